//! A Composition's first synthesis is applied in the pass that stores it and recorded with
//! that pass's one status write (every later synthesis is recorded before it is applied).
//!
//! Nothing of the Composition is in the cluster yet, so there is nothing a lost record could
//! leave behind unseen: a synthesis stored but not recorded — the write refused, an outage,
//! the process gone — stays as slices the Composition owns, and while no synthesis is
//! recorded they stand in for its current one ([`crate::run::slices::orphans`]): the next
//! synthesis takes its tombstones from them (their slices go once it is recorded), and a
//! deletion deletes what the newest holds — only objects labelled as this Composition's, which
//! is all such a synthesis could have applied. One whose objects reach outside the namespace
//! is recorded first (the sweep after a namespace deletion reads them from the status).

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::{Context, Error, status_write};
use crds::{Composition, CompositionStatus};

/// Whether the synthesis this pass stored (`st.current_synthesis`) is applied in this pass: the
/// Composition has none recorded, its objects all sit in its namespace, it may act on its
/// target, and it has not changed or gone while it was synthesized (then the synthesis is
/// recorded first, as any other, and the next pass looks at the Composition again).
pub(super) fn applies(ctx: &Context, comp: &Composition, st: &CompositionStatus) -> bool {
    let nothing_recorded = comp
        .status
        .as_ref()
        .is_none_or(|s| s.current_synthesis.is_none() && s.previous_synthesis.is_none());
    let unchanged = ctx
        .caches
        .compositions
        .get(&ObjectRef::from_obj(comp))
        .is_some_and(|latest| {
            latest.metadata.deletion_timestamp.is_none()
                && latest.metadata.generation == comp.metadata.generation
                && latest.uid() == comp.uid()
        });
    nothing_recorded
        && unchanged
        && st
            .current_synthesis
            .as_ref()
            .is_some_and(|c| c.outside_namespace.is_empty())
        && ctx.clusters.remote_user_of(comp).is_ok()
}

/// The status write recorded `st`'s current synthesis: the memory of it as unrecorded goes.
pub(super) fn recorded(ctx: &Context, uid: &str, st: &CompositionStatus) {
    let current = st.current_synthesis.as_ref().map(|c| c.uuid.as_str());
    ctx.state.memory.synthesis(uid, |m| {
        if m.unrecorded
            .as_ref()
            .is_some_and(|(_, s)| Some(s.uuid.as_str()) == current)
        {
            m.unrecorded = None;
        }
    });
}

/// The apply of a first synthesis failed: the synthesis is recorded all the same (what it
/// applied in part belongs to it; `st` holds the failure when it is terminal, so the failure
/// report writes nothing more), then the error goes to the error policy.
pub(super) async fn record_then_fail(
    ctx: &Arc<Context>,
    comp: &Arc<Composition>,
    mut st: CompositionStatus,
    error: Error,
) -> Result<Action, Error> {
    reconciler_core::generation::settle(&mut st, comp.metadata.generation, false);
    if let Some(before) = &comp.status {
        reconciler_core::condition::keep_transitions(&mut st.conditions, &before.conditions);
    }
    match status_write::write(ctx, comp, &st).await {
        Ok(()) => recorded(ctx, &comp.uid().unwrap_or_default(), &st),
        Err(e) => tracing::debug!(error = %e, "cannot record the first synthesis either"),
    }
    Err(error)
}
