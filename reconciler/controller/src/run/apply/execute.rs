//! Performs a plan's writes with bounded concurrency (`--apply-concurrency`), holding back
//! resources in failure or fight backoff, and updates that backoff from the outcomes.
//! Outcomes are data; recording them in status is [`super::record`]'s job.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use plan::{Op, Plan, Recorded, ResourceKey, SkipReason};
use serde_json::Value;

use super::Context;
use super::observe::Observation;
use crds::Composition;
use crds::names::{FIELD_MANAGER, reasons};
use reconciler_core::fights;
pub(crate) use reconciler_core::model::StepResult;
use reconciler_core::model::{Failure, summarize_error};

mod write;
pub(crate) use write::Handover;
#[cfg(test)]
pub(crate) use write::NO_OBJECT_HAS;
pub(super) use write::release;
use write::{Unwritten, write};

/// The outcomes of a plan, in step order, and the shortest fight backoff that is pending.
pub(crate) struct Acted {
    pub outcomes: Vec<StepResult>,
    pub fight_wait: Option<Duration>,
}

/// Executes `the_plan`.
pub(crate) async fn act(
    ctx: &Arc<Context>,
    comp: &Composition,
    the_plan: &Plan,
    observations: &HashMap<ResourceKey, Observation>,
    recorded: &HashMap<ResourceKey, Recorded>,
) -> Acted {
    let uid = comp.uid().unwrap_or_default();
    let started = Instant::now();
    let exists = |k: &ResourceKey| observations.get(k).is_some_and(|o| o.live.is_some());
    let is_correction =
        |s: &plan::Step| fights::is_correction(s, exists(&s.key), recorded.get(&s.key));
    let (backing_off, (deferred, mut fight_wait)) = ctx.state.memory.apply(&uid, |m| {
        (
            fights::held(&m.backoff, started),
            fights::deferred(
                &m.fights,
                the_plan
                    .steps
                    .iter()
                    .filter(|s| is_correction(s))
                    .map(|s| s.key.clone()),
                started,
            ),
        )
    });
    let mut outcomes = run_steps(
        &ctx.opts.apply,
        &uid,
        the_plan,
        observations,
        &deferred,
        &backing_off,
    )
    .await;
    ctx.state.memory.apply(&uid, |m| {
        refused_again(&m.read_first, the_plan, &mut outcomes)
    });
    log_writes(the_plan, &outcomes, &deferred);
    let conflicts = ctx.state.memory.apply(&uid, |m| {
        record_failures(&mut m.backoff, the_plan, &outcomes, started);
        count_corrections(
            &mut m.fights,
            the_plan,
            &outcomes,
            observations,
            &deferred,
            &is_correction,
            started,
        )
    });
    for (_, delay) in &conflicts {
        fight_wait = Some(fight_wait.map_or(*delay, |w| w.min(*delay)));
    }
    for (message, _) in conflicts {
        tracing::warn!(%message, "field conflict");
        ctx.report
            .event(comp, true, reasons::FIELD_CONFLICT, "Apply", message)
            .await;
    }
    count_ops(&ctx.report, the_plan, &outcomes);
    ctx.state
        .memory
        .apply(&uid, |m| read_first(&mut m.read_first, the_plan, &outcomes));
    remember_own_writes(&ctx.caches.watches.rest, the_plan, &outcomes, observations);
    Acted {
        outcomes,
        fight_wait,
    }
}

/// The versions the writes that changed an object returned: their watch events wake no one.
fn remember_own_writes(
    rest: &crate::run::rest::Rest,
    the_plan: &Plan,
    outcomes: &[StepResult],
    observations: &HashMap<ResourceKey, Observation>,
) {
    for (step, o) in the_plan.steps.iter().zip(outcomes) {
        let Some(rv) = o.resource_version.as_ref() else {
            continue;
        };
        let live = observations.get(&step.key).and_then(|o| o.live.as_ref());
        let before = live.and_then(|l| l.pointer("/metadata/resourceVersion"));
        let patch = matches!(step.op, Op::JsonPatch { .. });
        if patch || before.and_then(Value::as_str) == Some(rv.as_str()) {
            continue;
        }
        let k = &step.key;
        let key = (
            k.group.clone(),
            k.kind.clone(),
            k.namespace.clone(),
            k.name.clone(),
        );
        rest.wrote(key, rv.clone());
    }
}

/// A guarded write refused again for an object this pass read first and found nothing of
/// (its GET was forbidden): a failure with backoff, not another refusal 200 ms later.
fn refused_again(
    read_first: &std::collections::BTreeSet<ResourceKey>,
    the_plan: &Plan,
    outcomes: &mut [StepResult],
) {
    for (step, o) in the_plan.steps.iter().zip(outcomes.iter_mut()) {
        if o.unseen && read_first.contains(&step.key) {
            o.unseen = false;
            o.error = Some(format!(
                "{} exists, but reading it found nothing (may the Composition's account get it?)",
                step.key
            ));
        }
    }
}

/// Keys whose guarded write was refused are read first from now on; keys written are not
/// (the cache holds them from now on).
fn read_first(
    keys: &mut std::collections::BTreeSet<ResourceKey>,
    the_plan: &Plan,
    outcomes: &[StepResult],
) {
    for (step, o) in the_plan.steps.iter().zip(outcomes) {
        if o.unseen {
            keys.insert(step.key.clone());
        } else if step.op.is_write() && o.error.is_none() && !o.held {
            keys.remove(&step.key);
        }
    }
}

/// How soon a pass whose guarded writes found objects existing goes again (it reads them).
pub(crate) const UNSEEN_RETRY: Duration = Duration::from_millis(200);

/// Steps whose guarded first write found the object existing wrote nothing: they wait, to
/// be read and decided on the next pass. Whether there were any.
pub(crate) fn wait_unseen(the_plan: &mut Plan, outcomes: &[StepResult]) -> bool {
    let mut any = false;
    for (step, outcome) in the_plan.steps.iter_mut().zip(outcomes) {
        if outcome.unseen {
            step.op = Op::Wait { on: Vec::new() };
            any = true;
        }
    }
    any
}

/// Executes the plan's steps, `apply_concurrency` at a time: a step `deferred` (a fight
/// waiting) counts as in sync, a write `backing_off` is held. The outcomes in step order.
async fn run_steps(
    opts: &crate::run::ApplyOptions,
    uid: &str,
    the_plan: &Plan,
    observations: &HashMap<ResourceKey, Observation>,
    deferred: &std::collections::BTreeSet<ResourceKey>,
    backing_off: &HashMap<ResourceKey, Failure>,
) -> Vec<StepResult> {
    let in_sync = Op::Skip {
        reason: SkipReason::InSync,
    };
    let pending: Vec<_> = the_plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let op = if deferred.contains(&step.key) {
                &in_sync
            } else {
                &step.op
            };
            let held = step
                .op
                .is_write()
                .then(|| backing_off.get(&step.key).cloned())
                .flatten();
            let migrating = Handover {
                uid,
                migration: reconciler_core::migrate::Migration {
                    managers: &opts.migrating_field_managers,
                    fields: &opts.migrating_fields,
                },
                previous: step.previous.as_ref(),
            };
            execute(
                i,
                op,
                &step.key,
                observations.get(&step.key),
                held,
                migrating,
                opts.timeout,
            )
        })
        .collect();
    let mut indexed: Vec<(usize, StepResult)> = futures::stream::iter(pending)
        .buffer_unordered(opts.apply_concurrency.max(1))
        .collect()
        .await;
    indexed.sort_by_key(|(i, _)| *i);
    indexed.into_iter().map(|(_, o)| o).collect()
}

/// Counts the drift corrections that took effect; returns a `FieldConflict` message and the
/// backoff delay for every resource whose correction count reached a fight.
fn count_corrections(
    fights: &mut std::collections::HashMap<ResourceKey, fights::Fight>,
    the_plan: &Plan,
    outcomes: &[StepResult],
    observations: &HashMap<ResourceKey, Observation>,
    deferred: &std::collections::BTreeSet<ResourceKey>,
    is_correction: &dyn Fn(&plan::Step) -> bool,
    now: Instant,
) -> Vec<(String, Duration)> {
    let mut conflicts = Vec::new();
    for (step, outcome) in the_plan.steps.iter().zip(outcomes) {
        if deferred.contains(&step.key) {
            continue;
        }
        // A correction whose write changed nothing (the server returned the live
        // resourceVersion: e.g. only the status moved) reverted nothing: not a fight.
        let live = observations.get(&step.key).and_then(|o| o.live.as_ref());
        let live_rv = live
            .and_then(|l| l.pointer("/metadata/resourceVersion"))
            .and_then(Value::as_str);
        let no_op = outcome.resource_version.as_deref() == live_rv;
        if !is_correction(step) || outcome.error.is_some() || outcome.held || no_op {
            if step.op.is_write() && outcome.error.is_none() && !no_op {
                fights.remove(&step.key);
            }
            continue;
        }
        let (n, delay) = fights::count_correction(fights, &step.key, now);
        if let Some(message) = fights::conflict_message(&step.key, live, n, delay) {
            conflicts.push((message, delay));
        }
    }
    conflicts
}

fn log_writes(
    the_plan: &Plan,
    outcomes: &[StepResult],
    deferred: &std::collections::BTreeSet<ResourceKey>,
) {
    let writes = the_plan
        .steps
        .iter()
        .zip(outcomes)
        .filter(|(s, o)| {
            s.op.is_write() && o.error.is_none() && !o.held && !deferred.contains(&s.key)
        })
        .count();
    if writes > 0 {
        tracing::info!(writes, "applied resources");
    }
}

fn record_failures(
    backoff: &mut std::collections::HashMap<ResourceKey, reconciler_core::model::Backoff>,
    the_plan: &Plan,
    outcomes: &[StepResult],
    now: Instant,
) {
    for (step, outcome) in the_plan.steps.iter().zip(outcomes) {
        if !step.op.is_write() || outcome.held {
            continue;
        }
        match &outcome.error {
            None => {
                backoff.remove(&step.key);
            }
            Some(e) => {
                let failures = backoff.get(&step.key).map_or(0, |f| f.0) + 1;
                let delay = fights::failure_delay(failures);
                let failure = Failure {
                    error: e.clone(),
                    summary: outcome.summary.clone().unwrap_or_default(),
                };
                backoff.insert(step.key.clone(), (failures, now + delay, failure));
            }
        }
    }
}

fn count_ops(report: &crate::run::context::Reporter, the_plan: &Plan, outcomes: &[StepResult]) {
    for (step, outcome) in the_plan.steps.iter().zip(outcomes) {
        if step.op.is_write() && !outcome.held {
            let result = if outcome.error.is_some() {
                "error"
            } else if outcome.unseen {
                "exists"
            } else {
                "ok"
            };
            super::super::metrics::Metrics::count(
                &report.metrics.apply_ops,
                &format!("{}-{result}", op_name(&step.op)),
            );
        }
    }
}

/// Summarizes an API error for status (the server's message, not the transport details).
fn summarize(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(resp) => format!("{}: {}", resp.reason, resp.message),
        other => other.to_string(),
    }
}

fn failed(message: String) -> StepResult {
    StepResult {
        error: Some(message),
        ..StepResult::default()
    }
}

/// A request the API server (or the transport) refused: enoki's message and Eno's summary.
fn failure(e: &kube::Error) -> Failure {
    let summary = match e {
        kube::Error::Api(resp) => summarize_error(&resp.reason, &resp.message),
        _ => String::new(),
    };
    Failure {
        error: summarize(e),
        summary,
    }
}

/// Executes one step; returns its index with the outcome (steps run out of order).
async fn execute(
    index: usize,
    op: &Op,
    key: &ResourceKey,
    obs: Option<&Observation>,
    held: Option<Failure>,
    migrating: Handover<'_>,
    timeout: Duration,
) -> (usize, StepResult) {
    // `--timeout`: a write that takes longer failed (retried with backoff).
    match tokio::time::timeout(timeout, execute_one(op, key, obs, held, migrating)).await {
        Ok(result) => (index, result),
        Err(_) => (
            index,
            failed(format!(
                "{} of {key} took longer than --timeout {}",
                op_name(op),
                humantime::format_duration(timeout)
            )),
        ),
    }
}

async fn execute_one(
    op: &Op,
    key: &ResourceKey,
    obs: Option<&Observation>,
    held: Option<Failure>,
    migrating: Handover<'_>,
) -> StepResult {
    if let Some(last) = held {
        return StepResult {
            error: Some(last.error),
            summary: Some(last.summary),
            held: true,
            ..StepResult::default()
        };
    }
    if let (Some(o), true) = (obs, left_for_good(op)) {
        if let (Some(api), Some(live)) = (o.api.as_ref(), o.live.as_ref())
            && let Err(e) = release(api, &key.to_string(), &key.name, live, migrating.uid).await
            && crate::run::error::kube_is_transient(&e)
        {
            // Not settled: retried with backoff, so no dead owner label is left behind.
            return failed(format!(
                "releasing the managed-by label of {key}: {}",
                summarize(&e)
            ));
        }
        return StepResult::default();
    }
    if matches!(op, Op::Skip { .. } | Op::Wait { .. } | Op::Conflict { .. }) {
        return StepResult::default();
    }
    let Some(api) = obs.and_then(|o| o.api.as_ref()) else {
        return failed(format!(
            "kind of {key} is not served by the API server (yet)"
        ));
    };
    let live = obs.and_then(|o| o.live.as_ref());
    // Whatever said it is absent (the cache, a GET a moment ago), its first write creates
    // only: an object someone created meanwhile is never taken over blind.
    let guarded = live.is_none();
    match write(api, op, key, (live, guarded), migrating).await {
        Ok(written) => {
            tracing::debug!(resource = %key, op = op_name(op), "applied");
            let resource_version = written
                .as_ref()
                .and_then(|o| o.metadata.resource_version.clone());
            StepResult {
                resource_version,
                object: written.and_then(|o| serde_json::to_value(o).ok()),
                ..StepResult::default()
            }
        }
        Err(Unwritten::Unseen) => {
            tracing::debug!(resource = %key, "exists though the cache has not seen it: read on the next pass");
            StepResult {
                unseen: true,
                ..StepResult::default()
            }
        }
        Err(Unwritten::Failed(f)) => StepResult {
            error: Some(f.error),
            summary: Some(f.summary),
            ..StepResult::default()
        },
    }
}

/// An object this Composition hands over: kept by `prune: disabled`, orphaned on Composition
/// deletion, or no longer reconciled (`disable-reconciliation`, the first half of Eno's recipe
/// for moving a resource between Compositions, `docs/resource-migration.md`): its
/// `managed-by` label is released so the Composition that reconciles it next adopts it.
fn left_for_good(op: &Op) -> bool {
    matches!(
        op,
        Op::Skip {
            reason: SkipReason::PruneDisabled
                | SkipReason::Orphaned
                | SkipReason::ReconciliationDisabled
        }
    )
}

/// A short name of an op, for logs and metrics.
pub(crate) fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Apply { .. } => "apply",
        Op::Create { .. } => "create",
        Op::Replace { .. } => "replace",
        Op::JsonPatch { .. } => "json-patch",
        Op::MergePatch { .. } => "merge-patch",
        Op::Delete { .. } => "delete",
        Op::Skip { .. } => "skip",
        Op::Wait { .. } => "wait",
        Op::Conflict { .. } => "conflict",
    }
}
