//! Identity of a resource: (group, kind, namespace, name). Versions do not matter for identity.

use serde::Serialize;
use serde_json::Value;

/// Identifies one object: API group (without version), kind, namespace (empty when
/// cluster-scoped) and name. Orders by group, kind, namespace, name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ResourceKey {
    /// API group, empty for the core group.
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace, empty for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ResourceKey {
    /// Reads the key of a manifest, or says which field is missing.
    ///
    /// # Errors
    /// When `apiVersion`, `kind` or `metadata.name` is missing or not a non-empty string.
    pub fn of(manifest: &Value) -> Result<ResourceKey, String> {
        let field = |v: Option<&Value>, name: &str| -> Result<String, String> {
            match v.and_then(Value::as_str) {
                Some(s) if !s.is_empty() => Ok(s.to_string()),
                _ => Err(format!("{name} is missing or not a non-empty string")),
            }
        };
        if !manifest.is_object() {
            return Err("not a JSON object".into());
        }
        let api_version = field(manifest.get("apiVersion"), "apiVersion")?;
        let kind = field(manifest.get("kind"), "kind")?;
        let meta = manifest.get("metadata");
        let name = field(meta.and_then(|m| m.get("name")), "metadata.name")?;
        let namespace = meta
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let group = match api_version.rsplit_once('/') {
            Some((group, _)) => group.to_string(),
            None => String::new(),
        };
        Ok(ResourceKey {
            group,
            kind,
            namespace,
            name,
        })
    }

    /// Whether this is a CustomResourceDefinition.
    pub fn is_crd(&self) -> bool {
        self.group == "apiextensions.k8s.io" && self.kind == "CustomResourceDefinition"
    }
}

impl std::fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.group.is_empty() {
            write!(f, "{}/", self.group)?;
        }
        write!(f, "{}/", self.kind)?;
        if !self.namespace.is_empty() {
            write!(f, "{}/", self.namespace)?;
        }
        write!(f, "{}", self.name)
    }
}
