//! Run a synthesizer natively over fixture files and compare with snapshots — the pattern the
//! samples use, so authors can copy one that works.
//!
//! ```
//! use enoki_sdk::{testing, Output, Resource};
//! let input = testing::input_from_items(vec![serde_json::json!({
//!     "apiVersion": "v1", "kind": "ConfigMap",
//!     "metadata": {"name": "c", "annotations": {"enoki.dev/input-key": "config"}},
//! })]);
//! let out = testing::run(|i| {
//!     let mut o = Output::default();
//!     o.push(Resource::new("v1", "ConfigMap", i.input("config")?["metadata"]["name"].as_str().unwrap_or("")));
//!     Ok(o)
//! }, &input);
//! assert_eq!(out.items[0]["metadata"]["name"], "c");
//! ```

use std::path::Path;

use serde_json::Value;

use crate::{Error, Input, Output, ResourceList, SynthesisResult};

/// Runs `f` as [`crate::run`] would, without stdin/stdout.
pub fn run<F>(f: F, input: &Input) -> ResourceList
where
    F: FnOnce(&Input) -> Result<Output, Error>,
{
    match f(input) {
        Ok(out) => out.into_resource_list(),
        Err(e) => Output {
            items: Vec::new(),
            results: vec![SynthesisResult::error(e.to_string())],
        }
        .into_resource_list(),
    }
}

/// A stdin ResourceList holding these items.
pub fn input_from_items(items: Vec<Value>) -> Input {
    ResourceList {
        items,
        ..ResourceList::default()
    }
}

/// Reads a fixture ResourceList (JSON).
///
/// # Panics
/// When the file is missing or not a ResourceList (this is test code).
pub fn read_fixture(path: impl AsRef<Path>) -> Input {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{}: not a ResourceList: {e}", path.display()))
}

/// Compares `output` (pretty JSON) with the snapshot file; `UPDATE_SNAPSHOTS=1` rewrites it
/// (never when `CI` is set).
///
/// # Panics
/// When the snapshot differs or is missing (this is test code).
pub fn assert_snapshot(output: &ResourceList, path: impl AsRef<Path>) {
    let path = path.as_ref();
    let got = serde_json::to_string_pretty(output).unwrap_or_default() + "\n";
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() && std::env::var_os("CI").is_none() {
        std::fs::write(path, &got).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let want = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        want == got,
        "snapshot {} differs (UPDATE_SNAPSHOTS=1 to accept):\n--- want\n{want}\n+++ got\n{got}",
        path.display()
    );
}
