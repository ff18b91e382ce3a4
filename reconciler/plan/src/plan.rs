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
use crate::settings::{self, DeletionStrategy, Settings};
use crate::snapshot;

mod deletion;
mod ops;
mod prepare;
use deletion::*;
pub use ops::*;
pub use prepare::*;

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
}

impl CompositionInfo {
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
    let uid = (!input.composition.uid.is_empty()).then_some(input.composition.uid.as_str());
    let p = snapshot::strip(&p, uid);
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

/// One item of a synthesis's output.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    /// The manifest (namespace already defaulted by the caller).
    pub manifest: Value,
    /// A tombstone: dropped since the previous synthesis, to be deleted.
    pub tombstone: bool,
}

/// One ingested resource.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedResource {
    /// Identity.
    pub key: ResourceKey,
    /// The manifest as synthesized.
    pub manifest: Value,
    /// A tombstone.
    pub tombstone: bool,
    /// Settings parsed from the manifest's annotations (before overrides).
    pub settings: Settings,
    /// Compiled readiness checks.
    pub checks: Vec<ReadinessCheck>,
    /// Parsed overrides.
    pub overrides: Vec<Override>,
    /// The snapshot and its canonical hash, computed once at ingestion when no override can
    /// change them (no overrides): a pass over an in-sync resource then costs no copy.
    pub snapshot: Option<(Value, String)>,
    /// A `Patch` pseudo-resource (Eno's `eno.azure.io/v1 Patch`, enoki's
    /// `enoki.dev/v1alpha1 Patch`): the object it patches, `(apiVersion, kind)`; the name and
    /// namespace are the Patch's own.
    pub patch: Option<(String, String)>,
}

/// API versions of the `Patch` pseudo-kind.
pub use crds::names::PATCH_API_VERSIONS;

/// A synthesis's output, ingested: parsed once, planned many times.
#[derive(Clone, Debug, PartialEq)]
pub struct Prepared {
    /// Every resource, sorted by key.
    pub resources: Vec<PreparedResource>,
    /// The readiness DAG over the live (non-tombstone) resources.
    pub ordering: Ordering,
    /// Eno's backtracking rule (`internal/resource/tree.go`, `Backtracks`): a resource whose
    /// object (a Patch's target) is also written by a member of the next readiness group, with
    /// those members. Once the later one may go ahead, the earlier one is left alone, so the
    /// two never undo each other.
    pub superseded_by: BTreeMap<ResourceKey, Vec<ResourceKey>>,
}

/// What was recorded about a resource at its last reconciliation (ResourceSlice status).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recorded {
    /// Hash of the last applied snapshot.
    pub applied_hash: Option<String>,
    /// resourceVersion the server returned for that apply.
    pub applied_resource_version: Option<String>,
    /// Ready time latched in this synthesis.
    pub ready: Option<String>,
    /// `drift: interval` only: the resource's `reconcile-interval` has elapsed since it was
    /// last checked, so a foreign change (resourceVersion differs) is re-applied now.
    pub interval_due: bool,
}

/// How resources are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum ApplyMode {
    /// Server-side apply (field manager `enoki`, force).
    #[default]
    ServerSide,
    /// Client-side: JSON merge patch from the previous snapshot (`--disable-ssa`).
    ClientSide,
}

/// Options of the planner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// How resources are written.
    pub mode: ApplyMode,
    /// How soon to look again while something is not ready.
    pub readiness_poll: Duration,
    /// `--fail-open`: resources without their own `fail-open` annotation fail open (Eno).
    pub fail_open: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            mode: ApplyMode::ServerSide,
            readiness_poll: Duration::from_secs(5),
            fail_open: false,
        }
    }
}

/// Live state as observed (by key; absent keys do not exist).
pub type Observed = std::collections::HashMap<ResourceKey, Value>;

/// Everything [`plan`] reads.
#[derive(Clone, Copy, Debug)]
pub struct PlanInput<'a> {
    /// The ingested synthesis output.
    pub prepared: &'a Prepared,
    /// The Composition.
    pub composition: &'a CompositionInfo,
    /// Live objects.
    pub observed: &'a Observed,
    /// Recorded per-resource status.
    pub recorded: &'a std::collections::HashMap<ResourceKey, Recorded>,
    /// Snapshots applied by the previous synthesis (for client-side merge patches).
    pub previous: &'a std::collections::HashMap<ResourceKey, Value>,
    /// Options.
    pub options: PlanOptions,
}

/// Why a resource needs no write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SkipReason {
    /// Hash and resourceVersion match the last apply: no API call at all.
    InSync,
    /// `disable-updates` and the object exists.
    UpdatesDisabled,
    /// `disable-reconciliation`.
    ReconciliationDisabled,
    /// To be deleted, and already gone.
    AlreadyDeleted,
    /// Composition deletion with `deletion-strategy: orphan`.
    Orphaned,
    /// `prune: disabled`: dropped from the output, or its Composition deleted, and left.
    PruneDisabled,
    /// Deletion already in progress.
    Terminating,
    /// The object carries another Composition's `managed-by` label: it is never deleted on
    /// this Composition's behalf.
    OwnedElsewhere,
    /// A `Patch` whose target does not exist: patches never create.
    PatchTargetAbsent,
    /// A `Patch` dropped from the output, or its Composition deleted: the target is left as
    /// it is (patches are not reverted).
    PatchLeft,
    /// The pass spent its CEL time before this resource's overrides were evaluated: it is not
    /// written without them, and is planned again at the next poll.
    CelTimeSpent,
    /// A member of the next readiness group writes the same object (a Patch and the resource
    /// it patches) and may go ahead: this one is left as it is (Eno's backtracking rule).
    Superseded,
}

/// The one thing to do with a resource.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Op {
    /// Server-side apply this object.
    Apply {
        /// The snapshot.
        object: Value,
    },
    /// Create this object (create-only, replace or client-side mode, object absent).
    Create {
        /// The snapshot.
        object: Value,
    },
    /// PUT this object over the live one.
    Replace {
        /// The snapshot.
        object: Value,
    },
    /// JSON merge patch (client-side mode).
    MergePatch {
        /// The previously applied snapshot (`{}` when none).
        from: Value,
        /// The new snapshot.
        to: Value,
        /// RFC 7386 patch from `from` to `to`: dropped fields are `null`.
        patch: Value,
    },
    /// RFC 6902 JSON patch of an existing object (a `Patch` pseudo-resource).
    JsonPatch {
        /// The operations.
        ops: Value,
    },
    /// Delete the object.
    Delete {
        /// Wait until it is gone before counting it deleted.
        foreground: bool,
    },
    /// Nothing to do.
    Skip {
        /// Why.
        reason: SkipReason,
    },
    /// Not yet: these resources must be ready (or gone, when deleting) first.
    Wait {
        /// The resources waited on.
        on: Vec<ResourceKey>,
    },
    /// The object exists and carries another Composition's `managed-by` label, or no such
    /// label under `adopt: never`: it is not taken over (nothing is written).
    Conflict {
        /// The UID of the Composition that owns it; empty: an object enoki does not manage.
        owner: String,
    },
}

impl Op {
    /// Whether the op writes to the cluster.
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            Op::Skip { .. } | Op::Wait { .. } | Op::Conflict { .. }
        )
    }
}

/// The plan for one resource.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    /// The resource.
    pub key: ResourceKey,
    /// What to do.
    pub op: Op,
    /// Canonical hash of the snapshot (not for deletions).
    pub hash: Option<String>,
    /// Readiness observed now (latched if recorded).
    pub readiness: ReadinessState,
    /// Override outcomes.
    pub overrides: Vec<OverrideResult>,
    /// Effective settings (after overrides).
    pub settings: Settings,
    /// Server-side apply over an existing object during the first passes of a new synthesis:
    /// the previous synthesis's snapshot of it (with this resource's overrides), when it
    /// differs from `object`. Fields it had that `object` lacks must go even if another
    /// manager co-owns them (Eno's ownership repair, e.g. after `managedFields` were wiped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous: Option<Value>,
}

/// The whole plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// One step per resource: creation order, or deletion order while deleting.
    pub steps: Vec<Step>,
    /// When to look again: readiness poll, the shortest reconcile interval, or never.
    #[serde(with = "requeue_ser")]
    pub requeue: Option<Duration>,
}

mod requeue_ser {
    use std::time::Duration;
    pub fn serialize<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&humantime::format_duration(*d).to_string()),
            None => s.serialize_none(),
        }
    }
}

impl Plan {
    /// Every non-tombstone resource is ready (or exempt). A `fail-open` resource is reconciled
    /// whatever happens, and ready when it is (recorded ready after a failed attempt when it
    /// has no readiness checks, as Eno).
    pub fn all_ready(&self) -> bool {
        self.steps.iter().all(|s| {
            s.readiness.is_ready()
                || matches!(
                    s.op,
                    Op::Skip {
                        reason: SkipReason::ReconciliationDisabled
                            | SkipReason::AlreadyDeleted
                            | SkipReason::Orphaned
                            | SkipReason::PruneDisabled
                            | SkipReason::OwnedElsewhere
                            | SkipReason::PatchLeft
                            | SkipReason::PatchTargetAbsent
                            | SkipReason::Superseded
                    } | Op::Delete { .. }
                )
        })
    }

    /// Nothing is left to write or wait for.
    pub fn settled(&self) -> bool {
        self.steps.iter().all(|s| matches!(s.op, Op::Skip { .. }))
    }
}

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
    let mut steps: Vec<Step> = Vec::with_capacity(input.prepared.resources.len());
    let mut ready: std::collections::HashMap<&ResourceKey, bool> =
        std::collections::HashMap::with_capacity(input.prepared.resources.len());
    let mut unready_in_group: BTreeMap<i64, Vec<ResourceKey>> = BTreeMap::new();
    let mut requeue: Option<Duration> = None;
    let mut poll = false;
    let mut unblocked: BTreeSet<&ResourceKey> = BTreeSet::new();
    let mut wants_poll: Vec<bool> = Vec::with_capacity(input.prepared.resources.len());

    for key in &input.prepared.ordering.order {
        let Some(r) = by_key.get(key) else { continue };
        let live = input.observed.get(key);
        let recorded = input.recorded.get(key);
        let (object, mut settings, results, hash) = match &r.snapshot {
            Some((object, hash)) => (
                std::borrow::Cow::Borrowed(object),
                r.settings.clone(),
                Vec::new(),
                hash.clone(),
            ),
            None => {
                let (object, settings, results) = effective(r, live, input.composition);
                let hash = snapshot::hash(&object);
                (std::borrow::Cow::Owned(object), settings, results, hash)
            }
        };
        // Eno reads fail-open from the resource as synthesized, before overrides.
        settings.fail_open = Some(r.settings.fail_open.unwrap_or(input.options.fail_open));
        let readiness = match recorded.and_then(|rec| rec.ready.clone()) {
            Some(at) => ReadinessState::Ready { at: Some(at) },
            None => readiness::evaluate(&r.checks, r.settings.health, live),
        };
        let waiting_on = waiting_on(key, &input.prepared.ordering, &ready, &mut unready_in_group);
        // An object whose `managed-by` label was taken off (handed over under
        // `disable-reconciliation`, then enabled again) is written again to put it back.
        let labelled = r.patch.is_some() || labelled_for(live, &input.composition.uid);
        let in_sync = in_sync(live, recorded, &settings, &hash) && labelled;
        let deferred = results
            .iter()
            .any(|o| o.status == overrides::OverrideStatus::Deferred);
        let op = if settings.disable_reconciliation {
            Op::Skip {
                reason: SkipReason::ReconciliationDisabled,
            }
        } else if deferred {
            poll = true;
            Op::Skip {
                reason: SkipReason::CelTimeSpent,
            }
        } else if !waiting_on.is_empty() {
            Op::Wait { on: waiting_on }
        } else if r.patch.is_some() {
            patch_op(&object, live, in_sync, &settings)
        } else {
            write_op(
                (live.is_some(), labelled),
                in_sync,
                &settings,
                &object,
                key,
                &input,
            )
        };
        // A Patch whose target is absent has nothing to wait for.
        let readiness = if r.patch.is_some() && live.is_none() {
            ReadinessState::Ready { at: None }
        } else {
            readiness
        };
        let refused = refused_owner(live, recorded, &settings, input.composition);
        let (op, readiness) = conflict_or(refused, op, readiness, &settings);
        // A fail-open resource blocks its dependents until its state records it ready (with
        // no readiness checks, once it was attempted), as Eno's readiness tree does.
        let exempt = settings.disable_reconciliation;
        // A resource the next group also writes counts as ready for that group only once its
        // readiness is recorded (Eno clears a pending dependency on a recorded readiness, after
        // a pass that wrote nothing): it settles before the later one starts.
        let latched = recorded.is_some_and(|rec| rec.ready.is_some());
        if input.prepared.superseded_by.contains_key(key) {
            ready.insert(key, latched || exempt);
        } else {
            ready.insert(key, readiness.is_ready() || exempt);
        }
        if !matches!(op, Op::Wait { .. }) {
            unblocked.insert(key);
        }
        wants_poll.push(
            !(readiness.is_ready() || exempt) || op.is_write() || matches!(op, Op::Wait { .. }),
        );
        if let Some(interval) = settings.reconcile_interval {
            requeue = Some(requeue.map_or(interval, |r: Duration| r.min(interval)));
        }
        let previous = previous_snapshot(&input, r, &op, live);
        steps.push(Step {
            key: key.clone(),
            op,
            hash: Some(hash),
            readiness,
            overrides: results,
            settings,
            previous,
        });
    }

    supersede(&input, &unblocked, &mut steps);
    poll |= still_wants_poll(&steps, &wants_poll);
    poll |= tombstone_steps(&input, &mut steps);
    resolve_fail_open(&mut steps, input.options.fail_open);

    if poll {
        requeue = Some(requeue.map_or(input.options.readiness_poll, |r| {
            r.min(input.options.readiness_poll)
        }));
    }
    Plan { steps, requeue }
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
