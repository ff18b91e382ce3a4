//! Ingesting the current synthesis for a pass: its slices' manifests (sealed Secrets opened)
//! into a [`plan::Prepared`], cached per Composition.

use std::sync::Arc;

use kube::ResourceExt;

use super::super::Error;
use super::super::context::Context;
use super::super::slices::{self, stored_bytes};
use reconciler_core::model::Loaded;

/// The ingested synthesis, cached per Composition (one entry, replaced when the synthesis or
/// the effective annotations change). The slice cache holds compact copies: the slices are
/// read whole (one GET each) only when the synthesis is ingested.
///
/// # Errors
/// `Err(Ok(_))`: the synthesis does not ingest; `Err(Err(_))`: reading a slice failed.
pub(super) async fn prepare(
    ctx: &Context,
    comp: &crds::Composition,
    synthesis: &str,
    loaded: &Loaded,
    info: &plan::CompositionInfo,
) -> Result<(Arc<plan::Prepared>, bool), Result<plan::PlanError, Error>> {
    let uid = info.uid.as_str();
    let key = cache_key(&ctx.opts.apply, synthesis, info);
    if let Some(p) = ctx.plans.get(uid, &key) {
        return Ok((p, false));
    }
    // Read whole and parsed by at most INGESTING passes at once: what a start (or an evicted
    // cache) reads at a time is bounded, not every Composition's output together; a freed
    // slot goes to the namespace with the fewest ingests running.
    let _ingesting = ctx.limits.ingest_slots.enter(&info.namespace).await;
    if let Some(p) = ctx.plans.get(uid, &key) {
        return Ok((p, false));
    }
    let whole = whole_slices(ctx.reads(), comp, loaded).await.map_err(Err)?;
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
            let entry = whole.get(r.slice)?.spec.resources.get(r.index)?;
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
    let desired = filtered(&ctx.opts.apply, desired, info);
    let p = Arc::new(plan::prepare(&desired, info).map_err(Ok)?);
    if !skipped {
        let bytes = whole.iter().map(|s| stored_bytes(s)).sum();
        ctx.plans.keep(uid, key, p.clone(), bytes);
    }
    Ok((p, unopened))
}

/// The plan-cache key of `synthesis` ingested for the Composition `info` describes: what of
/// the Composition's metadata the ingest reads (the annotations that cascade, enoki's and
/// Eno's; all its metadata with a filter, which may read any of it), kept as its digest (a key
/// costs the same whatever the annotations hold). An annotation of another tool's does not
/// make the synthesis read again.
fn cache_key(
    opts: &crate::run::ApplyOptions,
    synthesis: &str,
    info: &plan::CompositionInfo,
) -> String {
    let meta = match opts.resource_filter {
        Some(_) => serde_json::to_string(&(&info.annotations, &info.labels)),
        None => serde_json::to_string(
            &info
                .annotations
                .iter()
                .filter(|(k, _)| {
                    k.starts_with(crds::names::PREFIX) || k.starts_with(crds::names::ENO_PREFIX)
                })
                .collect::<Vec<_>>(),
        ),
    }
    .unwrap_or_default();
    format!(
        "{synthesis}/{}/{}",
        info.deleting,
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(meta.as_bytes()))
    )
}

/// Eno's `--resource-filter`: the resources it excludes are not reconciled by this
/// controller. CEL over tenant content: off the async workers.
fn filtered(
    opts: &crate::run::ApplyOptions,
    desired: Vec<plan::Desired>,
    info: &plan::CompositionInfo,
) -> Vec<plan::Desired> {
    let Some(filter) = &opts.resource_filter else {
        return desired;
    };
    let (kept, errors) =
        tokio::task::block_in_place(|| plan::filter_desired(desired, filter, info));
    for (item, error) in errors {
        tracing::warn!(composition = %info.name, item, %error,
            "--resource-filter failed on a resource; it is left out");
    }
    kept
}

/// The loaded slices with their manifests whole: a compact cache copy is read again (a slice
/// gone or rewritten since it was loaded fails the pass, which starts over).
async fn whole_slices(
    rd: crate::run::context::Reads<'_>,
    comp: &crds::Composition,
    loaded: &Loaded,
) -> Result<Vec<Arc<crds::ResourceSlice>>, Error> {
    let mut out = Vec::with_capacity(loaded.specs.len());
    for s in &loaded.specs {
        if !slices::is_compact(s) {
            out.push(s.clone());
            continue;
        }
        let name = s.name_any();
        let whole = slices::read_full(rd, comp, &name)
            .await?
            .map(|(w, _)| w)
            .filter(|w| w.metadata.generation == s.metadata.generation)
            .ok_or_else(|| Error::SliceChanged { name })?;
        out.push(whole);
    }
    Ok(out)
}
