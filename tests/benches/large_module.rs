//! A Go synthesizer the size of a real operator's (`tests/guests/go-k8s`: k8s.io/api,
//! apimachinery, client-go's scheme and clientset; about 90 MB of wasm) through the wasm host,
//! each phase in its own process so its peak RSS (VmHWM) is its own:
//!
//! - `cranelift` (the baseline of the ratios): the Cranelift-only path (no Winch tier) — compile with
//!   Cranelift, then run;
//! - `first-sight`: a fresh host and cache directory — Winch compiles, the module runs, and
//!   the optimized (Cranelift) code is compiled in the background and cached on disk;
//! - `restart`: a new process on that cache directory — load the verified artifact, run;
//! - `warm`: runs of the optimized code in one process (median).
//!
//! Run: `cargo bench -p enoki-tests --bench large_module` (after
//! `hack/build-go-k8s.sh`; `make bench` does both).

#![allow(clippy::unwrap_used)] // a measuring tool: any failure stops it loudly

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasm_host::{Entropy, Host, ModulePre, RunLimits, RunRequest};

const INPUT: &[u8] =
    br#"{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[]}"#;

fn run(host: &Host, m: &ModulePre) -> Duration {
    let started = Instant::now();
    let out = host
        .run(
            m,
            RunRequest {
                program: "go-k8s",
                input: INPUT,
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
        .unwrap_or_else(|e| panic!("the Go module failed: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\"kind\":\"Deployment\""), "{text}");
    started.elapsed()
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// One phase, in this process; prints `key=value` lines for the parent.
fn phase(name: &str, module: &str, cache: &str) {
    let bytes = std::fs::read(module).unwrap_or_else(|e| panic!("{module}: {e}"));
    let cache = std::path::Path::new(cache);
    let started = Instant::now();
    match name {
        "cranelift" => {
            let host = Host::new(None).unwrap();
            host.set_baseline_min_bytes(usize::MAX);
            let m = host.load(&bytes).unwrap();
            let compiled = started.elapsed();
            let first = run(&host, &m);
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
            let first = run(&host, &m);
            println!("usable={}", secs(compiled + first));
            println!("compile={}", secs(compiled));
            println!("run={}", secs(first));
            while m.is_baseline() {
                std::thread::sleep(Duration::from_millis(50));
            }
            println!("optimized={}", secs(started.elapsed()));
        }
        "restart" => {
            let host = Host::new(Some(cache)).unwrap();
            let m = host.load(&bytes).unwrap();
            assert_eq!(host.cache_hits(), 1, "loaded from the on-disk cache");
            let loaded = started.elapsed();
            let first = run(&host, &m);
            println!("usable={}", secs(loaded + first));
            println!("compile={}", secs(loaded));
            println!("run={}", secs(first));
        }
        "warm" => {
            let host = Host::new(Some(cache)).unwrap();
            let m = host.load(&bytes).unwrap();
            let mut runs: Vec<Duration> = (0..7).map(|_| run(&host, &m)).collect();
            runs.sort();
            println!("run={}", secs(runs[runs.len() / 2]));
        }
        other => panic!("unknown phase {other}"),
    }
}

/// Runs a phase in a child process, sampling its VmHWM; returns its lines and peak RSS (MiB).
fn child(name: &str, module: &str, cache: &str) -> (Vec<(String, String)>, u64) {
    let exe = std::env::current_exe().unwrap();
    let mut c = Command::new(exe)
        .args(["--phase", name, module, cache])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
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
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success(), "phase {name} failed");
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (lines, peak_kib / 1024)
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
        phase(&args[i + 1], &args[i + 2], &args[i + 3]);
        return;
    }
    let module = harness::workspace_root().join("target/samples/go-k8s.wasm");
    let Ok(meta) = std::fs::metadata(&module) else {
        eprintln!(
            "{} is missing: run hack/build-go-k8s.sh first (make bench does)",
            module.display()
        );
        std::process::exit(1);
    };
    let cache = std::env::temp_dir().join(format!("enoki-large-module-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let (m, c) = (module.to_str().unwrap(), cache.to_str().unwrap());
    let (base, base_rss) = child("cranelift", m, c);
    let (first, first_rss) = child("first-sight", m, c);
    let (restart, restart_rss) = child("restart", m, c);
    let (warm, warm_rss) = child("warm", m, c);
    let _ = std::fs::remove_dir_all(&cache);

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
         Warm run of the optimized code: {} (median of 7; process peak {warm_rss} MiB).",
        get(&first, "optimized"),
        get(&warm, "run")
    );
}
