//! The operation for one resource: in sync or not, apply or patch or delete, ownership refused,
//! the effective object after overrides.

use super::*;

/// The object to write for a resource: derived from its manifest only when an operation
/// writes it (an in-sync pass reads the hash alone), or given whole (after overrides).
pub(super) struct Snapshot<'a> {
    manifest: Option<(&'a Value, Option<snapshot::Owner<'a>>)>,
    object: std::cell::OnceCell<Value>,
}

impl<'a> Snapshot<'a> {
    /// The snapshot of `manifest` as written for `composition`, derived when first read.
    pub(super) fn of(manifest: &'a Value, composition: &'a CompositionInfo) -> Snapshot<'a> {
        Snapshot {
            manifest: Some((manifest, composition.owner())),
            object: std::cell::OnceCell::new(),
        }
    }

    /// The object.
    pub(super) fn get(&self) -> &Value {
        self.object.get_or_init(|| match self.manifest {
            Some((manifest, owner)) => snapshot::strip(manifest, owner),
            None => Value::Null,
        })
    }
}

impl From<Value> for Snapshot<'_> {
    fn from(object: Value) -> Self {
        Snapshot {
            manifest: None,
            object: std::cell::OnceCell::from(object),
        }
    }
}

/// Whether a resource that needs a write is in sync with its last apply: the snapshot's hash
/// is the applied one, and drift detection finds nothing (`off`; `interval` not due; or the
/// live resourceVersion is the applied one).
pub(super) fn in_sync(
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
/// by existence (and whether the live object carries this Composition's `managed-by` label),
/// sync state, settings and apply mode.
pub(super) fn write_op(
    (exists, labelled): (bool, bool),
    in_sync: bool,
    settings: &Settings,
    object: &Snapshot<'_>,
    key: &ResourceKey,
    input: &PlanInput<'_>,
) -> Op {
    let create_only =
        settings.disable_updates || settings.replace || input.options.mode == ApplyMode::ClientSide;
    if !exists {
        return if create_only {
            Op::Create {
                object: object.get().clone(),
            }
        } else {
            Op::Apply {
                object: object.get().clone(),
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
            object: object.get().clone(),
        }
    } else if input.options.mode == ApplyMode::ClientSide {
        let mut from = input
            .previous
            .get(key)
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new()));
        if let Some(l) = from
            .pointer_mut("/metadata/labels")
            .and_then(Value::as_object_mut)
        {
            if !labelled {
                // The label was taken off: the patch sets it again.
                l.remove(crds::names::annotations::MANAGED_BY.enoki);
            }
            // Every patch sets the shard label (`--shards`): an object written unsharded, for
            // another shard count, or relabelled by hand gets it.
            l.remove(crds::names::SHARD_LABEL);
        }
        let patch = merge_patch(&from, object.get());
        Op::MergePatch {
            from,
            to: object.get().clone(),
            patch,
        }
    } else {
        Op::Apply {
            object: object.get().clone(),
        }
    }
}

/// What a `Patch` does to its target: nothing when it is absent (never created), a delete
/// when an op sets `/metadata/deletionTimestamp` to a non-empty string (Eno), otherwise the
/// JSON patch — unless it was applied to this very version of the target already.
pub(super) fn patch_op(
    object: &Snapshot<'_>,
    live: Option<&Value>,
    in_sync: bool,
    settings: &Settings,
) -> Op {
    let Some(live) = live else {
        return Op::Skip {
            reason: SkipReason::PatchTargetAbsent,
        };
    };
    let ops = patch_ops(object.get());
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
pub(super) fn patch_ops(object: &Value) -> Value {
    object
        .pointer("/patch/ops")
        .cloned()
        .unwrap_or_else(|| Value::Array(Vec::new()))
}

/// Whether the ops delete the target: an op on `/metadata/deletionTimestamp` whose value is a
/// non-empty string (Eno's rule).
pub(super) fn patch_deletes(ops: &Value) -> bool {
    ops.as_array().into_iter().flatten().any(|op| {
        op.get("path").and_then(Value::as_str) == Some("/metadata/deletionTimestamp")
            && op
                .get("value")
                .and_then(Value::as_str)
                .is_some_and(|v| !v.is_empty())
    })
}

/// Why a live object must not be written for this Composition: the UID of the Composition
/// that owns it (unless that Composition is gone: then the object is adopted), or `""` for an
/// object enoki does not manage under `adopt: never` (never applied by this Composition).
/// `None`: it may be written.
pub(super) fn refused_owner(
    live: Option<&Value>,
    recorded: Option<&Recorded>,
    settings: &Settings,
    comp: &CompositionInfo,
) -> Option<String> {
    let ours = recorded.is_some_and(|rec| rec.applied_hash.is_some());
    let owner = foreign_owner(live, &comp.uid);
    if owner.as_ref().is_some_and(|o| comp.gone_owners.contains(o)) {
        // Managed by no live Composition: adopted, unless `adopt: never`.
        return (settings.adopt_never && !ours).then(String::new);
    }
    owner.or_else(|| {
        let unmanaged = live.is_some_and(|l| {
            l.pointer("/metadata/labels")
                .and_then(Value::as_object)
                .is_none_or(|m| {
                    !m.contains_key(crds::names::annotations::MANAGED_BY.enoki)
                        && !m.contains_key(crds::names::annotations::MANAGED_BY.eno)
                })
        });
        (settings.adopt_never && unmanaged && !ours).then(String::new)
    })
}

/// Whether `live` is not this Composition's to delete: another Composition's label is on it,
/// or `r` comes from a synthesis whose record was lost (the Composition records none, or a
/// tombstone taken from one) and the object lacks this Composition's label — such a synthesis
/// applied, at most, what it labelled. A Patch labels nothing: what its ops say holds.
pub(super) fn not_ours(r: &PreparedResource, live: Option<&Value>, c: &CompositionInfo) -> bool {
    if foreign_owner(live, &c.uid).is_some() {
        return true;
    }
    let marked = r.tombstone
        && r.manifest
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(crds::names::UNRECORDED_ANNOTATION))
            .is_some();
    (c.unrecorded || marked) && r.patch.is_none() && live.is_some() && !labelled_for(live, &c.uid)
}

/// Whether the live object's `managed-by` label (either spelling) names `uid` (always true
/// while the Composition's UID is unknown).
pub(super) fn labelled_for(live: Option<&Value>, uid: &str) -> bool {
    let labels = live.and_then(|l| l.pointer("/metadata/labels"));
    uid.is_empty()
        || [
            crds::names::annotations::MANAGED_BY.enoki,
            crds::names::annotations::MANAGED_BY.eno,
        ]
        .iter()
        .any(|k| labels.and_then(|l| l.get(*k)).and_then(Value::as_str) == Some(uid))
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
pub(super) fn deletion_step(r: &PreparedResource, live: Option<&Value>, op: Op) -> Step {
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
        previous: None,
    }
}

pub(super) fn delete_op(live: Option<&Value>, foreground: bool) -> Op {
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

/// The settings of `r` after its overrides (the ingested ones when it has none), and whether
/// an override was deferred for want of the pass's CEL time (the settings are then not to be
/// acted on: a deferred override may be the one that protects the object).
pub(super) fn settings_after_overrides(
    r: &PreparedResource,
    live: Option<&Value>,
    composition: &CompositionInfo,
) -> (Settings, bool) {
    if r.overrides.is_empty() {
        (r.settings.clone(), false)
    } else {
        let (_, settings, results) = effective(r, live, composition);
        let deferred = results
            .iter()
            .any(|o| o.status == overrides::OverrideStatus::Deferred);
        (settings, deferred)
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
pub(super) fn effective(
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
        settings::parse_as(
            &r.key,
            r.defaults_kind(),
            &annotations,
            &composition.annotations,
        )
        .unwrap_or_else(|_| r.settings.clone())
    };
    (
        snapshot::strip(&manifest, composition.owner()),
        settings,
        results,
    )
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
