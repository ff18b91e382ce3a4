//! Slices of a synthesis whose record was lost. A first synthesis is applied in the pass that
//! records it, so while a Composition's status records no synthesis, the slices it owns may
//! hold what was applied: they stand in for its current synthesis — the next synthesis takes
//! its tombstones from them, a deletion deletes what they hold — and, through them, only
//! objects labelled as this Composition's are deleted (the planner's `not_ours`).

use kube::ResourceExt;

use super::{Context, owned_by};
use crds::{Composition, ResourceSlice, ResourceSliceRef, Synthesis};

/// Whether the slice cache has finished its first list (or has no writer left to finish it):
/// before, a Composition's slices may be missing from it.
pub(crate) fn cache_listed(caches: &crate::run::context::Caches) -> bool {
    use futures::FutureExt;
    caches.slices.wait_until_ready().now_or_never().is_some()
}

/// Which unrecorded slices [`orphans`] gathers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pick {
    /// Every slice the Composition owns (the next synthesis's tombstones, deduplicated, cover
    /// all of them: a set cut short by a crash included).
    All,
    /// The newest synthesis's slices only (a deletion plans each resource once): each synthesis
    /// stored while nothing was recorded took its tombstones from all before it.
    Newest,
}

/// The slices `comp` owns while its status records no synthesis, as one synthesis; `None`
/// when it owns none. The synthesis this process stored last (in memory) comes first, whole;
/// the slice cache gives the others (`Pick::Newest`: the newest by creation, else none).
pub(crate) fn orphans(ctx: &Context, comp: &Composition, pick: Pick) -> Option<Synthesis> {
    let uid = comp.uid().unwrap_or_default();
    let stored = ctx
        .state
        .memory
        .synthesis(&uid, |m| m.unrecorded.as_ref().map(|(_, s)| s.clone()));
    let stored = stored.filter(|s| !s.resource_slices.is_empty());
    if pick == Pick::Newest && stored.is_some() {
        return stored;
    }
    let ns = comp.namespace();
    let mut found = ctx
        .caches
        .slices
        .state_filter(|s| s.metadata.namespace == ns && owned_by(s, &uid));
    if pick == Pick::Newest {
        let order = |s: &ResourceSlice| {
            let rv = s.resource_version().and_then(|v| v.parse::<u64>().ok());
            (s.metadata.creation_timestamp.clone(), rv)
        };
        let uuid = found
            .iter()
            .max_by_key(|s| order(s))?
            .spec
            .synthesis_uuid
            .clone();
        found.retain(|s| s.spec.synthesis_uuid == uuid);
    }
    found.sort_by_key(|s| s.name_any());
    let mut orphan = stored.unwrap_or_else(|| Synthesis {
        uuid: found
            .first()
            .map(|s| s.spec.synthesis_uuid.clone())
            .unwrap_or_default(),
        ..Synthesis::default()
    });
    for s in found {
        let name = s.name_any();
        if !orphan.resource_slices.iter().any(|r| r.name == name) {
            orphan.resource_slices.push(ResourceSliceRef { name });
        }
    }
    (!orphan.resource_slices.is_empty()).then_some(orphan)
}
