//! Compilation in child processes (`enoki __compile-module`, the controller's own binary):
//! the artifact comes back through the artifact directory, a compile bomb stops at the
//! compile memory budget, a compilation past its timeout is killed, and the host keeps
//! compiling and running modules afterwards. The controller-level behaviour (conditions,
//! the controller's memory, serving on) is in `attacks.rs`.
#![allow(clippy::unwrap_used)] // test code

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use harness::wasm::{compile_children, module, slow_module};
use wasm_host::{CompileProcess, Entropy, Host, HostError, RunLimits, RunRequest};

/// The tests look for compile processes of this test process: one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn enoki_binary() -> PathBuf {
    let p = harness::workspace_root().join("target/debug/enoki");
    assert!(
        p.exists(),
        "{} is missing: build it (cargo build -p reconciler-controller --bin enoki; `make test` does)",
        p.display()
    );
    p
}

fn host(cache: Option<&std::path::Path>, timeout: Duration) -> Host {
    Host::with_compile_process(
        cache,
        Some(CompileProcess {
            program: enoki_binary(),
            args: vec![wasm_host::COMPILE_SUBCOMMAND.into()],
            timeout,
            background_timeout: timeout * 10,
        }),
    )
    .unwrap()
}

fn run(host: &Host, m: &wasm_host::ModulePre) -> Result<wasm_host::RunOutput, HostError> {
    host.run(
        m,
        RunRequest {
            program: "test",
            input: br#"{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[]}"#,
            env: &[],
            limits: RunLimits::default(),
            entropy: Entropy::Secure,
        },
    )
}

#[test]
fn modules_compile_in_a_child_process_and_their_artifact_is_reused() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = harness::tempdir("compile-child");
    let sample = harness::sample_module();
    let host = host(Some(&dir), Duration::from_secs(120));
    let m = host.load(&sample).unwrap();
    let out = run(&host, &m).unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ResourceList"),
        "{out:?}"
    );
    assert_eq!(host.compilations(), 1);
    assert!(compile_children(std::process::id()).is_empty());
    // Another process's host (a restart) maps the child's artifact without compiling.
    let restarted = self::host(Some(&dir), Duration::from_secs(120));
    let again = restarted.load(&sample).unwrap();
    assert_eq!((restarted.compilations(), restarted.cache_hits()), (0, 1));
    assert!(run(&restarted, &again).is_ok());
    // A bad module is a compile error with wasmtime's message, as in this process.
    let err = host.load(b"\0asm\x01\0\0\0\x01\x05").unwrap_err();
    assert!(
        matches!(&err, HostError::Instantiate { message } if message.starts_with("compile:")),
        "{err:?}"
    );
}

#[test]
fn a_compile_bomb_stops_at_the_budget_and_the_host_compiles_on() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // No cache directory: the children write into a private one, removed with the host.
    let host = host(None, Duration::from_secs(300));
    let budget = 256 << 20;
    host.set_compile_budget(budget);
    host.set_baseline_min_bytes(0);
    // 3,000 functions of 50,000 locals: 21 KB of functions, over a gigabyte of Winch code.
    let bomb = module(3_000, 50_000, &[], 0);
    assert!(bomb.len() < 32 << 10, "{}", bomb.len());
    // Its share of the budget (a quarter, more than its estimate) ran out, and then the
    // whole budget on the retry.
    let err = host.load(&bomb).unwrap_err();
    assert_eq!(err, HostError::CompileMemory { limit: budget }, "{err}");
    assert!(
        err.to_string()
            .contains("268435456 bytes of the compile memory budget")
    );
    assert_eq!(
        host.compilations(),
        1,
        "one compilation, retried once in a child"
    );
    assert!(compile_children(std::process::id()).is_empty());
    // Remembered: loading it again fails at once, compiling nothing.
    let compilations = host.compilations();
    assert_eq!(host.load(&bomb).unwrap_err(), err);
    assert_eq!(host.compilations(), compilations);
    // The host compiles and runs the next module (baseline tier, as the bomb would have),
    // then replaces its code with Cranelift's compiled in the background.
    let fine = module(3, 4, &[], 0);
    let m = host.load(&fine).unwrap();
    assert!(m.is_baseline());
    assert!(run(&host, &m).is_ok());
    let started = Instant::now();
    while m.is_baseline() && started.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!m.is_baseline(), "optimized in the background");
    assert!(run(&host, &m).is_ok());
    assert!(compile_children(std::process::id()).is_empty());
}

#[test]
fn a_compilation_past_its_timeout_is_killed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let timeout = Duration::from_millis(300);
    let host = host(None, timeout);
    // About 14 s of Cranelift.
    let slow = slow_module();
    let started = Instant::now();
    let err = host.load(&slow).unwrap_err();
    let took = started.elapsed();
    assert_eq!(err, HostError::CompileTimeout { after: timeout }, "{err}");
    assert!(err.to_string().contains("was stopped"), "{err}");
    // Killed and reaped, not left compiling.
    assert!(
        compile_children(std::process::id()).is_empty(),
        "a compile process is still there"
    );
    eprintln!("stopped after {took:?} (timeout {timeout:?})");
    // Remembered for a while: the next load is answered without compiling again.
    assert_eq!(
        host.load(&slow).unwrap_err(),
        HostError::CompileTimeout { after: timeout }
    );
    assert_eq!(host.compilations(), 1);
}

#[test]
fn the_language_samples_compile_in_child_processes_within_their_share() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // The default budget (2 GiB): each gets a quarter of it or its estimate if more. All on
    // Cranelift in the foreground (python.wasm is over the Winch threshold, whose background
    // compilation would outlive the loop).
    let host = host(None, Duration::from_secs(300));
    host.set_baseline_min_bytes(usize::MAX);
    let samples = harness::workspace_root().join("target/samples");
    for name in [
        "go.wasm",
        "c.wasm",
        "assemblyscript.wasm",
        "python.wasm",
        "typescript.wasm",
    ] {
        let path = samples.join(name);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (hack/build-samples.sh; `make test` does)",
                path.display()
            )
        });
        let loaded = host.load(&bytes);
        assert!(loaded.is_ok(), "{name}: {:?}", loaded.err());
    }
    assert_eq!(host.compilations(), 5);
    assert!(compile_children(std::process::id()).is_empty());
}

/// A field of this process's `/proc/self/status`, in KiB.
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap()
}

#[test]
fn a_module_file_compiles_without_this_process_holding_its_bytes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = harness::tempdir("compile-file");
    let host = host(Some(&dir), Duration::from_secs(120));
    host.set_baseline_min_bytes(16 << 20);
    // 64 MiB (a custom section's padding): over the Winch threshold, so both tiers compile
    // from the file, the Cranelift one in the background.
    let file = dir.join("downloaded.wasm");
    let digest = {
        let bytes = module(3, 4, &[], 64 << 20);
        std::fs::write(&file, &bytes).unwrap();
        wasm_host::digest(&bytes)
    };
    // The peak from here on: the file's bytes never enter this process.
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = status_kib("VmRSS:");
    let m = host.load_file(&file).unwrap();
    let peak = status_kib("VmHWM:");
    assert_eq!(m.digest(), digest);
    assert!(
        m.is_baseline(),
        "a large module starts on the baseline tier"
    );
    assert!(
        peak < before + (16 << 10),
        "loading a 64 MiB module file took this process from {before} KiB to a peak of \
         {peak} KiB"
    );
    // The caller's file may go: the host compiles from its own copy, also in the background.
    std::fs::remove_file(&file).unwrap();
    assert!(run(&host, &m).is_ok());
    wait_optimized(&host, &m, "from the spooled copy");
    assert!(status_kib("VmHWM:") < before + (16 << 10));
    assert!(run(&host, &m).is_ok());
    // No copy is left behind (nor the background compilation's), and the same bytes again
    // are the loaded module.
    let copies = walk(&dir)
        .into_iter()
        .filter(|p| {
            let p = p.to_string_lossy();
            p.contains("incoming-") || p.contains(".spool-") || p.ends_with("downloaded.wasm")
        })
        .collect::<Vec<_>>();
    assert!(copies.is_empty(), "{copies:?}");
    let compilations = host.compilations();
    let again = dir.join("again.wasm");
    std::fs::write(&again, module(3, 4, &[], 64 << 20)).unwrap();
    assert_eq!(host.load_file(&again).unwrap().digest(), digest);
    assert_eq!(host.compilations(), compilations);
    // A download into the host's download directory is compiled where it is (no copy), and
    // the background compilation keeps its own link to it.
    let download = host.download_dir().unwrap().unwrap().join("download.wasm");
    std::fs::write(&download, module(4, 4, &[], 64 << 20)).unwrap();
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let before = status_kib("VmRSS:");
    let m = host.load_file(&download).unwrap();
    let peak = status_kib("VmHWM:");
    assert!(
        peak < before + (16 << 10),
        "loading a 64 MiB download took this process from {before} KiB to {peak} KiB"
    );
    let copies = walk(&dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("incoming-"))
        .collect::<Vec<_>>();
    assert!(copies.is_empty(), "{copies:?}");
    std::fs::remove_file(&download).unwrap();
    assert!(m.is_baseline());
    wait_optimized(&host, &m, "from its link");
    assert!(run(&host, &m).is_ok());
    // A missing file is an error naming it; so is a directory.
    let err = host.load_file(&dir.join("missing.wasm")).unwrap_err();
    assert!(
        matches!(&err, HostError::File { message } if message.contains("missing.wasm")),
        "{err:?}"
    );
    assert!(matches!(host.load_file(&dir), Err(HostError::File { .. })));
    // Not a module: refused from its first bytes, nothing compiled.
    let compilations = host.compilations();
    let garbage = dir.join("garbage.wasm");
    std::fs::write(&garbage, vec![7u8; 1 << 20]).unwrap();
    let err = host.load_file(&garbage).unwrap_err();
    assert!(
        matches!(&err, HostError::Instantiate { message } if message.contains("bad header")),
        "{err:?}"
    );
    assert_eq!(host.compilations(), compilations);
    // WebAssembly text is compiled by the compile process from the file.
    let text = dir.join("text.wat");
    std::fs::write(
        &text,
        "(module (memory (export \"memory\") 1) (func (export \"_start\")))",
    )
    .unwrap();
    assert!(host.load_file(&text).is_ok());
    assert!(compile_children(std::process::id()).is_empty());
}

#[test]
fn a_module_known_by_its_digest_loads_without_its_bytes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = harness::tempdir("compile-known");
    let host = host(Some(&dir), Duration::from_secs(120));
    let sample = harness::sample_module();
    let digest = wasm_host::digest(&sample);
    assert!(!host.knows(&digest, true));
    assert!(matches!(
        host.load_known(&digest, Some(sample.len())),
        Err(HostError::NotLoaded { .. })
    ));
    let loaded = host.load(&sample).unwrap();
    assert!(host.knows(&digest, false));
    assert_eq!(
        host.load_known(&digest, Some(sample.len()))
            .unwrap()
            .digest(),
        digest
    );
    // A restarted host knows it from the on-disk cache and maps it without the bytes.
    let restarted = self::host(Some(&dir), Duration::from_secs(120));
    assert!(!restarted.knows(&digest, false), "not loaded");
    assert!(restarted.knows(&digest, true), "on disk");
    let m = restarted.load_known(&digest, Some(sample.len())).unwrap();
    assert_eq!((restarted.compilations(), restarted.cache_hits()), (0, 1));
    assert!(run(&restarted, &m).is_ok());
    // An artifact whose recorded digest is unreadable is removed, not known any more.
    let another = self::host(Some(&dir), Duration::from_secs(120));
    for entry in walk(&dir) {
        if entry.to_string_lossy().ends_with(".cwasm.sha256") {
            std::fs::write(&entry, [0xff, 0xfe, 0x00]).unwrap();
        }
    }
    assert!(another.knows(&digest, true));
    assert!(matches!(
        another.load_known(&digest, Some(sample.len())),
        Err(HostError::NotLoaded { .. })
    ));
    assert!(!another.knows(&digest, true), "the torn pair is gone");
    // A remembered failure is known too: answered without the bytes, compiling nothing.
    let bad = b"\0asm\x01\0\0\0\x01\x05".to_vec();
    let err = host.load(&bad).unwrap_err();
    let compilations = host.compilations();
    assert!(host.knows(&wasm_host::digest(&bad), false));
    assert_eq!(
        host.load_known(&wasm_host::digest(&bad), Some(bad.len()))
            .unwrap_err(),
        err
    );
    assert_eq!(host.compilations(), compilations);
    drop(loaded);
}

/// Waits (2 minutes at most) for `m`'s Cranelift code to replace its Winch code, compiled in
/// the background `how`; no background compilation may fail meanwhile.
fn wait_optimized(host: &Host, m: &wasm_host::ModulePre, how: &str) {
    let started = Instant::now();
    while m.is_baseline() && started.elapsed() < Duration::from_secs(120) {
        assert_eq!(host.optimize_failures(), 0, "optimizing {how}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!m.is_baseline(), "optimized in the background {how}");
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
