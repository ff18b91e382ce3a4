//! A Synthesizer's Compositions as its rollout sees them: which take part, which revision each
//! runs, whether it is Ready, failed the rolling revision, or was Ready before (only those
//! count in a wave's gate), and which revisions are in use.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::super::context::Context;
use super::order::{canary_selects, order_key, runs};
use crds::names::conditions;
use crds::{Composition, RolloutStatus, Synthesizer};
use reconciler_core::rollout::Member;

/// Every Composition this controller serves: from the cache when this replica serves them
/// all, else listed page by page (within `--label-selector`).
///
/// # Errors
/// The list's error.
pub(crate) async fn compositions(ctx: &Context) -> Result<Vec<Arc<Composition>>, kube::Error> {
    if ctx.opts.shards <= 1 {
        return Ok(ctx.caches.compositions.state());
    }
    let api: Api<Composition> = Api::all(ctx.clusters.client().clone());
    let mut lp = ListParams::default();
    if let Some(sel) = &ctx.opts.scope.label_selector {
        lp = lp.labels(sel);
    }
    let fetch = |lp: ListParams| {
        let api = api.clone();
        async move { api.list(&lp).await }
    };
    match super::super::paging::list_bounded(&lp, 0, fetch, |c| Some((Arc::new(c), 0))).await {
        Ok(all) => Ok(all),
        Err(super::super::paging::Stop::Api(e)) => Err(e),
        // No bound is set.
        Err(super::super::paging::Stop::TooLarge(_)) => Ok(Vec::new()),
    }
}

/// Whether `c` is one of Synthesizer `name`'s Compositions a rollout moves: not being
/// deleted, not suspended, not ignoring side effects (Eno: a Synthesizer change does not reach
/// them), synthesized or attempted at least once.
pub(crate) fn takes_part(c: &Composition, name: &str) -> bool {
    c.spec.synthesizer.name == name
        && c.metadata.deletion_timestamp.is_none()
        && !c.spec.suspend
        && !c.ignores_side_effects()
        && c.status
            .as_ref()
            .is_some_and(|s| s.current_synthesis.is_some() || s.in_flight_synthesis.is_some())
}

/// The Compositions a rollout moves ([`takes_part`]), as the rollout sees them.
pub(crate) fn members(
    synth: &Synthesizer,
    st: &RolloutStatus,
    comps: &[Arc<Composition>],
) -> Vec<Member> {
    let name = synth.name_any();
    let rolling = st.revision.number;
    comps
        .iter()
        .filter(|c| takes_part(c, &name))
        .filter_map(|c| {
            let s = c.status.as_ref()?;
            let cur = s.current_synthesis.as_ref();
            let on = cur.and_then(|x| runs(st, x));
            let failed = on != Some(rolling)
                && s.in_flight_synthesis
                    .as_ref()
                    .is_some_and(|f| f.canceled.is_some() && runs(st, f) == Some(rolling));
            // Ready on the stable revision: its current synthesis there was, or (moved) the
            // one before it; one whose synthesis before was of the rolling revision too (made
            // again) is held to the gate whatever it was before.
            let before = if on == Some(rolling) {
                s.previous_synthesis.as_ref()
            } else {
                cur
            };
            let again = before.is_some_and(|b| runs(st, b) == Some(rolling));
            Some(Member {
                key: order_key(&c.uid().unwrap_or_default(), rolling),
                canary: canary_selects(synth, c),
                runs: on,
                // Its current synthesis became Ready (Eno's `ready`, latched) and it still is
                // (the condition: a revision that breaks after a while fails the bake).
                ready: cur.is_some_and(|x| x.ready.is_some())
                    && s.conditions
                        .iter()
                        .any(|k| k.type_ == conditions::READY && k.status == "True"),
                failed,
                gated: again || before.is_some_and(|b| b.ready.is_some()),
                created: c.metadata.creation_timestamp.as_ref().map(|t| t.0),
            })
        })
        .collect()
}

/// Revisions a Composition of `name` runs (any: suspended ones too), rolls to, or may go back
/// to.
pub(crate) fn in_use(st: &RolloutStatus, name: &str, comps: &[Arc<Composition>]) -> BTreeSet<i64> {
    let mut keep: BTreeSet<i64> = comps
        .iter()
        .filter(|c| c.spec.synthesizer.name == name)
        .filter_map(|c| c.status.as_ref()?.current_synthesis.as_ref())
        .filter_map(|s| runs(st, s))
        .collect();
    keep.insert(st.revision.number);
    keep.extend(st.stable.as_ref().map(|s| s.number));
    keep
}
