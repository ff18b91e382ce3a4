//! Synthesis cost, measured in one run (medians), with the native build of the same function
//! as the baseline:
//! - warm synthesis of sample 01 producing 100 resources (wasm, precompiled, fresh Store,
//!   instances from the host's pool);
//! - the fixed cost of a run (an empty module);
//! - the same synthesizer function compiled natively (parse input, run, serialize output);
//! - loading a precompiled module from the on-disk cache (into a host created before) vs
//!   compiling it, and creating a host.
//!
//! `PROFILE_WARM=1` runs 5,000 more warm syntheses and stops (for `perf record`).
//!
//! Run: `cargo bench -p enoki-tests --bench synthesis` (needs `hack/build-samples.sh`).

use std::time::{Duration, Instant};

use wasm_host::{Entropy, Host, RunLimits, RunRequest};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(n: usize, mut f: impl FnMut() -> T) -> Duration {
    let samples = (0..n)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed()
        })
        .collect();
    median(samples)
}

/// One reproducible run of `module` on `input`.
fn run_once(host: &Host, module: &wasm_host::ModulePre, input: &[u8]) -> wasm_host::RunOutput {
    host.run(
        module,
        RunRequest {
            program: "test",
            input,
            env: &[],
            limits: RunLimits::default(),
            entropy: Entropy::Reproducible {
                wall_clock: Duration::ZERO,
                seed: [1; 32],
            },
        },
    )
    .unwrap_or_else(|e| panic!("run: {e}"))
}

fn main() {
    let root = harness::workspace_root();
    let wasm_path = root.join("target/wasm32-wasip1/release/hello-rust.wasm");
    let Ok(wasm) = std::fs::read(&wasm_path) else {
        eprintln!(
            "{} is missing: run hack/build-samples.sh first",
            wasm_path.display()
        );
        std::process::exit(1);
    };
    let input = serde_json::json!({
        "apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList",
        "items": [{"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c", "namespace": "demo", "annotations": {"enoki.dev/input-key": "config"}},
                   "data": {"greeting": "hello", "extra": "97"}}],
        "functionConfig": {"composition": {"name": "bench", "namespace": "demo"}, "env": {}},
    });
    let input_bytes = serde_json::to_vec(&input).unwrap_or_default();

    let host = Host::new(None).unwrap_or_else(|e| panic!("engine: {e}"));
    let module = host.load(&wasm).unwrap_or_else(|e| panic!("load: {e}"));
    let run = || run_once(&host, &module, &input_bytes);
    let out: serde_json::Value = serde_json::from_slice(&run().stdout).unwrap_or_default();
    let n_items = out["items"].as_array().map_or(0, Vec::len);
    assert_eq!(n_items, 100, "the benchmark input makes 100 resources");

    let wasm_warm = time(200, run);
    if std::env::var_os("PROFILE_WARM").is_some() {
        for _ in 0..5000 {
            std::hint::black_box(run());
        }
        return;
    }
    let empty = harness::wasm::module(0, 0, &[], 0);
    let empty = host.load(&empty).unwrap_or_else(|e| panic!("load: {e}"));
    let overhead = time(200, || run_once(&host, &empty, &input_bytes));

    let native = time(200, || {
        let parsed: enoki_sdk::Input = serde_json::from_slice(&input_bytes)
            .unwrap_or_else(|_| enoki_sdk::testing::input_from_items(vec![]));
        let list = enoki_sdk::testing::run(hello::synthesize, &parsed);
        serde_json::to_vec(&list).unwrap_or_default()
    });

    let cache = std::env::temp_dir().join(format!("enoki-bench-cache-{}", std::process::id()));
    let compile = time(5, || {
        let h = Host::new(None).unwrap_or_else(|e| panic!("engine: {e}"));
        h.load(&wasm).map(|m| m.digest().len()).unwrap_or_default()
    });
    {
        let h = Host::new(Some(&cache)).unwrap_or_else(|e| panic!("engine: {e}"));
        let _ = h.load(&wasm);
    }
    // A restart: the host (engines, instance pool) is created once, then its modules are
    // loaded from the disk cache (verified, mapped, pre-linked). Each sample a fresh host.
    let hosts: Vec<Host> = (0..21)
        .map(|_| Host::new(Some(&cache)).unwrap_or_else(|e| panic!("engine: {e}")))
        .collect();
    let precompiled = median(
        hosts
            .iter()
            .map(|h| {
                let t = Instant::now();
                let m = h.load(&wasm).unwrap_or_else(|e| panic!("load: {e}"));
                let took = t.elapsed();
                assert_eq!(h.cache_hits(), 1, "loaded from the cache");
                std::hint::black_box(m);
                took
            })
            .collect(),
    );
    drop(hosts);
    let new_host = time(10, || {
        Host::new(Some(&cache)).unwrap_or_else(|e| panic!("engine: {e}"))
    });
    let _ = std::fs::remove_dir_all(&cache);

    println!(
        "synthesis benchmark (medians; module {} bytes; output {} resources)",
        wasm.len(),
        n_items
    );
    println!(
        "  warm wasm synthesis (fresh Store each run)  {:>10.3} ms",
        wasm_warm.as_secs_f64() * 1e3
    );
    println!(
        "  same function compiled natively (baseline)  {:>10.3} ms",
        native.as_secs_f64() * 1e3
    );
    println!(
        "  wasm / native                               {:>10.2}x",
        wasm_warm.as_secs_f64() / native.as_secs_f64()
    );
    println!(
        "  fixed cost of a run (empty module)          {:>10.3} ms",
        overhead.as_secs_f64() * 1e3
    );
    println!(
        "  compile module (cold, no cache)             {:>10.3} ms",
        compile.as_secs_f64() * 1e3
    );
    println!(
        "  load precompiled module from disk cache     {:>10.3} ms",
        precompiled.as_secs_f64() * 1e3
    );
    println!(
        "  compile / load-precompiled                  {:>10.2}x",
        compile.as_secs_f64() / precompiled.as_secs_f64()
    );
    println!(
        "  create a host (once per process)            {:>10.3} ms",
        new_host.as_secs_f64() * 1e3
    );
}
