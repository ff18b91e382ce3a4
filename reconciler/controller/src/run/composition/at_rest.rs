//! A pass of a Composition at rest: counted as checked, without a plan or a request.

use kube::ResourceExt;

use super::finalizer;
use crate::run::Context;
use crds::Composition;

/// A pass of a Composition at rest (see [`crate::run::rest`]): nothing changed since its last full
/// pass, so its resources count as checked without a plan or a request.
pub(super) fn at_rest(comp: &Composition, ctx: &Context) -> bool {
    if comp.spec.suspend || !matches!(finalizer::state(comp), finalizer::State::Present) {
        return false;
    }
    let Some(checked) = ctx.caches.watches.rest.unchanged(comp, &ctx.caches.slices) else {
        return false;
    };
    // Its objects' and inputs' changes reach it only while the watches know it (a shard
    // handed back and taken again: a full pass registers it first).
    if ctx.limits.serving(comp).is_none() || !ctx.caches.watches.knows(comp) {
        return false;
    }
    let queued = format!(
        "{}/{}",
        comp.namespace().unwrap_or_default(),
        comp.name_any()
    );
    drop(ctx.report.metrics.queue.started(&queued));
    ctx.report.metrics.resource_checks.inc_by(checked);
    ctx.report.metrics.passes_at_rest.inc();
    true
}
