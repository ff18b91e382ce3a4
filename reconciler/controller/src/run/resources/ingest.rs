//! Ingesting the current synthesis for a pass: its slices' manifests (sealed Secrets opened)
//! into a [`plan::Prepared`], cached per Composition.

use std::sync::Arc;

use super::super::context::Context;
use super::super::model::Loaded;

/// The ingested synthesis, cached per Composition (one entry, replaced when the synthesis or
/// the effective annotations change).
pub(super) fn prepare(
    ctx: &Context,
    uid: &str,
    synthesis: &str,
    loaded: &Loaded,
    info: &plan::CompositionInfo,
) -> Result<(Arc<plan::Prepared>, bool), plan::PlanError> {
    // The filter may read the Composition's labels: they are part of the key with it.
    let labels = match ctx.opts.resource_filter {
        Some(_) => serde_json::to_string(&info.labels).unwrap_or_default(),
        None => String::new(),
    };
    let key = format!(
        "{synthesis}/{}/{}/{labels}",
        info.deleting,
        serde_json::to_string(&info.annotations).unwrap_or_default()
    );
    if let Some(p) = ctx.prepared(uid, &key) {
        return Ok((p, false));
    }
    // A sealed Secret that does not open is left alone this pass (neither applied nor
    // pruned; everything else is reconciled), and the ingested synthesis is not cached
    // without it. With keys loaded it does not open for good (its key was deleted or rotated
    // away, or the entry altered): `true`, the next synthesis writes it anew.
    let keys = ctx.slice_keys.has_keys();
    let (mut unopened, mut skipped) = (false, false);
    let desired: Vec<plan::Desired> = loaded
        .resources
        .iter()
        .filter_map(|r| {
            let entry = loaded.entry(r)?;
            let manifest = match ctx.slice_keys.manifest(&info.uid, entry) {
                Some(m) => m,
                // Deleting needs only the Secret's name: its shown part will do.
                None if entry.sealed.is_some() && (r.tombstone || info.deleting) => {
                    serde_json::from_str(&entry.manifest).ok()?
                }
                None => {
                    unopened |= keys && entry.sealed.is_some();
                    skipped |= entry.sealed.is_some();
                    return None;
                }
            };
            Some(plan::Desired {
                manifest,
                tombstone: r.tombstone,
            })
        })
        .collect();
    if unopened {
        tracing::warn!(composition = %info.name, namespace = %info.namespace,
            "a sealed Secret of the current synthesis opens with no slice key; it is synthesized again");
    }
    let desired = match &ctx.opts.resource_filter {
        None => desired,
        Some(filter) => {
            // Eno's --resource-filter: the others are not reconciled by this controller. CEL
            // over tenant content: off the async workers.
            let (kept, errors) =
                tokio::task::block_in_place(|| plan::filter_desired(desired, filter, info));
            for (item, error) in errors {
                tracing::warn!(composition = %info.name, item, %error,
                    "--resource-filter failed on a resource; it is left out");
            }
            kept
        }
    };
    let p = Arc::new(plan::prepare(&desired, info)?);
    if !skipped {
        ctx.keep_prepared(uid, key, p.clone());
    }
    Ok((p, unopened))
}
