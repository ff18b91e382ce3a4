//! The slice cache holds slices *compact*: each manifest cut down to its identity
//! (`apiVersion`, `kind`, `metadata.name`, `metadata.namespace`; a Patch's target kind), a
//! sealed Secret to its key id, and the bytes the slice stored noted beside it. What a
//! tenant's synthesis emits is then held by the controller as a few dozen bytes per object,
//! whatever its size: a pass reads a slice's content with a GET only when it needs the
//! manifests themselves (a synthesis ingested again, tombstones, identical-output checks).
//! Pure.

use serde_json::{Map, Value, json};

use crds::{Manifest, ResourceSlice};

/// Marks a cached slice as compact; its value is the bytes its manifests stored. Set on the
/// cache's own copy only, never written to the API server.
pub(crate) const COMPACT: &str = "enoki.dev/cached-compact-bytes";

/// Bytes a slice's manifests store (manifest text and sealed Secrets).
pub(crate) fn manifest_bytes(resources: &[Manifest]) -> usize {
    resources
        .iter()
        .map(|m| m.manifest.len() + m.sealed.as_ref().map_or(0, String::len))
        .sum()
}

/// Drops a compact marker an object read from the API server carries (it is not believed).
pub(crate) fn forget_marker(slice: &mut ResourceSlice) {
    if let Some(a) = slice.metadata.annotations.as_mut() {
        a.remove(COMPACT);
    }
}

/// Cuts a slice read from the API server down to what the planner and the checks of the
/// cache need (a marker the object itself carries is not believed: it is counted anew).
pub(crate) fn compact(slice: &mut ResourceSlice) {
    forget_marker(slice);
    let bytes = manifest_bytes(&slice.spec.resources);
    for m in &mut slice.spec.resources {
        let plain = crate::run::sealing::plain_secret(m);
        m.manifest = serde_json::from_str::<Value>(&m.manifest)
            .map(|v| identity(&v, plain).to_string())
            .unwrap_or_default();
        if let Some(sealed) = &mut m.sealed {
            *sealed = key_id_prefix(sealed).to_string();
        }
    }
    slice
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(COMPACT.to_string(), bytes.to_string());
}

/// Whether `slice` is a compact cache copy (its manifests are identities only).
pub(crate) fn is_compact(slice: &ResourceSlice) -> bool {
    slice
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(COMPACT))
}

/// Bytes `slice` stores: noted on a compact copy, counted on a whole one.
pub(crate) fn stored_bytes(slice: &ResourceSlice) -> usize {
    slice
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(COMPACT))
        .and_then(|b| b.parse().ok())
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
fn identity(v: &Value, plain: bool) -> Value {
    // Strings only, and no longer than an identity can be (older slices were not checked):
    // the compact copy never holds more of a manifest than its identity.
    let pick = |from: &Value, keys: &[&str]| -> Map<String, Value> {
        keys.iter()
            .filter_map(|k| {
                let s = from.get(*k)?.as_str()?;
                Some(((*k).to_string(), Value::from(clip(s))))
            })
            .collect()
    };
    let mut out = pick(v, &["apiVersion", "kind"]);
    if let Some(meta) = v.get("metadata") {
        out.insert("metadata".into(), pick(meta, &["name", "namespace"]).into());
    }
    if let Some(patch) = v
        .get("patch")
        .filter(|_| v.get("kind") == Some(&json!("Patch")))
    {
        out.insert("patch".into(), pick(patch, &["apiVersion", "kind"]).into());
    }
    if plain {
        out.insert("data".into(), json!({}));
    }
    Value::Object(out)
}

/// An identity string cut to [`crate::synthesis::MAX_IDENTITY_BYTES`].
fn clip(s: &str) -> &str {
    let mut end = s.len().min(crate::synthesis::MAX_IDENTITY_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
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
        let keys = crate::run::model::parse(&s.spec);
        assert_eq!(keys.keys, crate::run::model::parse(&slice(whole).spec).keys);
        assert_eq!(keys.tombstones, [false, false, false, true]);
        assert!(crate::run::sealing::plain_secret(&s.spec.resources[1]));
        assert!(!crate::run::sealing::plain_secret(&s.spec.resources[0]));
        assert_eq!(
            s.spec.resources[2].sealed.as_deref(),
            Some("enoki-aead-v1:k1:")
        );
        // A marker written on the object itself is not believed.
        let mut forged = slice(whole_again());
        forged
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(COMPACT.into(), "0".into());
        compact(&mut forged);
        assert_eq!(stored_bytes(&forged), bytes);
    }

    #[test]
    fn a_compact_identity_holds_strings_of_identity_size_only() {
        let huge = "x".repeat(1 << 20);
        let odd = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": huge, "namespace": {"nested": huge}},
            "patch": {"apiVersion": huge, "kind": huge}});
        let kept = identity(&odd, false);
        assert!(kept.to_string().len() < 400, "{kept}");
        assert!(
            kept.get("patch").is_none(),
            "a patch is kept for kind Patch only"
        );
        assert!(kept["metadata"].get("namespace").is_none());
        let patch = json!({"apiVersion": "enoki.dev/v1", "kind": "Patch",
            "metadata": {"name": "p"}, "patch": {"apiVersion": "v1", "kind": "ConfigMap"}});
        assert_eq!(identity(&patch, false)["patch"]["kind"], "ConfigMap");
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
