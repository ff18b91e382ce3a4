//! Objects a dry run cannot see yet: a custom resource whose CRD, or an object whose
//! Namespace, the same synthesis creates (the apply creates those first). Pure.

use serde_json::Value;

use super::text::{mask_secrets, normalized, unified};

/// What among a synthesis makes another of its objects possible.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Parent {
    /// Nothing: the object's kind and namespace are the cluster's business.
    None,
    /// A CustomResourceDefinition serving the object's group, version and kind.
    Crd,
    /// The Namespace the object is in.
    Namespace,
}

/// Whether `r`'s group, version and kind are served by a CustomResourceDefinition among
/// `all`, or its namespace is a Namespace among them.
pub(super) fn made_by_the_same_synthesis(
    all: &[plan::plan::PreparedResource],
    r: &plan::plan::PreparedResource,
) -> Parent {
    let (group, version) = r.manifest["apiVersion"]
        .as_str()
        .and_then(|v| v.rsplit_once('/'))
        .unwrap_or_default();
    let serves = |m: &Value| {
        m["kind"] == "CustomResourceDefinition"
            && m["spec"]["group"] == group
            && m["spec"]["names"]["kind"] == r.key.kind.as_str()
            && m["spec"]["versions"].as_array().is_some_and(|vs| {
                vs.iter()
                    .any(|v| v["name"] == version && v["served"] != false)
            })
    };
    let namespace = |m: &Value| {
        m["kind"] == "Namespace"
            && !r.key.namespace.is_empty()
            && m["metadata"]["name"] == r.key.namespace.as_str()
    };
    if all.iter().any(|o| serves(&o.manifest)) {
        Parent::Crd
    } else if all.iter().any(|o| namespace(&o.manifest)) {
        Parent::Namespace
    } else {
        Parent::None
    }
}

/// The diff of creating `manifest` (a Secret's data masked unless shown).
pub(super) fn created(label: &str, manifest: &Value, show_secrets: bool) -> String {
    let mut m = manifest.clone();
    if !show_secrets && m["kind"] == "Secret" {
        mask_secrets(None, Some(&mut m));
    }
    unified(label, "", &normalized(&m))
}
