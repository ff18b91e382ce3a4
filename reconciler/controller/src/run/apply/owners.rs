//! Whether the Composition a `managed-by` label names still exists: an object whose owner is
//! gone (a restore gave every Composition a new UID, a Composition was re-created after an
//! orphaning delete) is adopted by the Composition that emits it; a live owner keeps it
//! (`Conflict`).
//!
//! A UID is looked up in the controller's Composition cache first; one not there is confirmed
//! gone by a LIST of Compositions (metadata only) on the management cluster before anything
//! is adopted (batched: one LIST answers every pass waiting, at most one every 2 s,
//! `owners::Owners::confirm`). UIDs are never reused, so a gone owner is remembered; a live one is remembered
//! for a minute (`owners::LIVE_FOR`), so a Conflict polled every few seconds does not list every time. Any
//! error (a 403 included) keeps the owner, and is remembered as long: nothing is taken over on
//! a guess. With `--remote-kubeconfig` nothing is adopted this way: the objects live in a
//! cluster other management clusters may write to, whose Compositions this one cannot see.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::super::context::Context;

/// Of the owner UIDs in `named`, those that name no Composition (confirmed as described in
/// the module docs); empty when none is gone or the check cannot be made.
pub(crate) async fn gone_owners(ctx: &Context, named: BTreeSet<String>) -> BTreeSet<String> {
    if !ctx.clusters.target_is_management() {
        return BTreeSet::new();
    }
    let now = Instant::now();
    let cached: BTreeSet<String> = ctx
        .caches
        .compositions
        .state()
        .iter()
        .filter_map(|c| c.uid())
        .filter(|u| named.contains(u))
        .collect();
    let mut gone = BTreeSet::new();
    let mut unknown = BTreeSet::new();
    for uid in named {
        if cached.contains(&uid) || ctx.state.owners.live_recently(&uid, now) {
            continue;
        }
        if ctx.state.owners.is_gone(&uid) {
            gone.insert(uid);
        } else {
            unknown.insert(uid);
        }
    }
    if unknown.is_empty() {
        return gone;
    }
    let api: Api<crds::Composition> = Api::all(ctx.clusters.client().clone());
    let Some(existing) = ctx
        .state
        .owners
        .confirm(&unknown, |asked| list_existing(&api, asked))
        .await
    else {
        ctx.state.owners.remember(&unknown, &BTreeSet::new(), now);
        return gone;
    };
    let (live, newly_gone): (BTreeSet<String>, BTreeSet<String>) =
        unknown.into_iter().partition(|u| existing.contains(u));
    ctx.state.owners.remember(&live, &newly_gone, now);
    for uid in &newly_gone {
        tracing::info!(owner = %uid, "the Composition a managed-by label names is gone; its objects are adopted by the Composition that emits them");
    }
    gone.extend(newly_gone);
    gone
}

/// Of the UIDs `asked`, those of existing Compositions (one LIST, metadata only, page by
/// page); `None` when it failed.
async fn list_existing(
    api: &Api<crds::Composition>,
    asked: BTreeSet<String>,
) -> Option<BTreeSet<String>> {
    let fetch = |lp: ListParams| {
        let api = api.clone();
        async move { api.list_metadata(&lp).await }
    };
    let keep = |c: kube::core::PartialObjectMeta<crds::Composition>| {
        c.uid().filter(|u| asked.contains(u)).map(|u| (u, 0))
    };
    match crate::run::paging::list_bounded(&ListParams::default(), 0, fetch, keep).await {
        Ok(uids) => Some(uids.into_iter().collect()),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list Compositions to check the owners of managed objects; they keep their owners");
            None
        }
    }
}

/// `<namespace>/<name>` of every cached Composition by UID.
pub(crate) fn owner_names(
    compositions: &kube::runtime::reflector::Store<crds::Composition>,
) -> HashMap<String, String> {
    compositions
        .state()
        .iter()
        .filter_map(|c| {
            let name = format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any());
            Some((c.uid()?, name))
        })
        .collect()
}

/// Owners that live objects name and that may be gone (restored, re-created, moved): those
/// gone are adopted.
pub(crate) async fn gone_among(
    ctx: &Context,
    observed: &plan::Observed,
    uid: &str,
) -> std::collections::BTreeSet<String> {
    let named: std::collections::BTreeSet<String> = observed
        .values()
        .filter_map(|l| plan::plan::foreign_owner(Some(l), uid))
        .collect();
    if named.is_empty() {
        return named;
    }
    gone_owners(ctx, named).await
}
