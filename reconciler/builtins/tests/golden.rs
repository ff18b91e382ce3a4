//! Golden fixtures: each `tests/golden/<builtin>/<case>/input.json` (a stdin ResourceList) must
//! produce `output.json` exactly. `UPDATE_GOLDEN=1` rewrites the outputs (never under `CI`).
//! The controller's `builtins_wasm` test runs the same inputs through the `wasm32-wasip1`
//! builds and requires byte-identical output.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

fn cases() -> Vec<(String, PathBuf)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut out = Vec::new();
    for builtin in std::fs::read_dir(&root).unwrap() {
        let builtin = builtin.unwrap().path();
        for case in std::fs::read_dir(&builtin).unwrap() {
            let name = builtin.file_name().unwrap().to_string_lossy().to_string();
            out.push((name, case.unwrap().path()));
        }
    }
    out.sort();
    out
}

#[test]
fn every_builtin_matches_its_golden_outputs() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some() && std::env::var_os("CI").is_none();
    let cases = cases();
    assert!(cases.len() >= 8, "golden cases are missing");
    let mut failures = Vec::new();
    for (builtin, dir) in cases {
        let input = enoki_sdk::testing::read_fixture(dir.join("input.json"));
        let run = builtins::lookup(&builtin).unwrap();
        let got = enoki_sdk::testing::run(run, &input);
        let text = format!("{}\n", serde_json::to_string_pretty(&got).unwrap());
        let path = dir.join("output.json");
        if update {
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if want != text {
            failures.push(format!("{}:\n{text}", path.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "golden mismatch (UPDATE_GOLDEN=1 rewrites):\n{}",
        failures.join("\n")
    );
}

#[test]
fn every_builtin_has_a_synthesizer_spec_for_its_kind() {
    for name in builtins::NAMES {
        let spec = builtins::synthesizer_spec(name).unwrap();
        assert_eq!(spec["module"]["builtin"], *name);
        assert!(spec["for"]["kind"].is_string());
    }
}
