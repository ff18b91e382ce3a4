//! Fuzz targets: one function per parser that users or synthesizer modules feed, each taking
//! arbitrary bytes. A target must never panic, hang or allocate without bound on any input —
//! errors are fine (and expected for most inputs); a panic is a bug.
//!
//! The same functions are driven by cargo-fuzz (`fuzz/fuzz_targets/*.rs`, coverage-guided,
//! nightly; `make fuzz`) and replayed in `make test` (`tests/replay.rs`) over the committed
//! seeds (`fuzz/seeds/<target>/`), the committed regression inputs (`fuzz/regressions/<target>/`)
//! and the generated corpus when `make fuzz` has left one (`fuzz/corpus/`, not committed).
//! [`TARGETS`] lists them by the name their directories have.
//!
//! - [`resource_list`]: a module's stdout (JSON or YAML ResourceList), then the output
//!   validation the controller runs on it;
//! - [`annotations`]: enoki/Eno annotation values on a resource and its Composition
//!   (readiness and deletion groups, strategies, intervals, CEL readiness checks);
//! - [`cel`]: readiness and override CEL expressions, compiled and evaluated;
//! - [`overrides`]: override paths and the `overrides` annotation, applied to an object;
//! - [`label_selector`]: label selectors (collections, the quota built-in);
//! - [`builtins()`]: an arbitrary instance through the three built-ins (Kubernetes quantities in
//!   the quota and Lepton specs, selectors, names);
//! - [`oci_reference`]: the OCI reference of a module source.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// A fuzz target: arbitrary bytes in, no panic.
pub type Target = fn(&[u8]);

/// (corpus name, target) for every target.
pub const TARGETS: &[(&str, Target)] = &[
    ("resource_list", resource_list),
    ("annotations", annotations),
    ("cel", cel),
    ("overrides", overrides),
    ("label_selector", label_selector),
    ("builtins", builtins),
    ("oci_reference", oci_reference),
];

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// A module's stdout: parsed as a ResourceList, then validated as the controller does.
pub fn resource_list(data: &[u8]) {
    use controller::synthesis::{parse_output, static_is_namespaced, validate};
    if let Ok((items, _)) = parse_output(data) {
        let _ = validate(items, "default", &static_is_namespaced);
    }
}

/// Annotation values: each line is `key=value`, applied to a ConfigMap; lines after a line
/// `---` go to the Composition.
pub fn annotations(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let (own, comp) = t.split_once("\n---\n").unwrap_or((t, ""));
    let pairs = |s: &str| -> BTreeMap<String, String> {
        s.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let key = plan::ResourceKey {
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: "default".into(),
        name: "fuzz".into(),
    };
    let own = pairs(own);
    let _ = plan::settings::parse(&key, &own, &pairs(comp));
    let _ = plan::settings::readiness_annotations(&own);
}

/// A CEL expression, compiled and evaluated against a small object.
pub fn cel(data: &[u8]) {
    let Some(src) = text(data) else { return };
    let Ok(expr) = plan::expr::Expr::compile(src) else {
        return;
    };
    let object = json!({"metadata": {"name": "x", "labels": {"a": "b"}},
        "status": {"replicas": 3, "ready": true, "conditions": [{"type": "Ready", "status": "True"}]},
        "spec": {"list": [1, 2, 3], "q": "100m"}});
    let vars = [("self", plan::expr::to_cel(&object))];
    let _ = expr.estimated_cost(&vars);
    if let Ok(v) = expr.eval(&vars) {
        let _ = plan::expr::to_json(&v);
    }
    let _ = expr.eval_bool(&vars);
}

/// An override path (first line) set on an object, and the whole input as the `overrides`
/// annotation, applied.
pub fn overrides(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let mut object = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": "a", "env": [{"name": "X", "value": "1"}]}]}},
        "replicas": 2, "map": {"x-y": "z"}}});
    if let Ok(segments) = plan::overrides::parse_path(t.lines().next().unwrap_or_default()) {
        let _ = plan::overrides::set(&mut object.clone(), &segments, &json!("v"));
        let _ = plan::overrides::path_managed_by(Some(&object), "enoki", &segments);
    }
    if let Ok(list) = plan::overrides::parse(t) {
        let live = object.clone();
        let _ = plan::overrides::apply_all(&mut object, &list, Some(&live), &json!({}));
    }
}

/// A label selector (JSON) matched against labels, and rendered as a query.
pub fn label_selector(data: &[u8]) {
    let Ok(selector) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let labels: BTreeMap<String, String> = [("app", "web"), ("tier", "")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let _ = builtins::selector::matches(&selector, &labels);
    let _ = controller::run::selector_string(&selector);
}

/// An arbitrary stdin ResourceList through each built-in.
pub fn builtins(data: &[u8]) {
    let Ok(input) = serde_json::from_slice::<enoki_sdk::Input>(data) else {
        return;
    };
    for name in builtins::NAMES {
        if let Some(f) = builtins::lookup(name) {
            let _ = f(&input);
        }
    }
    if let Some(t) = text(data) {
        let _ = enoki_sdk::quantity::Quantity::parse(t);
        let _ = controller::synthesis::parse_quantity(t);
    }
}

/// An OCI reference of a module source.
pub fn oci_reference(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let _ = controller::sources::parse_reference(t);
}
