//! The planner's data: what goes in (a synthesis prepared, what is observed and recorded,
//! options) and what comes out (steps, their operations and why some are skipped).

use super::*;

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
    /// The canonical hash of the snapshot, computed once at ingestion when no override can
    /// change it (no overrides): a pass over an in-sync resource then costs no copy, and the
    /// snapshot itself is derived from the manifest again only for a write (a cached
    /// synthesis holds one copy of its manifests).
    pub snapshot_hash: Option<String>,
    /// A `Patch` pseudo-resource (Eno's `eno.azure.io/v1 Patch`, enoki's
    /// `enoki.dev/v1alpha1 Patch`): the object it patches, `(apiVersion, kind)`; the name and
    /// namespace are the Patch's own.
    pub patch: Option<(String, String)>,
}

impl PreparedResource {
    /// The kind whose default readiness and deletion groups it takes: a Patch its target's
    /// (Eno's `managedCreateOrder[res.GVK.Kind]`, with the target's GVK), anything else its own.
    pub fn defaults_kind(&self) -> &str {
        self.patch
            .as_ref()
            .map_or(self.key.kind.as_str(), |(_, kind)| kind.as_str())
    }
}

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

    /// Whether the op leaves nothing to do: a skip, but not one deferred for want of the
    /// pass's CEL time (that resource is still to be written or deleted).
    pub fn is_done_skip(&self) -> bool {
        matches!(self, Op::Skip { reason } if *reason != SkipReason::CelTimeSpent)
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

    /// Nothing is left to write, wait for, or defer.
    pub fn settled(&self) -> bool {
        self.steps.iter().all(|s| s.op.is_done_skip())
    }
}
