//! One synthesis, exactly as the controller and `enoki render` run it: build the stdin
//! ResourceList, run the module (wasm or built-in) under its limits, parse stdout (JSON or
//! YAML), honour `results`, and validate the items.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use wasm_host::{Entropy, Host, HostError, ModulePre, RunLimits, RunRequest};

use crds::names::{annotations as keys, reasons};

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

/// Largest total of a Composition's `synthesisEnv` names and values, in bytes: far below
/// etcd's object size limit, so the status enoki adds always fits beside the spec.
pub const MAX_SYNTHESIS_ENV_BYTES: usize = 64 * 1024;

/// Why a Composition's `synthesisEnv` is refused (`None`: accepted). Pure.
pub fn synthesis_env_too_large(env: &[crds::EnvVar]) -> Option<String> {
    let total: usize = env.iter().map(|e| e.name.len() + e.value.len()).sum();
    (total > MAX_SYNTHESIS_ENV_BYTES).then(|| {
        format!(
            "spec.synthesisEnv holds {total} bytes of names and values; at most \
             {MAX_SYNTHESIS_ENV_BYTES} are accepted"
        )
    })
}

/// Largest serialized `spec` of a Composition or a Symphony enoki acts on, in bytes. A spec
/// is references and small values; one padded towards etcd's object limit would make every
/// status write fail (and a Symphony would copy it into every Composition it generates).
pub const MAX_SPEC_BYTES: usize = 256 * 1024;
/// Most variations one Symphony may have (each becomes a Composition).
pub const MAX_SYMPHONY_VARIATIONS: usize = 256;

/// Why a Composition's spec is refused for its size (`None`: accepted). Pure.
pub fn composition_spec_too_large(spec: &crds::CompositionSpec) -> Option<String> {
    synthesis_env_too_large(&spec.synthesis_env).or_else(|| spec_too_large(spec))
}

/// Why a Symphony's spec is refused for its size (`None`: accepted). Pure.
pub fn symphony_spec_too_large(spec: &crds::SymphonySpec) -> Option<String> {
    let n = spec.variations.len();
    if n > MAX_SYMPHONY_VARIATIONS {
        return Some(format!(
            "spec.variations holds {n} variations; at most {MAX_SYMPHONY_VARIATIONS} are accepted"
        ));
    }
    synthesis_env_too_large(&spec.synthesis_env).or_else(|| spec_too_large(spec))
}

fn spec_too_large(spec: &impl serde::Serialize) -> Option<String> {
    let size = serde_json::to_vec(spec).map_or(0, |v| v.len());
    (size > MAX_SPEC_BYTES)
        .then(|| format!("spec is {size} bytes serialized; at most {MAX_SPEC_BYTES} are accepted"))
}

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

/// A built-in synthesizer function.
pub type BuiltinFn = fn(&enoki_sdk::Input) -> Result<enoki_sdk::Output, enoki_sdk::Error>;

/// What runs.
#[derive(Clone)]
pub enum Module {
    /// A compiled WebAssembly module.
    Wasm(ModulePre),
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
            Module::Builtin { name, .. } => format!("builtin:{name}@{}", env!("CARGO_PKG_VERSION")),
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

/// Why a synthesis failed; `reason()` is the condition reason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SynthesisError {
    /// The module failed in the sandbox.
    #[error(transparent)]
    Host(#[from] HostError),
    /// stdout is not a ResourceList.
    #[error("output is not a ResourceList: {message}")]
    MalformedOutput {
        /// Parser message with position.
        message: String,
    },
    /// The synthesizer reported errors.
    #[error("synthesizer reported: {}", messages.join("; "))]
    ErrorResult {
        /// The error messages.
        messages: Vec<String>,
        /// The `enoki.dev/event-reason` tag of the first error result that has one: the
        /// reason of the Event on the instance.
        event_reason: Option<String>,
    },
    /// An item is invalid (missing fields, duplicates, bad annotations).
    #[error("invalid output: {message}")]
    InvalidOutput {
        /// Names the item and field.
        message: String,
    },
    /// The output holds more items than the controller accepts.
    #[error(
        "the output holds {count} items, over the limit of {MAX_OUTPUT_ITEMS} per synthesis \
         (split the synthesizer, or emit fewer, larger objects)"
    )]
    TooManyItems {
        /// Items in the output.
        count: usize,
    },
    /// The output holds more values (objects, lists, scalars, results included) than the
    /// controller parses: each becomes an allocation in the host.
    #[error(
        "the output holds more than {MAX_OUTPUT_VALUES} values (objects, lists and scalars, \
         results included), over the limit per synthesis: emit fewer or smaller objects"
    )]
    TooManyValues,
    /// The inputs passed to the module are larger than the controller accepts.
    #[error(
        "the synthesis input is {size} bytes (bound inputs, collections and observed outputs), \
         over the limit of {MAX_INPUT_BYTES} bytes: bind fewer or smaller objects"
    )]
    InputTooLarge {
        /// Bytes of stdin.
        size: usize,
    },
}

/// Most items one synthesis may emit: the host-side memory of a run (parsed output, plan,
/// slices) is bounded by it and the output byte limit.
pub const MAX_OUTPUT_ITEMS: usize = 10_000;
/// Most JSON/YAML values (every object, list and scalar, anywhere in the output, `results`
/// included) one synthesis may emit: counted before anything is built, so the host memory of
/// parsing an output is bounded (about 100 bytes per value) whatever its shape.
pub const MAX_OUTPUT_VALUES: usize = 1_000_000;
/// Largest stdin (bound inputs, collections, observed outputs) passed to a module.
pub const MAX_INPUT_BYTES: usize = 64 << 20;

impl SynthesisError {
    /// Condition/Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            SynthesisError::Host(HostError::Timeout { .. }) => reasons::TIMEOUT,
            SynthesisError::Host(HostError::MemoryLimit { .. }) => reasons::MEMORY_LIMIT,
            SynthesisError::Host(HostError::OutputTooLarge { .. }) => reasons::OUTPUT_TOO_LARGE,
            SynthesisError::Host(HostError::Trap { .. }) => reasons::TRAP,
            SynthesisError::Host(HostError::ExitCode { .. }) => reasons::EXIT_CODE,
            SynthesisError::Host(HostError::Instantiate { .. } | HostError::Engine { .. }) => {
                reasons::INSTANTIATE
            }
            SynthesisError::MalformedOutput { .. } | SynthesisError::InvalidOutput { .. } => {
                reasons::MALFORMED_OUTPUT
            }
            SynthesisError::ErrorResult { .. } => reasons::ERROR_RESULT,
            SynthesisError::TooManyItems { .. } | SynthesisError::TooManyValues => {
                reasons::OUTPUT_TOO_LARGE
            }
            SynthesisError::InputTooLarge { .. } => reasons::INPUT_TOO_LARGE,
        }
    }
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
    let stdin = input_bytes(input);
    if stdin.len() > MAX_INPUT_BYTES {
        return Err(SynthesisError::InputTooLarge { size: stdin.len() });
    }
    let input_digest = sha256(&stdin);
    let mut peak_memory_bytes = 0;
    let stdout = match module {
        Module::Wasm(m) => {
            let env = process_env(input);
            let entropy = if secure {
                Entropy::Secure
            } else {
                Entropy::Reproducible {
                    wall_clock: input.composition.created,
                    seed: seed(&input.composition.uid, &stdin),
                }
            };
            let out = host.run(
                m,
                RunRequest {
                    program: &input.program,
                    input: &stdin,
                    env: &env,
                    limits,
                    entropy,
                },
            )?;
            peak_memory_bytes = out.peak_memory_bytes;
            out.stdout
        }
        Module::Builtin { run, .. } => {
            let parsed: enoki_sdk::Input =
                serde_json::from_slice(&stdin).map_err(|e| SynthesisError::MalformedOutput {
                    message: e.to_string(),
                })?;
            let list = enoki_sdk::testing::run(*run, &parsed);
            serde_json::to_vec(&list).map_err(|e| SynthesisError::MalformedOutput {
                message: e.to_string(),
            })?
        }
    };
    let output_digest = sha256(&stdout);
    let (items, results) = parse_output(&stdout)?;
    let errors: Vec<String> = results
        .iter()
        .filter(|r| r.severity == "error")
        .map(|r| r.message.clone())
        .collect();
    if !errors.is_empty() {
        let event_reason = results
            .iter()
            .filter(|r| r.severity == "error")
            .find_map(|r| r.tags.get(crds::names::EVENT_REASON_TAG).cloned());
        return Err(SynthesisError::ErrorResult {
            messages: errors,
            event_reason,
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

/// Whether the document holds at most `limit` values (objects, lists and scalars, at any
/// depth; YAML aliases count each time they are expanded), counted without building any and
/// stopping as soon as the limit is passed. A document that does not parse counts as within
/// (the full parse reports why).
fn values_within(text: &str, limit: usize) -> bool {
    use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use std::cell::Cell;
    const OVER: &str = "enoki: too many values";
    #[derive(Clone, Copy)]
    struct Counter<'a>(&'a Cell<usize>, usize);
    impl Counter<'_> {
        fn one<E: serde::de::Error>(self) -> Result<(), E> {
            self.0.set(self.0.get() + 1);
            if self.0.get() > self.1 {
                return Err(E::custom(OVER));
            }
            Ok(())
        }
    }
    impl<'de> DeserializeSeed<'de> for Counter<'_> {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Counter<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("any value")
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
            self.one()
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
            self.one()
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
            self.one()
        }
        fn visit_i128<E: serde::de::Error>(self, _: i128) -> Result<(), E> {
            self.one()
        }
        fn visit_u128<E: serde::de::Error>(self, _: u128) -> Result<(), E> {
            self.one()
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
            self.one()
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
            self.one()
        }
        fn visit_bytes<E: serde::de::Error>(self, _: &[u8]) -> Result<(), E> {
            self.one()
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
            self.one()
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
            self.one()
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            self.one()?;
            while seq.next_element_seed(self)?.is_some() {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            self.one()?;
            while map.next_key_seed(self)?.is_some() {
                map.next_value_seed(self)?;
            }
            Ok(())
        }
    }
    let seen = Cell::new(0);
    let counter = Counter(&seen, limit);
    let over = |e: &dyn std::fmt::Display| e.to_string().contains(OVER);
    if text.trim_start().starts_with('{') {
        let mut de = serde_json::Deserializer::from_str(text);
        // Deep nesting is the JSON parser's recursion limit's business (128 levels).
        match counter.deserialize(&mut de) {
            Err(e) => !over(&e),
            Ok(()) => true,
        }
    } else {
        match serde_saphyr::with_deserializer_from_str(text, |de| counter.deserialize(de)) {
            Err(e) => !over(&e),
            Ok(()) => true,
        }
    }
}

/// The number of `items` of a ResourceList, counted without building them (0 when the text
/// does not parse: the full parse reports why).
fn count_items(text: &str) -> usize {
    use serde::de::{IgnoredAny, SeqAccess, Visitor};
    struct Count(usize);
    impl<'de> serde::Deserialize<'de> for Count {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Count;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a list")
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                    let mut n = 0;
                    while seq.next_element::<IgnoredAny>()?.is_some() {
                        n += 1;
                    }
                    Ok(Count(n))
                }
                // Not a list: no items here (the full parse says what is wrong), and the count
                // goes on to any later `items` key.
                fn visit_unit<E>(self) -> Result<Count, E> {
                    Ok(Count(0))
                }
                fn visit_none<E>(self) -> Result<Count, E> {
                    Ok(Count(0))
                }
                fn visit_bool<E>(self, _: bool) -> Result<Count, E> {
                    Ok(Count(0))
                }
                fn visit_i64<E>(self, _: i64) -> Result<Count, E> {
                    Ok(Count(0))
                }
                fn visit_u64<E>(self, _: u64) -> Result<Count, E> {
                    Ok(Count(0))
                }
                fn visit_f64<E>(self, _: f64) -> Result<Count, E> {
                    Ok(Count(0))
                }
                fn visit_str<E>(self, _: &str) -> Result<Count, E> {
                    Ok(Count(0))
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Count, A::Error> {
                    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    Ok(Count(0))
                }
            }
            d.deserialize_any(V)
        }
    }
    // Every `items` key counts (a JSON object may repeat one; the full parse keeps the last).
    struct Shape(usize);
    impl<'de> serde::Deserialize<'de> for Shape {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Shape;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a ResourceList")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Shape, A::Error> {
                    let mut n = 0usize;
                    while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                        if key == "items" {
                            n = n.saturating_add(map.next_value::<Count>()?.0);
                        } else {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                    Ok(Shape(n))
                }
            }
            d.deserialize_map(V)
        }
    }
    let shape: Option<Shape> = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).ok()
    } else {
        serde_saphyr::from_str(text).ok()
    };
    shape.map_or(0, |s| s.0)
}

#[cfg(test)]
mod count_tests {
    #[test]
    fn every_items_key_is_counted_whatever_comes_before_it() {
        let many: Vec<String> = (0..20_000).map(|i| format!("{{\"n\":{i}}}")).collect();
        let many = many.join(",");
        for text in [
            format!("{{\"kind\":\"ResourceList\",\"items\":[{many}]}}"),
            format!("{{\"items\":0,\"items\":[{many}]}}"),
            format!("{{\"items\":{{\"a\":1}},\"items\":[{many}]}}"),
            format!("{{\"items\":[],\"items\":[{many}]}}"),
        ] {
            assert_eq!(super::count_items(&text), 20_000, "{}", &text[..40]);
            assert!(matches!(
                super::parse_output(text.as_bytes()),
                Err(super::SynthesisError::TooManyItems { count: 20_000 })
            ));
        }
    }

    /// A spec padded through any field (bindings here), or a Symphony with more variations
    /// than the cap, is refused by size; an ordinary one is not.
    #[test]
    fn padded_specs_are_refused_by_size() {
        let binding = |i: usize| -> crds::Binding {
            serde_json::from_value(
                serde_json::json!({"key": format!("k{i}"), "resource": {"name": "x".repeat(200)}}),
            )
            .unwrap()
        };
        let mut spec: crds::CompositionSpec =
            serde_json::from_value(serde_json::json!({"synthesizer": {"name": "s"}})).unwrap();
        assert_eq!(super::composition_spec_too_large(&spec), None);
        spec.bindings = (0..2_000).map(binding).collect();
        let msg = super::composition_spec_too_large(&spec).unwrap();
        assert!(msg.contains("at most 262144"), "{msg}");
        let mut sym: crds::SymphonySpec = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(super::symphony_spec_too_large(&sym), None);
        sym.variations = (0..300)
            .map(|i| {
                serde_json::from_value(
                    serde_json::json!({"synthesizer": {"name": format!("s{i}")}}),
                )
                .unwrap()
            })
            .collect();
        let msg = super::symphony_spec_too_large(&sym).unwrap();
        assert!(msg.contains("300 variations"), "{msg}");
    }

    /// A million tiny results, or one item holding a huge nested list, would each be a
    /// parsed allocation: refused before any is built, whatever the item count says.
    #[test]
    fn values_anywhere_are_counted_results_and_nesting_included() {
        let results = vec!["{\"message\":\"\"}"; 600_000].join(",");
        let results = format!("{{\"kind\":\"ResourceList\",\"items\":[],\"results\":[{results}]}}");
        let nested = vec!["{\"k\":0}"; 600_000].join(",");
        let nested = format!(
            "{{\"kind\":\"ResourceList\",\"items\":[{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"a\":[{nested}]}}]}}"
        );
        // YAML aliases expanded a million times: the YAML parser's own budget (250,000 nodes)
        // refuses it first.
        let mut yaml = String::from(
            "kind: ResourceList\nitems: []\nresults:\n- &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n",
        );
        for i in 0..6 {
            let prev = if i == 0 {
                "a".to_string()
            } else {
                format!("b{}", i - 1)
            };
            yaml.push_str(&format!("- &b{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        assert!(matches!(
            super::parse_output(yaml.as_bytes()),
            Err(super::SynthesisError::MalformedOutput { .. })
        ));
        for text in [&results, &nested] {
            assert!(
                !super::values_within(text, super::MAX_OUTPUT_VALUES),
                "{}",
                &text[..60]
            );
            let err = super::parse_output(text.as_bytes()).unwrap_err();
            assert!(matches!(err, super::SynthesisError::TooManyValues), "{err}");
            assert_eq!(err.reason(), crds::names::reasons::OUTPUT_TOO_LARGE);
        }
        // An ordinary output is well within.
        let ok = "{\"kind\":\"ResourceList\",\"items\":[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\"}}]}";
        // 14 values: 4 objects, 1 list, 9 keys and scalars.
        assert!(super::values_within(ok, 14) && !super::values_within(ok, 13));
        assert!(super::parse_output(ok.as_bytes()).is_ok());
    }
}

/// The top-level fields a ResourceList on stdout may have (KRM function spec).
const RESOURCE_LIST_FIELDS: &[&str] = &["apiVersion", "kind", "items", "results", "functionConfig"];

/// Parses stdout as a ResourceList, JSON or YAML, strictly: `kind: ResourceList`, `items`
/// present and a list, no unknown top-level field (a typo such as `itmes` must not read as
/// an empty output that deletes everything).
///
/// # Errors
/// [`SynthesisError::MalformedOutput`] naming the problem (with the parser's position).
pub fn parse_output(
    stdout: &[u8],
) -> Result<(Vec<Value>, Vec<crds::SynthesisResult>), SynthesisError> {
    let malformed = |message: String| SynthesisError::MalformedOutput { message };
    let text = std::str::from_utf8(stdout).map_err(|e| malformed(format!("not UTF-8: {e}")))?;
    if text.trim().is_empty() {
        return Err(malformed("stdout is empty".into()));
    }
    // Count the items before building them: a module emitting 250,000 tiny items is refused
    // without the host holding 250,000 parsed objects.
    let count = count_items(text);
    if count > MAX_OUTPUT_ITEMS {
        return Err(SynthesisError::TooManyItems { count });
    }
    if !values_within(text, MAX_OUTPUT_VALUES) {
        return Err(SynthesisError::TooManyValues);
    }
    let list: Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| {
            malformed(format!(
                "JSON at line {} column {}: {e}",
                e.line(),
                e.column()
            ))
        })?
    } else {
        serde_saphyr::from_str(text).map_err(|e| malformed(format!("YAML: {e}")))?
    };
    let Value::Object(mut fields) = list else {
        return Err(malformed("not an object".into()));
    };
    match fields.get("kind").and_then(Value::as_str) {
        Some("ResourceList") => {}
        other => {
            return Err(malformed(format!(
                "kind is {other:?}, want \"ResourceList\""
            )));
        }
    }
    let unknown: Vec<&String> = fields
        .keys()
        .filter(|k| !RESOURCE_LIST_FIELDS.contains(&k.as_str()))
        .collect();
    if !unknown.is_empty() {
        return Err(malformed(format!(
            "unknown top-level field(s) {unknown:?}; a ResourceList has {RESOURCE_LIST_FIELDS:?}"
        )));
    }
    let items = match fields.remove("items") {
        Some(Value::Array(items)) => items,
        None => {
            return Err(malformed(
                "no \"items\" (an empty output is `items: []`)".into(),
            ));
        }
        Some(other) => {
            return Err(malformed(format!(
                "\"items\" is {}, want a list",
                json_type(&other)
            )));
        }
    };
    let results = match fields.remove("results") {
        None | Some(Value::Null) => Vec::new(),
        Some(r) => serde_json::from_value::<Vec<KrmResult>>(r)
            .map_err(|e| malformed(format!("results: {e}")))?
            .into_iter()
            .map(KrmResult::into_status)
            .collect(),
    };
    Ok((items, results))
}

/// A `results[]` entry as the KRM function specification (and Eno's SDK) writes it:
/// `message` required; `severity` (`error`/`warning`/`info`), `resourceRef` (an object),
/// `tags` and `file` optional. A `resourceRef` written as a string is accepted too.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct KrmResult {
    message: String,
    #[serde(default)]
    severity: String,
    #[serde(default)]
    resource_ref: Option<KrmResourceRef>,
    #[serde(default)]
    tags: BTreeMap<String, String>,
    #[serde(default, rename = "file")]
    _file: Option<Value>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum KrmResourceRef {
    Object {
        #[serde(default, rename = "apiVersion")]
        _api_version: String,
        kind: String,
        name: String,
        #[serde(default)]
        namespace: String,
    },
    Text(String),
}

impl KrmResult {
    fn into_status(self) -> crds::SynthesisResult {
        let resource_ref = self.resource_ref.map(|r| match r {
            KrmResourceRef::Object {
                kind,
                name,
                namespace,
                ..
            } if namespace.is_empty() => format!("{kind}/{name}"),
            KrmResourceRef::Object {
                kind,
                name,
                namespace,
                ..
            } => format!("{kind}/{namespace}/{name}"),
            KrmResourceRef::Text(t) => t,
        });
        crds::SynthesisResult {
            severity: self.severity,
            message: self.message,
            resource_ref,
            tags: self.tags,
        }
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Kinds that are cluster-scoped (used when discovery is not available, e.g. `enoki render`).
pub const CLUSTER_SCOPED_KINDS: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "StorageClass",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PriorityClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "APIService",
    "IngressClass",
    "RuntimeClass",
    "CSIDriver",
    "CSINode",
    "VolumeAttachment",
    "CertificateSigningRequest",
    "FlowSchema",
    "PriorityLevelConfiguration",
    "Synthesizer",
    "ClusterResourceQuota",
];

/// Static scope guess: everything not in [`CLUSTER_SCOPED_KINDS`] is namespaced.
pub fn static_is_namespaced(_group: &str, kind: &str) -> bool {
    !CLUSTER_SCOPED_KINDS.contains(&kind)
}

/// Validates the items: each has apiVersion/kind/name, namespaces are defaulted on namespaced
/// kinds (and removed from cluster-scoped ones), annotations parse. Resources emitted more than
/// once are resolved as Eno resolves them — the copy whose manifest has the greatest FNV-1
/// 64-bit hash is kept (on a tie, the later one) — and each dropped copy is reported as a
/// `warning` result.
///
/// # Errors
/// [`SynthesisError::InvalidOutput`] naming the item and the problem.
pub fn validate(
    items: Vec<Value>,
    namespace: &str,
    is_namespaced: &dyn Fn(&str, &str) -> bool,
) -> Result<(Vec<Value>, Vec<crds::SynthesisResult>), SynthesisError> {
    let mut out: Vec<Value> = Vec::with_capacity(items.len());
    let mut seen: std::collections::HashMap<plan::ResourceKey, (usize, usize, u64)> =
        std::collections::HashMap::new();
    let mut warnings = Vec::new();
    for (index, mut item) in items.into_iter().enumerate() {
        let key = plan::ResourceKey::of(&item).map_err(|m| SynthesisError::InvalidOutput {
            message: format!("item {index}: {m}"),
        })?;
        let hash = eno_manifest_hash(&item);
        let namespaced = is_namespaced(&key.group, &key.kind);
        // As Eno, what client-go structs emit is dropped: `status: {}` and
        // `creationTimestamp: null`. (Eno drops any status; a non-empty one is kept here, as
        // it is an instance-mode status write-back.)
        if let Some(obj) = item.as_object_mut()
            && obj
                .get("status")
                .is_some_and(|s| s.is_null() || s.as_object().is_some_and(|m| m.is_empty()))
        {
            obj.remove("status");
        }
        if let Some(meta) = item.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("creationTimestamp");
            if namespaced && key.namespace.is_empty() {
                meta.insert("namespace".into(), Value::String(namespace.to_string()));
            } else if !namespaced {
                meta.remove("namespace");
            }
        }
        let key = plan::ResourceKey::of(&item).unwrap_or(key);
        match seen.get_mut(&key) {
            None => {
                seen.insert(key, (out.len(), index, hash));
                out.push(item);
            }
            Some((slot, kept_index, kept_hash)) => {
                let (kept, dropped) = if hash >= *kept_hash {
                    let dropped = *kept_index;
                    out[*slot] = item;
                    (*kept_index, *kept_hash) = (index, hash);
                    (index, dropped)
                } else {
                    (*kept_index, index)
                };
                warnings.push(crds::SynthesisResult {
                    severity: "warning".into(),
                    message: format!(
                        "duplicate resource {key}: kept item {kept}, dropped item {dropped} \
                         (Eno's rule: the greater manifest hash)"
                    ),
                    resource_ref: Some(key.to_string()),
                    tags: BTreeMap::new(),
                });
            }
        }
    }
    // Annotation values and CEL are checked by the planner's ingestion.
    let desired: Vec<plan::Desired> = out
        .iter()
        .map(|m| plan::Desired {
            manifest: m.clone(),
            tombstone: false,
        })
        .collect();
    let prepared = plan::prepare(&desired, &plan::CompositionInfo::default()).map_err(|e| {
        SynthesisError::InvalidOutput {
            message: e.to_string(),
        }
    })?;
    // Cascading values that did not parse are read as Eno reads them: a warning, not an error.
    for r in &prepared.resources {
        for w in &r.settings.warnings {
            warnings.push(crds::SynthesisResult {
                severity: "warning".into(),
                message: w.clone(),
                resource_ref: Some(r.key.to_string()),
                tags: BTreeMap::new(),
            });
        }
    }
    Ok((out, warnings))
}

/// FNV-1 (64-bit) of the manifest's canonical JSON: Eno orders duplicate resources by the
/// FNV-1 hash of their manifest JSON (Go's `encoding/json`, sorted keys — the same bytes as
/// enoki's canonical JSON for manifests without `<`, `>` or `&`, which Go escapes).
fn eno_manifest_hash(manifest: &Value) -> u64 {
    fnv1_64(plan::snapshot::canonical_json(manifest).as_bytes())
}

/// FNV-1, 64-bit (Go's `hash/fnv.New64`): multiply, then xor.
fn fnv1_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, b| {
        h.wrapping_mul(0x0000_0100_0000_01b3) ^ u64::from(*b)
    })
}

/// Parses a Kubernetes quantity such as `256Mi`, `1G` or `1048576` into bytes.
///
/// # Errors
/// A message when the text is not a quantity.
pub fn parse_quantity(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: usize = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a quantity"))?;
    let mult: usize = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "k" | "K" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?} (use Ki, Mi, Gi, k, M, G)"
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// Turns a Synthesizer's `spec.limits` into run limits (defaults 10s, 256Mi, 16Mi).
///
/// # Errors
/// A message naming the field that does not parse.
pub fn run_limits(limits: Option<&crds::Limits>) -> Result<RunLimits, String> {
    let mut out = RunLimits::default();
    if let Some(l) = limits {
        if let Some(t) = &l.timeout {
            out.deadline = humantime::parse_duration(t)
                .map_err(|e| format!("spec.limits.timeout {t:?}: {e}"))?;
        }
        if let Some(m) = &l.memory {
            out.max_memory_bytes =
                parse_quantity(m).map_err(|e| format!("spec.limits.memory: {e}"))?;
        }
        if let Some(o) = &l.output {
            out.max_output_bytes =
                parse_quantity(o).map_err(|e| format!("spec.limits.output: {e}"))?;
        }
    }
    Ok(out)
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
        let bad = br#"{"kind":"ResourceList","items":[],"results":[{"severity":"error"}]}"#;
        assert!(
            parse_output(bad)
                .unwrap_err()
                .to_string()
                .contains("message")
        );
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
