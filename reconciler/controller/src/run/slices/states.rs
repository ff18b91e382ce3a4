//! The recorded states of a slice's resources (its status): what a pass reads, and their
//! write.
//!
//! A pass reads the states as stored, unless enoki wrote newer ones the cache has not caught
//! up with, or kept newer ones in memory. Only a change that says something new is written:
//! when a resource's only change is the resourceVersion its write returned (an apply that
//! found drift, or changed nothing, with the same snapshot), the states are kept in memory
//! for the passes that follow, not written. A tenant's edit of an applied object (or a
//! Deployment's status moving) therefore costs no write of the slice, which holds up to
//! [`super::SLICE_BYTES`] of manifests. After a restart (or on another replica) such a
//! resource is read (a GET) and applied again once: a no-op for an object, and for a `Patch`
//! pseudo-resource its JSON patch once more (as after any change of its target).

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{Context, Error, Loaded};
use crds::{Composition, ResourceSlice, ResourceState};

/// The states of slice `name` of the Composition with `uid` as a pass reads them: `stored`
/// (the status of the slice at `rv`, `cached` when read from the cache), or what enoki wrote
/// or kept since. What enoki wrote is forgotten once the cache has it.
pub(super) fn as_read(
    memory: Option<&crate::run::memory::Memory>,
    uid: &str,
    name: &str,
    (rv, cached): (&str, bool),
    stored: Vec<ResourceState>,
) -> Vec<ResourceState> {
    let Some(memory) = memory else {
        // Nothing remembered (a one-shot command): the stored states.
        return stored;
    };
    memory.slices(uid, |m| {
        let (base, states) = match m.slice_status.get(name) {
            Some((written_rv, _)) if written_rv == rv => {
                if cached {
                    m.slice_status.remove(name);
                }
                (rv.to_string(), stored)
            }
            Some((written_rv, written)) => (written_rv.clone(), written.clone()),
            None => (rv.to_string(), stored),
        };
        match m.kept.get(name) {
            Some((at, kept)) if *at == base => kept.clone(),
            Some(_) => {
                // The slice was written since: what was kept is older than what it holds.
                m.kept.remove(name);
                states
            }
            None => states,
        }
    })
}

/// Forgets what was written or kept of slice `name` (deleted).
pub(super) fn forget(state: &crate::run::context::State, uid: &str, name: &str) {
    state.memory.slices(uid, |m| {
        m.slice_status.remove(name);
        m.kept.remove(name);
        m.parsed.remove(name);
        m.fresh.remove(name);
    });
}

/// Writes the changed slice states (a merge patch of each slice's status), or keeps them in
/// memory when only resourceVersions moved.
///
/// # Errors
/// [`Error::WriteSliceStatus`] when a patch fails.
pub(crate) async fn write_states(
    ctx: &Context,
    comp: &Composition,
    loaded: &Loaded,
    states: &[Vec<ResourceState>],
) -> Result<(), Error> {
    let api: Api<ResourceSlice> = Api::namespaced(
        ctx.clusters.client().clone(),
        &comp.namespace().unwrap_or_default(),
    );
    let uid = comp.uid().unwrap_or_default();
    for ((slice, new), spec) in loaded.slices.iter().zip(states).zip(&loaded.specs) {
        if slice.stored == *new {
            continue;
        }
        if only_versions_moved(&slice.stored, new) {
            let read_at = spec.resource_version().unwrap_or_default();
            ctx.state.memory.slices(&uid, |m| {
                let base = m
                    .slice_status
                    .get(&slice.name)
                    .map_or(read_at, |(written_rv, _)| written_rv.clone());
                m.kept.insert(slice.name.clone(), (base, new.clone()));
            });
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
        ctx.state.memory.slices(&uid, |m| {
            m.kept.remove(&slice.name);
            m.slice_status.insert(slice.name.clone(), (rv, new.clone()))
        });
    }
    Ok(())
}

/// Whether `new` differs from `old` only in the resourceVersions writes returned (the same
/// resources, each with the same snapshot applied and everything else unchanged). Pure.
pub(crate) fn only_versions_moved(old: &[ResourceState], new: &[ResourceState]) -> bool {
    old.len() == new.len()
        && old.iter().zip(new).all(|(o, n)| {
            o.applied_hash.is_some()
                && o.applied_hash == n.applied_hash
                && ResourceState {
                    applied_resource_version: o.applied_resource_version.clone(),
                    ..n.clone()
                } == *o
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(hash: &str, rv: &str) -> ResourceState {
        ResourceState {
            applied_hash: Some(hash.into()),
            applied_resource_version: Some(rv.into()),
            reconciled: true,
            ..ResourceState::default()
        }
    }

    #[test]
    fn a_moved_version_alone_is_not_a_change_to_write() {
        let old = vec![applied("h1", "5"), applied("h2", "7")];
        assert!(only_versions_moved(
            &old,
            &[applied("h1", "9"), applied("h2", "7")]
        ));
        // A new snapshot applied, a state that changed otherwise, another resource: written.
        assert!(!only_versions_moved(
            &old,
            &[applied("h3", "9"), applied("h2", "7")]
        ));
        let mut failed = applied("h1", "9");
        failed.error = Some("refused".into());
        assert!(!only_versions_moved(&old, &[failed, applied("h2", "7")]));
        assert!(!only_versions_moved(&old, &[applied("h1", "5")]));
        // Nothing applied yet: the first hash is written.
        let fresh = vec![ResourceState::default()];
        assert!(!only_versions_moved(&fresh, &[applied("h1", "1")]));
    }
}
