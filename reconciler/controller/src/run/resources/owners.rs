//! Whether the Composition a `managed-by` label names still exists: an object whose owner is
//! gone (a restore gave every Composition a new UID, a Composition was re-created after an
//! orphaning delete, a resource moved between Compositions) is adopted by the Composition that
//! emits it; a live owner keeps it (`Conflict`).
//!
//! A UID is looked up in the controller's Composition cache first; one not there is confirmed
//! gone by one LIST of Compositions (metadata only) on the management cluster before anything
//! is adopted. UIDs are never reused, so a gone owner is remembered; a live one is remembered
//! for [`LIVE_FOR`], so a Conflict polled every few seconds does not list every time. Any
//! error (a 403 included) keeps the owner: nothing is taken over on a guess.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::super::context::Context;

/// How long a UID confirmed live by a LIST is believed without asking again.
pub(crate) const LIVE_FOR: Duration = Duration::from_secs(60);
/// Gone UIDs remembered at most (the memory is cleared past it; asking again is only a LIST).
const GONE_KEPT: usize = 100_000;

/// What is known of owners named by `managed-by` labels.
#[derive(Default)]
pub(crate) struct Owners {
    gone: Mutex<BTreeSet<String>>,
    live: Mutex<HashMap<String, Instant>>,
}

impl Owners {
    fn is_gone(&self, uid: &str) -> bool {
        self.gone.lock().is_ok_and(|g| g.contains(uid))
    }

    fn live_recently(&self, uid: &str, now: Instant) -> bool {
        self.live.lock().is_ok_and(|l| {
            l.get(uid)
                .is_some_and(|t| now.duration_since(*t) < LIVE_FOR)
        })
    }

    fn remember(&self, live: &BTreeSet<String>, gone: &BTreeSet<String>, now: Instant) {
        if let Ok(mut l) = self.live.lock() {
            l.retain(|_, t| now.duration_since(*t) < LIVE_FOR);
            for u in live {
                l.insert(u.clone(), now);
            }
        }
        if let Ok(mut g) = self.gone.lock() {
            if g.len() + gone.len() > GONE_KEPT {
                g.clear();
            }
            g.extend(gone.iter().cloned());
        }
    }
}

/// Of the owner UIDs in `named`, those that name no Composition (confirmed as described in
/// the module docs); empty when none is gone or the check cannot be made.
pub(crate) async fn gone_owners(ctx: &Context, named: BTreeSet<String>) -> BTreeSet<String> {
    let now = Instant::now();
    let cached: BTreeSet<String> = ctx
        .compositions
        .state()
        .iter()
        .filter_map(|c| c.uid())
        .filter(|u| named.contains(u))
        .collect();
    let mut gone = BTreeSet::new();
    let mut unknown = BTreeSet::new();
    for uid in named {
        if cached.contains(&uid) || ctx.owners.live_recently(&uid, now) {
            continue;
        }
        if ctx.owners.is_gone(&uid) {
            gone.insert(uid);
        } else {
            unknown.insert(uid);
        }
    }
    if unknown.is_empty() {
        return gone;
    }
    let api: Api<crds::Composition> = Api::all(ctx.client.clone());
    let existing: BTreeSet<String> = match api.list_metadata(&ListParams::default()).await {
        Ok(list) => list.items.iter().filter_map(ResourceExt::uid).collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list Compositions to check the owners of managed objects; they keep their owners");
            return gone;
        }
    };
    let (live, newly_gone): (BTreeSet<String>, BTreeSet<String>) =
        unknown.into_iter().partition(|u| existing.contains(u));
    ctx.owners.remember(&live, &newly_gone, now);
    for uid in &newly_gone {
        tracing::info!(owner = %uid, "the Composition a managed-by label names is gone; its objects are adopted by the Composition that emits them");
    }
    gone.extend(newly_gone);
    gone
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_owners_are_believed_for_a_while_and_gone_ones_for_good() {
        let o = Owners::default();
        let t0 = Instant::now();
        let set = |u: &str| [u.to_string()].into_iter().collect::<BTreeSet<_>>();
        o.remember(&set("live"), &set("gone"), t0);
        assert!(o.live_recently("live", t0 + Duration::from_secs(1)));
        assert!(!o.live_recently("live", t0 + LIVE_FOR));
        assert!(o.is_gone("gone"));
        assert!(!o.is_gone("live"));
    }
}
