//! What earlier syntheses left behind: the snapshots and recorded applies of the previous
//! synthesis (so an unchanged resource is not rewritten by a new one, and client-side patches
//! remove dropped fields), and the tombstones a new synthesis must carry for resources it no
//! longer emits.

use std::collections::{BTreeSet, HashMap};

use kube::ResourceExt;
use plan::ResourceKey;
use serde_json::Value;

use super::super::{Context, Error};
use super::{Loaded, read_full};
use crds::{Composition, CompositionStatus, Manifest, Synthesis};

/// What the previous synthesis applied: its snapshots (client-side patches remove fields the
/// synthesizer stopped emitting) and its recorded hash/resourceVersion, so a new synthesis
/// that leaves a resource unchanged does not rewrite it.
#[derive(Default)]
pub(crate) struct Previous {
    pub snapshots: HashMap<ResourceKey, Value>,
    pub carried: HashMap<ResourceKey, (Option<String>, Option<String>)>,
}

/// Reads [`Previous`] when it is needed: some resource of the current synthesis that may
/// still be written (not a tombstone, not recorded deleted) has no recorded apply yet, or
/// writes are client-side merge patches.
///
/// # Errors
/// [`Error::ReadSlice`].
pub(crate) async fn previous_applied(
    ctx: &Context,
    comp: &Composition,
    st: &CompositionStatus,
    loaded: &Loaded,
    info: &plan::CompositionInfo,
) -> Result<Previous, Error> {
    let mut out = Previous::default();
    let unrecorded = loaded.slices.iter().any(|s| {
        s.states
            .iter()
            .zip(&s.tombstones)
            .any(|(x, tombstone)| !tombstone && !x.deleted && x.applied_hash.is_none())
    });
    let Some(prev) = &st.previous_synthesis else {
        return Ok(out);
    };
    if !unrecorded && ctx.opts.apply.mode != plan::ApplyMode::ClientSide {
        return Ok(out);
    }
    // The snapshots need the manifests whole (server-side apply hands the fields of the
    // previous version back to enoki's manager from them; client-side patches diff them).
    for r in &prev.resource_slices {
        let Some((slice, states)) = read_full(ctx.reads(), comp, &r.name).await? else {
            continue;
        };
        for (i, m) in slice
            .spec
            .resources
            .iter()
            .enumerate()
            .filter(|(_, m)| !m.deleted)
        {
            let uid = comp.uid().unwrap_or_default();
            let Some(manifest) = ctx.slice_keys.manifest(&uid, m) else {
                continue;
            };
            let Ok(key) = ResourceKey::of(&manifest) else {
                continue;
            };
            if let Some(state) = states.get(i) {
                let recorded = (
                    state.applied_hash.clone(),
                    state.applied_resource_version.clone(),
                );
                out.carried.insert(key.clone(), recorded);
            }
            out.snapshots
                .insert(key, plan::snapshot::strip(&manifest, info.owner()));
        }
    }
    Ok(out)
}

/// Tombstones for resources of the current synthesis that `items` no longer has (and for
/// tombstones not yet confirmed deleted, so an interrupted delete is retried), one per
/// resource. When the status records no synthesis, `current` holds slices whose record was
/// lost: their tombstones are marked ([`crds::names::UNRECORDED_ANNOTATION`]) and delete only
/// objects labelled as this Composition's.
///
/// # Errors
/// [`Error::ReadSlice`].
pub(crate) async fn tombstones(
    rd: crate::run::context::Reads<'_>,
    comp: &Composition,
    current: Option<&Synthesis>,
    items: &[Value],
) -> Result<Vec<Manifest>, Error> {
    let mut seen: BTreeSet<ResourceKey> = items
        .iter()
        .filter_map(|i| ResourceKey::of(i).ok())
        .collect();
    let unrecorded = comp
        .status
        .as_ref()
        .is_none_or(|s| s.current_synthesis.is_none());
    let mut out = Vec::new();
    for slice_ref in current
        .map(|c| c.resource_slices.as_slice())
        .unwrap_or_default()
    {
        let Some((slice, states)) = read_full(rd, comp, &slice_ref.name).await? else {
            continue;
        };
        for (i, m) in slice.spec.resources.iter().enumerate() {
            let Ok(v) = serde_json::from_str::<Value>(&m.manifest) else {
                continue;
            };
            let Ok(key) = ResourceKey::of(&v) else {
                continue;
            };
            let gone = m.deleted && states.get(i).is_some_and(|s| s.deleted);
            if !gone && seen.insert(key) {
                // A tombstone needs only the identity and the annotations that say how it is
                // deleted: nothing else of the object (a Secret's values least of all).
                let mut t = tombstone_of(&v);
                if unrecorded {
                    mark_unrecorded(&mut t);
                }
                out.push(Manifest {
                    manifest: t.to_string(),
                    deleted: true,
                    sealed: None,
                });
            }
        }
    }
    Ok(out)
}

/// Marks tombstone `t` as taken from a synthesis whose record was lost.
fn mark_unrecorded(t: &mut Value) {
    let Some(meta) = t.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if let Some(a) = annotations.as_object_mut() {
        a.insert(crds::names::UNRECORDED_ANNOTATION.into(), "true".into());
    }
}

/// What a tombstone keeps of a manifest: `apiVersion`, `kind`, `metadata.name`,
/// `metadata.namespace`, `metadata.annotations` (deletion strategy, readiness group, …) and a
/// Patch's target kind. Pure.
pub(crate) fn tombstone_of(v: &Value) -> Value {
    let pick = |from: &Value, keys: &[&str]| -> serde_json::Map<String, Value> {
        keys.iter()
            .filter_map(|k| Some(((*k).to_string(), from.get(*k)?.clone())))
            .collect()
    };
    let mut out = pick(v, &["apiVersion", "kind"]);
    if let Some(meta) = v.get("metadata") {
        out.insert(
            "metadata".into(),
            pick(meta, &["name", "namespace", "annotations"]).into(),
        );
    }
    if let Some(patch) = v.get("patch") {
        out.insert("patch".into(), pick(patch, &["apiVersion", "kind"]).into());
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tombstone_keeps_the_identity_and_annotations_only() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "n", "labels": {"x": "y"},
                "annotations": {"eno.azure.io/deletion-strategy": "orphan"}},
            "data": {"big": "x".repeat(10_000)}});
        let t = tombstone_of(&cm);
        assert_eq!(
            t,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "n",
                "annotations": {"eno.azure.io/deletion-strategy": "orphan"}}})
        );
        assert_eq!(ResourceKey::of(&t).unwrap(), ResourceKey::of(&cm).unwrap());
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s"}, "data": {"k": "dg=="}});
        assert!(tombstone_of(&secret).get("data").is_none());
    }
}
