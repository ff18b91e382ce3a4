//! Replays every committed corpus input (`fuzz/corpus/<target>/`) and every regression input
//! (`fuzz/regressions/<target>/`: inputs that once panicked, kept after the fix) through its
//! target: none may panic. `make fuzz` grows the corpus; this runs in `make test`.

use std::path::PathBuf;

fn inputs(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    out.retain(|p| p.is_file());
    out.sort();
    out
}

#[test]
fn every_corpus_and_regression_input_runs_without_a_panic() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut failures = Vec::new();
    for (name, target) in enoki_fuzz::TARGETS {
        let corpus = inputs(&fuzz.join("corpus").join(name));
        assert!(
            !corpus.is_empty(),
            "fuzz/corpus/{name} is empty: seed it (make fuzz keeps what it finds)"
        );
        for path in corpus
            .iter()
            .chain(inputs(&fuzz.join("regressions").join(name)).iter())
        {
            let data = std::fs::read(path).unwrap_or_default();
            if std::panic::catch_unwind(|| target(&data)).is_err() {
                failures.push(path.display().to_string());
            }
        }
    }
    assert!(failures.is_empty(), "inputs that panic: {failures:#?}");
}
