//! Writing a Composition's status, and reading it back consistently.
//!
//! The controller hands a reconcile the Composition from its cache, which may not yet hold
//! the status enoki wrote in the previous pass. [`fresh`] substitutes the status enoki last
//! wrote until the cache has caught up (same resourceVersion), so a pass never starts from a
//! stale synthesis. [`write`] patches only when the status changed, nulling what it drops.

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::super::{Context, Error};
use crds::{Composition, CompositionStatus};

/// `comp` with the status enoki last wrote, when the cache has not caught up with it: only
/// while the cache still shows the version enoki's write was based on. Once the cache moved
/// on — to enoki's write or to anyone's later one (a status edit by someone else) — the cache
/// is the truth and the memory is dropped.
pub(crate) fn fresh(ctx: &Context, comp: Arc<Composition>) -> Arc<Composition> {
    let uid = comp.uid().unwrap_or_default();
    let rv = comp.resource_version().unwrap_or_default();
    let written = ctx.remember(&uid, |m| match &m.written {
        Some((_, based_on, st)) if *based_on == rv && comp.status.as_ref() != Some(st) => {
            Some(st.clone())
        }
        Some(_) => {
            m.written = None;
            None
        }
        None => None,
    });
    match written {
        Some(st) if comp.status.as_ref() != Some(&st) => {
            let mut c = (*comp).clone();
            c.status = Some(st);
            Arc::new(c)
        }
        _ => comp,
    }
}

/// Writes `st` when it differs from `comp`'s status.
///
/// # Errors
/// [`Error::WriteStatus`].
pub(crate) async fn write(
    ctx: &Context,
    comp: &Composition,
    st: &CompositionStatus,
) -> Result<(), Error> {
    if comp.status.as_ref() == Some(st) {
        return Ok(());
    }
    // A merge patch leaves out what the new status no longer has: null it explicitly (e.g. a
    // finished in-flight synthesis, a cleared dependency status).
    let mut patch = serde_json::to_value(st).unwrap_or_default();
    if let (Some(new), Some(Value::Object(old))) = (
        patch.as_object_mut(),
        comp.status
            .as_ref()
            .map(serde_json::to_value)
            .and_then(Result::ok),
    ) {
        for key in old.keys() {
            new.entry(key.clone()).or_insert(Value::Null);
        }
    }
    let api: Api<Composition> =
        Api::namespaced(ctx.client.clone(), &comp.namespace().unwrap_or_default());
    let written = api
        .patch_status(
            &comp.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": patch })),
        )
        .await
        .map_err(|source| Error::WriteStatus { source })?;
    let rv = written.resource_version().unwrap_or_default();
    let uid = comp.uid().unwrap_or_default();
    // The version this write was based on: the cache's, or the one an earlier write of this
    // pass (still not in the cache) was based on.
    let based_on = comp.resource_version().unwrap_or_default();
    ctx.remember(&uid, |m| {
        let based_on = match &m.written {
            Some((prev_rv, prev_based_on, _)) if *prev_rv != based_on => prev_based_on.clone(),
            _ => based_on,
        };
        m.written = Some((rv, based_on, st.clone()));
    });
    Ok(())
}
