//! One reconcile of one Composition: observe → decide → act.
//!
//! 1. [`finalizer`]: a small state value decides the one finalizer action of this pass.
//! 2. [`observe`]: Synthesizer, module and inputs (from the shared caches).
//! 3. [`trigger::decide`] (pure): synthesize or not, and why.
//! 4. [`synthesize`]: run it (at most once per fingerprint), store it as [`slices`]; the pass
//!    that stored it records it (its status write) and ends, the next one applies it — except
//!    a first synthesis, applied and recorded in one pass (`at_once`).
//! 5. `apply::reconcile`: apply, record, roll up.
//! 6. [`status_write`]: at most one status write per pass, when something changed, at the
//!    resourceVersion the pass read; an explicit requeue.

pub(crate) mod budget;
pub(crate) use reconciler_core::{decide, generation, trigger};
pub(crate) mod dependencies;
pub(crate) mod finalizer;
pub(crate) mod observe;
mod refusals;
pub(crate) mod revision;
pub(crate) mod status_write;
pub(crate) mod suspend;
pub(crate) mod synthesize;

use reconciler_core::model::Outcome;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::{Context, Error, apply, inputs, slices};
use crate::synthesis;
use crds::names::{conditions, reasons};
use crds::{Composition, CompositionStatus, InputRevision, SimplifiedStatus};
use synthesize::fail;
use trigger::Trigger;

mod deletion;
use deletion::*;

mod next;
use next::{NextEnd, next_synthesis};

mod write_back;
use write_back::write_back;

mod at_rest;
use at_rest::at_rest;

mod at_once;

mod report;
use report::{count_pass, failed, report_failure};

/// Reconciles one Composition.
///
/// # Errors
/// Failed API calls, typed by step (`error_policy` backs off); synthesis and module faults
/// become conditions instead.
pub async fn reconcile(comp: Arc<Composition>, ctx: Arc<Context>) -> Result<Action, Error> {
    // A turn of the namespace's (workers are shared fairly between namespaces). Without one,
    // the reconcile leaves a ticket and ends: the ticket's wake queues it again once a turn is
    // kept for it (nothing waits in kube-runtime's runner, which polls all it holds).
    let namespace = comp.namespace().unwrap_or_default();
    let key = format!("{namespace}/{}", comp.name_any());
    if at_rest(&comp, &ctx) {
        // A turn kept for it meanwhile goes to the next in line.
        ctx.limits.fair.release(&key);
        return Ok(Action::requeue(super::rest::coalesced(ctx.opts.resync)));
    }
    let wake = ctx.caches.watches.ticket_wake(
        ObjectRef::from_obj(comp.as_ref()),
        ctx.caches.compositions.clone(),
    );
    let turn = match ctx.limits.fair.try_enter(&namespace, &key, wake) {
        super::fair::Entry::Turn(turn) => turn,
        // Queued: the wake brings it back. Closed: the stack is stopping.
        super::fair::Entry::Queued | super::fair::Entry::Closed => {
            return Ok(Action::await_change());
        }
    };
    // Its requests wait for `--qps` tokens in its namespace's queue, whatever their objects'.
    let flow = super::ratelimit::FLOW.scope(namespace.into(), async move {
        let action = admitted(comp.clone(), ctx.clone()).await?;
        // The pass that applies a synthesis just recorded follows at once, in the same
        // turn: it does not queue again behind another namespace's work. It reads the
        // Composition again; one deleted or changed meanwhile goes back to the queue.
        if action == recorded()
            && let Some(latest) = ctx
                .caches
                .compositions
                .get(&ObjectRef::from_obj(comp.as_ref()))
            && latest.metadata.deletion_timestamp.is_none()
            && latest.metadata.generation == comp.metadata.generation
            && latest.uid() == comp.uid()
        {
            return admitted(latest, ctx).await;
        }
        Ok(action)
    });
    super::fair::holding(turn, Box::pin(flow)).await
}

/// What a pass that recorded a new synthesis returns: the next pass applies it, at once.
fn recorded() -> Action {
    Action::requeue(Duration::ZERO)
}

/// A number for each pass of this process, in its log lines (`pass=`): what one pass did.
fn next_pass() -> u64 {
    static PASSES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    PASSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// One pass of a Composition that has its turn.
#[tracing::instrument(skip_all, fields(composition = %comp.name_any(), generation = ?comp.metadata.generation, pass = next_pass()))]
async fn admitted(comp: Arc<Composition>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some(_serving) = ctx.limits.serving(&comp) else {
        // Its shard was handed back: the new holder reconciles it.
        return Ok(Action::await_change());
    };
    let shard = ctx
        .limits
        .shards
        .borrow()
        .label_of(&comp.uid().unwrap_or_default());
    let by_shard = &ctx.report.metrics.shard_reconciles;
    by_shard
        .get_or_create(&super::metrics::ShardLabel { shard })
        .inc();
    let start = std::time::Instant::now();
    let queued = format!(
        "{}/{}",
        comp.namespace().unwrap_or_default(),
        comp.name_any()
    );
    let _in_flight = ctx.report.metrics.queue.started(&queued);
    let comp = status_write::fresh(&ctx.state, comp);
    let result = match finalizer::state(&comp) {
        finalizer::State::Released => {
            // Released by someone else (or a pass before): nothing of it is reported or
            // remembered any more (its per-Composition series included).
            ctx.report
                .metrics
                .health
                .forget(&super::metrics::CompositionLabel {
                    namespace: comp.namespace().unwrap_or_default(),
                    name: comp.name_any(),
                });
            ctx.forget(&ObjectRef::from_obj(comp.as_ref()), comp.uid().as_deref());
            Ok(Action::await_change())
        }
        finalizer::State::Missing => finalizer::add(&ctx.clusters, &comp).await,
        finalizer::State::Deleting => delete(&ctx, &comp).await,
        finalizer::State::Present if comp.spec.suspend => suspend::hold(&ctx, &comp).await,
        finalizer::State::Present => converge(&ctx, &comp).await,
    };
    if let Err(e) = &result
        && !e.is_transient()
    {
        report_failure(&ctx, &comp, e).await;
    }
    if result.is_ok() {
        ctx.state
            .clear_pass_failures(&ObjectRef::from_obj(comp.as_ref()));
    }
    ctx.report
        .metrics
        .reconcile_duration
        .observe(start.elapsed().as_secs_f64());
    count_pass(&ctx, &comp, &result);
    result
}

/// What [`converge`] decided before acting.
struct Observed {
    synth: crds::Synthesizer,
    /// A Synthesizer change alone waits for the rollout cooldown.
    paced: bool,
    module: synthesis::Module,
    gathered: observe::Gathered,
    revisions: Vec<InputRevision>,
    observed: Option<Vec<serde_json::Value>>,
    limits: wasm_host::RunLimits,
}

/// Observes what a synthesis depends on. `Err(requeue)` when a precondition blocks it: what
/// was read goes to [`decide::precondition`], and its verdict into `st` (the one write here is
/// to the status value this pass will write).
async fn observe_all(
    ctx: &Arc<Context>,
    comp: &Composition,
    st: &mut CompositionStatus,
) -> Result<Outcome<Observed, Duration>, Error> {
    let mut seen = decide::Preconditions::default();
    let blocked = |st: &mut CompositionStatus, seen: &decide::Preconditions| {
        decide::precondition(seen).map(|b| {
            refusals::record_blocker(st, comp.metadata.generation, &b);
            b.retry()
        })
    };
    seen.invalid_spec = crate::synthesis::composition_too_large(comp).or_else(|| {
        crate::synthesis::invalid_service_account_name(comp.spec.service_account_name.as_deref())
    });
    if let Some(wait) = blocked(st, &seen) {
        return Ok(Outcome::Waits(wait));
    }
    let synth = observe::synthesizer(ctx.reads(), comp).await?;
    seen.missing_synthesizer = synth.is_none().then(|| comp.spec.synthesizer.name.clone());
    // The revision the Synthesizer's rollout gives this Composition, and the tenancy rule.
    let eff = refusals::effective(ctx, comp, synth, &mut seen).await?;
    let (Some(eff), None) = (eff, blocked(st, &seen)) else {
        return Ok(Outcome::Waits(
            decide::precondition(&seen).map_or(Duration::from_secs(30), |b| b.retry()),
        ));
    };
    let module = revision::module_of(ctx, &eff).await;
    let (synth, paced) = (eff.synth, eff.paced);
    let limits = ctx.opts.sandbox.limits_of(synth.spec.limits.as_ref());
    seen.module = match &module {
        Ok(_) => decide::ModuleSeen::Ready,
        Err(super::module::ModuleError::Loading) => decide::ModuleSeen::Loading,
        Err(e) => decide::ModuleSeen::Failed {
            message: super::error::chain(e),
            transient: e.is_transient(),
        },
    };
    seen.limits_refused = limits.as_ref().err().cloned();
    let (Ok(module), Ok(limits), None) = (module, limits, blocked(st, &seen)) else {
        return Ok(Outcome::Waits(
            decide::precondition(&seen).map_or(Duration::from_secs(30), |b| b.retry()),
        ));
    };
    let gathered = match observe::gather(ctx.reads(), comp, &synth).await? {
        Outcome::Ready(g) => g,
        Outcome::Waits(message) => {
            seen.missing_input = Some(message);
            let wait = blocked(st, &seen).unwrap_or(Duration::from_secs(15));
            return Ok(Outcome::Waits(wait));
        }
    };
    let mut revisions = gathered.revisions();
    st.input_revisions.clone_from(&revisions);
    // Observed outputs: passed to every synthesis; with `watchOutputs` a change is a trigger.
    let mut observed = None;
    if synth.spec.watch_outputs {
        let (live, digest) = inputs::observed_outputs(ctx.reads(), comp, st).await?;
        revisions.push(InputRevision {
            key: inputs::OBSERVED_REVISION_KEY.into(),
            digest: Some(digest),
            ..InputRevision::default()
        });
        observed = Some(live);
    }
    Ok(Outcome::Ready(Observed {
        synth,
        paced,
        module,
        gathered,
        revisions,
        observed,
        limits,
    }))
}

/// A pass that stored a new synthesis records it — its one status write — and ends: the next
/// pass, at once, applies it. A synthesis replacing a recorded one is never applied before it
/// is recorded (a first one is: see `at_once`), so a pass
/// that cannot record it (a Conflict, an outage) leaves the cluster as the status says. Once
/// recorded, the slices of syntheses neither current nor previous are deleted. When the write
/// fails for good, the new slices go and the synthesis is not made again before the retry
/// delay.
async fn record_stored(
    ctx: &Arc<Context>,
    comp: &Arc<Composition>,
    mut st: CompositionStatus,
    instance: Option<serde_json::Value>,
) -> Result<Action, Error> {
    st.dependency_status = None;
    generation::settle(&mut st, comp.metadata.generation, false);
    if let Some(before) = &comp.status {
        reconciler_core::condition::keep_transitions(&mut st.conditions, &before.conditions);
    }
    if let Err(e) = status_write::write(ctx, comp, &st).await {
        synthesize::status_write_failed(ctx, comp, &e).await;
        return Err(e);
    }
    let uid = comp.uid().unwrap_or_default();
    at_once::recorded(ctx, &uid, &st);
    slices::delete_stale(ctx, comp, &st).await;
    write_back(ctx, comp, &uid, instance.as_ref()).await;
    Ok(recorded())
}

/// Records that this pass answers the `reconcile.enoki.dev/requestedAt` request it saw
/// (`status.lastHandledReconcileAt`, what `enoki reconcile` waits for).
fn answer_request(comp: &Composition, st: &mut CompositionStatus) {
    let asked = comp
        .annotations()
        .get(crds::names::RECONCILE_REQUESTED_AT)
        .map(|v| v.chars().take(64).collect::<String>());
    if asked.is_some() {
        st.last_handled_reconcile_at = asked;
    }
}

/// The Composition's `ignore-side-effects` annotation is exactly `"true"` (as Eno reads it).
pub(crate) fn ignores_side_effects(comp: &Composition) -> bool {
    comp.ignores_side_effects()
}

/// The normal pass, as two paths that never block each other: the decision about the *next*
/// synthesis (synthesize now, or wait / refuse, with the reason in a condition), and the pass
/// over the *current* synthesis, which runs whatever that decision was — a deleted output comes
/// back and drift is reverted while the next synthesis waits on the cooldown, inputs out of
/// lockstep, `dependsOn`, a failing synthesizer's backoff, or a missing Synthesizer, module or
/// input. Only deletion, `spec.suspend` (see [`suspend`]) and a resource's
/// `disable-reconciliation` stop it.
async fn converge(ctx: &Arc<Context>, comp: &Arc<Composition>) -> Result<Action, Error> {
    ctx.caches.watches.own(comp);
    let started = ctx.caches.watches.rest.start(comp, &ctx.caches.slices);
    let mut st = comp.status.clone().unwrap_or_default();
    suspend::resumed(&mut st);
    let uid = comp.uid().unwrap_or_default();
    // A first synthesis is applied in the pass that stores it (see `at_once`).
    let mut first = false;
    let (blocked, instance) = match observe_all(ctx, comp, &mut st).await {
        Ok(Outcome::Waits(requeue)) => (Some(requeue), None),
        Ok(Outcome::Ready(o)) => {
            let instance = o.gathered.instance().cloned();
            match next_synthesis(ctx, comp, &mut st, o).await {
                Ok(NextEnd::UpToDate) => (None, instance),
                Ok(NextEnd::Held(wait)) => (Some(wait), instance),
                Ok(NextEnd::Stored) if at_once::applies(ctx, comp, &st) => {
                    first = true;
                    (None, instance)
                }
                Ok(NextEnd::Stored) => return record_stored(ctx, comp, st, instance).await,
                Err(e) => return enforce_then_fail(ctx, comp, e).await,
            }
        }
        Err(e) => return enforce_then_fail(ctx, comp, e).await,
    };
    if blocked.is_none() {
        st.dependency_status = None;
    }
    // The blocker's summary survives the pass's roll-up.
    let blocker = blocked.map(|_| st.simplified.clone());
    // A Composition refused by policy (an invalid spec, references out of its namespace, a
    // remote namespace without a mapping) has no pass: nothing is applied on its behalf until
    // its spec or the flags change. Every other blocker leaves the current synthesis enforced.
    let refused = blocked.is_some() && refused_by_policy(&st);
    let enforced = decide::current(false, refused) != decide::Current::Nothing
        && ctx.clusters.remote_user_of(comp).is_ok();
    let pass = if enforced {
        match apply::reconcile(ctx, comp, &mut st, false, blocked.is_some()).await {
            Ok(pass) => pass,
            Err(e) if first => {
                if !e.is_transient() {
                    failed(comp, &mut st, &e);
                }
                return at_once::record_then_fail(ctx, comp, st, e).await;
            }
            Err(e) => return Err(e),
        }
    } else {
        apply::Pass::default()
    };
    if let Some(simplified) = blocker {
        st.simplified = simplified;
    }
    answer_request(comp, &mut st);
    generation::settle(&mut st, comp.metadata.generation, enforced);
    if let Some(before) = &comp.status {
        reconciler_core::condition::keep_transitions(&mut st.conditions, &before.conditions);
    }
    status_write::write(ctx, comp, &st).await?;
    if first {
        at_once::recorded(ctx, &uid, &st);
        // Slices of a synthesis whose record was lost (its tombstones are in this one's).
        if ctx
            .state
            .memory
            .synthesis(&uid, |m| std::mem::take(&mut m.orphaned))
        {
            slices::delete_stale(ctx, comp, &st).await;
        }
    }
    if blocked.is_none() || instance.is_some() {
        write_back(ctx, comp, &uid, instance.as_ref()).await;
    }
    Ok(after_pass(ctx, comp, &st, &pass, blocked, started))
}

/// What follows a pass of `converge` that wrote its status: at rest until the resync, a
/// readiness poll, a retry, or at once.
fn after_pass(
    ctx: &Context,
    comp: &Composition,
    st: &CompositionStatus,
    pass: &apply::Pass,
    blocked: Option<Duration>,
    started: super::rest::Started,
) -> Action {
    let uid = comp.uid().unwrap_or_default();
    let idle = if reconciler_core::condition::is_true(&st.conditions, conditions::READY) {
        ctx.opts.resync
    } else {
        ctx.opts.apply.readiness_poll
    };
    let current = pass.requeue.map_or(idle, |h| h.min(idle));
    // At rest: Ready, and nothing due before the resync (no readiness poll, no retry).
    let rest = &ctx.caches.watches.rest;
    let ready = reconciler_core::condition::is_true(&st.conditions, conditions::READY);
    match pass.at_rest {
        Some(checked) if blocked.is_none() && ready && pass.requeue.is_none() => {
            rest.settle(comp, started, checked);
            return Action::requeue(super::rest::coalesced(current));
        }
        _ => rest.unsettle(&uid),
    }
    if let Some(wait) = blocked {
        // Never a hot loop: missing slices or a changed output are the next synthesis's
        // business, and it is blocked.
        return Action::requeue(wait.min(current).max(Duration::from_millis(500)));
    }
    // Missing slices of a Composition that ignores side effects are left (as Eno leaves them):
    // looked at again at the usual interval, not synthesized again.
    if pass.resynthesize || (pass.slices_missing && !ignores_side_effects(comp)) {
        return Action::requeue(Duration::from_millis(100));
    }
    Action::requeue(current)
}

/// Whether `st` says the Composition is refused by policy (`Synthesized=False` with a policy
/// reason).
fn refused_by_policy(st: &CompositionStatus) -> bool {
    st.conditions.iter().any(|c| {
        c.type_ == conditions::SYNTHESIZED
            && reconciler_core::condition::fails(c)
            && decide::POLICY_REFUSALS.contains(&c.reason.as_str())
    })
}

/// A read or write of the next synthesis failed (an input the Composition's account may no
/// longer read, slices that cannot be written): the current synthesis is still enforced — its
/// pass runs from the status as it was — and the error then goes to the error policy, which
/// reports and retries it.
async fn enforce_then_fail(
    ctx: &Arc<Context>,
    comp: &Arc<Composition>,
    error: Error,
) -> Result<Action, Error> {
    let mut st = comp.status.clone().unwrap_or_default();
    suspend::resumed(&mut st);
    if !refused_by_policy(&st)
        && st.current_synthesis.is_some()
        && ctx.clusters.remote_user_of(comp).is_ok()
    {
        // The pass's own failure is reported with the first one's.
        if let Err(e) = apply::reconcile(ctx, comp, &mut st, false, true).await {
            tracing::warn!(error = %e, "the pass over the current synthesis failed too");
        }
    }
    Err(error)
}
