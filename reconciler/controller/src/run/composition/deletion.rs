//! Deleting a Composition: wait for its dependents, then delete (or orphan) its resources in
//! deletion-group order; a Composition whose Symphony is gone may be released at once.

use super::*;

/// Deletion: wait for dependents, then delete (or orphan) every resource in deletion-group
/// order; release the finalizer once nothing is left.
pub(super) async fn delete(ctx: &Arc<Context>, comp: &Arc<Composition>) -> Result<Action, Error> {
    if symphony_gone_and_forced(&ctx.clusters, comp).await? {
        tracing::warn!(
            "forceDeleteWhenSymphonyGone: the owning Symphony is gone; releasing the finalizer \
             without deleting resources"
        );
        finalizer::release(ctx, comp).await?;
        return Ok(Action::await_change());
    }
    if let Err(msg) = ctx.clusters.remote_user_of(comp) {
        // It may act nowhere on the target: nothing can be deleted on its behalf, and its
        // deletion (or its namespace's) must not hang.
        tracing::warn!(%msg, "releasing the finalizer of a Composition that may act nowhere");
        finalizer::release(ctx, comp).await?;
        return Ok(Action::await_change());
    }
    // Events of its objects (a deletion finished, a finalizer on one of them removed) requeue
    // it — also on a replica that took its shard over while it was being deleted. The release
    // forgets it again; the sweep does if it leaves this replica another way.
    ctx.caches.watches.own(comp);
    let mut st = comp.status.clone().unwrap_or_default();
    let dependents = dependencies::dependents(ctx, comp).await?;
    if !dependents.is_empty() {
        st.dependency_status = Some(crds::DependencyStatus {
            blocked: true,
            reason: Some(reasons::WAITING_ON_DEPENDENTS.into()),
            blocked_by: dependents,
        });
        st.simplified = Some(SimplifiedStatus {
            status: crds::StatusWord::Deleting,
            error: Some(reasons::WAITING_ON_DEPENDENTS.into()),
        });
        status_write::write(ctx, comp, &st).await?;
        return Ok(Action::requeue(ctx.opts.apply.readiness_poll));
    }
    st.dependency_status = None;
    // Nothing recorded: a synthesis stored whose record was lost may have been applied (a first
    // synthesis is applied in the pass that records it); what it labelled goes. Its slices are
    // looked for once the slice cache has listed them, and it is not written into the status.
    let unrecorded = st.current_synthesis.is_none();
    if unrecorded {
        if !slices::cache_listed(&ctx.caches) {
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        st.current_synthesis = slices::orphans(ctx, comp, slices::Pick::Newest);
    }
    let pass = apply::reconcile(ctx, comp, &mut st, true, false).await;
    if unrecorded {
        st.current_synthesis = None;
    }
    let pass = pass?;
    if pass.settled {
        finalizer::release(ctx, comp).await?;
        return Ok(Action::await_change());
    }
    status_write::write(ctx, comp, &st).await?;
    Ok(Action::requeue(ctx.opts.apply.readiness_poll))
}

/// Eno's `forceDeleteWhenSymphonyGone`: the Composition says `"true"` and the Symphony that
/// owns it no longer exists, so nothing is left to wait for.
pub(super) async fn symphony_gone_and_forced(
    clusters: &crate::run::context::Clusters,
    comp: &Composition,
) -> Result<bool, Error> {
    let key = crds::names::annotations::FORCE_DELETE_WHEN_SYMPHONY_GONE;
    let a = comp.annotations();
    if a.get(key.enoki)
        .or_else(|| a.get(key.eno))
        .map(String::as_str)
        != Some("true")
    {
        return Ok(false);
    }
    let Some(owner) = comp
        .owner_references()
        .iter()
        .find(|o| o.kind == crds::names::kinds::SYMPHONY)
    else {
        return Ok(false);
    };
    let syms: kube::Api<crds::Symphony> = kube::Api::namespaced(
        clusters.client().clone(),
        &comp.namespace().unwrap_or_default(),
    );
    let found = syms
        .get_opt(&owner.name)
        .await
        .map_err(super::super::api_err(
            super::super::error::Step::ReadSymphony,
        ))?;
    Ok(found.is_none_or(|s| s.uid().as_deref() != Some(owner.uid.as_str())))
}
