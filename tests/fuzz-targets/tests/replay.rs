//! Replays every seed input (`fuzz/seeds/<target>/`: small, readable, committed), every
//! regression input (`fuzz/regressions/<target>/`: inputs that once panicked, aborted or hung,
//! kept after the fix) and, when present, the generated corpus (`fuzz/corpus/<target>/`, not
//! committed; `make fuzz` rebuilds it from the seeds) through its target: none may panic.
//! This runs in `make test`.

use std::path::{Path, PathBuf};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    out.retain(|p| p.is_file());
    out.sort();
    out
}

#[test]
fn every_seed_regression_and_corpus_input_runs_without_a_panic() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut failures = Vec::new();
    let mut replayed = 0;
    for (name, target) in enoki_fuzz::TARGETS {
        let seeds = inputs(&fuzz.join("seeds").join(name));
        assert!(
            !seeds.is_empty(),
            "fuzz/seeds/{name} is empty: every target needs readable seed inputs"
        );
        for dir in ["seeds", "regressions", "corpus"] {
            for path in inputs(&fuzz.join(dir).join(name)) {
                let data = std::fs::read(&path).unwrap_or_default();
                replayed += 1;
                if std::panic::catch_unwind(|| target(&data)).is_err() {
                    failures.push(path.display().to_string());
                }
            }
        }
    }
    assert!(failures.is_empty(), "inputs that panic: {failures:#?}");
    assert!(
        replayed >= enoki_fuzz::TARGETS.len(),
        "{replayed} inputs replayed"
    );
}
