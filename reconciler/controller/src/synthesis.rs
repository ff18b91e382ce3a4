//! One synthesis, exactly as the controller and `enoki render` run it: build the stdin
//! ResourceList, run the module (wasm or built-in) under its limits, parse stdout (JSON or
//! YAML), honour `results`, and validate the items.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use wasm_host::{Entropy, Host, ModulePre, RunLimits, RunRequest};

use crds::names::annotations as keys;

mod builtin;
mod error;
mod limits;
mod output;
mod validate;
pub use builtin::BuiltinFn;
pub use error::*;
pub use limits::*;
pub use output::*;
pub use validate::*;

/// The Composition as the synthesizer sees it (`functionConfig.composition`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompositionMeta {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// UID (seeds reproducible randomness).
    pub uid: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// metadata.generation.
    pub generation: i64,
    /// creationTimestamp as time since the Unix epoch (the reproducible wall clock).
    pub created: Duration,
}

/// Everything that goes into one synthesis.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SynthesisInput {
    /// The Composition.
    pub composition: CompositionMeta,
    /// Bound inputs as (ref key, object).
    pub inputs: Vec<(String, Value)>,
    /// Live state of last synthesis's outputs.
    pub observed: Vec<Value>,
    /// Environment.
    pub env: BTreeMap<String, String>,
    /// The synthesizer's name: the module's `argv[0]`.
    pub program: String,
    /// Keys of the Synthesizer's optional refs (`functionConfig.optionalRefs`, as Eno sends).
    pub optional_refs: Vec<String>,
    /// This synthesis's UUID (`SYNTHESIS_UUID` in the module's environment; not in stdin).
    pub synthesis_uuid: String,
}

/// The variables Eno sets for every synthesizer; they override `env`/`synthesisEnv`.
pub const ENO_ENV: [&str; 3] = [
    "COMPOSITION_NAME",
    "COMPOSITION_NAMESPACE",
    "SYNTHESIS_UUID",
];

/// The module's process environment: the merged synthesis environment, then Eno's
/// [`ENO_ENV`] (a user variable of the same name is dropped).
pub fn process_env(input: &SynthesisInput) -> Vec<(String, String)> {
    let c = &input.composition;
    input
        .env
        .iter()
        .filter(|(k, _)| !ENO_ENV.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .chain([
            (ENO_ENV[0].to_string(), c.name.clone()),
            (ENO_ENV[1].to_string(), c.namespace.clone()),
            (ENO_ENV[2].to_string(), input.synthesis_uuid.clone()),
        ])
        .collect()
}

/// What runs.
#[derive(Clone)]
pub enum Module {
    /// A compiled WebAssembly module.
    Wasm(ModulePre),
    /// A WebAssembly module given a Helm chart (`spec.helm`) as extra inputs.
    Chart(std::sync::Arc<Chart>),
    /// A synthesizer linked into the binary.
    Builtin {
        /// Its name.
        name: String,
        /// The function.
        run: BuiltinFn,
    },
}

impl Module {
    /// `sha256:<hex>` for wasm, `builtin:<name>@<version>` for built-ins.
    pub fn digest(&self) -> String {
        match self {
            Module::Wasm(m) => m.digest().to_string(),
            Module::Chart(c) => format!("{}+chart:{}", c.module.digest(), c.digest),
            Module::Builtin { name, .. } => format!("builtin:{name}@{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// A module and the chart of `spec.helm` it renders: the packaged chart goes to the module
/// as the input `chart` (a ConfigMap-shaped object, `binaryData.chart.tgz`) and the
/// Synthesizer's values as the input `helm-values` (`data.values.yaml`), before the bound
/// inputs.
#[derive(Clone)]
pub struct Chart {
    /// The module (the built-in `helm` module, or one of the author's).
    pub module: ModulePre,
    /// `sha256:` of the packaged chart.
    pub digest: String,
    /// The inputs the chart adds.
    pub inputs: Vec<(String, Value)>,
}

impl Chart {
    /// The chart of Synthesizer `synth`: its `.tgz` bytes and inline values.
    pub fn new(module: ModulePre, synth: &str, tgz: &[u8], values: Option<&Value>) -> Chart {
        use base64::Engine as _;
        let chart = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{synth}-chart")},
            "binaryData": {"chart.tgz": base64::engine::general_purpose::STANDARD.encode(tgz)}});
        let values = values.cloned().unwrap_or_else(|| json!({}));
        let values = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{synth}-helm-values")},
            "data": {"values.yaml": plan::snapshot::canonical_json(&values)}});
        Chart {
            module,
            digest: sha256(tgz),
            inputs: vec![("chart".into(), chart), ("helm-values".into(), values)],
        }
    }
}

/// A successful synthesis.
#[derive(Clone, Debug, PartialEq)]
pub struct Synthesized {
    /// Validated desired resources (namespaces defaulted).
    pub items: Vec<Value>,
    /// Non-error results.
    pub results: Vec<crds::SynthesisResult>,
    /// `sha256:` of the stdin bytes.
    pub input_digest: String,
    /// `sha256:` of the stdout bytes.
    pub output_digest: String,
    /// Peak linear memory of the wasm run (0 for built-ins).
    pub peak_memory_bytes: usize,
}

/// The stdin bytes: a ResourceList with inputs (annotated with their key under both
/// `enoki.dev/input-key` and `eno.azure.io/input-key`), observed outputs (annotated observed)
/// and functionConfig — shaped as Eno's (`apiVersion: v1`, `kind: ConfigMap`,
/// `optionalRefs`) plus enoki's `composition` and `env`. Deterministic for equal inputs.
pub fn input_bytes(input: &SynthesisInput) -> Vec<u8> {
    let mut items = Vec::with_capacity(input.inputs.len() + input.observed.len());
    for (key, object) in &input.inputs {
        let mut o = object.clone();
        enoki_sdk::annotations::set(&mut o, keys::INPUT_KEY.enoki, key.clone());
        enoki_sdk::annotations::set(&mut o, keys::INPUT_KEY.eno, key.clone());
        items.push(o);
    }
    for object in &input.observed {
        let mut o = object.clone();
        enoki_sdk::annotations::set(&mut o, keys::OBSERVED.enoki, "true");
        items.push(o);
    }
    let c = &input.composition;
    let list = json!({
        "apiVersion": "config.kubernetes.io/v1",
        "kind": "ResourceList",
        "items": items,
        "functionConfig": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "optionalRefs": input.optional_refs,
            "composition": {
                "name": c.name, "namespace": c.namespace, "labels": c.labels,
                "annotations": c.annotations, "generation": c.generation,
            },
            "env": input.env,
        },
    });
    plan::snapshot::canonical_json(&list).into_bytes()
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The reproducible seed: SHA-256 of the composition UID and the input digest.
pub fn seed(uid: &str, input: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(uid.as_bytes());
    h.update([0]);
    h.update(Sha256::digest(input));
    h.finalize().into()
}

/// Runs a wasm module on `stdin`: its stdout; `peak` gets its peak linear memory.
fn run_wasm(
    host: &Host,
    m: &ModulePre,
    input: &SynthesisInput,
    stdin: &[u8],
    limits: RunLimits,
    secure: bool,
    peak: &mut usize,
) -> Result<Vec<u8>, SynthesisError> {
    let env = process_env(input);
    let entropy = if secure {
        Entropy::Secure
    } else {
        Entropy::Reproducible {
            wall_clock: input.composition.created,
            seed: seed(&input.composition.uid, stdin),
        }
    };
    let out = host.run(
        m,
        RunRequest {
            program: &input.program,
            input: stdin,
            env: &env,
            limits,
            entropy,
        },
    )?;
    *peak = out.peak_memory_bytes;
    Ok(out.stdout)
}

/// Runs one synthesis.
///
/// # Errors
/// A typed [`SynthesisError`]; nothing is applied on error.
pub fn synthesize(
    host: &Host,
    module: &Module,
    input: &SynthesisInput,
    limits: RunLimits,
    secure: bool,
    is_namespaced: &dyn Fn(&str, &str) -> bool,
) -> Result<Synthesized, SynthesisError> {
    let with_chart;
    let input = match module {
        Module::Chart(c) => {
            let mut i = input.clone();
            i.inputs.splice(0..0, c.inputs.iter().cloned());
            with_chart = i;
            &with_chart
        }
        _ => input,
    };
    let stdin = input_bytes(input);
    if stdin.len() > MAX_INPUT_BYTES {
        return Err(SynthesisError::InputTooLarge { size: stdin.len() });
    }
    let input_digest = sha256(&stdin);
    let mut peak_memory_bytes = 0;
    let stdout = match module {
        Module::Wasm(m) => run_wasm(
            host,
            m,
            input,
            &stdin,
            limits,
            secure,
            &mut peak_memory_bytes,
        )?,
        Module::Chart(c) => run_wasm(
            host,
            &c.module,
            input,
            &stdin,
            limits,
            secure,
            &mut peak_memory_bytes,
        )?,
        Module::Builtin { run, .. } => builtin::run(*run, &stdin, limits)?,
    };
    let output_digest = sha256(&stdout);
    let (items, results) = parse_output(&stdout)?;
    let errors: Vec<String> = results
        .iter()
        .filter(|r| r.severity == crds::Severity::Error)
        .map(|r| r.message.clone())
        .collect();
    if !errors.is_empty() {
        let event_reason = results
            .iter()
            .filter(|r| r.severity == crds::Severity::Error)
            .find_map(|r| r.tags.get(crds::names::EVENT_REASON_TAG).cloned());
        return Err(SynthesisError::ErrorResult {
            messages: errors,
            event_reason,
            results,
        });
    }
    let (items, duplicates) = validate(items, &input.composition.namespace, is_namespaced)?;
    let mut results = results;
    results.extend(duplicates);
    Ok(Synthesized {
        items,
        results,
        input_digest,
        output_digest,
        peak_memory_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse() {
        assert_eq!(parse_quantity("256Mi"), Ok(256 << 20));
        assert_eq!(parse_quantity("1G"), Ok(1_000_000_000));
        assert_eq!(parse_quantity("42"), Ok(42));
        assert!(parse_quantity("1Xi").is_err());
        // The SDK's parser, as Kubernetes reads quantities.
        assert_eq!(parse_quantity("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_quantity("1Ti"), Ok(1 << 40));
        assert_eq!(parse_quantity("0.5k"), Ok(500));
        assert!(parse_quantity("1K").is_err(), "Kubernetes has no K suffix");
        assert!(parse_quantity("-1Mi").is_err());
        assert!(
            parse_quantity("512m")
                .unwrap_err()
                .contains("whole number of bytes")
        );
        for huge in ["1e30", "1e2147483647", "99999999999999999999999999Ei"] {
            assert!(parse_quantity(huge).is_err(), "{huge}");
        }
        assert!(parse_quantity("lots").is_err());
    }

    #[test]
    fn malformed_output_names_the_position() {
        let err = parse_output(b"{\"kind\": \"ResourceList\", \"items\": [}").unwrap_err();
        assert!(err.to_string().contains("line 1 column"), "{err}");
        assert_eq!(err.reason(), "MalformedOutput");
        let err = parse_output(b"this is not { json").unwrap_err();
        assert_eq!(err.reason(), "MalformedOutput");
        let (items, _) = parse_output(b"kind: ResourceList\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n").unwrap();
        assert_eq!(items.len(), 1, "YAML output is accepted");
    }

    #[test]
    fn output_is_parsed_strictly() {
        let err = |text: &str| match parse_output(text.as_bytes()) {
            Err(SynthesisError::MalformedOutput { message }) => message,
            other => panic!("{text}: {other:?}"),
        };
        assert!(err(r#"{"kind":"ResourceList","itmes":[]}"#).contains("\"itmes\""));
        assert!(err(r#"{"kind":"ResourceList"}"#).contains("no \"items\""));
        assert!(err(r#"{"kind":"ResourceList","items":{}}"#).contains("an object, want a list"));
        assert!(err(r#"{"kind":"ResourceList","items":null}"#).contains("null"));
        assert!(err("kind: ResourceList\nitems: []\nextra: 1\n").contains("\"extra\""));
        let (items, results) = parse_output(
            br#"{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[],
                "functionConfig":{},"results":[{"message":"hi","severity":"info"}]}"#,
        )
        .unwrap();
        assert!(items.is_empty());
        assert_eq!(results.len(), 1);
    }

    #[test]
    fn validation_names_the_item_and_defaults_namespaces() {
        let items = vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "namespace": "x"}}),
        ];
        let mut items = items;
        items[0]["status"] = json!({});
        items[0]["metadata"]["creationTimestamp"] = Value::Null;
        let (out, _) = validate(items, "demo", &static_is_namespaced).unwrap();
        assert_eq!(out[0]["metadata"]["namespace"], "demo");
        assert!(out[0].get("status").is_none(), "status dropped as Eno does");
        assert!(out[0]["metadata"].get("creationTimestamp").is_none());
        assert!(out[1]["metadata"].get("namespace").is_none());
        let err = validate(
            vec![json!({"apiVersion": "v1", "metadata": {"name": "a"}})],
            "demo",
            &static_is_namespaced,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("item 0") && err.to_string().contains("kind"),
            "{err}"
        );
        // enoki's own storage is never an output (either API group's spelling).
        for group in ["enoki.dev/v1alpha1", "eno.azure.io/v1"] {
            let slice = json!({"apiVersion": group, "kind": "ResourceSlice",
                "metadata": {"name": "planted"}});
            let err = validate(vec![slice], "demo", &static_is_namespaced).unwrap_err();
            assert!(
                err.to_string()
                    .contains("item 0: demo/planted is a ResourceSlice"),
                "{err}"
            );
            let patch = json!({"apiVersion": "eno.azure.io/v1", "kind": "Patch",
                "metadata": {"name": "planted"},
                "patch": {"apiVersion": group, "kind": "ResourceSlice", "ops": []}});
            let err = validate(vec![patch], "demo", &static_is_namespaced).unwrap_err();
            assert!(
                err.to_string()
                    .contains("item 0: demo/planted patches a ResourceSlice"),
                "{err}"
            );
        }
        // An identity no API server accepts is refused before anything is stored.
        let long = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x".repeat(318)}});
        let err = validate(vec![long], "demo", &static_is_namespaced).unwrap_err();
        assert!(
            err.to_string()
                .contains("item 0: metadata.name is 318 bytes (at most 317)"),
            "{err}"
        );
        // So is a Patch whose target is (the slice cache keeps the target's kind).
        for api_version in crds::names::PATCH_API_VERSIONS {
            let patch = json!({"apiVersion": api_version, "kind": "Patch",
                "metadata": {"name": "p"}, "patch": {"apiVersion": "v1", "kind": "x".repeat(400)}});
            let err = validate(vec![patch], "demo", &static_is_namespaced).unwrap_err();
            assert!(
                err.to_string()
                    .contains("item 0: patch.kind is 400 bytes (at most 317)"),
                "{err}"
            );
        }
        // A cluster-scoped item's stray namespace is dropped, not refused.
        let stray = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "n", "namespace": "y".repeat(100)}});
        assert!(validate(vec![stray], "demo", &static_is_namespaced).is_ok());
    }

    /// The stdin enoki sends, as Eno's Go SDK must accept it: both input-key annotations,
    /// functionConfig shaped as Eno's (`v1 ConfigMap`, `optionalRefs`) plus enoki's fields.
    /// `samples/11-eno-go/enofn/golden_test.go` decodes this file the way Eno's SDK does
    /// (every item and functionConfig as `unstructured.Unstructured`, which needs `kind`).
    #[test]
    fn the_stdin_resource_list_is_what_enos_sdk_reads() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "web-config", "namespace": "team-a"},
            "data": {"image": "nginx:1.27", "replicas": "2"}});
        let input = SynthesisInput {
            composition: CompositionMeta {
                name: "web".into(),
                namespace: "team-a".into(),
                uid: "u".into(),
                generation: 3,
                ..CompositionMeta::default()
            },
            inputs: vec![("config".into(), cm)],
            env: [("TIER".to_string(), "prod".to_string())].into(),
            program: "eno-go".into(),
            optional_refs: vec!["extra".into()],
            synthesis_uuid: "5d0c1b8e-0000-4000-8000-000000000001".into(),
            ..SynthesisInput::default()
        };
        let text = String::from_utf8(input_bytes(&input)).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        let fc = &v["functionConfig"];
        assert_eq!(
            (fc["apiVersion"].as_str(), fc["kind"].as_str()),
            (Some("v1"), Some("ConfigMap"))
        );
        assert_eq!(fc["optionalRefs"], json!(["extra"]));
        let ann = &v["items"][0]["metadata"]["annotations"];
        assert_eq!(ann["eno.azure.io/input-key"], "config");
        assert_eq!(ann["enoki.dev/input-key"], "config");
        // Eno's variables reach the module's environment, over any user value.
        let mut user = input.clone();
        user.env.insert("COMPOSITION_NAME".into(), "spoofed".into());
        let env: BTreeMap<String, String> = process_env(&user).into_iter().collect();
        assert_eq!(env["COMPOSITION_NAME"], "web");
        assert_eq!(env["COMPOSITION_NAMESPACE"], "team-a");
        assert_eq!(
            env["SYNTHESIS_UUID"],
            "5d0c1b8e-0000-4000-8000-000000000001"
        );
        assert_eq!(env["TIER"], "prod");
        let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../samples/11-eno-go/testdata/stdin.json");
        let text = text + "\n";
        if std::env::var_os("UPDATE_GOLDEN").is_some() && std::env::var_os("CI").is_none() {
            std::fs::write(&golden, &text).unwrap();
        }
        assert_eq!(
            std::fs::read_to_string(&golden).unwrap(),
            text,
            "UPDATE_GOLDEN=1 rewrites"
        );
    }

    #[test]
    fn krm_results_parse_as_the_spec_writes_them() {
        let out = br#"{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[],
            "results":[{"message":"m1","severity":"warning","tags":{"team":"a"},
                        "resourceRef":{"apiVersion":"v1","kind":"ConfigMap","name":"c","namespace":"n"}},
                       {"message":"no severity"},
                       {"message":"cluster","resourceRef":{"apiVersion":"v1","kind":"Namespace","name":"x"},
                        "file":{"path":"a.yaml","index":0}}]}"#;
        let (_, results) = parse_output(out).unwrap();
        assert_eq!(results[0].resource_ref.as_deref(), Some("ConfigMap/n/c"));
        assert_eq!(results[0].tags["team"], "a");
        assert_eq!(results[0].severity, "warning");
        assert_eq!(
            results[1].severity, "",
            "severity is optional and not an error"
        );
        assert_eq!(results[2].resource_ref.as_deref(), Some("Namespace/x"));
        // Eno (Go's encoding/json) reads a result without a message as "".
        let bare = br#"{"kind":"ResourceList","items":[],"results":[{"severity":"error"}]}"#;
        assert_eq!(parse_output(bare).unwrap().1[0].message, "");
        // Eno's documented failure output: results only, no items.
        let eno = br#"{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList",
            "results":[{"severity":"warning","message":"w"},
                       {"severity":"error","message":"Invalid configuration: replicas must be a positive integer"},
                       {"severity":"error","message":"second"}]}"#;
        let (items, results) = parse_output(eno).unwrap();
        assert!(items.is_empty());
        assert_eq!(results.len(), 3);
        let null_items = br#"{"kind":"ResourceList","items":null,"results":[{"severity":"error","message":"x"}]}"#;
        assert!(parse_output(null_items).is_ok());
        // Without an error result, a missing items is still refused (not an empty output).
        let no_items =
            br#"{"kind":"ResourceList","results":[{"severity":"warning","message":"x"}]}"#;
        assert!(parse_output(no_items).is_err());
        assert!(parse_output(br#"{"kind":"ResourceList"}"#).is_err());
    }

    /// Go's `fnv.New64()` over `json.Marshal` of `{"apiVersion":"v1","kind":"ConfigMap",
    /// "metadata":{"name":"a"}}`, computed with go1.26.
    const GO_FNV1_OF_MANIFEST: u64 = 0xa93a_e0be_92a7_fd77;

    #[test]
    fn duplicates_are_resolved_as_eno_resolves_them() {
        // The FNV-1 64 reference vectors.
        assert_eq!(fnv1_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1_64(b"a"), 0xaf63_bd4c_8601_b7be);
        // Go: fnv.New64 over json.Marshal of the same manifest (checked with go1.26).
        assert_eq!(
            eno_manifest_hash(
                &json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "a"}})
            ),
            GO_FNV1_OF_MANIFEST
        );
        let a = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"v": "1"}});
        let b = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "demo"}, "data": {"v": "2"}});
        let winner = if eno_manifest_hash(&a) >= eno_manifest_hash(&b) {
            "1"
        } else {
            "2"
        };
        // Either order gives the same winner (a tie keeps the later copy).
        for items in [vec![a.clone(), b.clone()], vec![b.clone(), a.clone()]] {
            let (out, warnings) = validate(items, "demo", &static_is_namespaced).unwrap();
            assert_eq!(out.len(), 1);
            assert_eq!(out[0]["data"]["v"], winner);
            assert_eq!(warnings.len(), 1);
            assert_eq!(warnings[0].severity, "warning");
            assert!(
                warnings[0].message.contains("duplicate resource"),
                "{warnings:?}"
            );
        }
        let (out, _) = validate(vec![a.clone(), a], "demo", &static_is_namespaced).unwrap();
        assert_eq!(out.len(), 1);
    }
}
