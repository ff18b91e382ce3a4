//! What a pass reports beyond its status write: its count in the Composition's series, and a
//! terminal failure (a Warning Event and `Reconciled=False`).

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::{Context, Error, answer_request, status_write, suspend};
use crds::names::{conditions, reasons};
use crds::{Composition, CompositionStatus};

/// Counts a pass of `comp` in its series (not the pass that released a deleted Composition:
/// its series went with it); a failed pass wrote no status, so its health series advance here
/// (stuck keeps time).
pub(super) fn count_pass(ctx: &Context, comp: &Composition, result: &Result<Action, Error>) {
    let released = comp.metadata.deletion_timestamp.is_some()
        && matches!(result, Ok(a) if *a == Action::await_change());
    if released {
        return;
    }
    let who = crate::run::metrics::CompositionLabel {
        namespace: comp.namespace().unwrap_or_default(),
        name: comp.name_any(),
    };
    ctx.report
        .metrics
        .composition_reconciles
        .get_or_create(&who)
        .inc();
    if result.is_err() {
        ctx.report.metrics.health.record(
            &who,
            &comp.status.clone().unwrap_or_default(),
            comp.metadata.creation_timestamp.as_ref(),
            ctx.opts.stuck_threshold,
        );
    }
}

/// A terminal failure of this pass, reported by the pass: a Warning Event and
/// `Reconciled=False` in its status write (`error_policy` only schedules the retry).
pub(super) async fn report_failure(ctx: &Context, comp: &Arc<Composition>, err: &Error) {
    // From the status this process wrote last, when the cache has not caught up with it (the
    // record a failing pass made first is kept).
    let comp = &status_write::fresh(&ctx.state, comp.clone());
    ctx.report
        .event(
            comp,
            true,
            err.category(),
            "Reconcile",
            crate::run::error::chain(err),
        )
        .await;
    let mut st = comp.status.clone().unwrap_or_default();
    failed(comp, &mut st, err);
    // Unchanged (a pass that wrote the failure already): nothing is written.
    if let Err(e) = status_write::write(ctx, comp, &st).await {
        tracing::debug!(error = %e, "cannot write the failure condition");
    }
}

/// `st` with a terminal failure `err` of a pass of `comp`: `Reconciled=False`, the suspension
/// lifted when the spec lifts it, the reconcile request answered.
pub(super) fn failed(comp: &Composition, st: &mut CompositionStatus, err: &Error) {
    if !comp.spec.suspend {
        suspend::resumed(st);
    }
    answer_request(comp, st);
    reconciler_core::condition::set_condition(
        &mut st.conditions,
        conditions::RECONCILED,
        false,
        reasons::RECONCILE_FAILED,
        &format!("{}: {}", err.category(), crate::run::error::chain(err)),
        comp.metadata.generation,
    );
}
