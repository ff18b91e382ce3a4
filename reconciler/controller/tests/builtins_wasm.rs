//! Each built-in also builds to `wasm32-wasip1` (`reconciler/builtins/src/bin/`); on every
//! golden fixture the wasm build, run through the real wasm host, produces byte-identical
//! output (same `outputDigest`) to the natively linked built-in. `make test` builds the wasm
//! first (`hack/build-samples.sh`); a missing build fails loudly.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use controller::synthesis::{self, CompositionMeta, Module, SynthesisInput};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn synthesis_input(list: &Value) -> SynthesisInput {
    let annotation = |i: &Value, k: &str| {
        i.pointer("/metadata/annotations")
            .and_then(|a| a.get(k))
            .and_then(Value::as_str)
            .map(String::from)
    };
    let items = list["items"].as_array().unwrap();
    let fc = &list["functionConfig"];
    SynthesisInput {
        composition: CompositionMeta {
            name: fc["composition"]["name"]
                .as_str()
                .unwrap_or_default()
                .into(),
            namespace: fc["composition"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .into(),
            uid: "fixture-uid".into(),
            generation: 1,
            ..CompositionMeta::default()
        },
        inputs: items
            .iter()
            .filter_map(|i| Some((annotation(i, "enoki.dev/input-key")?, i.clone())))
            .collect(),
        observed: items
            .iter()
            .filter(|i| annotation(i, "enoki.dev/observed").is_some())
            .cloned()
            .collect(),
        env: fc["env"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default(),
        program: "builtin".into(),
        ..SynthesisInput::default()
    }
}

#[test]
fn wasm_builds_of_the_builtins_match_the_native_ones_byte_for_byte() {
    let host = wasm_host::Host::new(None).unwrap();
    let golden = root().join("reconciler/builtins/tests/golden");
    let mut compared = 0;
    for name in builtins::NAMES {
        let wasm_path = root().join(format!("target/wasm32-wasip1/release/{name}.wasm"));
        let bytes = std::fs::read(&wasm_path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; build it with hack/build-samples.sh (make test does)",
                wasm_path.display()
            )
        });
        let wasm = Module::Wasm(host.load(&bytes).unwrap());
        let native = Module::Builtin {
            name: (*name).to_string(),
            run: builtins::lookup(name).unwrap(),
        };
        for case in std::fs::read_dir(golden.join(name)).unwrap() {
            let case = case.unwrap().path();
            let list: Value =
                serde_json::from_str(&std::fs::read_to_string(case.join("input.json")).unwrap())
                    .unwrap();
            let input = synthesis_input(&list);
            let run = |m: &Module| {
                synthesis::synthesize(
                    &host,
                    m,
                    &input,
                    synthesis::run_limits(None).unwrap(),
                    false,
                    &synthesis::static_is_namespaced,
                )
            };
            match (run(&native), run(&wasm)) {
                (Ok(n), Ok(w)) => {
                    assert_eq!(n.output_digest, w.output_digest, "{}", case.display());
                    assert_eq!(n.items, w.items, "{}", case.display());
                    assert!(!n.items.is_empty(), "{}", case.display());
                }
                (Err(n), Err(w)) => assert_eq!(n.to_string(), w.to_string(), "{}", case.display()),
                (n, w) => panic!(
                    "{}: native {:?} but wasm {:?}",
                    case.display(),
                    n.map(|o| o.output_digest),
                    w.map(|o| o.output_digest)
                ),
            }
            compared += 1;
        }
    }
    assert!(compared >= 8, "only {compared} golden cases compared");
}
