//! Deleting a Composition whose ResourceSlices are gone (its namespace is being deleted): what
//! it emitted outside the namespace, as recorded in its status, is deleted (or released when
//! kept), as the Composition's account.

use std::sync::Arc;

use kube::ResourceExt;

use super::super::error::Step;
use super::super::{Context, Error};
use crate::run::apply::execute;
use crds::Composition;

/// Deletes the objects `current` recorded outside the Composition's namespace that still carry
/// its `managed-by` label, except those kept on deletion, which only lose the label; `true`
/// once none is left. An object the Composition's account may not read or delete is left (reported).
pub(super) async fn sweep_outside(
    ctx: &Arc<Context>,
    comp: &Composition,
    current: &crds::Synthesis,
    info: &plan::CompositionInfo,
) -> Result<bool, Error> {
    if current.outside_namespace.is_empty() {
        return Ok(true);
    }
    // A Composition whose Symphony is deleted deletes nothing (Eno), as the planner decides;
    // nor does one that orphans (syntheses recorded before the per-object `kept` existed
    // carry only the Composition's setting). What is kept loses enoki's label.
    let keep_all = crds::names::annotations::DELETION_STRATEGY
        .get(comp.annotations())
        .is_some_and(|s| s.trim().eq_ignore_ascii_case("orphan"))
        || info.symphony_deleting();
    let uid = comp.uid().unwrap_or_default();
    let client = ctx
        .clusters
        .target_for(comp)
        .map_err(|source| Error::Impersonate {
            user: ctx.clusters.service_account(comp).unwrap_or_default(),
            source,
        })?;
    let (mut left, mut refused) = (0, Vec::new());
    let sweep = Sweep {
        ctx,
        client,
        info,
        uid: &uid,
        keep_all,
    };
    for o in &current.outside_namespace {
        match sweep.one(o).await? {
            Swept::Done => {}
            Swept::Left => left += 1,
            Swept::Refused => refused.push(format!("{}/{}/{}", o.kind, o.namespace, o.name)),
        }
    }
    if !refused.is_empty() {
        let note = format!(
            "the Composition's account may not read or delete what it emitted outside its \
             namespace (its namespace, and the grant to act as its account there, may be gone \
             already): left in place: {}",
            refused
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
        ctx.report
            .event(comp, true, OUTSIDE_LEFT, "Delete", note)
            .await;
    }
    Ok(left == 0)
}

/// What sweeping one output outside the namespace did: nothing left to do, left to look at
/// again (deleted, or its label not released yet), or refused to the Composition's account.
enum Swept {
    Done,
    Left,
    Refused,
}

/// What the sweep of a deleted Composition's outputs outside its namespace works with.
struct Sweep<'a> {
    ctx: &'a Arc<Context>,
    client: kube::Client,
    info: &'a plan::CompositionInfo,
    uid: &'a str,
    /// Orphaned or the Symphony deleted: what is kept loses enoki's label only.
    keep_all: bool,
}

impl Sweep<'_> {
    /// Deletes (or releases) one output when it is still the Composition's.
    async fn one(&self, o: &crds::OutputRef) -> Result<Swept, Error> {
        let (group, version) = o
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", &o.api_version));
        let gvk = kube::core::GroupVersionKind::gvk(group, version, &o.kind);
        let Ok((ar, namespaced)) = self.ctx.clusters.resolve_target(&gvk).await else {
            return Ok(Swept::Done); // the kind is gone, and its objects with it
        };
        let api: kube::Api<kube::api::DynamicObject> = if namespaced {
            kube::Api::namespaced_with(self.client.clone(), &o.namespace, &ar)
        } else {
            kube::Api::all_with(self.client.clone(), &ar)
        };
        let live = match api.get_opt(&o.name).await {
            Ok(live) => live,
            Err(kube::Error::Api(s)) if s.code == 403 => {
                tracing::warn!(kind = %o.kind, name = %o.name, "may not read an output outside the namespace; left");
                return Ok(Swept::Refused);
            }
            Err(e) if crate::run::error::kind_not_served(&e) => {
                self.ctx.clusters.forget_target(&gvk);
                return Ok(Swept::Done); // the kind is gone, and its objects with it
            }
            Err(e) => {
                return Err(crate::run::api_err(Step::OutsideOutput(true))(e));
            }
        };
        let Some(live) = live else {
            return Ok(Swept::Done);
        };
        // --resource-filter: what it leaves to others is judged on the live object (the
        // manifests went with the slices).
        if !filter_keeps(&self.ctx.opts.apply, self.info, &live) {
            return Ok(Swept::Done);
        }
        let ours = live
            .labels()
            .get(crds::names::annotations::MANAGED_BY.enoki)
            .is_some_and(|v| v == self.uid);
        if !ours || live.metadata.deletion_timestamp.is_some() {
            return Ok(if ours { Swept::Left } else { Swept::Done });
        }
        if self.keep_all || o.kept {
            if let Ok(value) = serde_json::to_value(&live) {
                let what = format!("{}/{}/{}", o.kind, o.namespace, o.name);
                if let Err(e) = execute::release(&api, &what, &o.name, &value, self.uid).await
                    && crate::run::error::kube_is_transient(&e)
                {
                    // Looked at again: no dead owner label is left behind.
                    return Ok(Swept::Left);
                }
            }
            return Ok(Swept::Done);
        }
        match api.delete(&o.name, &Default::default()).await {
            Ok(_) => {
                tracing::info!(kind = %o.kind, namespace = %o.namespace, name = %o.name, "deleted an output outside the namespace");
                Ok(Swept::Left)
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(Swept::Done),
            Err(kube::Error::Api(s)) if s.code == 403 => {
                tracing::warn!(kind = %o.kind, name = %o.name, "may not delete an output outside the namespace; left");
                Ok(Swept::Refused)
            }
            Err(e) => Err(crate::run::api_err(Step::OutsideOutput(false))(e)),
        }
    }
}

/// The reason of the Event that names what a deleted Composition left outside its namespace.
const OUTSIDE_LEFT: &str = "OutsideNamespaceLeft";

/// Whether `--resource-filter` (if any) keeps `live` for this controller.
fn filter_keeps(
    opts: &crate::run::ApplyOptions,
    info: &plan::CompositionInfo,
    live: &kube::api::DynamicObject,
) -> bool {
    let Some(filter) = &opts.resource_filter else {
        return true;
    };
    let Ok(mut manifest) = serde_json::to_value(live) else {
        return false;
    };
    if let Some(meta) = manifest
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        meta.remove("managedFields");
    }
    let desired = vec![plan::Desired {
        manifest,
        tombstone: false,
    }];
    let (kept, _) = tokio::task::block_in_place(|| plan::filter_desired(desired, filter, info));
    !kept.is_empty()
}
