//! A Go synthesizer the size of a real operator's (`tests/guests/go-k8s`: k8s.io/api,
//! apimachinery, client-go's scheme and clientset; about 90 MB of wasm) through the wasm host,
//! each phase in its own process so its peak RSS (VmHWM) is its own:
//!
//! - `cranelift` (the baseline of the ratios): the Cranelift-only path (no Winch tier) — compile with
//!   Cranelift, then run;
//! - `first-sight`: a fresh host and cache directory — Winch compiles, the module runs, and
//!   the optimized (Cranelift) code is compiled in the background and cached on disk;
//! - `compile-processes`: first sight as the controller does it for a downloaded module, both
//!   tiers compiled in child processes of the release `enoki` binary from the module's file
//!   (`Host::load_file`): this process's RSS before and while they compile, and their peak;
//! - `restart`: a new process on that cache directory — load the verified artifact, run;
//! - `warm`: runs of the optimized code in one process (median).
//!
//! The same phases then run the Helm module (`target/samples/helm-chart.wasm`: Helm's engine)
//! rendering the ingress-nginx chart with its defaults, next to `helm template` of the same
//! chart, values, release and namespace (time: median of 7; peak RSS).
//!
//! Run: `cargo bench -p enoki-tests --bench large_module` (after `hack/build-go-k8s.sh` and
//! `hack/build-samples.sh`; `make bench` does all three).

#![allow(clippy::unwrap_used)] // a measuring tool: any failure stops it loudly

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasm_host::{CompileProcess, Entropy, Host, ModulePre, RunLimits, RunRequest};

#[path = "large_module/helm.rs"]
mod helm;
use helm::{helm_template, ingress_nginx, reactor_warm};

const EMPTY_INPUT: &str =
    r#"{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[]}"#;

/// What a phase runs: the module's stdin (a file) and a kind its output must hold.
struct Case {
    input: Vec<u8>,
    expect: String,
}

fn run(host: &Host, m: &ModulePre, case: &Case) -> Duration {
    let started = Instant::now();
    let out = host
        .run(
            m,
            RunRequest {
                program: "bench",
                input: &case.input,
                env: &[],
                limits: RunLimits {
                    deadline: Duration::from_secs(60),
                    max_memory_bytes: 512 << 20,
                    max_output_bytes: 1 << 20,
                },
                entropy: Entropy::Reproducible {
                    wall_clock: Duration::from_secs(1_700_000_000),
                    seed: [1; 32],
                },
            },
        )
        .unwrap_or_else(|e| panic!("the module failed: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let kind = format!("\"kind\":\"{}\"", case.expect);
    assert!(text.contains(&kind), "{text}");
    started.elapsed()
}

/// Seconds, to the millisecond under one second (warm renders).
fn secs(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.3} s", d.as_secs_f64())
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// One phase, in this process; prints `key=value` lines for the parent.
fn phase(name: &str, module: &str, cache: &str, case: &Case) {
    // Read for every phase but the controller's, which loads the module from its file.
    let bytes = if name == "compile-processes" {
        Vec::new()
    } else {
        std::fs::read(module).unwrap_or_else(|e| panic!("{module}: {e}"))
    };
    let cache = std::path::Path::new(cache);
    let started = Instant::now();
    match name {
        "cranelift" => {
            let host = Host::new(None).unwrap();
            host.set_baseline_min_bytes(usize::MAX);
            let m = host.load(&bytes).unwrap();
            let compiled = started.elapsed();
            let first = run(&host, &m, case);
            println!("usable={}", secs(compiled + first));
            println!("compile={}", secs(compiled));
            println!("run={}", secs(first));
        }
        "first-sight" => {
            let host = Host::new(Some(cache)).unwrap();
            let m = host.load(&bytes).unwrap();
            assert!(
                m.is_baseline(),
                "a large module starts on the baseline tier"
            );
            let compiled = started.elapsed();
            let first = run(&host, &m, case);
            println!("usable={}", secs(compiled + first));
            println!("compile={}", secs(compiled));
            println!("run={}", secs(first));
            while m.is_baseline() {
                std::thread::sleep(Duration::from_millis(50));
            }
            println!("optimized={}", secs(started.elapsed()));
        }
        "compile-processes" => {
            // The controller's way: both tiers compile in child processes of the release
            // `enoki` binary. This process plays the controller: its RSS before loading is
            // the steady figure, its peak while the children compile must stay near it.
            // Steady: before the module is loaded. A controller downloads a large module to a
            // file (`Host::download_dir`) and loads it from there, as here.
            let steady = status_kib("VmRSS");
            let children = ChildPeak::start();
            let host = Host::with_compile_process(
                Some(cache),
                Some(CompileProcess {
                    program: enoki_release(),
                    args: vec![wasm_host::COMPILE_SUBCOMMAND.into()],
                    timeout: Duration::from_secs(120),
                    background_timeout: Duration::from_secs(1200),
                }),
            )
            .unwrap();
            // Downloaded into the host's download directory (a copy here, page cache only).
            let download = host.download_dir().unwrap().unwrap().join("download.wasm");
            std::fs::copy(module, &download).unwrap();
            let m = host.load_file(&download).unwrap();
            std::fs::remove_file(&download).unwrap();
            assert!(
                m.is_baseline(),
                "a large module starts on the baseline tier"
            );
            let compiled = started.elapsed();
            let after_load = status_kib("VmHWM");
            // What stays after loading: allocations, and the mapped code.
            println!("anon_after_load={}", status_kib("RssAnon") / 1024);
            println!("file_after_load={}", status_kib("RssFile") / 1024);
            let first = run(&host, &m, case);
            // The run's own peak (the module's linear memory, released after the run), then
            // the peak from here on: the background compilation and the code swap.
            println!("run_peak={}", status_kib("VmHWM") / 1024);
            std::fs::write("/proc/self/clear_refs", "5").unwrap();
            println!("after_run={}", status_kib("VmRSS") / 1024);
            println!("file_after_run={}", status_kib("RssFile") / 1024);
            println!("usable={}", secs(compiled + first));
            println!("compile={}", secs(compiled));
            println!("run={}", secs(first));
            while m.is_baseline() {
                assert_eq!(host.optimize_failures(), 0, "the Cranelift process failed");
                std::thread::sleep(Duration::from_millis(50));
            }
            println!("optimized={}", secs(started.elapsed()));
            println!("during_cranelift={}", status_kib("VmHWM") / 1024);
            println!("steady={}", steady / 1024);
            println!("compile_peak={}", after_load / 1024);
            println!("child_peak={}", children.stop() / 1024);
        }
        "restart" => {
            let host = Host::new(Some(cache)).unwrap();
            let m = host.load(&bytes).unwrap();
            assert_eq!(host.cache_hits(), 1, "loaded from the on-disk cache");
            let loaded = started.elapsed();
            let first = run(&host, &m, case);
            println!("usable={}", secs(loaded + first));
            println!("compile={}", secs(loaded));
            println!("run={}", secs(first));
        }
        "warm" => {
            let host = Host::new(Some(cache)).unwrap();
            let m = host.load(&bytes).unwrap();
            let mut runs: Vec<Duration> = (0..7).map(|_| run(&host, &m, case)).collect();
            runs.sort();
            println!("run={}", secs(runs[runs.len() / 2]));
        }
        other => panic!("unknown phase {other}"),
    }
}

/// A field of this process's `/proc/self/status`, in KiB.
fn status_kib(field: &str) -> u64 {
    proc_status_kib("self", field)
}

fn proc_status_kib(pid: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The release `enoki` binary (`ENOKI_BIN`, which `make bench` sets; or target/release/enoki).
fn enoki_release() -> std::path::PathBuf {
    let bin = std::env::var_os("ENOKI_BIN").map_or_else(
        || harness::workspace_root().join("target/release/enoki"),
        std::path::PathBuf::from,
    );
    required(
        &bin,
        "cargo build --release -p reconciler-controller --bin enoki",
    )
}

/// Samples the peak RSS (VmHWM) of this process's children every 20 ms.
struct ChildPeak {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl ChildPeak {
    fn start() -> ChildPeak {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let me = std::process::id().to_string();
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                for entry in std::fs::read_dir("/proc").unwrap().flatten() {
                    let pid = entry.file_name().to_string_lossy().into_owned();
                    let stat =
                        std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                    let parent = stat
                        .rsplit_once(')')
                        .and_then(|(_, rest)| rest.split_whitespace().nth(1));
                    if parent == Some(me.as_str()) {
                        peak = peak.max(proc_status_kib(&pid, "VmHWM"));
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        });
        ChildPeak { stop, thread }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Runs a phase in a child process, sampling its VmHWM; returns its lines and peak RSS (MiB).
fn child(
    name: &str,
    module: &str,
    cache: &str,
    input: &str,
    expect: &str,
) -> (Vec<(String, String)>, u64) {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--phase", name, module, cache, input, expect]);
    let (out, peak) = sampled(c);
    assert!(out.status.success(), "phase {name} failed");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (lines, peak)
}

/// Runs `c` with stdout piped, sampling its VmHWM: its output and peak RSS (MiB).
fn sampled(mut c: Command) -> (std::process::Output, u64) {
    let mut c = c.stdout(Stdio::piped()).spawn().unwrap();
    let status_path = format!("/proc/{}/status", c.id());
    let mut peak_kib = 0;
    loop {
        if let Ok(status) = std::fs::read_to_string(&status_path)
            && let Some(v) = status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        {
            peak_kib = peak_kib.max(v);
        }
        if c.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (c.wait_with_output().unwrap(), peak_kib / 1024)
}

fn get(lines: &[(String, String)], key: &str) -> String {
    lines
        .iter()
        .find(|(k, _)| k == key)
        .map_or_else(|| "—".into(), |(_, v)| v.clone())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--phase") {
        let input = std::fs::read(&args[i + 4]).unwrap();
        let case = Case {
            input,
            expect: args[i + 5].clone(),
        };
        phase(&args[i + 1], &args[i + 2], &args[i + 3], &case);
        return;
    }
    let root = harness::workspace_root();
    let scratch = std::env::temp_dir().join(format!("enoki-large-module-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let empty = scratch.join("empty.json");
    std::fs::write(&empty, EMPTY_INPUT).unwrap();
    // BENCH_LARGE=helm: the Helm module only.
    if !matches!(std::env::var("BENCH_LARGE").as_deref(), Ok("helm")) {
        phases(
            &required(
                &root.join("target/samples/go-k8s.wasm"),
                "hack/build-go-k8s.sh",
            ),
            &scratch.join("cache-go"),
            &empty,
            "Deployment",
        );
    }
    let helm_module = required(
        &root.join("target/samples/helm-chart.wasm"),
        "hack/build-samples.sh",
    );
    let (list, tgz) = ingress_nginx(&root, &scratch);
    phases(
        &helm_module,
        &scratch.join("cache-helm"),
        &list,
        "DaemonSet",
    );
    reactor_warm(&root, &scratch, &list);
    helm_template(&tgz);
    let _ = std::fs::remove_dir_all(&scratch);
}

fn required(path: &std::path::Path, how: &str) -> std::path::PathBuf {
    if !path.exists() {
        eprintln!(
            "{} is missing: run {how} first (make bench does)",
            path.display()
        );
        std::process::exit(1);
    }
    path.to_path_buf()
}

/// The four phases of `module` run on `input`, as a table.
fn phases(
    module: &std::path::Path,
    cache: &std::path::Path,
    input: &std::path::Path,
    expect: &str,
) {
    let meta = std::fs::metadata(module).unwrap();
    let _ = std::fs::remove_dir_all(cache);
    let (m, c, i) = (
        module.to_str().unwrap(),
        cache.to_str().unwrap(),
        input.to_str().unwrap(),
    );
    let (base, base_rss) = child("cranelift", m, c, i, expect);
    let (first, first_rss) = child("first-sight", m, c, i, expect);
    let _ = std::fs::remove_dir_all(cache);
    let (children, children_rss) = child("compile-processes", m, c, i, expect);
    let (restart, restart_rss) = child("restart", m, c, i, expect);
    let (warm, warm_rss) = child("warm", m, c, i, expect);
    let _ = std::fs::remove_dir_all(cache);

    let seconds = |s: &str| s.trim_end_matches(" s").parse::<f64>().unwrap_or(f64::NAN);
    let ratio = |v: &str| format!("{:.2}×", seconds(v) / seconds(&get(&base, "usable")));
    println!(
        "## Large module: {} ({:.1} MB of wasm)\n",
        module.file_name().unwrap().to_string_lossy(),
        meta.len() as f64 / 1e6
    );
    println!("| phase | compile/load | first run | usable after | vs Cranelift-first | peak RSS |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (name, lines, rss) in [
        ("Cranelift first (baseline)", &base, base_rss),
        (
            "first sight (Winch, Cranelift in background)",
            &first,
            first_rss,
        ),
        (
            "first sight, compiled in child processes (the controller's way)",
            &children,
            children_rss,
        ),
        ("restart (verified on-disk artifact)", &restart, restart_rss),
    ] {
        let usable = get(lines, "usable");
        println!(
            "| {name} | {} | {} | {usable} | {} | {rss} MiB |",
            get(lines, "compile"),
            get(lines, "run"),
            ratio(&usable)
        );
    }
    println!(
        "\nBackground optimization done {} after first sight (same process, peak RSS above). \
         Warm run of the optimized code: {} (median of 7; process peak {warm_rss} MiB).\n",
        get(&first, "optimized"),
        get(&warm, "run")
    );
    let mib = |k: &str| get(&children, k).parse::<i64>().unwrap_or(0);
    println!(
        "Compiled in child processes from the module's file (`Host::load_file`, the \
         controller's way for a downloaded module): the host process's RSS was {} MiB before \
         loading and peaked at {} MiB (+{} MiB, target ≤ +50 MiB) by first sight ({} MiB \
         allocated and {} MiB of mapped files resident just after loading). The first run \
         peaked at {} MiB (the module's linear memory) and left {} MiB, {} MiB of it file-backed \
         (the mapped code the run executed, and the module's initial memory image that the \
         instance pool keeps mapped for the next run); from there the Cranelift compilation and the swap of its code for Winch's ({} \
         after first sight) peaked at {} MiB (+{} MiB). The compile processes peaked at {} \
         MiB.\n",
        mib("steady"),
        mib("compile_peak"),
        mib("compile_peak") - mib("steady"),
        mib("anon_after_load"),
        mib("file_after_load"),
        mib("run_peak"),
        mib("after_run"),
        mib("file_after_run"),
        get(&children, "optimized"),
        mib("during_cranelift"),
        mib("during_cranelift") - mib("after_run"),
        mib("child_peak"),
    );
}
