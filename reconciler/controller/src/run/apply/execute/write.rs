//! The writes of one step: server-side apply or create/replace, the handover of an object
//! another manager holds, and the release of an object's `managed-by` label.

use super::*;

/// Takes the `managed-by` label (either spelling) naming `uid`, and the `shard` label, off an
/// object left for good (kept by `prune: disabled`, orphaned), so that another Composition — or this one, created
/// again — may adopt it later. The patch tests the label's value first: an object another
/// Composition took meanwhile keeps its label. A refusal (403) is logged and does not hold
/// the Composition (its deletion in particular) back; a transient failure is returned, for
/// the caller to retry.
///
/// # Errors
/// The API server's answer when it is neither success, 404 nor 422.
pub(crate) async fn release(
    api: &Api<DynamicObject>,
    what: &str,
    name: &str,
    live: &Value,
    uid: &str,
) -> Result<(), kube::Error> {
    let labels = live.pointer("/metadata/labels").and_then(Value::as_object);
    let ops: Vec<Value> = [
        crds::names::annotations::MANAGED_BY.enoki,
        crds::names::annotations::MANAGED_BY.eno,
    ]
    .iter()
    .filter(|k| {
        !uid.is_empty() && labels.and_then(|l| l.get(**k)).and_then(Value::as_str) == Some(uid)
    })
    .flat_map(|k| {
        let path = format!(
            "/metadata/labels/{}",
            k.replace('~', "~0").replace('/', "~1")
        );
        [
            serde_json::json!({"op": "test", "path": path, "value": uid}),
            serde_json::json!({"op": "remove", "path": path}),
        ]
    })
    .collect();
    if ops.is_empty() {
        return Ok(());
    }
    // Its shard label goes with it (what no Composition owns is in no shard); added first, so
    // that the removal holds whether or not the object has it.
    let shard = format!(
        "/metadata/labels/{}",
        crds::names::SHARD_LABEL.replace('/', "~1")
    );
    let ops: Vec<Value> = ops
        .into_iter()
        .chain([
            serde_json::json!({"op": "add", "path": shard, "value": ""}),
            serde_json::json!({"op": "remove", "path": shard}),
        ])
        .collect();
    let Ok(patch) = serde_json::from_value::<json_patch::Patch>(Value::Array(ops)) else {
        return Ok(());
    };
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match api.patch(name, &params, &Patch::<()>::Json(patch)).await {
        Ok(_) => tracing::info!(resource = %what, "left in place; managed-by label removed"),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 422 => {}
        Err(e) => {
            tracing::warn!(resource = %what, error = %summarize(&e), "left in place; its managed-by label could not be removed");
            return Err(e);
        }
    }
    Ok(())
}

/// A resourceVersion no object has: a server-side apply carrying it creates an object that
/// does not exist and is refused (409) for one that does — a create that never takes over.
pub(crate) const NO_OBJECT_HAS: &str = "18446744073709551615";

/// Performs one write. `(live, guarded)`: the live object as observed, and whether it was
/// absent from the cache without being read (the write must not take over an object that
/// exists after all: a 409 then says so, and the next pass reads it).
pub(super) async fn write(
    api: &Api<DynamicObject>,
    op: &Op,
    key: &ResourceKey,
    (live, guarded): (Option<&Value>, bool),
    migrating: Handover<'_>,
) -> Result<Option<DynamicObject>, Unwritten> {
    let rv_of = Some;
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    let result = match op {
        Op::Apply { object } if guarded => {
            let mut object = object.clone();
            if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("resourceVersion".into(), NO_OBJECT_HAS.into());
            }
            let pp = PatchParams::apply(FIELD_MANAGER).force();
            api.patch(&key.name, &pp, &Patch::Apply(&object))
                .await
                .map(rv_of)
        }
        Op::Apply { object } => apply(api, &key.name, object, migrating).await.map(rv_of),
        Op::Create { object } => {
            let obj: DynamicObject =
                serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
            api.create(&pp, &obj).await.map(rv_of)
        }
        Op::Replace { object } => {
            let mut object = object.clone();
            if let Some(rv) = live.and_then(|l| l.pointer("/metadata/resourceVersion")) {
                object["metadata"]["resourceVersion"] = rv.clone();
            }
            let obj: DynamicObject = serde_json::from_value(object).map_err(|e| e.to_string())?;
            api.replace(&key.name, &pp, &obj).await.map(rv_of)
        }
        Op::MergePatch { patch, .. } => api
            .patch(
                &key.name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::Merge(patch),
            )
            .await
            .map(rv_of),
        Op::JsonPatch { ops } => {
            let ops: json_patch::Patch =
                serde_json::from_value(ops.clone()).map_err(|e| format!("patch.ops: {e}"))?;
            api.patch(
                &key.name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                },
                &Patch::<()>::Json(ops),
            )
            .await
            .map(rv_of)
        }
        // The API server's default propagation, as Eno deletes (`client.Delete` with no
        // options), also for `deletion-strategy: foreground`: what makes that strategy is the
        // plan waiting until the object is gone, not its dependents.
        Op::Delete { .. } => match api.delete(&key.name, &DeleteParams::default()).await {
            Ok(_) => Ok(None),
            Err(kube::Error::Api(resp)) if resp.code == 404 => Ok(None),
            Err(e) => Err(e),
        },
        Op::Skip { .. } | Op::Wait { .. } | Op::Conflict { .. } => Ok(None),
    };
    result.map_err(|e| match e {
        kube::Error::Api(resp) if guarded && resp.code == 409 => Unwritten::Unseen,
        e => Unwritten::Failed(super::failure(&e)),
    })
}

/// Why a write wrote nothing.
pub(crate) enum Unwritten {
    /// A guarded first write found the object existing (the cache had not seen it).
    Unseen,
    /// The API server (or the transport) refused it.
    Failed(Failure),
}

impl From<String> for Unwritten {
    fn from(message: String) -> Self {
        Unwritten::Failed(message.into())
    }
}

/// What a server-side apply may hand over to enoki after writing: a migrating manager's fields
/// (`--migrating-field-managers`), and the fields the previous synthesis left behind.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handover<'a> {
    /// This Composition's UID: an object it leaves for good is released only while its
    /// `managed-by` label still names it.
    pub uid: &'a str,
    pub migration: reconciler_core::migrate::Migration<'a>,
    /// The previous synthesis's snapshot ([`plan::Step::previous`]).
    pub previous: Option<&'a Value>,
}

/// Server-side apply; then, when a migrating manager still owns fields under the migrating
/// paths (see [`super::super::migrate`]), or fields the previous synthesis applied are left behind
/// because another manager co-owns them (see [`super::super::ownership`]), those become enoki's and
/// the manifest is applied again, which prunes what enoki no longer emits.
pub(super) async fn apply(
    api: &Api<DynamicObject>,
    name: &str,
    object: &Value,
    handover: Handover<'_>,
) -> Result<DynamicObject, kube::Error> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let written = api.patch(name, &pp, &Patch::Apply(object)).await?;
    let migration = handover.migration;
    let migrated = if migration.is_on() {
        serde_json::to_value(&written)
            .ok()
            .and_then(|w| reconciler_core::migrate::merged_managed_fields(&w, migration))
    } else {
        None
    };
    if let Some(fields) = migrated {
        hand_over(api, name, fields, &written).await?;
        tracing::info!(resource = name, managers = ?migration.managers, fields = ?migration.fields,
            "field ownership migrated to enoki");
        return api.patch(name, &pp, &Patch::Apply(object)).await;
    }
    let Some(previous) = handover.previous else {
        return Ok(written);
    };
    let w = serde_json::to_value(&written).unwrap_or_default();
    if !reconciler_core::ownership::shared_ownership(&w) {
        return Ok(written);
    }
    // The previous snapshot's field set, as the server computes it. One the server now
    // refuses (a schema or an immutable field changed) only skips the repair.
    let dry = PatchParams {
        dry_run: true,
        ..PatchParams::apply(FIELD_MANAGER).force()
    };
    let Ok(before) = api.patch(name, &dry, &Patch::Apply(previous)).await else {
        return Ok(written);
    };
    let before = serde_json::to_value(&before).unwrap_or_default();
    let Some(fields) = reconciler_core::ownership::repaired_managed_fields(&before, &w) else {
        return Ok(written);
    };
    // The apply went through: a concurrent change (a status update mid-rollout) only puts the
    // repair off to the next pass.
    if let Err(e) = hand_over(api, name, fields, &written).await {
        tracing::debug!(resource = name, error = %e, "field ownership repair put off");
        return Ok(written);
    }
    tracing::info!(
        resource = name,
        "fields the previous synthesis left behind handed to enoki"
    );
    api.patch(name, &pp, &Patch::Apply(object)).await
}

/// Writes `fields` as the object's `managedFields`, guarded by the resourceVersion just
/// written: a concurrent change makes it a conflict (retried on the next pass).
pub(super) async fn hand_over(
    api: &Api<DynamicObject>,
    name: &str,
    fields: Value,
    written: &DynamicObject,
) -> Result<(), kube::Error> {
    let handover = serde_json::json!({"metadata": {
        "managedFields": fields,
        "resourceVersion": written.metadata.resource_version,
    }});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&handover))
        .await?;
    Ok(())
}
