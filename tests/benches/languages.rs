//! What a synthesizer costs per language, measured in one run so the figures compare: module
//! size, cold compile (Cranelift, no cache) and warm synthesis (precompiled, fresh Store per
//! run), each sample over its own fixture; ratios against the Rust preview1 sample (01)
//! measured in the same run. Medians.
//!
//! Run: `make bench-languages` (`cargo bench -p enoki-tests --bench languages`; needs
//! `hack/build-samples.sh`).

use std::path::Path;
use std::time::{Duration, Instant};

use wasm_host::{Entropy, Host, RunLimits, RunRequest};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(n: usize, mut f: impl FnMut() -> T) -> Duration {
    median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed()
            })
            .collect(),
    )
}

/// (language, module under target/, fixture)
const SAMPLES: &[(&str, &str, &str)] = &[
    (
        "Rust, preview1 (01, baseline)",
        "wasm32-wasip1/release/hello-rust.wasm",
        "samples/01-hello-rust/fixtures/input.json",
    ),
    (
        "Rust, component (02)",
        "wasm32-wasip2/release/rust-component.wasm",
        "samples/02-rust-component/fixtures/input.json",
    ),
    ("Go (03)", "samples/go.wasm", "samples/03-go/input.json"),
    ("C (04)", "samples/c.wasm", "samples/04-c/input.json"),
    (
        "AssemblyScript (08)",
        "samples/assemblyscript.wasm",
        "samples/08-assemblyscript/fixtures/input.json",
    ),
    (
        "Python, componentize-py (09)",
        "samples/python.wasm",
        "samples/09-python/fixtures/input.json",
    ),
    (
        "TypeScript, componentize-js (10)",
        "samples/typescript.wasm",
        "samples/10-typescript/fixtures/input.json",
    ),
];

struct Row {
    label: &'static str,
    size: usize,
    compile: Duration,
    warm: Duration,
    items: usize,
}

fn measure(root: &Path, (label, module, fixture): (&'static str, &str, &str)) -> Row {
    let path = root.join("target").join(module);
    let wasm = std::fs::read(&path).unwrap_or_else(|e| {
        eprintln!("{}: {e} (run hack/build-samples.sh first)", path.display());
        std::process::exit(1);
    });
    let input = std::fs::read(root.join(fixture)).unwrap_or_else(|e| panic!("{fixture}: {e}"));
    let fresh = || {
        let h = Host::new(None).unwrap_or_else(|e| panic!("engine: {e}"));
        h.set_baseline_min_bytes(usize::MAX); // Cranelift for every size: same code path
        h
    };
    let reps = if wasm.len() > 4 << 20 { 3 } else { 5 };
    let compile = time(reps, || {
        fresh()
            .load(&wasm)
            .unwrap_or_else(|e| panic!("{label}: {e}"))
            .digest()
            .len()
    });
    let host = fresh();
    let m = host.load(&wasm).unwrap_or_else(|e| panic!("{label}: {e}"));
    let run = || {
        host.run(
            &m,
            RunRequest {
                program: "bench",
                input: &input,
                env: &[],
                limits: RunLimits::default(),
                entropy: Entropy::Reproducible {
                    wall_clock: Duration::ZERO,
                    seed: [1; 32],
                },
            },
        )
        .unwrap_or_else(|e| panic!("{label}: run: {e}"))
    };
    let out: serde_json::Value = serde_json::from_slice(&run().stdout).unwrap_or_default();
    let items = out["items"].as_array().map_or(0, Vec::len);
    assert!(items > 0, "{label}: no resources in {out}");
    let warm = time(20, run);
    Row {
        label,
        size: wasm.len(),
        compile,
        warm,
        items,
    }
}

fn main() {
    let root = harness::workspace_root();
    let rows: Vec<Row> = SAMPLES.iter().map(|s| measure(&root, *s)).collect();
    let base = &rows[0];
    println!(
        "| language (sample) | module | cold compile | warm synthesis | resources | vs Rust p1: size / compile / synthesis |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for r in &rows {
        println!(
            "| {} | {:.2} MB | {:.1} ms | {:.2} ms | {} | {:.1}× / {:.1}× / {:.1}× |",
            r.label,
            r.size as f64 / 1e6,
            r.compile.as_secs_f64() * 1e3,
            r.warm.as_secs_f64() * 1e3,
            r.items,
            r.size as f64 / base.size as f64,
            r.compile.as_secs_f64() / base.compile.as_secs_f64(),
            r.warm.as_secs_f64() / base.warm.as_secs_f64(),
        );
    }
}
