//! The slice cache holds slices *compact*: each manifest cut down to its identity
//! (`apiVersion`, `kind`, `metadata.name`, `metadata.namespace`; a Patch's target kind and
//! apiVersion), a sealed Secret to its key id, and the bytes the slice stored noted beside it.
//! What a tenant's synthesis emits is then held by the controller as its identity (at most
//! [`crate::synthesis::MAX_IDENTITY_BYTES`] per string) and its recorded state — a few
//! hundred bytes per object — whatever its size: a pass reads a slice's content with a GET only when it needs the
//! manifests themselves (a synthesis ingested again, tombstones, identical-output checks).
//! Pure.

use serde_json::{Map, Value, json};

use crds::{Manifest, ResourceSlice};

/// Bytes a slice's manifests store (manifest text and sealed Secrets).
pub(crate) fn manifest_bytes(resources: &[Manifest]) -> usize {
    resources
        .iter()
        .map(|m| m.manifest.len() + m.sealed.as_ref().map_or(0, String::len))
        .sum()
}

/// The copy of a slice the cache keeps: without labels (the Composition label is written for
/// people using kubectl), annotations and field managers, which nothing reads — a slice costs
/// the same whoever labels or annotates it —, and compact unless `whole`.
pub(crate) fn for_cache(slice: &mut ResourceSlice, whole: bool) {
    slice.metadata.managed_fields = None;
    slice.metadata.labels = None;
    slice.metadata.annotations = None;
    if !whole {
        compact(slice);
    }
}

/// Cuts a slice read from the API server down to what the planner and the checks of the
/// cache need; the bytes it stored are noted in `spec.compact_bytes` (a field the API
/// server never sees nor sets).
pub(crate) fn compact(slice: &mut ResourceSlice) {
    let bytes = manifest_bytes(&slice.spec.resources);
    let identities: Option<Vec<String>> = slice
        .spec
        .resources
        .iter()
        .map(|m| {
            let plain = crate::run::sealing::plain_secret(m);
            match serde_json::from_str::<Value>(&m.manifest) {
                Ok(v) => identity(&v, plain).map(|i| i.to_string()),
                Err(_) => Some(String::new()),
            }
        })
        .collect();
    // An identity longer than an output may name (a slice written before the bound) keeps
    // its slice whole: a cut one would not match the key of its manifest.
    let Some(identities) = identities else {
        return;
    };
    for (m, id) in slice.spec.resources.iter_mut().zip(identities) {
        m.manifest = id;
        if let Some(sealed) = &mut m.sealed {
            *sealed = key_id_prefix(sealed).to_string();
        }
    }
    slice.spec.compact_bytes = Some(bytes);
}

/// Whether `slice` is a compact cache copy (its manifests are identities only).
pub(crate) fn is_compact(slice: &ResourceSlice) -> bool {
    slice.spec.compact_bytes.is_some()
}

/// Bytes `slice` stores: noted on a compact copy, counted on a whole one.
pub(crate) fn stored_bytes(slice: &ResourceSlice) -> usize {
    slice
        .spec
        .compact_bytes
        .unwrap_or_else(|| manifest_bytes(&slice.spec.resources))
}

/// `enoki-aead-v1:<key id>:` of a sealed entry (all of it when it has no such shape).
pub(crate) fn key_id_prefix(sealed: &str) -> &str {
    match sealed.match_indices(':').nth(1) {
        Some((i, _)) => &sealed[..=i],
        None => sealed,
    }
}

/// The identity of a manifest; `plain`: it holds a Secret's values in plain text, which the
/// identity keeps saying (an empty `data`).
///
/// Strings only (the key reads nothing else), each at most
/// [`crate::synthesis::MAX_IDENTITY_BYTES`] (`None` past it): the compact copy never holds
/// more of a manifest than its identity.
fn identity(v: &Value, plain: bool) -> Option<Value> {
    let pick = |from: &Value, keys: &[&str]| -> Option<Map<String, Value>> {
        let mut out = Map::new();
        for k in keys {
            let Some(s) = from.get(*k).and_then(Value::as_str) else {
                continue;
            };
            if s.len() > crate::synthesis::MAX_IDENTITY_BYTES {
                return None;
            }
            out.insert((*k).to_string(), Value::from(s));
        }
        Some(out)
    };
    let mut out = pick(v, &["apiVersion", "kind"])?;
    if let Some(meta) = v.get("metadata") {
        out.insert(
            "metadata".into(),
            pick(meta, &["name", "namespace"])?.into(),
        );
    }
    let is_patch = v.get("kind") == Some(&json!("Patch"));
    if let Some(patch) = v.get("patch").filter(|_| is_patch) {
        out.insert("patch".into(), pick(patch, &["apiVersion", "kind"])?.into());
    }
    if plain {
        out.insert("data".into(), json!({}));
    }
    Some(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::ResourceSliceSpec;

    fn slice(resources: Vec<Manifest>) -> ResourceSlice {
        ResourceSlice::new(
            "s",
            ResourceSliceSpec {
                synthesis_uuid: "u".into(),
                resources,
                compact_bytes: None,
            },
        )
    }

    #[test]
    fn a_compact_slice_keeps_identities_and_the_bytes_it_stored() {
        let whole = whole_again();
        let bytes = manifest_bytes(&whole);
        let mut s = slice(whole.clone());
        compact(&mut s);
        assert!(is_compact(&s));
        assert_eq!(stored_bytes(&s), bytes);
        assert!(manifest_bytes(&s.spec.resources) < 400, "{s:?}");
        let keys = reconciler_core::model::parse(&s.spec);
        assert_eq!(
            keys.keys,
            reconciler_core::model::parse(&slice(whole).spec).keys
        );
        assert_eq!(keys.tombstones, [false, false, false, true]);
        assert!(crate::run::sealing::plain_secret(&s.spec.resources[1]));
        assert!(!crate::run::sealing::plain_secret(&s.spec.resources[0]));
        assert_eq!(
            s.spec.resources[2].sealed.as_deref(),
            Some("enoki-aead-v1:k1:")
        );
        // The note is the cache's own: an object read from the API server never has one.
        let read: ResourceSlice = serde_json::from_value(json!({
            "apiVersion": "enoki.dev/v1alpha1", "kind": "ResourceSlice",
            "metadata": {"name": "s"},
            "spec": {"synthesisUUID": "u", "resources": [], "compact_bytes": 0, "compactBytes": 0}
        }))
        .unwrap();
        assert!(!is_compact(&read));
        assert!(!serde_json::to_string(&s).unwrap().contains("ompact"));
    }

    #[test]
    fn a_compact_identity_holds_identity_strings_only() {
        let huge = "x".repeat(1 << 20);
        let odd = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": {"nested": huge}},
            "patch": {"apiVersion": huge, "kind": huge}});
        let kept = identity(&odd, false).unwrap();
        assert!(kept.to_string().len() < 100, "{kept}");
        assert!(
            kept.get("patch").is_none(),
            "a patch is kept for kind Patch only"
        );
        assert!(kept["metadata"].get("namespace").is_none());
        for api_version in crds::names::PATCH_API_VERSIONS {
            let patch = json!({"apiVersion": api_version, "kind": "Patch",
                "metadata": {"name": "p"}, "patch": {"apiVersion": "v1", "kind": "ConfigMap"}});
            assert_eq!(
                identity(&patch, false).unwrap()["patch"]["kind"],
                "ConfigMap"
            );
        }
        // An identity past the bound (a slice written before it) keeps its slice whole.
        let long = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": huge}});
        assert!(identity(&long, false).is_none());
        let mut s = slice(vec![Manifest {
            manifest: long.to_string(),
            ..Manifest::default()
        }]);
        compact(&mut s);
        assert!(!is_compact(&s));
        assert_eq!(s.spec.resources[0].manifest, long.to_string());
    }

    fn whole_again() -> Vec<Manifest> {
        let big = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "n", "labels": {"x": "y"}},
            "data": {"k": "v".repeat(10_000)}});
        let plain = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "p", "namespace": "n"}, "data": {"k": "dg=="}});
        let sealed = Manifest {
            manifest: json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "s", "namespace": "n"}})
            .to_string(),
            sealed: Some(format!("enoki-aead-v1:k1:{}", "A".repeat(500))),
            deleted: false,
        };
        vec![
            Manifest {
                manifest: big.to_string(),
                ..Manifest::default()
            },
            Manifest {
                manifest: plain.to_string(),
                ..Manifest::default()
            },
            sealed,
            Manifest {
                manifest: "not json".into(),
                deleted: true,
                sealed: None,
            },
        ]
    }
}
