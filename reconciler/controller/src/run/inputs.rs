//! Input extensions: instance mode's `self`, collections (namespace selection — also read from
//! the instance —, label selection, field projection and a digest so changes a synthesizer
//! cannot see do not re-synthesize), observed outputs, and status write-back.

use std::collections::BTreeSet;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::context::Reads;
use super::error::Step;
use super::{Error, api_err};
use crds::{CollectionRef, Composition, CompositionStatus};
use emitted::emitted_identities;
pub use emitted::{emitted, holds_plain_secret, slices_reusable};
use reconciler_core::model::Outcome;
mod emitted;

pub use crds::names::OBSERVED_REVISION_KEY;

mod collection;
pub use collection::collection;
/// The key the instance is bound under in instance mode.
pub const SELF_KEY: &str = "self";

/// `sha256:<hex>` of the canonical JSON of `value`.
pub fn digest(value: &Value) -> String {
    let text = plan::snapshot::canonical_json(value);
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// A Kubernetes LabelSelector object in the list-call query syntax (`{}` is `""`).
///
/// # Errors
/// A malformed selector, naming the bad part.
pub fn selector_string(selector: &Value) -> Result<String, String> {
    Ok(enoki_sdk::selector::LabelSelector::parse(selector)?.to_query())
}

/// Keeps `apiVersion`, `kind`, the name, namespace, labels and annotations, plus `fields`
/// (dotted paths; a `[*]` suffix maps over a list).
pub fn project(object: &Value, fields: &[String]) -> Value {
    if fields.is_empty() {
        let mut o = object.clone();
        if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        return o;
    }
    let mut out = json!({});
    for k in ["apiVersion", "kind"] {
        if let Some(v) = object.get(k) {
            out[k] = v.clone();
        }
    }
    let mut meta = Map::new();
    for k in ["name", "namespace", "labels", "annotations"] {
        if let Some(v) = object.pointer(&format!("/metadata/{k}")) {
            meta.insert(k.into(), v.clone());
        }
    }
    out["metadata"] = Value::Object(meta);
    for f in fields {
        let segments: Vec<(&str, bool)> = f
            .split('.')
            .map(|s| match s.strip_suffix("[*]") {
                Some(name) => (name, true),
                None => (s, false),
            })
            .collect();
        if let Some(part) = project_path(object, &segments) {
            merge_into(&mut out, part);
        }
    }
    out
}

/// The part of `src` at `segments`, shaped like `src` (`[*]` keeps every list element, `{}`
/// where the rest of the path is absent, so paths stay aligned); `None` when absent.
fn project_path(src: &Value, segments: &[(&str, bool)]) -> Option<Value> {
    let Some(((name, each), rest)) = segments.split_first() else {
        return Some(src.clone());
    };
    let child = src.get(*name)?;
    let projected = if *each {
        Value::Array(
            child
                .as_array()?
                .iter()
                .map(|item| project_path(item, rest).unwrap_or_else(|| json!({})))
                .collect(),
        )
    } else {
        project_path(child, rest)?
    };
    let mut out = Map::new();
    out.insert((*name).to_string(), projected);
    Some(Value::Object(out))
}

/// Deep-merges `src` into `dst` (objects by key, equally long lists element-wise).
fn merge_into(dst: &mut Value, src: Value) {
    match (dst, src) {
        (Value::Object(d), Value::Object(s)) => {
            for (k, v) in s {
                match d.get_mut(&k) {
                    Some(existing) => merge_into(existing, v),
                    None => {
                        d.insert(k, v);
                    }
                }
            }
        }
        (Value::Array(d), Value::Array(s)) if d.len() == s.len() => {
            for (x, y) in d.iter_mut().zip(s) {
                merge_into(x, y);
            }
        }
        (d, s) => *d = s,
    }
}

fn gvk_of(group: &str, version: &str, kind: &str) -> GroupVersionKind {
    GroupVersionKind::gvk(group, version, kind)
}

/// The live state of every resource the current synthesis emitted (tombstones excluded),
/// `managedFields` stripped, in slice order; and a digest of their identities and
/// resourceVersions.
pub async fn observed_outputs(
    rd: Reads<'_>,
    comp: &Composition,
    st: &CompositionStatus,
) -> Result<(Vec<Value>, String), Error> {
    let mut out = Vec::new();
    let mut ids = Vec::new();
    let Some(current) = &st.current_synthesis else {
        return Ok((out, observed_digest(std::iter::empty())));
    };
    let client = rd
        .clusters
        .target_for(comp)
        .map_err(api_err(Step::ImpersonatingClient))?;
    for manifest in emitted_identities(rd, comp, current).await? {
        let Ok(key) = plan::ResourceKey::of(&manifest) else {
            continue;
        };
        let api_version = manifest["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = gvk_of(group, version, &key.kind);
        let Ok((ar, namespaced)) = rd.clusters.resolve_target(&gvk).await else {
            continue;
        };
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(client.clone(), &key.namespace, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        // Read as the Composition's account: an object it may not read is not observed
        // (otherwise emitting another tenant's Secret would hand its data to the module).
        let live = match api.get_opt(&key.name).await {
            Err(kube::Error::Api(e)) if e.code == 403 => None,
            // The kind went away with its CRD: nothing of it is there to observe.
            Err(e) if crate::run::error::kind_not_served(&e) => {
                rd.clusters.forget_target(&gvk);
                None
            }
            other => other.map_err(api_err(Step::ReadObserved(key.clone())))?,
        };
        if let Some(live) = live {
            let mut v = serde_json::to_value(live).unwrap_or_default();
            if v.get("apiVersion").is_none() {
                v["apiVersion"] = json!(ar.api_version);
                v["kind"] = json!(ar.kind);
            }
            if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("managedFields");
            }
            ids.push((key, v.clone()));
            out.push(v);
        }
    }
    Ok((out, observed_digest(ids.iter().map(|(k, v)| (k, v)))))
}

/// The digest of observed outputs: their identities and resourceVersions, in key order. The
/// synthesis records it; the apply pass recomputes it from what it observes, so a change that
/// lands between the two is synthesized again instead of being reverted.
pub fn observed_digest<'a>(
    live: impl Iterator<Item = (&'a plan::ResourceKey, &'a Value)>,
) -> String {
    let mut ids: Vec<(String, Value)> = live
        .map(|(k, v)| {
            (
                k.to_string(),
                v.pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or(Value::Null),
            )
        })
        .collect();
    ids.sort_by(|a, b| a.0.cmp(&b.0));
    digest(&json!(ids))
}

/// Whether `item` is a status write-back: the instance itself (same apiVersion, kind, name and
/// namespace) carrying nothing but `status`.
pub fn is_status_write_back(item: &Value, instance: &Value) -> bool {
    let same = |p: &str| item.pointer(p) == instance.pointer(p);
    let only_status = item.as_object().is_some_and(|o| {
        o.contains_key("status")
            && o.keys()
                .all(|k| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"))
    });
    only_status
        && same("/apiVersion")
        && same("/kind")
        && same("/metadata/name")
        && item
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            == instance
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projection_keeps_identity_and_the_named_fields_only() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "resourceVersion": "9", "labels": {"a": "b"}},
            "spec": {"nodeName": "x", "containers": [
                {"name": "c1", "image": "i", "resources": {"requests": {"cpu": "1"}}},
                {"name": "c2", "image": "j"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready"}],
                       "containerStatuses": [{"name": "c1", "restartCount": 3, "state": {"running": {}}}]}});
        let fields = vec![
            "spec.containers[*].name".to_string(),
            "spec.containers[*].resources".to_string(),
            "status.phase".to_string(),
            "status.containerStatuses[*].state.terminated".to_string(),
            "spec.overhead".to_string(),
        ];
        let p = project(&pod, &fields);
        assert_eq!(
            p,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "n", "labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c1", "resources": {"requests": {"cpu": "1"}}}, {"name": "c2"}]},
                "status": {"phase": "Running", "containerStatuses": [{}]}})
        );
        // A change the projection hides keeps the digest.
        let mut restarted = pod.clone();
        restarted["status"]["containerStatuses"][0]["restartCount"] = json!(4);
        restarted["metadata"]["resourceVersion"] = json!("10");
        assert_eq!(
            digest(&project(&restarted, &fields)),
            digest(&project(&pod, &fields))
        );
    }

    #[test]
    fn a_status_write_back_is_the_instance_with_only_status() {
        let me = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "namespace": "n"}, "spec": {}});
        let st = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "namespace": "n"}, "status": {"s": 1}});
        assert!(is_status_write_back(&st, &me));
        let mut with_spec = st.clone();
        with_spec["spec"] = json!({});
        assert!(!is_status_write_back(&with_spec, &me));
        let mut other = st.clone();
        other["metadata"]["name"] = json!("b");
        assert!(!is_status_write_back(&other, &me));
    }
}
