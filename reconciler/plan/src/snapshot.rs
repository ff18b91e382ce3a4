//! The object that is actually applied, and its canonical hash.
//!
//! A snapshot is the desired manifest with every `enoki.dev/*` and `eno.azure.io/*` label and
//! annotation, `status`, and server-owned metadata (`creationTimestamp`, `resourceVersion`,
//! `uid`, `generation`, `managedFields`) removed, plus the `enoki.dev/managed-by` label (and with `--shards`, `enoki.dev/shard`).
//! The hash is SHA-256 over sorted-key JSON in which `null` and absent are the same thing.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Server-owned metadata fields that are never applied.
const SERVER_METADATA: &[&str] = &[
    "creationTimestamp",
    "resourceVersion",
    "uid",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Who an applied object belongs to: the labels [`strip`] sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner<'a> {
    /// The Composition's UID: the `enoki.dev/managed-by` label.
    pub uid: &'a str,
    /// Its shard with `--shards` (`<index>-of-<N>`): the `enoki.dev/shard` label.
    pub shard: Option<&'a str>,
}

impl<'a> Owner<'a> {
    /// The owner of this UID, unsharded.
    pub fn uid(uid: &'a str) -> Owner<'a> {
        Owner { uid, shard: None }
    }
}

/// Strips reserved keys, status and server metadata; sets the owner's labels when given.
pub fn strip(manifest: &Value, owner: Option<Owner<'_>>) -> Value {
    let mut out = manifest.clone();
    let Some(obj) = out.as_object_mut() else {
        return out;
    };
    obj.remove("status");
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in SERVER_METADATA {
            meta.remove(*field);
        }
        for field in ["labels", "annotations"] {
            if let Some(map) = meta.get_mut(field).and_then(Value::as_object_mut) {
                map.retain(|k, _| !crds::names::is_reserved_key(k));
            }
        }
        if let Some(owner) = owner {
            let labels = meta
                .entry("labels")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(labels) = labels.as_object_mut() {
                labels.insert(
                    crds::names::annotations::MANAGED_BY.enoki.to_string(),
                    Value::String(owner.uid.to_string()),
                );
                if let Some(shard) = owner.shard {
                    labels.insert(
                        crds::names::SHARD_LABEL.to_string(),
                        Value::String(shard.to_string()),
                    );
                }
            }
        }
        for field in ["labels", "annotations"] {
            if meta
                .get(field)
                .and_then(Value::as_object)
                .is_some_and(Map::is_empty)
            {
                meta.remove(field);
            }
        }
    }
    out
}

/// Writes `value` as JSON with object keys sorted and null-valued entries dropped.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, _)| k)
                .collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The canonical JSON text of `value`: sorted keys, no nulls in objects, no whitespace.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// `v1:<sha256 hex>` of the canonical JSON of `snapshot`.
pub fn hash(snapshot: &Value) -> String {
    let digest = Sha256::digest(canonical_json(snapshot).as_bytes());
    format!("v1:{}", hex::encode(digest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reserved_keys_status_and_server_metadata_are_stripped() {
        let m = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "a", "creationTimestamp": null, "resourceVersion": "5",
                "labels": {"enoki.dev/x": "1", "eno.azure.io/y": "2", "app": "web"},
                "annotations": {"enoki.dev/readiness": "true"}
            },
            "status": {"phase": "x"},
            "data": {"k": "v"}
        });
        let s = strip(&m, Some(Owner::uid("uid-1")));
        assert_eq!(
            s,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "labels": {"app": "web", "enoki.dev/managed-by": "uid-1"}},
                "data": {"k": "v"}
            })
        );
    }

    #[test]
    fn a_sharded_owner_labels_its_shard_and_a_synthesizer_cannot_forge_it() {
        let m = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"enoki.dev/shard": "0-of-4"}}});
        let owner = Owner {
            uid: "uid-1",
            shard: Some("3-of-4"),
        };
        let s = strip(&m, Some(owner));
        assert_eq!(
            s["metadata"]["labels"],
            json!({"enoki.dev/managed-by": "uid-1", "enoki.dev/shard": "3-of-4"})
        );
        // Unsharded, no shard label (a synthesizer's own is stripped).
        let plain = strip(&m, Some(Owner::uid("uid-1")));
        assert_eq!(
            plain["metadata"]["labels"],
            json!({"enoki.dev/managed-by": "uid-1"})
        );
        // A change of --shards changes what is applied: each object is labelled again once.
        assert_ne!(hash(&s), hash(&plain));
    }

    #[test]
    fn equal_objects_hash_equal_regardless_of_key_order_and_nulls() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":[1,2],"x":null}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(hash(&a), hash(&b));
        assert!(hash(&a).starts_with("v1:"));
        let c: Value = serde_json::from_str(r#"{"a":{"y":[2,1]},"b":1}"#).unwrap();
        assert_ne!(hash(&a), hash(&c), "list order matters");
    }
}
