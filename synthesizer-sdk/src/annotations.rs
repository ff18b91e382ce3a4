//! Helpers that set every enoki annotation on any JSON object, plus the keys themselves.
//!
//! The synthesizer SDK depends on nothing in the enoki workspace (it shares a contract, not
//! crates), so the keys are spelled here; a test in the controller checks they match
//! `crds::names`.

use serde_json::{Map, Value};
use std::time::Duration;

/// An annotation key and its Eno alias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    /// `enoki.dev/<name>`.
    pub enoki: &'static str,
    /// `eno.azure.io/<name>`.
    pub eno: &'static str,
}

macro_rules! key {
    ($c:ident, $n:literal) => {
        #[doc = concat!("`enoki.dev/", $n, "` (alias `eno.azure.io/", $n, "`).")]
        pub const $c: Key = Key {
            enoki: concat!("enoki.dev/", $n),
            eno: concat!("eno.azure.io/", $n),
        };
    };
}
key!(READINESS, "readiness");
key!(READINESS_GROUP, "readiness-group");
key!(DELETION_GROUP, "deletion-group");
key!(RECONCILE_INTERVAL, "reconcile-interval");
key!(DISABLE_UPDATES, "disable-updates");
key!(DISABLE_RECONCILIATION, "disable-reconciliation");
key!(REPLACE, "replace");
key!(DELETION_STRATEGY, "deletion-strategy");
key!(OVERRIDES, "overrides");
key!(FAIL_OPEN, "fail-open");
key!(DRIFT, "drift");
key!(INPUT_KEY, "input-key");
key!(OBSERVED, "observed");

/// Sets `metadata.annotations[key] = value`, creating maps as needed.
///
/// ```
/// let mut cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
/// enoki_sdk::annotations::set(&mut cm, "enoki.dev/readiness", "true");
/// assert_eq!(cm["metadata"]["annotations"]["enoki.dev/readiness"], "true");
/// ```
pub fn set(object: &mut Value, key: &str, value: impl Into<String>) {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    let meta = object.as_object_mut().map(|o| {
        o.entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()))
    });
    if let Some(meta) = meta {
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        if let Some(meta) = meta.as_object_mut() {
            let annotations = meta
                .entry("annotations")
                .or_insert_with(|| Value::Object(Map::new()));
            if !annotations.is_object() {
                *annotations = Value::Object(Map::new());
            }
            if let Some(a) = annotations.as_object_mut() {
                a.insert(key.to_string(), Value::String(value.into()));
            }
        }
    }
}

/// A CEL readiness check over `self`.
///
/// ```
/// let mut d = serde_json::json!({});
/// enoki_sdk::annotations::readiness(&mut d, "self.status.readyReplicas == self.spec.replicas");
/// assert!(d["metadata"]["annotations"]["enoki.dev/readiness"].is_string());
/// ```
pub fn readiness(object: &mut Value, cel: &str) {
    set(object, READINESS.enoki, cel);
}

/// A named CEL readiness check (`readiness-<name>`), ANDed with the others.
///
/// ```
/// let mut d = serde_json::json!({});
/// enoki_sdk::annotations::readiness_named(&mut d, "pods", "self.status.ready > 0");
/// assert!(d["metadata"]["annotations"]["enoki.dev/readiness-pods"].is_string());
/// ```
pub fn readiness_named(object: &mut Value, name: &str, cel: &str) {
    set(object, &format!("{}-{name}", READINESS.enoki), cel);
}

/// The readiness group (lower groups are applied and ready first).
///
/// ```
/// let mut d = serde_json::json!({});
/// enoki_sdk::annotations::readiness_group(&mut d, 1);
/// assert_eq!(d["metadata"]["annotations"]["enoki.dev/readiness-group"], "1");
/// ```
pub fn readiness_group(object: &mut Value, group: i64) {
    set(object, READINESS_GROUP.enoki, group.to_string());
}

/// The deletion group (lower groups are deleted first when the Composition is deleted).
///
/// ```
/// let mut d = serde_json::json!({});
/// enoki_sdk::annotations::deletion_group(&mut d, 2);
/// assert_eq!(d["metadata"]["annotations"]["enoki.dev/deletion-group"], "2");
/// ```
pub fn deletion_group(object: &mut Value, group: i64) {
    set(object, DELETION_GROUP.enoki, group.to_string());
}

/// Periodic re-apply.
///
/// ```
/// let mut d = serde_json::json!({});
/// enoki_sdk::annotations::reconcile_interval(&mut d, std::time::Duration::from_secs(90));
/// assert_eq!(d["metadata"]["annotations"]["enoki.dev/reconcile-interval"], "90s");
/// ```
pub fn reconcile_interval(object: &mut Value, every: Duration) {
    set(
        object,
        RECONCILE_INTERVAL.enoki,
        format!("{}s", every.as_secs().max(1)),
    );
}

/// Boolean flags: `disable-updates`, `disable-reconciliation`, `replace`, `fail-open`.
///
/// ```
/// let mut d = serde_json::json!({});
/// enoki_sdk::annotations::flag(&mut d, enoki_sdk::annotations::REPLACE);
/// assert_eq!(d["metadata"]["annotations"]["enoki.dev/replace"], "true");
/// ```
pub fn flag(object: &mut Value, key: Key) {
    set(object, key.enoki, "true");
}

/// `deletion-strategy`: `orphan` or `foreground`.
///
/// ```
/// let mut d = serde_json::json!({});
/// enoki_sdk::annotations::deletion_strategy(&mut d, "orphan");
/// assert_eq!(d["metadata"]["annotations"]["enoki.dev/deletion-strategy"], "orphan");
/// ```
pub fn deletion_strategy(object: &mut Value, strategy: &str) {
    set(object, DELETION_STRATEGY.enoki, strategy);
}

/// `drift`: `watch`, `interval` or `off`.
///
/// ```
/// let mut d = serde_json::json!({});
/// enoki_sdk::annotations::drift(&mut d, "off");
/// assert_eq!(d["metadata"]["annotations"]["enoki.dev/drift"], "off");
/// ```
pub fn drift(object: &mut Value, mode: &str) {
    set(object, DRIFT.enoki, mode);
}

/// `overrides`: a list of `{path, value | valueExpression, condition}`.
///
/// ```
/// let mut d = serde_json::json!({});
/// enoki_sdk::annotations::overrides(&mut d, &serde_json::json!([
///     {"path": "self.spec.replicas", "valueExpression": "self.spec.replicas", "condition": "!pathManagedByEnoki"}
/// ]));
/// assert!(d["metadata"]["annotations"]["enoki.dev/overrides"].as_str().unwrap().starts_with("[{"));
/// ```
pub fn overrides(object: &mut Value, list: &Value) {
    set(object, OVERRIDES.enoki, list.to_string());
}
