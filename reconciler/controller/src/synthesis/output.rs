//! A module's stdout read as a ResourceList: counted (items, values) before anything is built,
//! then parsed strictly, with its KRM `results`.

use super::*;

mod measure;
use measure::{Counter, OVER, Shape};

/// Whether the document holds at most `limit` values (objects, lists and scalars, at any
/// depth; YAML aliases count each time they are expanded), counted without building any and
/// stopping as soon as the limit is passed. A document that does not parse counts as within
/// (the full parse reports why).
pub(super) fn values_within(text: &str, limit: usize) -> bool {
    use serde::de::DeserializeSeed;
    let seen = std::cell::Cell::new(0);
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
pub(super) fn count_items(text: &str) -> usize {
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

    /// A Composition padded through any field (bindings, labels), or a Symphony with more variations
    /// than the cap, is refused by size; an ordinary one is not.
    #[test]
    fn padded_specs_are_refused_by_size() {
        let binding = |i: usize| -> crds::Binding {
            serde_json::from_value(
                serde_json::json!({"key": format!("k{i}"), "resource": {"name": "x".repeat(200)}}),
            )
            .unwrap()
        };
        let mut comp: crds::Composition = serde_json::from_value(serde_json::json!({
            "apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
            "metadata": {"name": "c", "namespace": "n"},
            "spec": {"synthesizer": {"name": "s"}}}))
        .unwrap();
        assert_eq!(super::composition_too_large(&comp), None);
        comp.spec.bindings = (0..2_000).map(binding).collect();
        let msg = super::composition_too_large(&comp).unwrap();
        assert!(msg.contains("at most 262144"), "{msg}");
        // The same padding in labels (which Kubernetes does not limit in total).
        comp.spec.bindings.clear();
        assert_eq!(super::composition_too_large(&comp), None);
        comp.metadata.labels = Some(
            (0..5_000)
                .map(|i| (format!("pad-{i}"), "x".repeat(60)))
                .collect(),
        );
        assert!(super::composition_too_large(&comp).is_some());
        // The cache's copy keeps what says why, not the padding; a marker written on the
        // object itself is not believed.
        let mut cached = comp.clone();
        super::drop_refused_spec(&mut cached);
        assert!(
            serde_json::to_vec(&cached).unwrap().len() < 1024,
            "{cached:?}"
        );
        assert_eq!(
            super::composition_too_large(&cached),
            super::composition_too_large(&comp)
        );
        let mut forged = cached.clone();
        forged.metadata.labels = None;
        forged
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(super::SPEC_DROPPED.into(), "forged".into());
        super::drop_refused_spec(&mut forged);
        assert_eq!(super::composition_too_large(&forged), None);
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

    #[test]
    fn service_account_names_are_dns_subdomains() {
        for ok in [None, Some(""), Some("enoki-composer"), Some("a.b-c.d1")] {
            assert_eq!(super::invalid_service_account_name(ok), None, "{ok:?}");
        }
        let long = "a".repeat(254);
        for bad in ["Admin", "a_b", "-a", "a..b", "x/y", long.as_str()] {
            assert!(
                super::invalid_service_account_name(Some(bad)).is_some(),
                "{bad}"
            );
        }
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
pub(super) const RESOURCE_LIST_FIELDS: &[&str] =
    &["apiVersion", "kind", "items", "results", "functionConfig"];

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
    let results: Vec<crds::SynthesisResult> = match fields.remove("results") {
        None | Some(Value::Null) => Vec::new(),
        Some(r) => serde_json::from_value::<Vec<KrmResult>>(r)
            .map_err(|e| malformed(format!("results: {e}")))?
            .into_iter()
            .map(KrmResult::into_status)
            .collect(),
    };
    let failed = results.iter().any(|r| r.severity == crds::Severity::Error);
    let items = match fields.remove("items") {
        Some(Value::Array(items)) => items,
        // Eno's documented failure output (docs/synthesis.md, "Error Handling"): results only.
        None | Some(Value::Null) if failed => Vec::new(),
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
    Ok((items, results))
}

/// A `results[]` entry as the KRM function specification (and Eno's SDK) writes it:
/// `message` (as Eno reads it, `""` when absent); `severity` (`error`/`warning`/`info`), `resourceRef` (an object),
/// `tags` and `file` optional. A `resourceRef` written as a string is accepted too.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct KrmResult {
    #[serde(default)]
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
pub(super) enum KrmResourceRef {
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
    pub(super) fn into_status(self) -> crds::SynthesisResult {
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
            severity: self.severity.into(),
            message: self.message,
            resource_ref,
            tags: self.tags,
        }
    }
}

pub(super) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
