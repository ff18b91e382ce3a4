//! The Plan: one op per resource, the readiness of each, and when to look again.
//!
//! [`prepare`] ingests a synthesis's output once (keys, settings, compiled CEL, parsed
//! overrides, the DAG) and fails with a [`PlanError`] naming the resource and key.
//! [`plan`] is then a pure function of (prepared output, composition, observed live objects,
//! recorded per-resource status, options). The fast path (seeds/002): when the snapshot's hash
//! and the live resourceVersion both equal what was recorded at the last apply, the op is
//! `Skip(InSync)` and the controller makes no API call at all.

use std::collections::BTreeMap;
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
pub const PATCH_API_VERSIONS: [&str; 2] = ["eno.azure.io/v1", "enoki.dev/v1alpha1"];

/// The target `(apiVersion, kind)` of a `Patch` pseudo-resource; `Ok(None)` for anything else.
///
/// # Errors
/// A message when it is a Patch without `patch.apiVersion`, `patch.kind` or a list `patch.ops`.
pub fn patch_target(manifest: &Value) -> Result<Option<(String, String)>, String> {
    let api_version = manifest
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if manifest.get("kind").and_then(Value::as_str) != Some("Patch")
        || !PATCH_API_VERSIONS.contains(&api_version)
    {
        return Ok(None);
    }
    let field = |name: &str| {
        manifest
            .pointer(&format!("/patch/{name}"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .ok_or_else(|| format!("a Patch needs patch.{name}"))
    };
    let target = (field("apiVersion")?, field("kind")?);
    match manifest.pointer("/patch/ops") {
        None | Some(Value::Array(_)) => Ok(Some(target)),
        Some(_) => Err("patch.ops must be a list of JSON patch operations".into()),
    }
}

/// A synthesis's output, ingested: parsed once, planned many times.
#[derive(Clone, Debug, PartialEq)]
pub struct Prepared {
    /// Every resource, sorted by key.
    pub resources: Vec<PreparedResource>,
    /// The readiness DAG over the live (non-tombstone) resources.
    pub ordering: Ordering,
}

/// Ingests a synthesis's output.
///
/// # Errors
/// The first invalid manifest, duplicate, bad annotation value, non-compiling CEL or bad
/// override (naming the resource and key), or a dependency cycle with all its members.
pub fn prepare(desired: &[Desired], composition: &CompositionInfo) -> Result<Prepared, PlanError> {
    let mut resources: Vec<PreparedResource> = Vec::with_capacity(desired.len());
    let mut seen = BTreeMap::new();
    for (index, d) in desired.iter().enumerate() {
        let key = ResourceKey::of(&d.manifest)
            .map_err(|message| PlanError::Manifest { index, message })?;
        if seen.insert(key.clone(), index).is_some() {
            return Err(PlanError::Duplicate {
                resource: key.to_string(),
            });
        }
        let annotations: BTreeMap<String, String> = d
            .manifest
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            v.as_str().map_or_else(|| v.to_string(), String::from),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let settings = settings::parse(&key, &annotations, &composition.annotations)?;
        let checks = settings::readiness_annotations(&annotations)
            .into_iter()
            .map(|(name, k, cel)| {
                Expr::compile(&cel)
                    .map(|expr| ReadinessCheck { name, expr })
                    .map_err(|message| PlanError::CompileCel {
                        resource: key.to_string(),
                        key: k,
                        message,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let overrides = match crds::names::annotations::OVERRIDES.get(&annotations) {
            None => Vec::new(),
            Some(text) => overrides::parse(text).map_err(|message| PlanError::Annotation {
                resource: key.to_string(),
                key: if annotations.contains_key(crds::names::annotations::OVERRIDES.enoki) {
                    crds::names::annotations::OVERRIDES.enoki.into()
                } else {
                    crds::names::annotations::OVERRIDES.eno.into()
                },
                message,
            })?,
        };
        let snapshot = overrides.is_empty().then(|| {
            let uid = (!composition.uid.is_empty()).then_some(composition.uid.as_str());
            let object = snapshot::strip(&d.manifest, uid);
            let hash = snapshot::hash(&object);
            (object, hash)
        });
        let patch =
            patch_target(&d.manifest).map_err(|message| PlanError::Manifest { index, message })?;
        resources.push(PreparedResource {
            key,
            manifest: d.manifest.clone(),
            tombstone: d.tombstone,
            settings,
            checks,
            overrides,
            snapshot,
            patch,
        });
    }
    resources.sort_by(|a, b| a.key.cmp(&b.key));
    let nodes: Vec<Node> = resources
        .iter()
        .filter(|r| !r.tombstone)
        .map(|r| Node {
            key: r.key.clone(),
            readiness_group: r.settings.readiness_group,
            defines: crd_defines(r),
        })
        .collect();
    let ordering = ordering::order(&nodes)?;
    Ok(Prepared {
        resources,
        ordering,
    })
}

fn crd_defines(r: &PreparedResource) -> Option<(String, String)> {
    if !r.key.is_crd() {
        return None;
    }
    let group = r.manifest.pointer("/spec/group")?.as_str()?;
    let kind = r.manifest.pointer("/spec/names/kind")?.as_str()?;
    Some((group.to_string(), kind.to_string()))
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
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            mode: ApplyMode::ServerSide,
            readiness_poll: Duration::from_secs(5),
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
    /// whatever happens, but ready only when it is (Eno).
    pub fn all_ready(&self) -> bool {
        self.steps.iter().all(|s| {
            s.readiness.is_ready()
                || matches!(
                    s.op,
                    Op::Skip {
                        reason: SkipReason::ReconciliationDisabled
                            | SkipReason::AlreadyDeleted
                            | SkipReason::Orphaned
                            | SkipReason::OwnedElsewhere
                            | SkipReason::PatchLeft
                            | SkipReason::PatchTargetAbsent
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

    for key in &input.prepared.ordering.order {
        let Some(r) = by_key.get(key) else { continue };
        let live = input.observed.get(key);
        let recorded = input.recorded.get(key);
        let (object, settings, results, hash) = match &r.snapshot {
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
        let readiness = match recorded.and_then(|rec| rec.ready.clone()) {
            Some(at) => ReadinessState::Ready { at: Some(at) },
            None => readiness::evaluate(&r.checks, r.settings.health, live),
        };
        let waiting_on = waiting_on(key, &input.prepared.ordering, &ready, &mut unready_in_group);
        let in_sync = in_sync(live, recorded, &settings, &hash);
        let op = if settings.disable_reconciliation {
            Op::Skip {
                reason: SkipReason::ReconciliationDisabled,
            }
        } else if !waiting_on.is_empty() {
            Op::Wait { on: waiting_on }
        } else if r.patch.is_some() {
            patch_op(&object, live, in_sync, &settings)
        } else {
            write_op(live.is_some(), in_sync, &settings, &object, key, &input)
        };
        // A Patch whose target is absent has nothing to wait for.
        let readiness = if r.patch.is_some() && live.is_none() {
            ReadinessState::Ready { at: None }
        } else {
            readiness
        };
        let refused = refused_owner(live, recorded, &settings, &input.composition.uid);
        let (op, readiness) = match refused {
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
        };
        let exempt = settings.disable_reconciliation || settings.fail_open;
        ready.insert(key, readiness.is_ready() || exempt);
        if !(readiness.is_ready() || exempt) || op.is_write() || matches!(op, Op::Wait { .. }) {
            poll = true;
        }
        if let Some(interval) = settings.reconcile_interval {
            requeue = Some(requeue.map_or(interval, |r: Duration| r.min(interval)));
        }
        steps.push(Step {
            key: key.clone(),
            op,
            hash: Some(hash),
            readiness,
            overrides: results,
            settings,
        });
    }

    poll |= tombstone_steps(&input, &mut steps);

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

/// The steps of the tombstones (resources the previous synthesis had and this one dropped):
/// deleted unless reconciliation is disabled or another Composition now owns them. Whether
/// one still exists (so the pass must look again).
fn tombstone_steps(input: &PlanInput<'_>, steps: &mut Vec<Step>) -> bool {
    let mut poll = false;
    for r in input.prepared.resources.iter().filter(|r| r.tombstone) {
        let live = input.observed.get(&r.key);
        if r.patch.is_some() {
            let op = Op::Skip {
                reason: SkipReason::PatchLeft,
            };
            steps.push(deletion_step(r, live, op));
            continue;
        }
        if foreign_owner(live, &input.composition.uid).is_some() {
            steps.push(deletion_step(
                r,
                None,
                Op::Skip {
                    reason: SkipReason::OwnedElsewhere,
                },
            ));
            continue;
        }
        // Overrides decide deletion too (Eno's resource-migration recipe).
        let settings = settings_after_overrides(r, live, input.composition);
        let foreground = settings.deletion_strategy == DeletionStrategy::Foreground;
        let op = if settings.disable_reconciliation {
            Op::Skip {
                reason: SkipReason::ReconciliationDisabled,
            }
        } else {
            delete_op(live, foreground)
        };
        if live.is_some()
            && !matches!(
                op,
                Op::Skip {
                    reason: SkipReason::ReconciliationDisabled
                }
            )
        {
            poll = true;
        }
        steps.push(deletion_step(r, live, op));
    }
    poll
}

/// Whether a resource that needs a write is in sync with its last apply: the snapshot's hash
/// is the applied one, and drift detection finds nothing (`off`; `interval` not due; or the
/// live resourceVersion is the applied one).
fn in_sync(
    live: Option<&Value>,
    recorded: Option<&Recorded>,
    settings: &Settings,
    hash: &str,
) -> bool {
    live.is_some_and(|l| {
        let rv = l
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str);
        recorded.is_some_and(|rec| {
            rec.applied_hash.as_deref() == Some(hash)
                && (settings.drift == crate::settings::Drift::Off
                    || (settings.drift == crate::settings::Drift::Interval && !rec.interval_due)
                    || (rv.is_some() && rec.applied_resource_version.as_deref() == rv))
        })
    })
}

/// The op of a resource that waits on nothing: create, apply, replace, merge-patch or skip,
/// by existence, sync state, settings and apply mode.
fn write_op(
    exists: bool,
    in_sync: bool,
    settings: &Settings,
    object: &Value,
    key: &ResourceKey,
    input: &PlanInput<'_>,
) -> Op {
    let create_only =
        settings.disable_updates || settings.replace || input.options.mode == ApplyMode::ClientSide;
    if !exists {
        return if create_only {
            Op::Create {
                object: object.clone(),
            }
        } else {
            Op::Apply {
                object: object.clone(),
            }
        };
    }
    if settings.disable_updates {
        Op::Skip {
            reason: SkipReason::UpdatesDisabled,
        }
    } else if in_sync {
        Op::Skip {
            reason: SkipReason::InSync,
        }
    } else if settings.replace {
        Op::Replace {
            object: object.clone(),
        }
    } else if input.options.mode == ApplyMode::ClientSide {
        let from = input
            .previous
            .get(key)
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new()));
        let patch = merge_patch(&from, object);
        Op::MergePatch {
            from,
            to: object.clone(),
            patch,
        }
    } else {
        Op::Apply {
            object: object.clone(),
        }
    }
}

/// What a `Patch` does to its target: nothing when it is absent (never created), a delete
/// when an op sets `/metadata/deletionTimestamp` to a non-empty string (Eno), otherwise the
/// JSON patch — unless it was applied to this very version of the target already.
fn patch_op(object: &Value, live: Option<&Value>, in_sync: bool, settings: &Settings) -> Op {
    let Some(live) = live else {
        return Op::Skip {
            reason: SkipReason::PatchTargetAbsent,
        };
    };
    let ops = patch_ops(object);
    if patch_deletes(&ops) {
        return delete_op(
            Some(live),
            settings.deletion_strategy == DeletionStrategy::Foreground,
        );
    }
    if ops.as_array().is_none_or(Vec::is_empty) || in_sync {
        Op::Skip {
            reason: SkipReason::InSync,
        }
    } else {
        Op::JsonPatch { ops }
    }
}

/// The `patch.ops` list of a Patch (empty when missing).
fn patch_ops(object: &Value) -> Value {
    object
        .pointer("/patch/ops")
        .cloned()
        .unwrap_or_else(|| Value::Array(Vec::new()))
}

/// Whether the ops delete the target: an op on `/metadata/deletionTimestamp` whose value is a
/// non-empty string (Eno's rule).
fn patch_deletes(ops: &Value) -> bool {
    ops.as_array().into_iter().flatten().any(|op| {
        op.get("path").and_then(Value::as_str) == Some("/metadata/deletionTimestamp")
            && op
                .get("value")
                .and_then(Value::as_str)
                .is_some_and(|v| !v.is_empty())
    })
}

/// Why a live object must not be written for this Composition: the UID of the Composition
/// that owns it, or `""` for an object enoki does not manage under `adopt: never` (never
/// applied by this Composition). `None`: it may be written.
fn refused_owner(
    live: Option<&Value>,
    recorded: Option<&Recorded>,
    settings: &Settings,
    uid: &str,
) -> Option<String> {
    foreign_owner(live, uid).or_else(|| {
        let unmanaged = live.is_some_and(|l| {
            l.pointer("/metadata/labels")
                .and_then(Value::as_object)
                .is_none_or(|m| {
                    !m.contains_key(crds::names::annotations::MANAGED_BY.enoki)
                        && !m.contains_key(crds::names::annotations::MANAGED_BY.eno)
                })
        });
        let ours = recorded.is_some_and(|rec| rec.applied_hash.is_some());
        (settings.adopt_never && unmanaged && !ours).then(String::new)
    })
}

/// The UID in the live object's `managed-by` label (either spelling) when it names another
/// Composition. `None` for objects without the label (adopted, Eno semantics), for this
/// Composition's own, and when this Composition's UID is unknown.
pub fn foreign_owner(live: Option<&Value>, uid: &str) -> Option<String> {
    if uid.is_empty() {
        return None;
    }
    let labels = live?.pointer("/metadata/labels")?.as_object()?;
    let owner = [
        crds::names::annotations::MANAGED_BY.enoki,
        crds::names::annotations::MANAGED_BY.eno,
    ]
    .iter()
    .find_map(|k| labels.get(*k).and_then(Value::as_str))?;
    (!owner.is_empty() && owner != uid).then(|| owner.to_string())
}

/// The step of a resource being deleted (a tombstone, or any resource of a deleted
/// Composition): no snapshot, no overrides; "ready" just means it still exists.
fn deletion_step(r: &PreparedResource, live: Option<&Value>, op: Op) -> Step {
    Step {
        key: r.key.clone(),
        op,
        hash: None,
        readiness: if live.is_some() {
            ReadinessState::Ready { at: None }
        } else {
            ReadinessState::Absent
        },
        overrides: Vec::new(),
        settings: r.settings.clone(),
    }
}

fn delete_op(live: Option<&Value>, foreground: bool) -> Op {
    match live {
        None => Op::Skip {
            reason: SkipReason::AlreadyDeleted,
        },
        Some(l)
            if l.pointer("/metadata/deletionTimestamp")
                .is_some_and(|t| !t.is_null()) =>
        {
            Op::Skip {
                reason: SkipReason::Terminating,
            }
        }
        Some(_) => Op::Delete { foreground },
    }
}

/// The settings of `r` after its overrides (the ingested ones when it has none).
fn settings_after_overrides(
    r: &PreparedResource,
    live: Option<&Value>,
    composition: &CompositionInfo,
) -> Settings {
    if r.overrides.is_empty() {
        r.settings.clone()
    } else {
        effective(r, live, composition).1
    }
}

/// What enoki would apply for `r` over `live`: the snapshot (overrides applied, reserved keys
/// stripped, managed-by label set) and the settings after overrides (`enoki diff`).
pub fn desired_snapshot(
    r: &PreparedResource,
    live: Option<&Value>,
    composition: &CompositionInfo,
) -> (Value, Settings) {
    let (snapshot, settings, _) = effective(r, live, composition);
    (snapshot, settings)
}

/// The snapshot to apply (overrides applied, reserved keys stripped, managed-by label set),
/// the settings after overrides, and the override outcomes.
fn effective(
    r: &PreparedResource,
    live: Option<&Value>,
    composition: &CompositionInfo,
) -> (Value, Settings, Vec<OverrideResult>) {
    let mut manifest = r.manifest.clone();
    let results = overrides::apply_all(&mut manifest, &r.overrides, live, &composition.cel_value());
    // Cascaded flags are read after overrides (Eno); a value an override broke falls back.
    let settings = if r.overrides.is_empty() {
        r.settings.clone()
    } else {
        let annotations: BTreeMap<String, String> = manifest
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        settings::parse(&r.key, &annotations, &composition.annotations)
            .unwrap_or_else(|_| r.settings.clone())
    };
    let uid = (!composition.uid.is_empty()).then_some(composition.uid.as_str());
    (snapshot::strip(&manifest, uid), settings, results)
}

/// Composition deletion, ordered as Eno orders it: only resources with a deletion group are
/// ordered (an explicit `deletion-group`, or Eno's infrastructure kinds, which default to the
/// negation of their create group); the others are deleted at once and hold nothing back. A
/// group waits until every resource of the lower groups is released: gone, or — for a
/// background delete — terminating (it has a `deletionTimestamp`).
fn plan_deletion(input: PlanInput<'_>) -> Plan {
    let mut ranked: Vec<(Option<i64>, &PreparedResource, Settings)> = input
        .prepared
        .resources
        .iter()
        .map(|r| {
            let settings =
                settings_after_overrides(r, input.observed.get(&r.key), input.composition);
            let group = ordering::deletion_group(&r.key, settings.deletion_group);
            (group, r, settings)
        })
        .collect();
    ranked.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.key.cmp(&b.1.key)));
    let mut steps = Vec::with_capacity(ranked.len());
    let mut poll = false;
    let mut held_below: Vec<ResourceKey> = Vec::new();
    let mut current_rank: Option<Option<i64>> = None;
    let mut held_in_rank: Vec<ResourceKey> = Vec::new();
    for (rank, r, settings) in ranked {
        if current_rank != Some(rank) {
            held_below.append(&mut held_in_rank);
            current_rank = Some(rank);
        }
        let live = input.observed.get(&r.key);
        let foreground = settings.deletion_strategy == DeletionStrategy::Foreground;
        let foreign = foreign_owner(live, &input.composition.uid).is_some();
        // Another Composition's object is never deleted, and nothing waits for it.
        let live = if foreign { None } else { live };
        let op = if foreign {
            Op::Skip {
                reason: SkipReason::OwnedElsewhere,
            }
        } else if settings.disable_reconciliation {
            Op::Skip {
                reason: SkipReason::ReconciliationDisabled,
            }
        } else if r.patch.is_some()
            && !patch_deletes(&patch_ops(&effective(r, live, input.composition).0))
        {
            // A Patch leaves its target on Composition deletion, unless (e.g. through an
            // override on `composition.metadata.deletionTimestamp`) it deletes it.
            Op::Skip {
                reason: SkipReason::PatchLeft,
            }
        } else if settings.deletion_strategy == DeletionStrategy::Orphan {
            Op::Skip {
                reason: SkipReason::Orphaned,
            }
        } else if rank.is_some() && live.is_some() && !held_below.is_empty() {
            Op::Wait {
                on: held_below.clone(),
            }
        } else {
            delete_op(live, foreground)
        };
        let kept = matches!(
            op,
            Op::Skip {
                reason: SkipReason::ReconciliationDisabled
                    | SkipReason::Orphaned
                    | SkipReason::PatchLeft
            }
        );
        if live.is_some() && !kept {
            poll = true;
            let terminating = live
                .and_then(|l| l.pointer("/metadata/deletionTimestamp"))
                .is_some_and(|t| !t.is_null());
            if rank.is_some() && (foreground || !terminating) {
                held_in_rank.push(r.key.clone());
            }
        }
        steps.push(deletion_step(r, live, op));
    }
    Plan {
        steps,
        requeue: poll.then_some(input.options.readiness_poll),
    }
}

/// RFC 7386 JSON merge patch turning `from` into `to`: removed keys become `null`.
pub fn merge_patch(from: &Value, to: &Value) -> Value {
    match (from, to) {
        (Value::Object(f), Value::Object(t)) => {
            let mut patch = Map::new();
            for (k, fv) in f {
                match t.get(k) {
                    None => {
                        patch.insert(k.clone(), Value::Null);
                    }
                    Some(tv) if tv != fv => {
                        patch.insert(k.clone(), merge_patch(fv, tv));
                    }
                    Some(_) => {}
                }
            }
            for (k, tv) in t {
                if !f.contains_key(k) {
                    patch.insert(k.clone(), tv.clone());
                }
            }
            Value::Object(patch)
        }
        (_, to) => to.clone(),
    }
}
