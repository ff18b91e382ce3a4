//! enoki's cleanup finalizer on Compositions: a small state value, and exactly one action per
//! pass. Patches carry the object's resourceVersion, so a finalizer list someone else changed
//! meanwhile is never overwritten (the conflict is retried).

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::super::{Context, Error};
use crds::Composition;
use crds::names::{FINALIZER, reasons};

/// When the pass after adding the finalizer runs if its watch event never comes.
const ADDED_FALLBACK: std::time::Duration = std::time::Duration::from_secs(2);

/// Where a Composition stands with respect to enoki's finalizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Live, finalizer missing: add it (and do nothing else in this pass).
    Missing,
    /// Live with the finalizer: converge.
    Present,
    /// Being deleted with the finalizer: clean up.
    Deleting,
    /// Being deleted and the finalizer is gone: nothing to do.
    Released,
}

/// The finalizer state of `comp`. Pure.
pub fn state(comp: &Composition) -> State {
    let has = comp.finalizers().iter().any(|f| f == FINALIZER);
    match (comp.metadata.deletion_timestamp.is_some(), has) {
        (false, false) => State::Missing,
        (false, true) => State::Present,
        (true, true) => State::Deleting,
        (true, false) => State::Released,
    }
}

/// Adds the finalizer; the resulting watch event starts the next pass (the Composition
/// trigger passes finalizer changes), so that pass finds the finalizer in the cache: a pass
/// started sooner, on a cache that still lacks it, would patch again from the old
/// resourceVersion and meet a 409. The requeue is the fallback should the event be lost.
///
/// # Errors
/// [`Error::Finalizer`].
pub(crate) async fn add(
    clusters: &crate::run::context::Clusters,
    comp: &Composition,
) -> Result<Action, Error> {
    let api: Api<Composition> = Api::namespaced(
        clusters.client().clone(),
        &comp.namespace().unwrap_or_default(),
    );
    super::super::finalizers::set_cleanup_finalizer(&api, comp, true, comp.resource_version())
        .await
        .map_err(|source| Error::Finalizer {
            action: "adding",
            source,
        })?;
    Ok(Action::requeue(ADDED_FALLBACK))
}

/// Removes the finalizer once every resource is gone, and forgets the Composition.
///
/// # Errors
/// [`Error::Finalizer`].
pub(crate) async fn release(ctx: &Arc<Context>, comp: &Composition) -> Result<(), Error> {
    let api: Api<Composition> = Api::namespaced(
        ctx.clusters.client().clone(),
        &comp.namespace().unwrap_or_default(),
    );
    super::super::finalizers::set_cleanup_finalizer(&api, comp, false, comp.resource_version())
        .await
        .map_err(|source| Error::Finalizer {
            action: "removing",
            source,
        })?;
    tracing::info!("resources cleaned up; finalizer removed");
    ctx.report
        .event(
            comp,
            false,
            reasons::DELETING,
            "Cleanup",
            "every managed resource was deleted or orphaned".into(),
        )
        .await;
    ctx.forget(&ObjectRef::from_obj(comp), comp.uid().as_deref());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_state_per_combination_of_deletion_and_finalizer() {
        let mut c = Composition::new("c", Default::default());
        assert_eq!(state(&c), State::Missing);
        c.metadata.finalizers = Some(vec!["other".into(), FINALIZER.into()]);
        assert_eq!(state(&c), State::Present);
        c.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert_eq!(state(&c), State::Deleting);
        c.metadata.finalizers = Some(vec!["other".into()]);
        assert_eq!(state(&c), State::Released);
    }
}
