//! Paired obeyed/violated tests with the hostile guests under `tests/guests/` (WebAssembly
//! text, built from source here). After every hostile run a normal module must still run
//! correctly on the same host.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::sync::OnceLock;
use std::time::Duration;

use wasm_host::{Entropy, Host, HostError, ModulePre, RunLimits, RunRequest};

fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| Host::new(None).unwrap())
}

fn guest(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/guests")
        .join(name);
    wat::parse_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn load(name: &str) -> ModulePre {
    host().load(&guest(name)).unwrap()
}

const SEED: [u8; 32] = [7; 32];
const LIMITS: RunLimits = RunLimits {
    deadline: Duration::from_millis(500),
    max_memory_bytes: 16 << 20,
    max_output_bytes: 1 << 20,
};

fn run_with(
    module: &ModulePre,
    limits: RunLimits,
    seed: [u8; 32],
) -> Result<wasm_host::RunOutput, HostError> {
    host().run(
        module,
        RunRequest {
            program: "test",
            input: br#"{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[]}"#,
            env: &[],
            limits,
            entropy: Entropy::Reproducible {
                wall_clock: Duration::from_secs(1_700_000_000),
                seed,
            },
        },
    )
}

fn run(module: &ModulePre) -> Result<wasm_host::RunOutput, HostError> {
    run_with(module, LIMITS, SEED)
}

/// The well-behaved module still runs correctly (called after every hostile run).
fn normal_module_still_runs() {
    let out = run(&load("hello.wat")).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "ResourceList");
}

#[test]
fn a_normal_module_runs_and_is_byte_identical_for_the_same_seed() {
    let m = load("hello.wat");
    let a = run(&m).unwrap();
    let b = run(&m).unwrap();
    assert_eq!(a.stdout, b.stdout, "same module + same input => same bytes");
    let v: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    assert_eq!(v["seed"].as_str().unwrap().len(), 32);
    // The wall clock reads the fixed instant: 1.7e9 s in little-endian nanoseconds.
    let nanos: u64 = 1_700_000_000 * 1_000_000_000;
    assert_eq!(v["clock"], hex::encode(nanos.to_le_bytes()));
    let c = run_with(&m, LIMITS, [8; 32]).unwrap();
    assert_ne!(
        a.stdout, c.stdout,
        "a different seed gives different random bytes"
    );
}

#[test]
fn a_module_past_its_deadline_is_stopped() {
    let err = run(&load("loop.wat")).unwrap_err();
    assert_eq!(
        err,
        HostError::Timeout {
            after: LIMITS.deadline
        }
    );
    assert_eq!(err.category(), "Timeout");
    normal_module_still_runs();
}

#[test]
fn a_memory_bomb_hits_the_memory_limit() {
    let err = run(&load("memory_bomb.wat")).unwrap_err();
    assert_eq!(
        err,
        HostError::MemoryLimit {
            limit: LIMITS.max_memory_bytes
        }
    );
    normal_module_still_runs();
}

#[test]
fn a_stdout_bomb_hits_the_output_limit() {
    let err = run(&load("stdout_bomb.wat")).unwrap_err();
    assert_eq!(
        err,
        HostError::OutputTooLarge {
            limit: LIMITS.max_output_bytes
        }
    );
    normal_module_still_runs();
}

#[test]
fn an_unreachable_trap_carries_a_wasm_backtrace() {
    let err = run(&load("unreachable.wat")).unwrap_err();
    let HostError::Trap {
        message, backtrace, ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert!(message.contains("unreachable"), "{message}");
    assert!(
        backtrace.contains("deep") && backtrace.contains("middle"),
        "{backtrace}"
    );
    normal_module_still_runs();
}

#[test]
fn a_non_zero_exit_reports_the_code_and_stderr() {
    let err = run(&load("exit3.wat")).unwrap_err();
    let HostError::ExitCode { code, stderr } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*code, 3);
    // Exactly the bytes exit3.wat writes to fd 2: the tail is passed through unchanged.
    assert_eq!(stderr, "synthesizer failed: bad input\n");
    normal_module_still_runs();
}

#[test]
fn a_stderr_flood_is_capped_and_the_run_still_succeeds() {
    // 100,000 host calls: give it a generous deadline; this test is about stderr, not time.
    let limits = RunLimits {
        deadline: Duration::from_secs(30),
        ..LIMITS
    };
    let out = run_with(&load("stderr_flood.wat"), limits, SEED).unwrap();
    assert!(
        out.stderr.len() <= wasm_host::STDERR_CAP,
        "{}",
        out.stderr.len()
    );
    assert!(out.stderr.ends_with("a line of diagnostic noise\n"));
    assert_eq!(out.stderr.len(), wasm_host::STDERR_CAP, "the tail is kept");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "ResourceList");
    normal_module_still_runs();
}

#[test]
fn a_missing_wasi_import_fails_instantiation_by_name() {
    let err = host().load(&guest("missing_import.wat")).unwrap_err();
    let HostError::Instantiate { message } = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains("sock_open_everything"), "{message}");
    normal_module_still_runs();
}

#[test]
fn garbage_stdout_is_returned_raw_for_the_contract_layer_to_reject() {
    let out = run(&load("garbage.wat")).unwrap();
    assert_eq!(out.stdout, b"this is not { json");
    normal_module_still_runs();
}

#[test]
fn bad_bytes_and_components_are_refused_with_a_clear_message() {
    let err = host().load(b"\x7fELF not wasm").unwrap_err();
    assert!(
        matches!(err, HostError::Instantiate { ref message } if message.contains("bad header"))
    );
    let component_header = [0, b'a', b's', b'm', 0x0d, 0, 1, 0];
    assert_eq!(
        wasm_host::module_kind(&component_header),
        Some(wasm_host::ModuleKind::Component)
    );
    let err = host().load(&component_header).unwrap_err();
    assert!(matches!(err, HostError::Instantiate { .. }), "{err:?}");
}

fn cache_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("enoki-wasm-cache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The artifact files (`*.cwasm`) in a cache directory.
fn artifacts_in(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir.join("compiled"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect()
}

#[test]
fn compiled_modules_are_cached_on_disk_for_the_next_process() {
    let dir = cache_dir("reuse");
    let bytes = guest("hello.wat");
    let first = Host::new(Some(&dir)).unwrap();
    let m = first.load(&bytes).unwrap();
    assert_eq!(first.cache_hits(), 0);
    assert!(m.digest().starts_with("sha256:"));
    drop(first);
    // One artifact and its recorded digest, nothing else (no temporary files left).
    let files: Vec<_> = std::fs::read_dir(dir.join("compiled"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("compiled"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700, "the cache directory is created private");
    let second = Host::new(Some(&dir)).unwrap();
    let m2 = second.load(&bytes).unwrap();
    assert_eq!(m2.digest(), m.digest());
    assert!(
        second.cache_hits() >= 1,
        "the second engine compiled again instead of loading the artifact"
    );
    assert_eq!(second.cache_rejected(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_tampered_or_truncated_cache_file_is_rejected_and_recompiled() {
    let dir = cache_dir("tamper");
    let bytes = guest("hello.wat");
    Host::new(Some(&dir)).unwrap().load(&bytes).unwrap();
    let artifact = artifacts_in(&dir).pop().unwrap();
    let good = std::fs::read(&artifact).unwrap();

    // Obeyed: the intact artifact is loaded, not compiled.
    let intact = Host::new(Some(&dir)).unwrap();
    intact.load(&bytes).unwrap();
    assert_eq!((intact.cache_hits(), intact.cache_rejected()), (1, 0));

    // Violated: one flipped byte in the code section.
    let mut evil = good.clone();
    let at = evil.len() / 2;
    evil[at] ^= 0xff;
    std::fs::write(&artifact, &evil).unwrap();
    let host = Host::new(Some(&dir)).unwrap();
    let m = host.load(&bytes).unwrap();
    assert_eq!((host.cache_hits(), host.cache_rejected()), (0, 1));
    // The module was compiled again from its bytes and runs correctly.
    let out = host.run(
        &m,
        RunRequest {
            program: "test",
            input: b"{}",
            env: &[],
            limits: LIMITS,
            entropy: Entropy::Reproducible {
                wall_clock: Duration::ZERO,
                seed: SEED,
            },
        },
    );
    assert!(out.is_ok(), "{out:?}");
    // …and a fresh, verified artifact replaced the altered one.
    assert_eq!(std::fs::read(&artifact).unwrap(), good);

    // Violated: a truncated artifact (a crash mid-write without the atomic rename).
    std::fs::write(&artifact, &good[..good.len() / 3]).unwrap();
    let host = Host::new(Some(&dir)).unwrap();
    host.load(&bytes).unwrap();
    assert_eq!((host.cache_hits(), host.cache_rejected()), (0, 1));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_cache_directory_other_users_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = cache_dir("perm");
    // The mount point may be shared (an emptyDir is 0777): enoki's own subdirectory is private.
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(Host::new(Some(&dir)).is_ok());
    let compiled = dir.join("compiled");
    std::fs::set_permissions(&compiled, std::fs::Permissions::from_mode(0o777)).unwrap();
    let Err(err) = Host::new(Some(&dir)) else {
        panic!("a world-writable artifact directory must be refused");
    };
    assert!(err.to_string().contains("writable by other users"), "{err}");
    std::fs::remove_dir(&compiled).unwrap();
    std::os::unix::fs::symlink("/tmp", &compiled).unwrap();
    let Err(err) = Host::new(Some(&dir)) else {
        panic!("a symlinked artifact directory must be refused");
    };
    assert!(err.to_string().contains("not a directory"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn concurrent_loads_of_one_module_compile_it_once() {
    let dir = cache_dir("single-flight");
    let host = std::sync::Arc::new(Host::new(Some(&dir)).unwrap());
    let bytes = std::sync::Arc::new(guest("stderr_flood.wat"));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (host, bytes) = (host.clone(), bytes.clone());
            std::thread::spawn(move || host.load(&bytes).unwrap().digest().to_string())
        })
        .collect();
    let digests: Vec<String> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(digests.windows(2).all(|w| w[0] == w[1]));
    // One compilation, not four racing ones; one artifact written, never rejected.
    assert_eq!(host.compilations(), 1);
    assert_eq!(artifacts_in(&dir).len(), 1);
    assert_eq!(host.cache_rejected(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_preview2_component_runs_with_the_same_contract() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/wasm32-wasip2/release/rust-component.wasm");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the samples first (hack/build-samples.sh; `make test` does)",
            path.display()
        )
    });
    assert_eq!(
        wasm_host::module_kind(&bytes),
        Some(wasm_host::ModuleKind::Component)
    );
    let m = host().load(&bytes).unwrap();
    assert_eq!(m.kind(), wasm_host::ModuleKind::Component);
    let input = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../samples/02-rust-component/fixtures/input.json"),
    )
    .unwrap();
    let req = RunRequest {
        program: "test",
        input: &input,
        env: &[("TIER".to_string(), "gold".to_string())],
        limits: LIMITS,
        entropy: Entropy::Reproducible {
            wall_clock: Duration::ZERO,
            seed: SEED,
        },
    };
    let out = host().run(&m, req).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 4);
    assert_eq!(
        host().run(&m, req).unwrap().stdout,
        out.stdout,
        "reproducible"
    );
    normal_module_still_runs();
}

#[test]
fn the_sample_module_reads_the_golden_contract_input() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let wasm = std::fs::read(root.join("target/wasm32-wasip1/release/hello-rust.wasm"))
        .unwrap_or_else(|e| {
            panic!("sample 01 is not built ({e}); run hack/build-samples.sh (`make test` does)")
        });
    let input = std::fs::read(root.join("synthesizer-sdk/contract/input.json")).unwrap();
    let out = host()
        .run(
            &host().load(&wasm).unwrap(),
            RunRequest {
                program: "test",
                input: &input,
                env: &[],
                limits: LIMITS,
                entropy: Entropy::Reproducible {
                    wall_clock: Duration::ZERO,
                    seed: SEED,
                },
            },
        )
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "ResourceList");
    // The golden input binds `config` with greeting "hello"; the composition is "hello".
    let items = v["items"].as_array().unwrap();
    assert_eq!(items[0]["metadata"]["name"], "hello-settings");
    assert_eq!(items[0]["data"]["greeting"], "hello");
}

#[test]
fn peak_memory_is_reported() {
    let out = run(&load("hello.wat")).unwrap();
    // hello.wat declares two 64 KiB pages.
    assert!(
        out.peak_memory_bytes >= 2 * 65536,
        "{}",
        out.peak_memory_bytes
    );
}

#[test]
fn the_module_cache_is_bounded_by_bytes_and_drops_the_least_recently_used() {
    let host = Host::new(None).unwrap();
    let (a, b, c) = (guest("hello.wat"), guest("loop.wat"), guest("exit3.wat"));
    host.set_module_cache_bytes(a.len() + b.len() + c.len() - 1);
    host.load(&a).unwrap();
    host.load(&b).unwrap();
    host.load(&a).unwrap(); // a is now more recent than b
    host.load(&c).unwrap();
    assert_eq!(host.module_cache_size(), (2, a.len() + c.len()));
    // b is compiled again when needed, and still runs.
    assert!(host.load(&b).is_ok());
}

#[test]
fn argv_is_the_program_name_and_nothing_else() {
    let m = load("args.wat");
    let out = host()
        .run(
            &m,
            RunRequest {
                program: "my-synth",
                input: b"",
                env: &[],
                limits: LIMITS,
                entropy: Entropy::Reproducible {
                    wall_clock: Duration::ZERO,
                    seed: SEED,
                },
            },
        )
        .unwrap();
    assert_eq!(out.stdout, b"my-synth\0");
}

#[test]
fn a_module_blocked_in_a_wasi_sleep_past_its_deadline_is_stopped() {
    let m = load("sleep_long.wat");
    let started = std::time::Instant::now();
    let err = run(&m).unwrap_err();
    let took = started.elapsed();
    assert_eq!(
        err,
        HostError::Timeout {
            after: LIMITS.deadline
        }
    );
    assert!(
        took < LIMITS.deadline + Duration::from_secs(2),
        "a one-hour sleep must end at the deadline ({:?}), took {took:?}",
        LIMITS.deadline
    );
    normal_module_still_runs();
}

#[test]
fn a_module_that_sleeps_within_its_deadline_succeeds() {
    let out = run(&load("sleep_short.wat")).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "ResourceList");
}

#[test]
fn several_linear_memories_are_refused_before_they_run() {
    let Err(err) = host().load(&guest("multi_memory.wat")) else {
        panic!("a module with eight memories must not load");
    };
    let HostError::Instantiate { message } = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains("multiple memories"), "{message}");
    normal_module_still_runs();
}

#[test]
fn the_memory_limit_covers_memories_and_tables_together() {
    let m = load("memory_and_table.wat");
    // Obeyed: 40 MiB of memory + 9.6 MB of table fit in 64 MiB.
    let roomy = RunLimits {
        max_memory_bytes: 64 << 20,
        ..LIMITS
    };
    let out = run_with(&m, roomy, SEED).unwrap();
    assert!(out.peak_memory_bytes >= (40 << 20) + 600_000 * 16);
    // Violated: each fits 48 MiB alone, the sum does not.
    let tight = RunLimits {
        max_memory_bytes: 48 << 20,
        ..LIMITS
    };
    assert_eq!(
        run_with(&m, tight, SEED).unwrap_err(),
        HostError::MemoryLimit { limit: 48 << 20 }
    );
    normal_module_still_runs();
}

#[test]
fn a_table_bomb_hits_the_memory_limit() {
    assert_eq!(
        run(&load("table_bomb.wat")).unwrap_err(),
        HostError::MemoryLimit {
            limit: LIMITS.max_memory_bytes
        }
    );
    normal_module_still_runs();
}

#[test]
fn host_side_random_buffers_are_capped() {
    // Obeyed: hello.wat asks for 16 random bytes (a_normal_module_runs…); violated: 16 MiB.
    let limits = RunLimits {
        max_memory_bytes: 32 << 20,
        ..LIMITS
    };
    let err = run_with(&load("random_bomb.wat"), limits, SEED).unwrap_err();
    let HostError::Trap { message, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains("exceeds limit"), "{message}");
    normal_module_still_runs();
}

/// A host whose every core module starts on the baseline tier (Winch).
fn baseline_host(dir: Option<&std::path::Path>) -> Host {
    let host = Host::new(dir).unwrap();
    host.set_baseline_min_bytes(0);
    host
}

fn run_on(
    host: &Host,
    module: &ModulePre,
    limits: RunLimits,
) -> Result<wasm_host::RunOutput, HostError> {
    host.run(
        module,
        RunRequest {
            program: "test",
            input: br#"{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[]}"#,
            env: &[],
            limits,
            entropy: Entropy::Reproducible {
                wall_clock: Duration::from_secs(1_700_000_000),
                seed: SEED,
            },
        },
    )
}

#[test]
fn baseline_code_obeys_the_same_limits() {
    let host = baseline_host(None);
    let timeout = HostError::Timeout {
        after: LIMITS.deadline,
    };
    for (guest_name, expected) in [
        ("loop.wat", timeout.clone()),
        ("sleep_long.wat", timeout),
        (
            "memory_bomb.wat",
            HostError::MemoryLimit {
                limit: LIMITS.max_memory_bytes,
            },
        ),
        (
            "stdout_bomb.wat",
            HostError::OutputTooLarge {
                limit: LIMITS.max_output_bytes,
            },
        ),
    ] {
        let m = host.load(&guest(guest_name)).unwrap();
        assert_eq!(
            run_on(&host, &m, LIMITS).unwrap_err(),
            expected,
            "{guest_name}"
        );
    }
}

#[test]
fn a_large_module_runs_on_baseline_code_then_switches_to_optimized_code() {
    let dir = cache_dir("tiers");
    let host = baseline_host(Some(&dir));
    let m = host.load(&guest("hello.wat")).unwrap();
    let first = run_on(&host, &m, LIMITS).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while m.is_baseline() {
        assert!(
            std::time::Instant::now() < deadline,
            "never optimized in the background"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(host.optimized_in_background(), 1);
    // Same output from the optimized code; the optimized artifact is what is cached.
    assert_eq!(run_on(&host, &m, LIMITS).unwrap().stdout, first.stdout);
    assert_eq!(artifacts_in(&dir).len(), 1);
    let next = baseline_host(Some(&dir));
    let again = next.load(&guest("hello.wat")).unwrap();
    assert!(
        !again.is_baseline(),
        "a restart loads the optimized artifact"
    );
    assert_eq!(next.cache_hits(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Rust `sleep` guest (`tests/guests/sleep`), built by hack/build-samples.sh for WASI
/// preview1 (`wasm32-wasip1`) or preview2 (`wasm32-wasip2`, a component).
fn rust_sleep_guest(target: &str) -> ModulePre {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target")
        .join(target)
        .join("release/sleep.wasm");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run hack/build-samples.sh (make test does)",
            path.display()
        )
    });
    host().load(&bytes).unwrap()
}

fn run_sleep(module: &ModulePre, ms: &str) -> (Result<wasm_host::RunOutput, HostError>, Duration) {
    let env = [("SLEEP_MS".to_string(), ms.to_string())];
    let started = std::time::Instant::now();
    let out = host().run(
        module,
        RunRequest {
            program: "sleep",
            input: b"{}",
            env: &env,
            limits: RunLimits {
                deadline: Duration::from_secs(2),
                ..LIMITS
            },
            entropy: Entropy::Reproducible {
                wall_clock: Duration::ZERO,
                seed: SEED,
            },
        },
    );
    (out, started.elapsed())
}

#[test]
fn a_rust_std_thread_sleep_past_the_timeout_ends_at_the_deadline_on_p1_and_p2() {
    for target in ["wasm32-wasip1", "wasm32-wasip2"] {
        let m = rust_sleep_guest(target);
        // Violated: an hour's sleep with a 2 s limit.
        let (out, took) = run_sleep(&m, "3600000");
        assert_eq!(
            out.unwrap_err(),
            HostError::Timeout {
                after: Duration::from_secs(2)
            },
            "{target}"
        );
        assert!(took < Duration::from_secs(4), "{target}: took {took:?}");
        // Obeyed: 50 ms within the limit.
        let (out, _) = run_sleep(&m, "50");
        let out = out.unwrap_or_else(|e| panic!("{target}: {e}"));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("ResourceList"),
            "{target}"
        );
    }
    normal_module_still_runs();
}

/// A module that traps when it finds a previous run's marker in its memory (in the first
/// page, inside the pool's resident region, and 3 MiB up after growing), then writes it.
const REMEMBERS: &str = r#"(module
  (memory 1)
  (func (export "_start")
    (if (i64.ne (i64.load (i32.const 1024)) (i64.const 0)) (then unreachable))
    (i64.store (i32.const 1024) (i64.const 0x4141414141414141))
    (drop (memory.grow (i32.const 64)))
    (if (i64.ne (i64.load (i32.const 3145728)) (i64.const 0)) (then unreachable))
    (i64.store (i32.const 3145728) (i64.const 0x4242424242424242))))"#;

#[test]
fn pooled_memory_never_shows_a_previous_runs_bytes() {
    let m = host().load(REMEMBERS.as_bytes()).unwrap();
    for i in 0..50 {
        run(&m).unwrap_or_else(|e| panic!("run {i} saw a previous run's memory: {e}"));
    }
    normal_module_still_runs();
}

#[test]
fn more_concurrent_runs_than_pool_slots_wait_for_one() {
    let m = load("hello.wat");
    let n = wasm_host::RUN_SLOTS as usize * 3;
    let results: Vec<_> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..n).map(|_| s.spawn(|| run(&m))).collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    assert_eq!(results.len(), n);
    for r in results {
        let out = r.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["kind"], "ResourceList");
    }
}
