//! WASI reactors and their pre-initialization (`wasm_host::preinitialize`, Wizer): a reactor
//! runs as built (`_initialize`, then `_start`), and pre-initialized it runs `_start` from the
//! state `_initialize` left, which ran once, at pre-initialization.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::time::Duration;

use wasm_host::{Entropy, Host, HostError, RunLimits, RunRequest, preinitialize};

/// A reactor: `_initialize` counts its calls in a global and writes the count as a digit
/// into memory (after a loop of work); `_start` traps unless initialized, then prints the
/// digit, the first byte of its stdin and its environment's size.
const REACTOR: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $env_sizes (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $inits (mut i32) (i32.const 0))
  (func (export "_initialize") (local $i i32)
    (loop $work
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $work (i32.lt_u (local.get $i) (i32.const 1000))))
    (global.set $inits (i32.add (global.get $inits) (i32.const 1)))
    (i32.store8 (i32.const 200) (i32.add (i32.const 48) (global.get $inits))))
  (func (export "_start")
    (if (i32.eqz (global.get $inits)) (then unreachable))
    ;; stdin's first byte at 201
    (i32.store (i32.const 0) (i32.const 201))
    (i32.store (i32.const 4) (i32.const 1))
    (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
    ;; the environment's variable count as a digit at 202
    (drop (call $env_sizes (i32.const 16) (i32.const 20)))
    (i32.store8 (i32.const 202) (i32.add (i32.const 48) (i32.load (i32.const 16))))
    (i32.store (i32.const 0) (i32.const 200))
    (i32.store (i32.const 4) (i32.const 3))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

fn run(host: &Host, wasm: &[u8], input: &[u8], env: &[(String, String)]) -> String {
    let m = host.load(wasm).unwrap();
    let out = host
        .run(
            &m,
            RunRequest {
                program: "test",
                input,
                env,
                limits: RunLimits {
                    deadline: Duration::from_secs(10),
                    max_memory_bytes: 16 << 20,
                    max_output_bytes: 1 << 20,
                },
                entropy: Entropy::Reproducible {
                    wall_clock: Duration::from_secs(1_700_000_000),
                    seed: [3; 32],
                },
            },
        )
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

fn exports(wasm: &[u8]) -> Vec<String> {
    let engine = wasmtime::Engine::default();
    let m = wasmtime::Module::new(&engine, wasm).unwrap();
    m.exports().map(|e| e.name().to_string()).collect()
}

#[test]
fn a_reactor_runs_as_built_and_pre_initialized_from_its_initialized_state() {
    let host = Host::new(None).unwrap();
    let reactor = wat::parse_str(REACTOR).unwrap();
    let env = [("A".to_string(), "1".to_string())];
    // As built: `_initialize` runs once before `_start`.
    assert_eq!(run(&host, &reactor, b"x", &env), "1x1");

    let snapshot = preinitialize(&reactor).unwrap();
    let names = exports(&snapshot);
    assert!(names.contains(&"_start".to_string()), "{names:?}");
    assert!(!names.contains(&"_initialize".to_string()), "{names:?}");
    // The global and memory `_initialize` left, not a second initialization; stdin and the
    // environment are each run's own.
    assert_eq!(run(&host, &snapshot, b"y", &env), "1y1");
    assert_eq!(run(&host, &snapshot, b"z", &[]), "1z0");
}

#[test]
fn what_cannot_be_pre_initialized_is_refused_by_name() {
    let instantiate = |wasm: &[u8]| match preinitialize(wasm) {
        Err(HostError::Instantiate { message }) => message,
        other => panic!("expected a refusal, got {other:?}"),
    };
    // A command: no `_initialize`.
    let command =
        wat::parse_str(r#"(module (memory (export "memory") 1) (func (export "_start")))"#);
    assert!(instantiate(&command.unwrap()).contains("_initialize"));
    // A reactor without `_start`.
    let no_start = r#"(module (memory (export "memory") 1) (func (export "_initialize")))"#;
    assert!(instantiate(&wat::parse_str(no_start).unwrap()).contains("_start"));
    // Not WebAssembly at all.
    assert!(preinitialize(b"not wasm").is_err());
    // A component is refused before anything runs.
    assert!(instantiate(&wat::parse_str("(component)").unwrap()).contains("component"));
}

#[test]
fn an_initialization_that_traps_or_exits_is_the_runs_error() {
    let trap = r#"(module (memory (export "memory") 1)
      (func (export "_initialize") unreachable) (func (export "_start")))"#;
    assert!(matches!(
        preinitialize(&wat::parse_str(trap).unwrap()),
        Err(HostError::Trap { .. })
    ));
    let exits = r#"(module
      (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
      (memory (export "memory") 1)
      (func (export "_initialize") (call $exit (i32.const 3))) (func (export "_start")))"#;
    assert!(matches!(
        preinitialize(&wat::parse_str(exits).unwrap()),
        Err(HostError::ExitCode { code: 3, .. })
    ));
}

/// Go's linker emits as many data segments as wasm allows (100,000): the snapshot's own fit
/// beside them because the applied ones are dropped, and the result is a valid module whose
/// memory holds what the segments and `_initialize` wrote.
#[test]
fn a_module_with_the_most_data_segments_wasm_allows_is_pre_initialized() {
    let mut wat = String::from(
        r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 4)
  (func (export "_initialize") (i32.store8 (i32.const 1) (i32.const 121)))
  (func (export "_start")
    (i32.store (i32.const 240000) (i32.const 0))
    (i32.store (i32.const 240004) (i32.const 4))
    (drop (call $fd_write (i32.const 1) (i32.const 240000) (i32.const 1) (i32.const 240008))))
"#,
    );
    for i in 0..100_000u32 {
        wat.push_str(&format!("  (data (i32.const {}) \"x\")\n", i * 2));
    }
    wat.push(')');
    let reactor = wat::parse_str(&wat).unwrap();
    let snapshot = preinitialize(&reactor).unwrap();
    assert!(!exports(&snapshot).contains(&"_initialize".to_string()));
    let host = Host::new(None).unwrap();
    assert_eq!(run(&host, &snapshot, b"", &[]), "xyx\0");
}

/// A reactor whose `_initialize` exits, even with status 0, never reaches `_start`: the run
/// fails instead of succeeding with no output.
#[test]
fn a_reactor_whose_initialize_exits_fails_the_run() {
    let exits = r#"(module
      (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
      (memory (export "memory") 1)
      (func (export "_initialize") (call $exit (i32.const 0))) (func (export "_start")))"#;
    let host = Host::new(None).unwrap();
    let m = host.load(&wat::parse_str(exits).unwrap()).unwrap();
    let out = host.run(
        &m,
        RunRequest {
            program: "test",
            input: b"",
            env: &[],
            limits: RunLimits {
                deadline: Duration::from_secs(10),
                max_memory_bytes: 16 << 20,
                max_output_bytes: 1 << 20,
            },
            entropy: Entropy::Secure,
        },
    );
    assert!(matches!(out, Err(HostError::Instantiate { .. })), "{out:?}");
}
