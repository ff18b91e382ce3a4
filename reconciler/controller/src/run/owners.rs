//! What is known of the owners `managed-by` labels name (see `apply::owners`): UIDs
//! confirmed gone (for good: UIDs are never reused) and UIDs confirmed live (for
//! [`LIVE_FOR`]).

use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

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
    pub(crate) fn is_gone(&self, uid: &str) -> bool {
        self.gone.lock().contains(uid)
    }

    pub(crate) fn live_recently(&self, uid: &str, now: Instant) -> bool {
        self.live
            .lock()
            .get(uid)
            .is_some_and(|t| now.duration_since(*t) < LIVE_FOR)
    }

    pub(crate) fn remember(&self, live: &BTreeSet<String>, gone: &BTreeSet<String>, now: Instant) {
        {
            let mut l = self.live.lock();
            l.retain(|_, t| now.duration_since(*t) < LIVE_FOR);
            for u in live {
                l.insert(u.clone(), now);
            }
        }
        {
            let mut g = self.gone.lock();
            if g.len() + gone.len() > GONE_KEPT {
                g.clear();
            }
            g.extend(gone.iter().cloned());
        }
    }
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
