//! One pass over the resources of a Composition's current synthesis:
//! observe → plan → execute → record → roll up.
//!
//! - [`observe`]: live state from the shared metadata cache; full objects (GET) only for
//!   resources that are not in sync, or whose readiness or overrides need them.
//! - `plan::plan` (pure) decides one op per resource.
//! - [`execute`]: writes with bounded concurrency, per-resource backoff and drift-fight
//!   backoff ([`fights`]).
//! - [`record`] (pure): per-resource outcomes into the ResourceSlice states; written back one
//!   patch per changed slice.
//! - [`rollup`] (pure): the Composition's conditions and simplified status.
//!
//! What it leaves to the caller: synthesis, the Composition's status write, the requeue.

pub(crate) mod execute;
pub(crate) use reconciler_core::{record, rollup};
mod ingest;
mod sweep;
use sweep::sweep_outside;
mod warnings;
use warnings::{report_warnings, warn_once};
pub(crate) mod observe;
pub(crate) mod owners;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use plan::{Plan, ResourceKey};

use super::slices::{self, Loaded};
use super::{Context, Error};
use crds::names::conditions;
use crds::{Composition, CompositionStatus};
use reconciler_core::condition;

/// What a pass found.
#[derive(Debug, Default)]
pub struct Pass {
    /// Nothing is left to do (deletion: every resource gone or orphaned).
    pub settled: bool,
    /// The plan's requeue hint (readiness poll, a `reconcile-interval`, a fight backoff).
    pub requeue: Option<Duration>,
    /// An observed output changed since the synthesis read it: synthesize again first.
    pub resynthesize: bool,
    /// Slices of the current synthesis are gone: synthesize again.
    pub slices_missing: bool,
    /// The resources this pass checked, when it wrote nothing, had nothing left to do and
    /// nothing that comes due on its own (`drift: interval`): `None` otherwise (see
    /// [`super::rest`]).
    pub at_rest: Option<u64>,
}

impl Pass {
    /// An observed output changed: synthesize again, shortly.
    fn resynthesize() -> Pass {
        Pass {
            resynthesize: true,
            requeue: Some(Duration::from_millis(100)),
            ..Pass::default()
        }
    }
}

/// Plans and executes one pass over the current synthesis.
///
/// # Errors
/// Transient API failures while reading slices or writing their status.
pub async fn reconcile(
    ctx: &Arc<Context>,
    comp: &Composition,
    st: &mut CompositionStatus,
    deleting: bool,
    next_blocked: bool,
) -> Result<Pass, Error> {
    let Some(current) = st.current_synthesis.clone() else {
        return Ok(Pass {
            settled: deleting,
            ..Pass::default()
        });
    };
    let uid = comp.uid().unwrap_or_default();
    let loaded = slices::load(ctx, comp, &current).await?;
    if loaded.missing
        && let Some(pass) = slices_missing(ctx, comp, &current, deleting).await?
    {
        return Ok(pass);
    }
    let mut info = composition_info(ctx, comp, deleting);
    let Some((prepared, unopened)) = ingest(ctx, comp, st, &loaded, &info).await? else {
        // Being deleted: nothing was deleted, so its finalizer stays.
        return Ok(Pass::default());
    };
    report_warnings(ctx, comp, &uid, &prepared).await;
    let previous = super::slices::history::previous_applied(ctx, comp, st, &loaded, &info).await?;
    let recorded = observe::recorded(ctx, &uid, &prepared, &loaded, &previous.carried);
    let seen = Seen {
        prepared: &prepared,
        recorded: &recorded,
        loaded: &loaded,
    };
    // Reads of live objects and every write below act as the Composition's ServiceAccount.
    let client = ctx
        .clusters
        .target_for(comp)
        .map_err(|source| Error::Impersonate {
            user: ctx.clusters.service_account(comp).unwrap_or_default(),
            source,
        })?;
    // Changed observed outputs (`watchOutputs`) call for a new synthesis first, unless the next
    // synthesis is blocked: then the current one is enforced as it is.
    let phase = (deleting, next_blocked);
    let Some(observations) = observe_pass(ctx, &client, comp, &current, &seen, phase).await? else {
        return Ok(Pass::resynthesize());
    };
    let observed: plan::Observed = observations
        .iter()
        .filter_map(|(k, o)| o.live.clone().map(|l| (k.clone(), l)))
        .collect();
    if !deleting {
        info.gone_owners = owners::gone_among(ctx, &observed, &info.uid).await;
    }
    let (mut the_plan, cel_deadline) = plan_pass(plan::PlanInput {
        prepared: &prepared,
        composition: &info,
        observed: &observed,
        recorded: &recorded,
        previous: &previous.snapshots,
        options: plan_options(&ctx.opts.apply),
    });
    let acted = execute::act(ctx, comp, &the_plan, &observations, &recorded).await;
    let unseen = execute::wait_unseen(&mut the_plan, &acted.outcomes);
    let planned = Planned::of(&the_plan, cel_deadline);
    let mut pass = finish(ctx, comp, st, deleting, &seen, &planned, acted).await?;
    rest_or_retry(
        &mut pass,
        &prepared,
        &observations,
        (unseen, unopened || deleting),
    );
    if unopened && !deleting {
        resynthesize_unopened(ctx, &mut pass, &uid, &current.uuid);
    }
    Ok(pass)
}

/// What the planner takes from the controller's flags.
fn plan_options(apply: &crate::run::ApplyOptions) -> plan::PlanOptions {
    plan::PlanOptions {
        mode: apply.mode,
        readiness_poll: apply.readiness_poll,
        fail_open: apply.fail_open,
    }
}

/// A sealed Secret no key opens: the synthesis is made again, soon, whatever
/// `ignore-side-effects` says (see `slices::check`).
fn resynthesize_unopened(ctx: &Context, pass: &mut Pass, uid: &str, uuid: &str) {
    pass.resynthesize = true;
    pass.requeue = Some(Duration::from_millis(100));
    let uuid = uuid.to_string();
    ctx.state.memory.slices(uid, |m| m.unopened = Some(uuid));
}

/// A pass whose guarded writes were refused comes back soon; one that ends with every
/// resource known from a watch's cache (none read: a kind enoki may not watch, an object the
/// cache never holds) and nothing that comes due by itself is at rest (see `run::rest`).
/// `(unseen, other)`: refused writes, and any other reason it is not at rest.
fn rest_or_retry(
    pass: &mut Pass,
    prepared: &plan::Prepared,
    observations: &HashMap<ResourceKey, observe::Observation>,
    (unseen, other): (bool, bool),
) {
    if unseen {
        let retry = execute::UNSEEN_RETRY;
        pass.requeue = Some(pass.requeue.map_or(retry, |r| r.min(retry)));
    }
    let timed = prepared
        .resources
        .iter()
        .any(|r| r.settings.drift == plan::Drift::Interval || !r.overrides.is_empty());
    let read = observations.values().any(|o| o.read);
    if pass.settled && !unseen && !other && !timed && !read {
        pass.at_rest = Some(prepared.resources.len() as u64);
    }
}

/// The current synthesis ingested (and whether a sealed Secret of it did not open); `None`
/// when it cannot be (`Reconciled=False` says why).
async fn ingest(
    ctx: &Arc<Context>,
    comp: &Composition,
    st: &mut CompositionStatus,
    loaded: &Loaded,
    info: &plan::CompositionInfo,
) -> Result<Option<(Arc<plan::Prepared>, bool)>, Error> {
    let uuid = st
        .current_synthesis
        .as_ref()
        .map(|c| c.uuid.clone())
        .unwrap_or_default();
    match ingest::prepare(ctx, comp, &uuid, loaded, info).await {
        Ok(p) => Ok(Some(p)),
        Err(Err(e)) => Err(e),
        Err(Ok(e)) => {
            condition::set_condition(
                &mut st.conditions,
                conditions::RECONCILED,
                false,
                e.category(),
                &e.to_string(),
                comp.metadata.generation,
            );
            Ok(None)
        }
    }
}

/// The pass when the current synthesis has slices missing: a new synthesis, unless the
/// Composition is deleted (its namespace is being deleted); then what it emitted outside
/// the namespace (it would outlive it) is deleted from the recorded list first, and the
/// pass goes on (`None`) once that is done.
async fn slices_missing(
    ctx: &Arc<Context>,
    comp: &Composition,
    current: &crds::Synthesis,
    deleting: bool,
) -> Result<Option<Pass>, Error> {
    if !deleting {
        return Ok(Some(Pass {
            slices_missing: true,
            ..Pass::default()
        }));
    }
    let swept = sweep_outside(ctx, comp, current, &composition_info(ctx, comp, true)).await?;
    Ok((!swept).then(Pass::default))
}

/// Plans the pass. Planning evaluates CEL (readiness, overrides): bounded per expression and
/// per pass (`MAX_PASS_TIME` in all), and run where it cannot hold up other reconciles' I/O.
/// The plan, and when its CEL time ends.
fn plan_pass(input: plan::PlanInput<'_>) -> (Plan, Option<std::time::Instant>) {
    let cel_deadline = Some(std::time::Instant::now() + plan::expr::MAX_PASS_TIME);
    let the_plan = tokio::task::block_in_place(|| {
        plan::expr::with_pass_deadline(cel_deadline, || plan::plan(input))
    });
    (the_plan, cel_deadline)
}

/// The plan of a pass and when its CEL time ends.
struct Planned<'p> {
    plan: &'p Plan,
    cel_deadline: Option<std::time::Instant>,
}

impl<'p> Planned<'p> {
    fn of(plan: &'p Plan, cel_deadline: Option<std::time::Instant>) -> Self {
        Planned { plan, cel_deadline }
    }
}

/// What a pass read before planning.
struct Seen<'a> {
    prepared: &'a plan::Prepared,
    recorded: &'a HashMap<ResourceKey, plan::Recorded>,
    loaded: &'a Loaded,
}

/// Observes the resources; `None` when an observed output changed since the synthesis read
/// it (synthesize again first rather than revert a change with a stale snapshot).
async fn observe_pass(
    ctx: &Arc<Context>,
    client: &kube::Client,
    comp: &Composition,
    current: &crds::Synthesis,
    seen: &Seen<'_>,
    (deleting, next_blocked): (bool, bool),
) -> Result<Option<HashMap<ResourceKey, observe::Observation>>, Error> {
    let recorded_observed = current
        .input_revisions
        .iter()
        .find(|r| r.key == super::inputs::OBSERVED_REVISION_KEY)
        .and_then(|r| r.digest.clone())
        .filter(|_| !deleting && !next_blocked);
    let observations = observe::observe(
        ctx,
        client,
        comp,
        seen.prepared,
        seen.recorded,
        &seen.loaded.deleted_keys(),
        observe::Needs {
            deleting,
            everything: recorded_observed.is_some(),
        },
    )
    .await?;
    if let Some(digest) = recorded_observed
        && observe::outputs_changed(seen.prepared, &observations, &digest)
    {
        tracing::debug!("observed outputs changed since the synthesis; re-synthesizing first");
        return Ok(None);
    }
    Ok(Some(observations))
}

/// Records the outcomes, writes slice states, rolls up into `st`.
async fn finish(
    ctx: &Arc<Context>,
    comp: &Composition,
    st: &mut CompositionStatus,
    deleting: bool,
    seen: &Seen<'_>,
    planned: &Planned<'_>,
    acted: execute::Acted,
) -> Result<Pass, Error> {
    let the_plan = planned.plan;
    if !deleting {
        ctx.report
            .metrics
            .managed_resources
            .set(i64::try_from(the_plan.steps.len()).unwrap_or(i64::MAX));
    }
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    // Readiness is evaluated again on the objects the writes returned: CEL, so under the
    // same pass deadline as planning and off the async workers. The names of other owners
    // (for conflicts) are looked up in one index built on first need, not per resource.
    let recording = tokio::task::block_in_place(|| {
        let owners = std::cell::OnceCell::new();
        let owner_name = |uid: &str| {
            owners
                .get_or_init(|| owners::owner_names(&ctx.caches.compositions))
                .get(uid)
                .cloned()
        };
        plan::expr::with_pass_deadline(planned.cel_deadline, || {
            record::record(
                &owner_name,
                the_plan,
                &acted.outcomes,
                seen.loaded,
                seen.recorded,
                seen.prepared,
                deleting,
                &now,
            )
        })
    });
    slices::write_states(ctx, comp, seen.loaded, &recording.states).await?;
    let roll = rollup::Rollup::of(
        seen.loaded,
        &recording,
        &filtered_out(&ctx.opts.apply, seen),
    );
    if !deleting {
        let uid = comp.uid().unwrap_or_default();
        let failed = [&recording.errors[..], &recording.later_errors[..]].concat();
        for (reason, messages) in [
            (crds::names::reasons::APPLY_FAILED, &failed),
            (crds::names::reasons::CONFLICT, &recording.conflicts),
        ] {
            warn_once(ctx, comp, &uid, reason, "Apply", messages).await;
        }
    }
    // Ready and Reconciled describe the current synthesis's outputs: they observe the
    // generation it was made from (a change held back leaves them at the older one).
    let observed = st
        .current_synthesis
        .as_ref()
        .and_then(|c| c.observed_composition_generation)
        .or(comp.metadata.generation);
    roll.apply_to(st, observed, deleting, &now);
    let requeue = match (the_plan.requeue, acted.fight_wait) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
    .map(|r| r.max(ctx.opts.apply.min_reconcile_interval));
    Ok(Pass {
        settled: settled(the_plan, &acted.outcomes)
            && recording.errors.is_empty()
            && recording.later_errors.is_empty(),
        requeue,
        ..Pass::default()
    })
}

/// Nothing is left to do: every step skipped (not deferred for want of CEL time), or a
/// fail-open delete that failed (it counts as done: Eno marks it deleted and moves on).
fn settled(the_plan: &Plan, outcomes: &[execute::StepResult]) -> bool {
    the_plan.steps.iter().zip(outcomes).all(|(s, o)| {
        s.op.is_done_skip()
            || (s.settings.fail_open == Some(true)
                && matches!(s.op, plan::Op::Delete { .. })
                && o.error.is_some())
    })
}

/// The Composition as the planner sees it; a Symphony being deleted orphans its
/// Compositions' resources (Eno semantics). With `--shards`, its objects are labelled with
/// its shard.
pub(crate) fn composition_info(
    ctx: &Context,
    comp: &Composition,
    deleting: bool,
) -> plan::CompositionInfo {
    let uid = comp.uid().unwrap_or_default();
    // A Symphony being deleted is read from the labels by the planner (`symphony_deleting`).
    let annotations = comp.annotations().clone();
    plan::CompositionInfo {
        name: comp.name_any(),
        namespace: comp.namespace().unwrap_or_default(),
        shard: ctx.limits.shards.borrow().label_value_of(&uid),
        uid,
        labels: comp.labels().clone(),
        annotations,
        deleting,
        deletion_timestamp: comp
            .metadata
            .deletion_timestamp
            .as_ref()
            .map(|t| t.0.to_string()),
        gone_owners: std::collections::BTreeSet::new(),
        // The pass runs a synthesis the status does not record: one whose record was lost.
        unrecorded: comp
            .status
            .as_ref()
            .is_none_or(|s| s.current_synthesis.is_none()),
    }
}

/// The positions of the resources `--resource-filter` left out (none without it): not
/// reconciled here, so they count neither for nor against the Composition's roll-up.
fn filtered_out(
    opts: &crate::run::ApplyOptions,
    seen: &Seen<'_>,
) -> std::collections::HashSet<(usize, usize)> {
    if opts.resource_filter.is_none() {
        return std::collections::HashSet::new();
    }
    seen.loaded
        .position
        .iter()
        .filter(|(k, _)| {
            seen.prepared
                .resources
                .binary_search_by(|r| r.key.cmp(k))
                .is_err()
        })
        .map(|(_, p)| *p)
        .collect()
}
