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
