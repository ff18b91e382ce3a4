//! What the controllers do with a failed reconcile: one policy driven by
//! [`Error::is_transient`] — transient failures back off per object (cleared by its next
//! success), terminal ones are retried at a capped delay. A Composition's pass reports its
//! own terminal failure (a condition in its one status write, a Warning Event); for the other
//! kinds the policy publishes the Warning Event.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::context::Context;
use super::error::{self, Error};
use super::metrics;
use crds::Composition;

/// Longest wait after a status write that conflicted (the backoff grows while they repeat).
const CONFLICT_RETRY_CAP: Duration = Duration::from_secs(5);

/// The backoff of a Composition whose reconcile failed: transient errors are retried after
/// an exponentially growing, jittered delay (per Composition, reset by a success), a status
/// write that conflicted within seconds; terminal ones (which the failing pass reported as a
/// `Reconciled=False` condition and a Warning Event) are retried only at the capped delay.
#[allow(clippy::needless_pass_by_value)] // the signature kube-runtime requires
pub(crate) fn error_policy(comp: Arc<Composition>, err: &Error, ctx: Arc<Context>) -> Action {
    metrics::Metrics::count(&ctx.report.metrics.reconcile_errors, err.category());
    let failures = ctx
        .state
        .count_pass_failure(&ObjectRef::from_obj(comp.as_ref()));
    let chain = error::chain(err);
    let name = kube::ResourceExt::name_any(comp.as_ref());
    if err.is_conflict() {
        // Someone else changed the Composition's spec or status since the pass read it: the
        // pass runs again from the newer version, soon (a status-only change wakes nothing).
        let delay = error::retry_after(err, failures).min(CONFLICT_RETRY_CAP);
        tracing::debug!(composition = %name, failures, retry_in = ?delay, error = %chain, "status write conflicted; retrying");
        return Action::requeue(delay);
    }
    if err.is_transient() {
        let delay = error::retry_after(err, failures);
        tracing::warn!(composition = %name, category = err.category(), failures, retry_in = ?delay, error = %chain, "reconcile failed; retrying with backoff");
        return Action::requeue(delay);
    }
    // The pass that failed reported it (a condition and a Warning Event): this policy only
    // schedules the retry.
    tracing::warn!(composition = %name, category = err.category(), error = %chain, "reconcile failed; not retrying soon");
    Action::requeue(error::BACKOFF_CAP)
}

#[allow(clippy::needless_pass_by_value)] // the signature kube-runtime requires
pub(crate) fn symphony_error_policy(
    sym: Arc<crds::Symphony>,
    err: &Error,
    ctx: Arc<Context>,
) -> Action {
    use kube::Resource;
    other_error_policy(&ctx, &object_key(sym.as_ref()), sym.object_ref(&()), err)
}

/// The key of a non-Composition object in the failure counts:
/// `<kind>/<namespace>/<name>/<uid>` (an object created again under the same name starts over).
pub(crate) fn object_key<K: kube::Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{}/{}/{}",
        K::kind(&()),
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default(),
        obj.meta().uid.as_deref().unwrap_or_default()
    )
}

/// Longest wait after a terminal error of a Symphony or instance: what they generate may
/// become writable without any change of theirs (RBAC granted, a namespace recreated).
const OTHER_TERMINAL_RETRY: Duration = Duration::from_secs(60);

/// [`error::retry_after`] for the Symphony, Synthesizer and instance controllers: counted per
/// object (cleared by its next success), in `enoki_reconcile_errors_total`, a terminal error
/// retried within a minute and reported as a Warning Event on the object.
pub(crate) fn other_error_policy(
    ctx: &Arc<Context>,
    key: &str,
    object: k8s_openapi::api::core::v1::ObjectReference,
    err: &Error,
) -> Action {
    metrics::Metrics::count(&ctx.report.metrics.reconcile_errors, err.category());
    let failures = ctx.state.count_failure(key.to_string());
    let delay = error::retry_after(err, failures).min(OTHER_TERMINAL_RETRY);
    let chain = error::chain(err);
    tracing::warn!(object = %key, category = err.category(), failures, retry_in = ?delay,
        error = %chain, "reconcile failed");
    if !err.is_transient() {
        let (ctx, category) = (ctx.clone(), err.category());
        tokio::spawn(async move {
            ctx.report
                .event_on(&object, true, category, "Reconcile", chain)
                .await;
        });
    }
    Action::requeue(delay)
}
