//! Objects a dry run cannot see yet: a custom resource whose CRD, or an object whose
//! Namespace, the same synthesis creates (the apply creates those first). Pure.

use serde_json::Value;

use super::text::{mask_secrets, normalized, unified};

/// Whether `r`'s kind is defined by a CustomResourceDefinition among `all`, or its namespace
/// is a Namespace among them.
pub(super) fn made_by_the_same_synthesis(
    all: &[plan::plan::PreparedResource],
    r: &plan::plan::PreparedResource,
) -> bool {
    let group = r.manifest["apiVersion"]
        .as_str()
        .and_then(|v| v.rsplit_once('/'))
        .map_or("", |(g, _)| g);
    all.iter().any(|o| {
        let m = &o.manifest;
        (m["kind"] == "CustomResourceDefinition"
            && m["spec"]["group"] == group
            && m["spec"]["names"]["kind"] == r.key.kind.as_str())
            || (m["kind"] == "Namespace"
                && !r.key.namespace.is_empty()
                && m["metadata"]["name"] == r.key.namespace.as_str())
    })
}

/// The diff of creating `manifest` (a Secret's data masked unless shown).
pub(super) fn created(label: &str, manifest: &Value, show_secrets: bool) -> String {
    let mut m = manifest.clone();
    if !show_secrets && m["kind"] == "Secret" {
        mask_secrets(None, Some(&mut m));
    }
    unified(label, "", &normalized(&m))
}
