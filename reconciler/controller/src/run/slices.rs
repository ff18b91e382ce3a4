//! ResourceSlices: the stored output of a synthesis.
//!
//! Reads come from the shared slice cache, corrected by what enoki itself wrote last (the
//! cache may lag behind its own status patches) and confirmed with a GET before a slice is
//! declared missing. Writes: [`chunk`] (pure) packs manifests and tombstones into slices
//! under a byte budget; [`write`] creates them all or, when one is refused, deletes the ones
//! it created and reports which; [`delete_stale`] removes slices no synthesis refers to.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::context::Reads;
use super::{Context, Error};
use crds::{
    Composition, CompositionStatus, Manifest, ResourceSlice, ResourceSliceRef, ResourceSliceSpec,
    ResourceState, Synthesis,
};
pub(crate) use reconciler_core::model::{Loaded, parse};

pub use crds::names::SLICE_COMPOSITION_LABEL;
/// Largest manifest payload per ResourceSlice.
pub const SLICE_BYTES: usize = 512 * 1024;

mod compact;
#[cfg(test)]
mod held_bytes;
pub(crate) mod history;
mod orphans;
mod states;
pub(crate) use compact::{for_cache, is_compact, manifest_bytes, stored_bytes};
pub(crate) use orphans::{Pick, cache_listed, orphans};
pub(crate) use states::write_states;

/// Whether `slice` carries an owner reference to the Composition with `uid` (enoki writes
/// one on every slice; a slice without it was not written for this Composition).
pub(crate) fn owned_by(slice: &ResourceSlice, uid: &str) -> bool {
    !uid.is_empty()
        && slice
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.uid == uid && o.kind == crds::names::kinds::COMPOSITION)
}

/// Reads one slice of `comp`: from the cache (compact: manifests cut to their identities),
/// with the states enoki wrote last when the cache has not caught up; a slice missing from
/// the cache is confirmed with a GET.
///
/// # Errors
/// [`Error::ReadSlice`] when the GET fails.
pub(crate) async fn read(
    rd: Reads<'_>,
    comp: &Composition,
    name: &str,
) -> Result<Option<(Arc<ResourceSlice>, Vec<ResourceState>)>, Error> {
    read_as(rd, comp, name, false).await
}

/// [`read`] with the manifests whole: the cache's compact copy is read again with a GET.
///
/// # Errors
/// [`Error::ReadSlice`] when the GET fails.
pub(crate) async fn read_full(
    rd: Reads<'_>,
    comp: &Composition,
    name: &str,
) -> Result<Option<(Arc<ResourceSlice>, Vec<ResourceState>)>, Error> {
    read_as(rd, comp, name, true).await
}

/// The slice from the cache, or from the API server when the cache lacks it or (`whole`)
/// holds only its compact copy.
async fn fetch(
    rd: Reads<'_>,
    (ns, uid): (&str, &str),
    name: &str,
    whole: bool,
) -> Result<Option<Arc<ResourceSlice>>, Error> {
    let cached = rd
        .kept
        .and_then(|k| k.caches.slices.get(&ObjectRef::new(name).within(ns)));
    // Created by this process a moment ago: whole in memory while the cache lacks it or
    // holds the same version compacted; dropped once the slice moved on (its states written)
    // or after [`crate::run::memory::FRESH_FOR`].
    let fresh = rd.kept.and_then(|k| {
        k.memory.slices(uid, |m| {
            let (at, slice) = m.fresh.get(name)?;
            let same = cached
                .as_ref()
                .is_none_or(|c| c.resource_version() == slice.resource_version());
            if !same || at.elapsed() > crate::run::memory::FRESH_FOR {
                m.fresh.remove(name);
                return None;
            }
            Some(slice.clone())
        })
    });
    match (cached, fresh) {
        (None, Some(f)) => Ok(Some(f)),
        (Some(c), Some(f)) if whole && is_compact(&c) => Ok(Some(f)),
        (Some(s), _) if !(whole && is_compact(&s)) => Ok(Some(s)),
        _ => Ok(
            Api::<ResourceSlice>::namespaced(rd.clusters.client().clone(), ns)
                .get_opt(name)
                .await
                .map_err(|source| Error::ReadSlice {
                    name: name.to_string(),
                    source,
                })?
                .map(Arc::new),
        ),
    }
}

async fn read_as(
    rd: Reads<'_>,
    comp: &Composition,
    name: &str,
    whole: bool,
) -> Result<Option<(Arc<ResourceSlice>, Vec<ResourceState>)>, Error> {
    let ns = comp.namespace().unwrap_or_default();
    let uid = comp.uid().unwrap_or_default();
    let slice = fetch(rd, (&ns, &uid), name, whole).await?;
    let Some(slice) = slice else {
        return Ok(None);
    };
    if !owned_by(&slice, &uid) {
        // A slice enoki did not write for this Composition is never applied: it counts as
        // missing, so a new synthesis writes the Composition's own.
        tracing::warn!(
            slice = name,
            composition = %comp.name_any(),
            "ResourceSlice is not owned by the Composition that references it; ignored"
        );
        return Ok(None);
    }
    let rv = slice.resource_version().unwrap_or_default();
    let stored = slice
        .status
        .as_ref()
        .map(|s| s.resources.clone())
        .unwrap_or_default();
    // Whether this is the cache's copy (a GET may be ahead of the cache: what enoki wrote
    // stays in memory until the cache has it too).
    let cached = rd
        .kept
        .and_then(|k| k.caches.slices.get(&ObjectRef::new(name).within(&ns)))
        .is_some_and(|c| c.resource_version() == slice.resource_version());
    let states = states::as_read(rd.kept.map(|k| k.memory), &uid, name, (&rv, cached), stored);
    Ok(Some((slice, states)))
}

/// What [`check`] found of a synthesis's slices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SliceCheck {
    /// Every slice exists, is this Composition's and can be read.
    Whole,
    /// A slice is gone (deleted by someone) or another's: Eno's missing slice.
    Missing,
    /// A slice holds a Secret in plain text (written before sealing) or a sealed Secret no
    /// loaded key opens: enoki makes such a synthesis again, whatever the Composition says.
    Unusable,
}

/// Whether every slice of `synthesis` exists, is owned by `comp` (the cache, then a GET for
/// what it lacks) and, once a slice key is loaded, holds no Secret in plain text and no sealed
/// Secret that fails to open.
///
/// # Errors
/// [`Error::ReadSlice`].
pub(crate) async fn all_exist(
    ctx: &Context,
    comp: &Composition,
    synthesis: &Synthesis,
) -> Result<bool, Error> {
    Ok(check(ctx, comp, synthesis).await? == SliceCheck::Whole)
}

/// [`all_exist`], saying why not.
///
/// # Errors
/// [`Error::ReadSlice`].
pub(crate) async fn check(
    ctx: &Context,
    comp: &Composition,
    synthesis: &Synthesis,
) -> Result<SliceCheck, Error> {
    let ns = comp.namespace().unwrap_or_default();
    let uid = comp.uid().unwrap_or_default();
    let unopened = ctx.state.memory.slices(&uid, |m| {
        m.unopened.as_deref() == Some(synthesis.uuid.as_str())
    });
    if unopened {
        return Ok(SliceCheck::Unusable);
    }
    for r in &synthesis.resource_slices {
        let found = fetch(ctx.reads(), (&ns, &uid), &r.name, false).await?;
        // A slice not owned by this Composition counts as missing (see `read`); so does one
        // holding a sealed Secret that no loaded key opens (its key was deleted).
        let Some(found) = found.filter(|s| owned_by(s, &uid)) else {
            return Ok(SliceCheck::Missing);
        };
        if !ctx.slice_keys.has_keys() {
            continue;
        }
        // A Secret in plain text (written before sealing): made again, sealed.
        if found
            .spec
            .resources
            .iter()
            .any(crate::run::sealing::plain_secret)
        {
            return Ok(SliceCheck::Unusable);
        }
        // A compact copy keeps a sealed Secret's key id: one no loaded key has does not open
        // (an entry altered under a known key is found when the synthesis is ingested).
        let short = is_compact(&found);
        let unopened = |m: &crds::Manifest| {
            !m.deleted
                && m.sealed.as_deref().is_some_and(|sealed| match short {
                    true => !ctx.slice_keys.knows(sealed),
                    false => ctx.slice_keys.manifest(&uid, m).is_none(),
                })
        };
        if found.spec.resources.iter().any(unopened) {
            // Perhaps a key rotated in since the keys were read: read them again first.
            if ctx.slice_keys.older_than(Duration::from_secs(5)) {
                let secret = &ctx.opts.storage.slice_key_secret;
                let _ =
                    crate::run::sealing::load(ctx.clusters.client(), secret, &ctx.slice_keys).await;
            }
            if found.spec.resources.iter().any(unopened) {
                return Ok(SliceCheck::Unusable);
            }
        }
    }
    Ok(SliceCheck::Whole)
}

/// Loads every slice of `synthesis`.
///
/// # Errors
/// [`Error::ReadSlice`].
pub(crate) async fn load(
    ctx: &Context,
    comp: &Composition,
    synthesis: &Synthesis,
) -> Result<Loaded, Error> {
    let mut loaded = Loaded::default();
    let uid = comp.uid().unwrap_or_default();
    for r in &synthesis.resource_slices {
        match read(ctx.reads(), comp, &r.name).await? {
            Some((slice, states)) => {
                let generation = slice.metadata.generation;
                let hit = ctx.state.memory.slices(&uid, |m| {
                    m.parsed
                        .get(&r.name)
                        .filter(|(g, _)| *g == generation)
                        .map(|(_, p)| p.clone())
                });
                let parsed = match hit {
                    Some(p) => p,
                    None => {
                        let p = Arc::new(parse(&slice.spec));
                        ctx.state.memory.slices(&uid, |m| {
                            m.parsed.insert(r.name.clone(), (generation, p.clone()))
                        });
                        p
                    }
                };
                loaded.push(slice, &parsed, states);
            }
            None => loaded.missing = true,
        }
    }
    Ok(loaded)
}

/// Bytes a resource's recorded state may take in its slice's status at most (an error of
/// [`reconciler_core::record::MAX_RESOURCE_ERROR`] bytes, hashes, a time, the keys):
/// counted for every manifest a slice holds, so a slice of many tiny manifests still fits
/// etcd's object size with all their states.
pub const STATE_BYTES: usize = 1400;

/// Packs manifests into slices of at most `budget` bytes each, in order, each manifest
/// counting `per_item` bytes more (its state in the slice's status); a manifest larger than
/// the budget gets a slice of its own. Always at least one (possibly empty) slice.
pub fn chunk(manifests: Vec<Manifest>, budget: usize, per_item: usize) -> Vec<Vec<Manifest>> {
    let mut chunks: Vec<Vec<Manifest>> = vec![Vec::new()];
    let mut size = 0;
    for m in manifests {
        let len = m.manifest.len() + m.sealed.as_ref().map_or(0, String::len) + per_item;
        if size + len > budget && !chunks.last().is_some_and(Vec::is_empty) {
            chunks.push(Vec::new());
            size = 0;
        }
        size += len;
        if let Some(last) = chunks.last_mut() {
            last.push(m);
        }
    }
    chunks
}

/// The value of a slice's Composition label: the Composition's name, or for a name longer
/// than a label value may be (63 characters) its first 54 and a hash of the whole. Pure.
pub fn label_value(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    use sha2::Digest;
    let hash = sha2::Sha256::digest(name.as_bytes());
    let stem = name
        .get(..54)
        .unwrap_or_default()
        .trim_end_matches(['-', '.']);
    format!("{stem}-{:x}", hash)[..stem.len() + 9].to_string()
}

/// Creates the slices of synthesis `uuid` (labelled with the Composition's shard when there
/// is one). All or nothing: when one is refused, the ones created before it are deleted again
/// and the error names the refused slice.
///
/// # Errors
/// [`Error::WriteSlice`].
pub(crate) async fn write(
    (clusters, memory, shard): (
        &crate::run::context::Clusters,
        &crate::run::memory::Memory,
        Option<String>,
    ),
    comp: &Composition,
    uuid: &str,
    manifests: Vec<Manifest>,
) -> Result<Vec<ResourceSliceRef>, Error> {
    let ns = comp.namespace().unwrap_or_default();
    let api: Api<ResourceSlice> = Api::namespaced(clusters.client().clone(), &ns);
    let owner = OwnerReference {
        api_version: Composition::api_version(&()).into(),
        kind: Composition::kind(&()).into(),
        name: comp.name_any(),
        uid: comp.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let mut refs = Vec::new();
    let short = uuid.get(..8).unwrap_or(uuid);
    let comp_name = comp.name_any();
    // A Composition's name may be 253 characters long: slice names and the label fit.
    let stem = comp_name
        .get(..220)
        .unwrap_or(&comp_name)
        .trim_end_matches(['-', '.']);
    for (i, resources) in chunk(manifests, SLICE_BYTES, STATE_BYTES)
        .into_iter()
        .enumerate()
    {
        let name = format!("{stem}-{short}-{i}");
        let mut slice = ResourceSlice::new(
            &name,
            ResourceSliceSpec {
                synthesis_uuid: uuid.to_string(),
                resources,
                compact_bytes: None,
            },
        );
        slice.metadata.namespace = Some(ns.clone());
        slice.metadata.owner_references = Some(vec![owner.clone()]);
        let mut labels: std::collections::BTreeMap<String, String> =
            [(SLICE_COMPOSITION_LABEL.to_string(), label_value(&comp_name))].into();
        if let Some(shard) = &shard {
            labels.insert(crds::names::SHARD_LABEL.to_string(), shard.clone());
        }
        slice.metadata.labels = Some(labels);
        match api.create(&PostParams::default(), &slice).await {
            Ok(created) => {
                let uid = comp.uid().unwrap_or_default();
                let at = std::time::Instant::now();
                memory.slices(&uid, |m| {
                    m.fresh.insert(name.clone(), (at, Arc::new(created)))
                });
            }
            Err(source) => {
                for r in &refs {
                    let r: &ResourceSliceRef = r;
                    let _ = api.delete(&r.name, &DeleteParams::default()).await;
                    memory.slices(&comp.uid().unwrap_or_default(), |m| m.fresh.remove(&r.name));
                }
                return Err(Error::WriteSlice { name, source });
            }
        }
        refs.push(ResourceSliceRef { name });
    }
    Ok(refs)
}

/// Deletes these slices of `comp` (best effort) and forgets what was remembered of them.
pub(crate) async fn delete(ctx: &Context, comp: &Composition, refs: &[crds::ResourceSliceRef]) {
    let api: Api<ResourceSlice> = Api::namespaced(
        ctx.clusters.client().clone(),
        &comp.namespace().unwrap_or_default(),
    );
    let uid = comp.uid().unwrap_or_default();
    for r in refs {
        match api.delete(&r.name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(slice = %r.name, "deleted the slice of an unrecorded synthesis")
            }
            Err(e) => {
                tracing::debug!(slice = %r.name, error = %e, "cannot delete an unrecorded ResourceSlice")
            }
        }
        states::forget(&ctx.state, &uid, &r.name);
    }
}

/// Deletes this Composition's slices that belong to neither the current nor the previous
/// synthesis, and the previous synthesis's that hold a Secret in plain text (written before
/// Secrets were sealed; best effort: a failed delete is retried on the next synthesis).
pub(crate) async fn delete_stale(ctx: &Arc<Context>, comp: &Composition, st: &CompositionStatus) {
    let ns = comp.namespace().unwrap_or_default();
    let api: Api<ResourceSlice> = Api::namespaced(ctx.clusters.client().clone(), &ns);
    let current: BTreeSet<String> = st
        .current_synthesis
        .iter()
        .flat_map(|s| s.resource_slices.iter().map(|r| r.name.clone()))
        .collect();
    let previous: BTreeSet<String> = st
        .previous_synthesis
        .iter()
        .flat_map(|s| s.resource_slices.iter().map(|r| r.name.clone()))
        .collect();
    let uid = comp.uid().unwrap_or_default();
    let stale: Vec<String> = ctx
        .caches
        .slices
        .state_filter(|s| s.namespace().as_deref() == Some(ns.as_str()) && owned_by(s, &uid))
        .iter()
        .filter(|s| {
            let n = s.name_any();
            !current.contains(&n)
                && (!previous.contains(&n)
                    || s.spec
                        .resources
                        .iter()
                        .any(crate::run::sealing::plain_secret))
        })
        .map(|s| s.name_any())
        .collect();
    for n in stale {
        match api.delete(&n, &DeleteParams::default()).await {
            Ok(_) => tracing::debug!(slice = %n, "deleted stale ResourceSlice"),
            Err(e) => tracing::debug!(slice = %n, error = %e, "cannot delete stale ResourceSlice"),
        }
        states::forget(&ctx.state, &uid, &n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(len: usize) -> Manifest {
        Manifest {
            manifest: "x".repeat(len),
            ..Manifest::default()
        }
    }

    #[test]
    fn only_slices_owned_by_the_composition_are_trusted() {
        let slice = |owners: serde_json::Value| -> ResourceSlice {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "enoki.dev/v1alpha1", "kind": "ResourceSlice",
                "metadata": {"name": "s", "namespace": "n", "ownerReferences": owners},
                "spec": {"synthesisUUID": "x", "resources": []}}))
            .unwrap()
        };
        let owner = |uid: &str, kind: &str| {
            serde_json::json!([{"apiVersion": "enoki.dev/v1alpha1", "kind": kind,
                "name": "c", "uid": uid}])
        };
        assert!(owned_by(&slice(owner("u1", "Composition")), "u1"));
        assert!(
            !owned_by(&slice(owner("u2", "Composition")), "u1"),
            "another's"
        );
        assert!(
            !owned_by(&slice(owner("u1", "ConfigMap")), "u1"),
            "not a Composition"
        );
        assert!(!owned_by(&slice(serde_json::json!([])), "u1"), "no owner");
        assert!(
            !owned_by(&slice(owner("", "Composition")), ""),
            "unknown uid"
        );
    }

    #[test]
    fn a_long_composition_name_gives_a_valid_label_value() {
        assert_eq!(label_value("web"), "web");
        let long = format!("{}.b", "a-".repeat(120));
        let v = label_value(&long);
        assert!(v.len() <= 63, "{v}");
        assert!(
            v.starts_with("a-a-") && v.chars().last().is_some_and(|c| c.is_ascii_alphanumeric())
        );
        assert_ne!(v, label_value(&format!("{long}c")));
    }

    #[test]
    fn chunks_respect_the_budget_and_keep_order() {
        let sizes = |c: &Vec<Vec<Manifest>>| -> Vec<Vec<usize>> {
            c.iter()
                .map(|s| s.iter().map(|m| m.manifest.len()).collect())
                .collect()
        };
        let c = chunk(vec![m(4), m(4), m(4), m(9), m(1)], 10, 0);
        assert_eq!(sizes(&c), [vec![4, 4], vec![4], vec![9, 1]]);
    }

    #[test]
    fn an_oversized_manifest_gets_a_slice_of_its_own_and_nothing_is_an_empty_slice() {
        let c = chunk(vec![m(30), m(2)], 10, 0);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0][0].manifest.len(), 30);
        assert_eq!(chunk(Vec::new(), 10, 0).len(), 1);
    }

    /// Tiny manifests: each counts its state too, so a slice's status fits beside them.
    #[test]
    fn every_manifest_counts_the_state_it_records() {
        let c = chunk(
            (0..10_000).map(|_| m(70)).collect(),
            SLICE_BYTES,
            STATE_BYTES,
        );
        let per_slice = SLICE_BYTES / (70 + STATE_BYTES);
        assert_eq!(c[0].len(), per_slice);
        // Its manifests and every state at the longest still fit etcd's 1.5 MiB.
        assert!(per_slice * (70 + STATE_BYTES) <= SLICE_BYTES);
    }
}
