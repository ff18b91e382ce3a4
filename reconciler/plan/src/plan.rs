//! The Plan: one op per resource, the readiness of each, and when to look again.
//!
//! [`prepare`] ingests a synthesis's output once (keys, settings, compiled CEL, parsed
//! overrides, the DAG) and fails with a [`PlanError`] naming the resource and key.
//! [`plan`] is then a pure function of (prepared output, composition, observed live objects,
//! recorded per-resource status, options). The fast path: when the snapshot's hash
//! and the live resourceVersion both equal what was recorded at the last apply, the op is
//! `Skip(InSync)` and the controller makes no API call at all.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::PlanError;
use crate::expr::Expr;
use crate::key::ResourceKey;
use crate::ordering::{self, Node, Ordering};
use crate::overrides::{self, Override, OverrideResult};
use crate::readiness::{self, ReadinessCheck, ReadinessState};
use crate::settings::{self, DeletionStrategy, Health, Settings};
use crate::snapshot;

mod deletion;
mod ops;
mod prepare;
use deletion::*;
pub use ops::*;
pub use prepare::*;

mod types;
pub use types::{
    ApplyMode, Desired, Observed, Op, Plan, PlanInput, PlanOptions, Prepared, PreparedResource,
    Recorded, SkipReason, Step,
};

/// What the planner needs to know about the Composition.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompositionInfo {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// UID (stamped as the `enoki.dev/managed-by` label).
    pub uid: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations (defaults for the cascading keys).
    pub annotations: BTreeMap<String, String>,
    /// The Composition is being deleted.
    pub deleting: bool,
    /// Its `metadata.deletionTimestamp` (RFC 3339), when set.
    pub deletion_timestamp: Option<String>,
    /// UIDs found in `managed-by` labels of live objects that the caller confirmed name no
    /// existing Composition (after a restore, a re-creation, a move): an object labelled with
    /// one is adopted, not a `Conflict`.
    pub gone_owners: std::collections::BTreeSet<String>,
    /// No synthesis of it is recorded: its resources come from slices of a synthesis whose
    /// record was lost, which applied at most what it labelled, so only objects labelled as
    /// its own are deleted.
    pub unrecorded: bool,
    /// With `--shards`: its shard, `<index>-of-<N>`, stamped as the `enoki.dev/shard` label.
    pub shard: Option<String>,
}

impl CompositionInfo {
    /// The labels that say an applied object is its own (`None` while its UID is unknown).
    pub fn owner(&self) -> Option<snapshot::Owner<'_>> {
        (!self.uid.is_empty()).then(|| snapshot::Owner {
            uid: &self.uid,
            shard: self.shard.as_deref(),
        })
    }

    /// The `composition` CEL variable, shaped as in Eno (`composition.metadata.name`, …,
    /// `metadata.deletionTimestamp` `null` unless it is being deleted), with the flat fields
    /// (`composition.name`, …) kept as aliases.
    pub fn cel_value(&self) -> Value {
        let mut metadata = serde_json::json!({
            "name": self.name,
            "namespace": self.namespace,
            "labels": self.labels,
            "annotations": self.annotations,
        });
        // As Eno: present, `null` unless the Composition is being deleted.
        metadata["deletionTimestamp"] = self
            .deletion_timestamp
            .clone()
            .map_or(Value::Null, Value::String);
        let mut v = metadata.clone();
        v["metadata"] = metadata;
        v
    }

    /// Its Symphony is being deleted (the `symphony-deleting` label, either spelling, set by
    /// the Symphony controller): nothing of it is deleted, whatever a resource's own
    /// deletion strategy says (Eno's reconciliation controller, `symphony-deleting`).
    pub fn symphony_deleting(&self) -> bool {
        [
            crds::names::labels::SYMPHONY_DELETING,
            crds::names::labels::ENO_SYMPHONY_DELETING,
        ]
        .iter()
        .any(|l| self.labels.get(*l).is_some_and(|v| v == "true"))
    }
}

/// `--resource-filter` (Eno's): the items `filter` is true for, and (index, error) of each
/// evaluation that failed or was not a bool (such an item is left out, as in Eno). `self` is
/// the manifest as synthesized, without `status` and `metadata.creationTimestamp`;
/// `composition` is the Composition's metadata. Pure.
pub fn filter_desired(
    desired: Vec<Desired>,
    filter: &crate::expr::Expr,
    composition: &CompositionInfo,
) -> (Vec<Desired>, Vec<(usize, String)>) {
    let comp = crate::expr::to_cel(&composition.cel_value());
    let mut errors = Vec::new();
    let kept = desired
        .into_iter()
        .enumerate()
        .filter_map(|(i, d)| {
            let mut m = d.manifest.clone();
            if let Some(o) = m.as_object_mut() {
                o.remove("status");
            }
            if let Some(md) = m.get_mut("metadata").and_then(Value::as_object_mut) {
                md.remove("creationTimestamp");
            }
            let vars = [
                ("self", crate::expr::to_cel(&m)),
                ("composition", comp.clone()),
            ];
            match filter.eval_bool(&vars) {
                Ok(true) => Some(d),
                Ok(false) => None,
                Err(e) => {
                    errors.push((i, e));
                    None
                }
            }
        })
        .collect();
    (kept, errors)
}

/// The previous synthesis's snapshot of `r` with `r`'s overrides (evaluated against `live`, as
/// Eno's `SnapshotWithOverrides`), for a server-side apply over an existing object, when it
/// differs from what is applied now.
fn previous_snapshot(
    input: &PlanInput<'_>,
    r: &PreparedResource,
    op: &Op,
    live: Option<&Value>,
) -> Option<Value> {
    let (Op::Apply { object }, Some(_), ApplyMode::ServerSide) = (op, live, input.options.mode)
    else {
        return None;
    };
    let mut p = input.previous.get(&r.key)?.clone();
    if !r.overrides.is_empty() {
        let results =
            overrides::apply_all(&mut p, &r.overrides, live, &input.composition.cel_value());
        // Without all its overrides the snapshot would claim fields they leave to others.
        if results
            .iter()
            .any(|o| o.status == overrides::OverrideStatus::Deferred)
        {
            return None;
        }
    }
    let p = snapshot::strip(&p, input.composition.owner());
    (&p != object).then_some(p)
}

/// A resource another owner holds (another Composition, or `adopt: never` over an unmanaged
/// object) is a conflict, not a write — unless it only waits or is never touched.
fn conflict_or(
    refused: Option<String>,
    op: Op,
    readiness: ReadinessState,
    settings: &Settings,
) -> (Op, ReadinessState) {
    match refused {
        Some(owner) if !matches!(op, Op::Wait { .. }) && !settings.disable_reconciliation => {
            let why = if owner.is_empty() {
                "exists and is not managed by enoki (adopt: never)".to_string()
            } else {
                format!("owned by another Composition (uid {owner})")
            };
            (
                Op::Conflict { owner },
                ReadinessState::NotReady {
                    unsatisfied: vec![why],
                },
            )
        }
        _ => (op, readiness),
    }
}

/// Whether a step asks for an early look (`wants`, per step); a superseded one is settled.
fn still_wants_poll(steps: &[Step], wants: &[bool]) -> bool {
    steps.iter().zip(wants).any(|(s, wants)| {
        *wants
            && !matches!(
                s.op,
                Op::Skip {
                    reason: SkipReason::Superseded
                }
            )
    })
}

/// Eno's backtracking rule: a resource whose readiness is recorded and whose object a member of
/// the next readiness group writes — one that may go ahead — is left alone (its readiness
/// kept), so a Patch and the resource it patches never undo each other.
fn supersede(input: &PlanInput<'_>, unblocked: &BTreeSet<&ResourceKey>, steps: &mut [Step]) {
    for step in steps.iter_mut() {
        let Some(later) = input.prepared.superseded_by.get(&step.key) else {
            continue;
        };
        let latched = input
            .recorded
            .get(&step.key)
            .is_some_and(|r| r.ready.is_some());
        if latched
            && later.iter().any(|d| unblocked.contains(d))
            && !matches!(step.op, Op::Conflict { .. })
        {
            step.op = Op::Skip {
                reason: SkipReason::Superseded,
            };
        }
    }
}

/// Resolves every step's `fail-open` (Eno): the resource's own annotation, else `--fail-open`;
/// never for a foreground delete.
fn resolve_fail_open(steps: &mut [Step], default: bool) {
    for s in steps {
        let foreground_delete = matches!(s.op, Op::Delete { foreground: true });
        s.settings.fail_open = Some(!foreground_delete && s.settings.fail_open.unwrap_or(default));
    }
}

/// API versions of the `Patch` pseudo-kind.
pub use crds::names::PATCH_API_VERSIONS;

/// Plans one pass over a composition's resources. Pure and deterministic.
pub fn plan(input: PlanInput<'_>) -> Plan {
    if input.composition.deleting {
        return plan_deletion(input);
    }
    let by_key: std::collections::HashMap<&ResourceKey, &PreparedResource> = input
        .prepared
        .resources
        .iter()
        .map(|r| (&r.key, r))
        .collect();
    let count = input.prepared.resources.len();
    let mut pass = Pass {
        steps: Vec::with_capacity(count),
        ready: std::collections::HashMap::with_capacity(count),
        unready_in_group: BTreeMap::new(),
        requeue: None,
        poll: false,
        unblocked: BTreeSet::new(),
        wants_poll: Vec::with_capacity(count),
    };
    for key in &input.prepared.ordering.order {
        if let Some(r) = by_key.get(key) {
            pass.resource(&input, r);
        }
    }
    let Pass {
        mut steps,
        mut requeue,
        mut poll,
        unblocked,
        wants_poll,
        ready,
        ..
    } = pass;
    supersede(&input, &unblocked, &mut steps);
    poll |= still_wants_poll(&steps, &wants_poll);
    poll |= tombstone_steps(&input, &ready, &mut steps);
    resolve_fail_open(&mut steps, input.options.fail_open);
    if poll {
        requeue = Some(requeue.map_or(input.options.readiness_poll, |r| {
            r.min(input.options.readiness_poll)
        }));
    }
    Plan { steps, requeue }
}

/// A plan being made, one resource after the other in order.
struct Pass<'a> {
    steps: Vec<Step>,
    /// Whether each resource planned so far counts as ready for the groups after it.
    ready: std::collections::HashMap<&'a ResourceKey, bool>,
    unready_in_group: BTreeMap<i64, Vec<ResourceKey>>,
    requeue: Option<Duration>,
    poll: bool,
    /// Resources not waiting on an earlier group.
    unblocked: BTreeSet<&'a ResourceKey>,
    /// Per step: whether it still wants a readiness poll.
    wants_poll: Vec<bool>,
}

impl<'a> Pass<'a> {
    /// Plans resource `r`: its effective object and settings, readiness, and operation.
    fn resource(&mut self, input: &PlanInput<'_>, r: &'a PreparedResource) {
        let key = &r.key;
        let live = input.observed.get(key);
        let recorded = input.recorded.get(key);
        let (object, mut settings, results, hash) = match &r.snapshot_hash {
            Some(hash) => (
                Snapshot::of(&r.manifest, input.composition),
                r.settings.clone(),
                Vec::new(),
                hash.clone(),
            ),
            None => {
                let (object, settings, results) = effective(r, live, input.composition);
                let hash = snapshot::hash(&object);
                (Snapshot::from(object), settings, results, hash)
            }
        };
        // Eno reads fail-open from the resource as synthesized, before overrides.
        settings.fail_open = Some(r.settings.fail_open.unwrap_or(input.options.fail_open));
        let readiness = readiness_of(r, live, recorded, &settings);
        let waiting_on = waiting_on(
            key,
            &input.prepared.ordering,
            &self.ready,
            &mut self.unready_in_group,
        );
        let deferred = results
            .iter()
            .any(|o| o.status == overrides::OverrideStatus::Deferred);
        let op = if deferred && !settings.disable_reconciliation {
            self.poll = true;
            Op::Skip {
                reason: SkipReason::CelTimeSpent,
            }
        } else {
            operation(r, live, (&object, &hash), &settings, waiting_on, input)
        };
        let refused = refused_owner(live, recorded, &settings, input.composition);
        let (op, readiness) = conflict_or(refused, op, readiness, &settings);
        let latched = recorded.is_some_and(|rec| rec.ready.is_some());
        let superseded = input.prepared.superseded_by.contains_key(key);
        self.ready
            .insert(key, ready_for_next(&op, &readiness, latched, superseded));
        if !matches!(op, Op::Wait { .. }) {
            self.unblocked.insert(key);
        }
        self.wants_poll
            .push(!readiness.is_ready() || op.is_write() || matches!(op, Op::Wait { .. }));
        if let Some(interval) = settings.reconcile_interval {
            self.requeue = Some(self.requeue.map_or(interval, |r| r.min(interval)));
        }
        let previous = previous_snapshot(input, r, &op, live);
        self.steps.push(Step {
            key: key.clone(),
            op,
            hash: Some(hash),
            readiness,
            overrides: results,
            settings,
            previous,
        });
    }
}

/// Whether a resource counts as ready for the group after it, its readiness `latched`
/// (recorded in this synthesis) or not.
///
/// A fail-open resource blocks its dependents until its state records it ready (with no
/// readiness checks, once it was attempted), as Eno's readiness tree does; so does a
/// hands-off (`disable-reconciliation`) resource whose checks are not met. A resource the next
/// group also writes (`superseded`) counts as ready for that group only once its readiness is
/// recorded (Eno clears a pending dependency on a recorded readiness, after a pass that wrote
/// nothing): it settles before the later one starts. A resource still waiting for its own
/// group's turn, or left unwritten for want of CEL time, is not ready for the next group
/// whatever its live object says (that object is the previous synthesis's): as in Eno's tree,
/// it becomes ready in this synthesis once written and then ready.
fn ready_for_next(op: &Op, readiness: &ReadinessState, latched: bool, superseded: bool) -> bool {
    let waiting = matches!(
        op,
        Op::Wait { .. }
            | Op::Skip {
                reason: SkipReason::CelTimeSpent
            }
    );
    if superseded {
        latched
    } else {
        readiness.is_ready() && (latched || !waiting)
    }
}

/// The readiness of `r` before its operation: latched (recorded), or as Eno's
/// `EvalOptionally` says — without checks ready at once, present or not (a Patch with an
/// absent target, a hands-off resource); with checks only as they say.
fn readiness_of(
    r: &PreparedResource,
    live: Option<&Value>,
    recorded: Option<&Recorded>,
    settings: &Settings,
) -> ReadinessState {
    let unchecked = r.checks.is_empty() && r.settings.health == Health::Exists;
    match recorded.and_then(|rec| rec.ready.clone()) {
        _ if r.patch.is_some() && live.is_none() && unchecked => ReadinessState::Ready { at: None },
        Some(at) => ReadinessState::Ready { at: Some(at) },
        None if settings.disable_reconciliation && unchecked => ReadinessState::Ready { at: None },
        None => readiness::evaluate(&r.checks, r.settings.health, live),
    }
}

/// The operation for one resource before conflicts: left alone, waiting on its group, or
/// written (a Patch, or the object itself, created or updated when not in sync or not
/// labelled for the Composition).
fn operation(
    r: &PreparedResource,
    live: Option<&Value>,
    (object, hash): (&Snapshot<'_>, &str),
    settings: &Settings,
    waiting_on: Vec<ResourceKey>,
    input: &PlanInput<'_>,
) -> Op {
    // An object whose `managed-by` label was taken off (handed over under
    // `disable-reconciliation`, then enabled again) is written again to put it back.
    let labelled = r.patch.is_some() || labelled_for(live, &input.composition.uid);
    let recorded = input.recorded.get(&r.key);
    let in_sync = in_sync(live, recorded, settings, hash) && labelled;
    if settings.disable_reconciliation {
        Op::Skip {
            reason: SkipReason::ReconciliationDisabled,
        }
    } else if !waiting_on.is_empty() {
        Op::Wait { on: waiting_on }
    } else if r.patch.is_some() {
        patch_op(object, live, in_sync, settings)
    } else {
        write_op(
            (live.is_some(), labelled),
            in_sync,
            settings,
            object,
            &r.key,
            input,
        )
    }
}

/// What `key` must wait for: the not-ready resources of the next-lower readiness group
/// (computed once per group) and, for a custom resource, its CRD from the same synthesis.
fn waiting_on(
    key: &ResourceKey,
    ordering: &crate::ordering::Ordering,
    ready: &std::collections::HashMap<&ResourceKey, bool>,
    unready_in_group: &mut BTreeMap<i64, Vec<ResourceKey>>,
) -> Vec<ResourceKey> {
    let mut waiting_on: Vec<ResourceKey> = match ordering.previous_group(key) {
        None => Vec::new(),
        Some(g) => unready_in_group
            .entry(g)
            .or_insert_with(|| {
                ordering
                    .group_members(g)
                    .iter()
                    .filter(|d| !ready.get(d).copied().unwrap_or(false))
                    .cloned()
                    .collect()
            })
            .clone(),
    };
    if let Some(crd) = ordering.crd_dependency(key)
        && !ready.get(crd).copied().unwrap_or(false)
        && !waiting_on.contains(crd)
    {
        waiting_on.push(crd.clone());
        waiting_on.sort();
    }
    waiting_on
}
