//! ResourceSlices: the stored output of a synthesis.
//!
//! Reads come from the shared slice cache, corrected by what enoki itself wrote last (the
//! cache may lag behind its own status patches) and confirmed with a GET before a slice is
//! declared missing. Writes: [`chunk`] (pure) packs manifests and tombstones into slices
//! under a byte budget; [`write`] creates them all or, when one is refused, deletes the ones
//! it created and reports which; [`delete_stale`] removes slices no synthesis refers to.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use plan::ResourceKey;
use serde_json::{Value, json};

use super::super::resources::Positions;
use super::super::{Context, Error};
use crds::{
    Composition, CompositionStatus, Manifest, ResourceSlice, ResourceSliceRef, ResourceSliceSpec,
    ResourceState, Synthesis,
};

/// Label on ResourceSlices: the owning Composition's name.
pub const SLICE_COMPOSITION_LABEL: &str = "enoki.dev/composition";
/// Largest manifest payload per ResourceSlice.
pub const SLICE_BYTES: usize = 512 * 1024;

/// One manifest of a loaded slice.
#[derive(Debug)]
pub(crate) struct LoadedResource {
    pub key: ResourceKey,
    pub manifest: Value,
    pub tombstone: bool,
    pub slice: usize,
    pub index: usize,
}

/// One loaded slice: its name and per-manifest states (resized to its manifests).
#[derive(Debug)]
pub(crate) struct LoadedSlice {
    pub name: String,
    pub states: Vec<ResourceState>,
    /// The states as stored (to skip writing unchanged ones).
    pub stored: Vec<ResourceState>,
    pub tombstones: Vec<bool>,
}

/// The slices of one synthesis, parsed.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub slices: Vec<LoadedSlice>,
    pub resources: Vec<LoadedResource>,
    pub position: Positions,
    /// A slice the synthesis refers to does not exist.
    pub missing: bool,
}

impl Loaded {
    /// Whether manifest `ri` of slice `si` is a tombstone.
    pub fn is_tombstone(&self, si: usize, ri: usize) -> bool {
        self.slices
            .get(si)
            .and_then(|s| s.tombstones.get(ri))
            .copied()
            .unwrap_or(false)
    }

    /// Resources recorded as deleted.
    pub fn deleted_keys(&self) -> BTreeSet<ResourceKey> {
        self.resources
            .iter()
            .filter(|r| {
                self.slices[r.slice]
                    .states
                    .get(r.index)
                    .is_some_and(|s| s.deleted)
            })
            .map(|r| r.key.clone())
            .collect()
    }

    fn push(&mut self, name: String, spec: &ResourceSliceSpec, stored: Vec<ResourceState>) {
        let si = self.slices.len();
        let mut states = stored.clone();
        states.resize(spec.resources.len(), ResourceState::default());
        for (ri, m) in spec.resources.iter().enumerate() {
            let Ok(manifest) = serde_json::from_str::<Value>(&m.manifest) else {
                continue;
            };
            if let Ok(key) = ResourceKey::of(&manifest) {
                self.position.insert(key.clone(), (si, ri));
                self.resources.push(LoadedResource {
                    key,
                    manifest,
                    tombstone: m.deleted,
                    slice: si,
                    index: ri,
                });
            }
        }
        self.slices.push(LoadedSlice {
            name,
            states,
            stored,
            tombstones: spec.resources.iter().map(|m| m.deleted).collect(),
        });
    }

    /// A loaded set of one slice with these (key, tombstone) resources, for unit tests.
    #[cfg(test)]
    pub fn for_test(keys: &[(ResourceKey, bool)]) -> Loaded {
        let spec = ResourceSliceSpec {
            synthesis_uuid: "u".into(),
            resources: keys
                .iter()
                .map(|(k, t)| Manifest {
                    manifest: json!({"apiVersion": "v1", "kind": k.kind, "metadata":
                        {"name": k.name, "namespace": k.namespace}})
                    .to_string(),
                    deleted: *t,
                })
                .collect(),
        };
        let mut l = Loaded::default();
        l.push("s".into(), &spec, Vec::new());
        l
    }
}

/// Reads one slice of `comp`: from the cache, with the states enoki wrote last when the
/// cache has not caught up; a slice missing from the cache is confirmed with a GET.
///
/// # Errors
/// [`Error::ReadSlice`] when the GET fails.
pub(crate) async fn read(
    ctx: &Context,
    comp: &Composition,
    name: &str,
) -> Result<Option<(ResourceSliceSpec, Vec<ResourceState>)>, Error> {
    let ns = comp.namespace().unwrap_or_default();
    let cached = ctx
        .slices
        .get(&ObjectRef::new(name).within(&ns))
        .map(|s| (*s).clone());
    let slice = match cached {
        Some(s) => Some(s),
        None => Api::<ResourceSlice>::namespaced(ctx.client.clone(), &ns)
            .get_opt(name)
            .await
            .map_err(|source| Error::ReadSlice {
                name: name.to_string(),
                source,
            })?,
    };
    let Some(slice) = slice else {
        return Ok(None);
    };
    let uid = comp.uid().unwrap_or_default();
    let rv = slice.resource_version().unwrap_or_default();
    let stored = slice.status.map(|s| s.resources).unwrap_or_default();
    let states = ctx.remember(&uid, |m| match m.slice_status.get(name) {
        Some((written_rv, _)) if *written_rv == rv => {
            m.slice_status.remove(name);
            stored
        }
        Some((_, written)) => written.clone(),
        None => stored,
    });
    Ok(Some((slice.spec, states)))
}

/// Whether every slice of `synthesis` exists (the cache, then a GET for what it lacks).
///
/// # Errors
/// [`Error::ReadSlice`].
pub(crate) async fn all_exist(
    ctx: &Context,
    comp: &Composition,
    synthesis: &Synthesis,
) -> Result<bool, Error> {
    let ns = comp.namespace().unwrap_or_default();
    for r in &synthesis.resource_slices {
        if ctx
            .slices
            .get(&ObjectRef::new(&r.name).within(&ns))
            .is_some()
        {
            continue;
        }
        let found = Api::<ResourceSlice>::namespaced(ctx.client.clone(), &ns)
            .get_opt(&r.name)
            .await
            .map_err(|source| Error::ReadSlice {
                name: r.name.clone(),
                source,
            })?;
        if found.is_none() {
            return Ok(false);
        }
    }
    Ok(true)
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
    for r in &synthesis.resource_slices {
        match read(ctx, comp, &r.name).await? {
            Some((spec, states)) => loaded.push(r.name.clone(), &spec, states),
            None => loaded.missing = true,
        }
    }
    Ok(loaded)
}

/// Writes the new states of every slice whose states changed (one patch per slice).
///
/// # Errors
/// [`Error::WriteSliceStatus`].
pub(crate) async fn write_states(
    ctx: &Context,
    comp: &Composition,
    loaded: &Loaded,
    states: &[Vec<ResourceState>],
) -> Result<(), Error> {
    let api: Api<ResourceSlice> =
        Api::namespaced(ctx.client.clone(), &comp.namespace().unwrap_or_default());
    let uid = comp.uid().unwrap_or_default();
    for (slice, new) in loaded.slices.iter().zip(states) {
        if slice.stored == *new {
            continue;
        }
        let written = api
            .patch_status(
                &slice.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"resources": new}})),
            )
            .await
            .map_err(|source| Error::WriteSliceStatus {
                name: slice.name.clone(),
                source,
            })?;
        let rv = written.resource_version().unwrap_or_default();
        ctx.remember(&uid, |m| {
            m.slice_status.insert(slice.name.clone(), (rv, new.clone()))
        });
    }
    Ok(())
}

/// What the previous synthesis applied: its snapshots (client-side patches remove fields the
/// synthesizer stopped emitting) and its recorded hash/resourceVersion, so a new synthesis
/// that leaves a resource unchanged does not rewrite it.
#[derive(Default)]
pub(crate) struct Previous {
    pub snapshots: BTreeMap<ResourceKey, Value>,
    pub carried: BTreeMap<ResourceKey, (Option<String>, Option<String>)>,
}

/// Reads [`Previous`] when it is needed: some resource of the current synthesis has no
/// recorded apply yet, or writes are client-side merge patches.
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
    let unrecorded = loaded
        .slices
        .iter()
        .any(|s| s.states.iter().any(|x| x.applied_hash.is_none()));
    let Some(prev) = &st.previous_synthesis else {
        return Ok(out);
    };
    if !unrecorded && ctx.opts.mode != plan::ApplyMode::ClientSide {
        return Ok(out);
    }
    for r in &prev.resource_slices {
        let Some((spec, states)) = read(ctx, comp, &r.name).await? else {
            continue;
        };
        for (i, m) in spec
            .resources
            .iter()
            .enumerate()
            .filter(|(_, m)| !m.deleted)
        {
            let Ok(manifest) = serde_json::from_str::<Value>(&m.manifest) else {
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
                .insert(key, plan::snapshot::strip(&manifest, Some(&info.uid)));
        }
    }
    Ok(out)
}

/// Tombstones for resources of the current synthesis that `items` no longer has (and for
/// tombstones not yet confirmed deleted, so an interrupted delete is retried).
///
/// # Errors
/// [`Error::ReadSlice`].
pub(crate) async fn tombstones(
    ctx: &Context,
    comp: &Composition,
    current: Option<&Synthesis>,
    items: &[Value],
) -> Result<Vec<Manifest>, Error> {
    let new_keys: BTreeSet<ResourceKey> = items
        .iter()
        .filter_map(|i| ResourceKey::of(i).ok())
        .collect();
    let mut out = Vec::new();
    for slice_ref in current
        .map(|c| c.resource_slices.as_slice())
        .unwrap_or_default()
    {
        let Some((spec, states)) = read(ctx, comp, &slice_ref.name).await? else {
            continue;
        };
        for (i, m) in spec.resources.iter().enumerate() {
            let Ok(v) = serde_json::from_str::<Value>(&m.manifest) else {
                continue;
            };
            let Ok(key) = ResourceKey::of(&v) else {
                continue;
            };
            let gone = m.deleted && states.get(i).is_some_and(|s| s.deleted);
            if !new_keys.contains(&key) && !gone {
                out.push(Manifest {
                    manifest: m.manifest.clone(),
                    deleted: true,
                });
            }
        }
    }
    Ok(out)
}

/// Packs manifests into slices of at most `budget` bytes each, in order; a manifest larger
/// than the budget gets a slice of its own. Always at least one (possibly empty) slice.
pub fn chunk(manifests: Vec<Manifest>, budget: usize) -> Vec<Vec<Manifest>> {
    let mut chunks: Vec<Vec<Manifest>> = vec![Vec::new()];
    let mut size = 0;
    for m in manifests {
        if size + m.manifest.len() > budget && !chunks.last().is_some_and(Vec::is_empty) {
            chunks.push(Vec::new());
            size = 0;
        }
        size += m.manifest.len();
        if let Some(last) = chunks.last_mut() {
            last.push(m);
        }
    }
    chunks
}

/// Creates the slices of synthesis `uuid`. All or nothing: when one is refused, the ones
/// created before it are deleted again and the error names the refused slice.
///
/// # Errors
/// [`Error::WriteSlice`].
pub(crate) async fn write(
    ctx: &Context,
    comp: &Composition,
    uuid: &str,
    manifests: Vec<Manifest>,
) -> Result<Vec<ResourceSliceRef>, Error> {
    let ns = comp.namespace().unwrap_or_default();
    let api: Api<ResourceSlice> = Api::namespaced(ctx.client.clone(), &ns);
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
    for (i, resources) in chunk(manifests, SLICE_BYTES).into_iter().enumerate() {
        let name = format!("{}-{short}-{i}", comp.name_any());
        let mut slice = ResourceSlice::new(
            &name,
            ResourceSliceSpec {
                synthesis_uuid: uuid.to_string(),
                resources,
            },
        );
        slice.metadata.namespace = Some(ns.clone());
        slice.metadata.owner_references = Some(vec![owner.clone()]);
        slice.metadata.labels =
            Some([(SLICE_COMPOSITION_LABEL.to_string(), comp.name_any())].into());
        if let Err(source) = api.create(&PostParams::default(), &slice).await {
            for r in &refs {
                let r: &ResourceSliceRef = r;
                let _ = api.delete(&r.name, &DeleteParams::default()).await;
            }
            return Err(Error::WriteSlice { name, source });
        }
        refs.push(ResourceSliceRef { name });
    }
    Ok(refs)
}

/// Deletes this Composition's slices that belong to neither the current nor the previous
/// synthesis (best effort: a failed delete is retried on the next synthesis).
pub(crate) async fn delete_stale(ctx: &Arc<Context>, comp: &Composition, st: &CompositionStatus) {
    let ns = comp.namespace().unwrap_or_default();
    let api: Api<ResourceSlice> = Api::namespaced(ctx.client.clone(), &ns);
    let keep: BTreeSet<String> = [&st.current_synthesis, &st.previous_synthesis]
        .into_iter()
        .flatten()
        .flat_map(|s| s.resource_slices.iter().map(|r| r.name.clone()))
        .collect();
    let name = comp.name_any();
    let stale: Vec<String> = ctx
        .slices
        .state()
        .iter()
        .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
        .filter(|s| s.labels().get(SLICE_COMPOSITION_LABEL) == Some(&name))
        .map(|s| s.name_any())
        .filter(|n| !keep.contains(n))
        .collect();
    let uid = comp.uid().unwrap_or_default();
    for n in stale {
        match api.delete(&n, &DeleteParams::default()).await {
            Ok(_) => tracing::debug!(slice = %n, "deleted stale ResourceSlice"),
            Err(e) => tracing::debug!(slice = %n, error = %e, "cannot delete stale ResourceSlice"),
        }
        ctx.remember(&uid, |m| m.slice_status.remove(&n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(len: usize) -> Manifest {
        Manifest {
            manifest: "x".repeat(len),
            deleted: false,
        }
    }

    #[test]
    fn chunks_respect_the_budget_and_keep_order() {
        let sizes = |c: &Vec<Vec<Manifest>>| -> Vec<Vec<usize>> {
            c.iter()
                .map(|s| s.iter().map(|m| m.manifest.len()).collect())
                .collect()
        };
        let c = chunk(vec![m(4), m(4), m(4), m(9), m(1)], 10);
        assert_eq!(sizes(&c), [vec![4, 4], vec![4], vec![9, 1]]);
    }

    #[test]
    fn an_oversized_manifest_gets_a_slice_of_its_own_and_nothing_is_an_empty_slice() {
        let c = chunk(vec![m(30), m(2)], 10);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0][0].manifest.len(), 30);
        assert_eq!(chunk(Vec::new(), 10).len(), 1);
    }
}
