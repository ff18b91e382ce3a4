//! A small builder for desired resources, with a method per enoki annotation.

use serde_json::{Map, Value, json};
use std::time::Duration;

use crate::annotations as a;

/// A desired resource under construction; converts into JSON.
///
/// ```
/// use enoki_sdk::Resource;
/// let d: serde_json::Value = Resource::new("apps/v1", "Deployment", "web")
///     .label("app", "web")
///     .readiness_group(1)
///     .readiness("self.status.readyReplicas == self.spec.replicas")
///     .set("/spec/replicas", 2)
///     .into();
/// assert_eq!(d["spec"]["replicas"], 2);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Resource(Value);

impl Resource {
    /// Starts a resource with apiVersion, kind and name.
    pub fn new(api_version: &str, kind: &str, name: &str) -> Resource {
        Resource(json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}))
    }

    /// Wraps existing JSON.
    pub fn from_value(value: Value) -> Resource {
        Resource(value)
    }

    /// Sets the namespace (namespaced kinds default to the Composition's).
    pub fn namespace(self, namespace: &str) -> Resource {
        self.set("/metadata/namespace", namespace)
    }

    /// Adds a label.
    pub fn label(self, key: &str, value: &str) -> Resource {
        let path = format!(
            "/metadata/labels/{}",
            key.replace('~', "~0").replace('/', "~1")
        );
        self.set(&path, value)
    }

    /// Adds an annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Resource {
        a::set(&mut self.0, key, value);
        self
    }

    /// Sets a value at a JSON pointer (`/spec/replicas`), creating objects on the way.
    pub fn set(mut self, pointer: &str, value: impl Into<Value>) -> Resource {
        let mut node = &mut self.0;
        let parts: Vec<String> = pointer
            .split('/')
            .skip(1)
            .map(|p| p.replace("~1", "/").replace("~0", "~"))
            .collect();
        for (i, part) in parts.iter().enumerate() {
            if !node.is_object() {
                *node = Value::Object(Map::new());
            }
            let Some(map) = node.as_object_mut() else {
                break;
            };
            if i + 1 == parts.len() {
                map.insert(part.clone(), value.into());
                break;
            }
            node = map
                .entry(part.clone())
                .or_insert_with(|| Value::Object(Map::new()));
        }
        self
    }

    /// `readiness`: CEL over `self`.
    pub fn readiness(mut self, cel: &str) -> Resource {
        a::readiness(&mut self.0, cel);
        self
    }

    /// `readiness-<name>`.
    pub fn readiness_named(mut self, name: &str, cel: &str) -> Resource {
        a::readiness_named(&mut self.0, name, cel);
        self
    }

    /// `readiness-group`.
    pub fn readiness_group(mut self, group: i64) -> Resource {
        a::readiness_group(&mut self.0, group);
        self
    }

    /// `deletion-group`.
    pub fn deletion_group(mut self, group: i64) -> Resource {
        a::deletion_group(&mut self.0, group);
        self
    }

    /// `reconcile-interval`.
    pub fn reconcile_interval(mut self, every: Duration) -> Resource {
        a::reconcile_interval(&mut self.0, every);
        self
    }

    /// `disable-updates`: create only.
    pub fn disable_updates(mut self) -> Resource {
        a::flag(&mut self.0, a::DISABLE_UPDATES);
        self
    }

    /// `disable-reconciliation`: never touched.
    pub fn disable_reconciliation(mut self) -> Resource {
        a::flag(&mut self.0, a::DISABLE_RECONCILIATION);
        self
    }

    /// `replace`: PUT instead of server-side apply.
    pub fn replace(mut self) -> Resource {
        a::flag(&mut self.0, a::REPLACE);
        self
    }

    /// `fail-open`.
    pub fn fail_open(mut self) -> Resource {
        a::flag(&mut self.0, a::FAIL_OPEN);
        self
    }

    /// `deletion-strategy`: `orphan` or `foreground`.
    pub fn deletion_strategy(mut self, strategy: &str) -> Resource {
        a::deletion_strategy(&mut self.0, strategy);
        self
    }

    /// `drift`: `watch`, `interval` or `off`.
    pub fn drift(mut self, mode: &str) -> Resource {
        a::drift(&mut self.0, mode);
        self
    }

    /// `overrides`.
    pub fn overrides(mut self, list: &Value) -> Resource {
        a::overrides(&mut self.0, list);
        self
    }

    /// The JSON.
    pub fn into_value(self) -> Value {
        self.0
    }
}

impl From<Resource> for Value {
    fn from(r: Resource) -> Value {
        r.0
    }
}
