//! Per-resource outcomes into ResourceSlice states. Pure: the caller writes the states back
//! (one patch per slice whose states changed).

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use plan::{Op, Plan, ReadinessState, Recorded, ResourceKey, SkipReason, Step};

use crate::model::{Loaded, StepResult};
use crds::ResourceState;

/// The new states of every slice, and what the roll-up needs to explain.
#[derive(Debug, Default)]
pub struct Recording {
    /// One state per manifest, per slice (same shape as the slices).
    pub states: Vec<Vec<ResourceState>>,
    /// `key: message` of every write that failed.
    pub errors: Vec<String>,
    /// `key: message` of every write that failed on a resource already reconciled in this
    /// synthesis (a drift revert, a resync): as Eno's `patchResourceError`, the resource stays
    /// reconciled and the roll-up does not count it; the pass reports it (Event) and retries.
    pub later_errors: Vec<String>,
    /// Eno's summary of each of them (empty when Eno reports nothing).
    pub summaries: Vec<String>,
    /// `key (why)` of every resource that is not ready yet.
    pub not_ready: Vec<String>,
    /// `key: owned by …` of every resource another Composition owns (not taken over).
    pub conflicts: Vec<String>,
    /// A write was refused with `403 Forbidden` (the Composition's ServiceAccount lacks RBAC).
    pub forbidden: bool,
}

/// Records `outcomes` (in step order) into the loaded slices' states. `now` is the time a
/// resource that became ready without a condition time is stamped with; `owner_name` names
/// the Composition of a UID (`namespace/name`) for conflict messages.
#[allow(clippy::too_many_arguments)]
pub fn record(
    owner_name: &dyn Fn(&str) -> Option<String>,
    the_plan: &Plan,
    outcomes: &[StepResult],
    loaded: &Loaded,
    recorded: &HashMap<ResourceKey, Recorded>,
    prepared: &plan::Prepared,
    deleting: bool,
    now: &Time,
) -> Recording {
    let mut rec = Recording {
        states: loaded.slices.iter().map(|s| s.states.clone()).collect(),
        ..Recording::default()
    };
    for (step, outcome) in the_plan.steps.iter().zip(outcomes) {
        let Some(&(si, ri)) = loaded.position.get(&step.key) else {
            continue;
        };
        let state = &mut rec.states[si][ri];
        if let Op::Conflict { owner } = &step.op {
            let message = conflict_message(owner, owner_name);
            state.error = Some(clipped(&message));
            state.reconciled = false;
            state.ready = None;
            rec.conflicts.push(format!("{}: {message}", step.key));
            continue;
        }
        if let Some(e) = &outcome.error {
            rec.forbidden |= e.starts_with("Forbidden:");
            state.error = Some(clipped(e));
            let fail_open = step.settings.fail_open == Some(true);
            let deletion = deleting || matches!(step.op, Op::Delete { .. });
            if state.reconciled && !fail_open && !deletion {
                rec.later_errors
                    .push(format!("{}: {}", step.key, clipped(e)));
            } else if fail_open {
                state.reconciled = true;
                // Eno suppresses a fail-open resource's error (kept on the resource's state
                // here, for `enoki status`): it is reconciled, a delete counts as done, and
                // without readiness checks it is ready (Eno's EvalOptionally).
                tracing::warn!(resource = %step.key, error = %e, "fail-open: error suppressed");
                if matches!(step.op, Op::Delete { .. }) {
                    state.deleted = true;
                }
                let tombstone = loaded.is_tombstone(si, ri);
                if !tombstone && !deleting && state.ready.is_none() && no_checks(prepared, step) {
                    state.ready = Some(now.clone());
                }
            } else {
                state.reconciled = false;
                rec.errors.push(format!("{}: {}", step.key, clipped(e)));
                rec.summaries
                    .push(outcome.summary.clone().unwrap_or_default());
            }
        } else {
            state.error = None;
            record_success(state, step, outcome, recorded.get(&step.key));
        }
        let tombstone = loaded.is_tombstone(si, ri);
        if tombstone || deleting || state.ready.is_some() {
            continue;
        }
        if let Some(why) = record_readiness(state, step, outcome, prepared, now) {
            rec.not_ready.push(why);
        }
    }
    rec
}

/// What a Conflict step says: the object is not enoki's (`owner` empty: under `adopt:
/// never`), or another Composition's, named when it is known here.
fn conflict_message(owner: &str, owner_name: &dyn Fn(&str) -> Option<String>) -> String {
    if owner.is_empty() {
        return "exists and is not managed by enoki; not adopted (adopt: never)".to_string();
    }
    let who = owner_name(owner).map_or_else(
        || format!("Composition with uid {owner}"),
        |n| format!("Composition {n} (uid {owner})"),
    );
    format!("owned by {who}; not taken over")
}

/// Whether a step's resource has no readiness checks (no CEL, and not `health: kstatus`).
fn no_checks(prepared: &plan::Prepared, step: &Step) -> bool {
    prepared
        .resources
        .binary_search_by(|r| r.key.cmp(&step.key))
        .is_ok_and(|i| {
            let r = &prepared.resources[i];
            r.checks.is_empty() && r.settings.health == plan::settings::Health::Exists
        })
}

/// Records the readiness of a resource not yet recorded ready in this synthesis; what it
/// waits for when it is not ready.
fn record_readiness(
    state: &mut ResourceState,
    step: &Step,
    outcome: &StepResult,
    prepared: &plan::Prepared,
    now: &Time,
) -> Option<String> {
    match readiness_after(step, outcome, prepared) {
        // Not written yet in this synthesis: what is live is the previous one's.
        ReadinessState::Ready { .. } if matches!(step.op, Op::Wait { .. }) => Some(format!(
            "{} (waiting for the resources before it)",
            step.key
        )),
        ReadinessState::Ready { .. }
            if matches!(
                step.op,
                Op::Skip {
                    reason: SkipReason::CelTimeSpent
                }
            ) =>
        {
            Some(format!("{} (its overrides wait for CEL time)", step.key))
        }
        ReadinessState::Ready { at } => {
            let t = at
                .as_ref()
                .and_then(|s| s.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map(Time)
                .unwrap_or_else(|| now.clone());
            state.ready = Some(t);
            tracing::info!(resource = %step.key, "ready");
            None
        }
        ReadinessState::NotReady { unsatisfied } => {
            Some(format!("{} ({})", step.key, unsatisfied.join(", ")))
        }
        ReadinessState::Absent => Some(format!("{} (not created yet)", step.key)),
    }
}

/// The readiness of a step's resource after it was written: evaluated on the object the
/// server returned, whatever the plan found on the object before the write (that object is
/// gone: a check it met may fail on the new one — Eno evaluates only the object after its
/// write, on the next pass). Without a write, the plan's.
fn readiness_after(step: &Step, outcome: &StepResult, prepared: &plan::Prepared) -> ReadinessState {
    let Some(object) = outcome.object.as_ref() else {
        return step.readiness.clone();
    };
    match prepared
        .resources
        .binary_search_by(|r| r.key.cmp(&step.key))
    {
        Ok(i) => plan::readiness::evaluate(
            &prepared.resources[i].checks,
            prepared.resources[i].settings.health,
            Some(object),
        ),
        Err(_) => step.readiness.clone(),
    }
}

fn record_success(
    state: &mut ResourceState,
    step: &Step,
    outcome: &StepResult,
    recorded: Option<&Recorded>,
) {
    match &step.op {
        Op::Apply { .. }
        | Op::Create { .. }
        | Op::Replace { .. }
        | Op::MergePatch { .. }
        | Op::JsonPatch { .. } => {
            state.reconciled = true;
            state.applied_hash = step.hash.clone();
            state.applied_resource_version = outcome.resource_version.clone();
        }
        Op::Skip {
            reason:
                SkipReason::AlreadyDeleted | SkipReason::OwnedElsewhere | SkipReason::PruneDisabled,
        } => {
            // Gone, now another Composition's, or left for good (`prune: disabled`): nothing
            // of it is this one's any more.
            state.reconciled = true;
            state.deleted = true;
        }
        Op::Delete { foreground: false } => {
            state.reconciled = true;
            state.deleted = true;
        }
        Op::Skip {
            reason: SkipReason::Orphaned,
        } => state.reconciled = true,
        Op::Skip {
            reason: SkipReason::Terminating,
        }
        | Op::Delete { foreground: true }
        | Op::Wait { .. }
        | Op::Conflict { .. } => {}
        Op::Skip {
            reason: SkipReason::ReconciliationDisabled,
        } => {
            // Eno: never touched, reported as reconciled; ready as its checks say (without
            // any, at once: the plan's readiness, recorded below like any resource's).
            state.reconciled = true;
        }
        Op::Skip {
            reason: SkipReason::InSync,
        } => {
            state.reconciled = true;
            if state.applied_hash.is_none() {
                state.applied_hash = step.hash.clone();
                state.applied_resource_version =
                    recorded.and_then(|r| r.applied_resource_version.clone());
            }
        }
        // Not written for want of CEL time this pass: reconciled only once it is written.
        Op::Skip {
            reason: SkipReason::CelTimeSpent,
        } => {}
        Op::Skip { .. } => state.reconciled = true,
    }
}

/// Longest error kept on a resource's state in its ResourceSlice's status, in bytes as the
/// API server stores it (JSON-escaped).
pub const MAX_RESOURCE_ERROR: usize = 1024;

/// Bytes `c` takes in JSON as the API server writes it: quotes and backslashes escaped,
/// control characters, `<`, `>`, `&` and the line separators as `\uXXXX`.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' => 2,
        '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => 6,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// An error as kept on a resource's state: at most [`MAX_RESOURCE_ERROR`] bytes once
/// JSON-escaped. Pure.
fn clipped(e: &str) -> String {
    let mut size = 0;
    for (i, c) in e.char_indices() {
        size += escaped_len(c);
        if size > MAX_RESOURCE_ERROR {
            return format!("{} …(truncated)", &e[..i]);
        }
    }
    e.to_string()
}

#[cfg(test)]
mod tests;
