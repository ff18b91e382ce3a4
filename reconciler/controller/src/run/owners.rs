//! What is known of the owners `managed-by` labels name (see `apply::owners`): UIDs
//! confirmed gone (for good: UIDs are never reused) and UIDs confirmed live (for
//! [`LIVE_FOR`]); and the LISTs that confirm them, batched ([`Owners::confirm`]): every
//! pass asking about UIDs not known yet waits for the next LIST, which answers for all of
//! them, and LISTs start at least [`LIST_EVERY`] apart. A tenant who relabels its objects
//! with made-up UIDs therefore costs at most one LIST of Compositions per [`LIST_EVERY`]
//! per controller process (each replica of a sharded install lists for itself), however
//! many objects and passes it uses.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// How long a UID confirmed live by a LIST is believed without asking again.
pub(crate) const LIVE_FOR: Duration = Duration::from_secs(60);
/// Gone UIDs remembered at most (the memory is cleared past it; asking again is only a LIST).
const GONE_KEPT: usize = 100_000;
/// The least time between the starts of two LISTs confirming owners.
pub(crate) const LIST_EVERY: Duration = Duration::from_secs(2);
/// Rounds whose answers are kept for passes that have not read them yet.
const ROUNDS_KEPT: u64 = 16;

/// What is known of owners named by `managed-by` labels.
#[derive(Default)]
pub(crate) struct Owners {
    gone: Mutex<BTreeSet<String>>,
    live: Mutex<HashMap<String, Instant>>,
    /// The UIDs the next LIST answers for, and that round's number.
    asked: Mutex<(u64, BTreeSet<String>)>,
    /// One LIST at a time; the start of the last one.
    listing: tokio::sync::Mutex<Option<Instant>>,
    /// Each recent round's answer: the UIDs asked that exist (`None`: the LIST failed).
    answers: Mutex<BTreeMap<u64, Option<BTreeSet<String>>>>,
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

impl Owners {
    /// Which of `unknown` name an existing Composition, from the next LIST (`list` answers,
    /// of the UIDs it is given, those that exist); `None` when that LIST failed.
    pub(crate) async fn confirm<F, Fut>(
        &self,
        unknown: &BTreeSet<String>,
        list: F,
    ) -> Option<BTreeSet<String>>
    where
        F: Fn(BTreeSet<String>) -> Fut,
        Fut: std::future::Future<Output = Option<BTreeSet<String>>>,
    {
        let round = {
            let mut asked = self.asked.lock();
            asked.1.extend(unknown.iter().cloned());
            asked.0
        };
        loop {
            let mut last = self.listing.lock().await;
            if let Some(answer) = self.answer(round) {
                return answer.map(|a| a.intersection(unknown).cloned().collect());
            }
            if let Some(at) = *last {
                tokio::time::sleep(LIST_EVERY.saturating_sub(at.elapsed())).await;
            }
            *last = Some(Instant::now());
            let (this, uids) = {
                let mut asked = self.asked.lock();
                let uids = std::mem::take(&mut asked.1);
                asked.0 += 1;
                (asked.0 - 1, uids)
            };
            let answer = list(uids).await;
            let mine = answer
                .as_ref()
                .map(|a| a.intersection(unknown).cloned().collect());
            let mut answers = self.answers.lock();
            answers.insert(this, answer);
            answers.retain(|r, _| r + ROUNDS_KEPT > this);
            // This LIST was round `round` itself. (A later round means a pass was dropped
            // mid-LIST with `round`'s UIDs: `answer` counts `round` failed, next time round.)
            if this == round {
                return mine;
            }
        }
    }

    /// Round `round`'s answer once it ran (`Some(None)`: it failed; a round forgotten
    /// counts as failed).
    fn answer(&self, round: u64) -> Option<Option<BTreeSet<String>>> {
        let answers = self.answers.lock();
        if let Some(a) = answers.get(&round) {
            return Some(a.clone());
        }
        let ran = answers.keys().next_back().is_some_and(|r| *r >= round);
        ran.then_some(None)
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

    /// Passes asking at once share a LIST, the LISTs are spaced, and each pass learns about
    /// its own UIDs; a failed LIST is a failure for every pass it answered.
    #[tokio::test(start_paused = true)]
    async fn passes_asking_together_share_spaced_lists() {
        let o = std::sync::Arc::new(Owners::default());
        let starts = std::sync::Arc::new(Mutex::new(Vec::<tokio::time::Instant>::new()));
        let list = |fail: bool| {
            let starts = starts.clone();
            move |asked: BTreeSet<String>| {
                starts.lock().push(tokio::time::Instant::now());
                async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    (!fail).then(|| {
                        asked
                            .into_iter()
                            .filter(|u| u.starts_with("live"))
                            .collect()
                    })
                }
            }
        };
        let set = |i: usize| BTreeSet::from([format!("live-{i}"), format!("gone-{i}")]);
        let passes: Vec<_> = (0..20)
            .map(|i| {
                let (o, list) = (o.clone(), list(false));
                tokio::spawn(async move { o.confirm(&set(i), list).await })
            })
            .collect();
        for (i, p) in passes.into_iter().enumerate() {
            assert_eq!(
                p.await.unwrap(),
                Some(BTreeSet::from([format!("live-{i}")]))
            );
        }
        let again = o.confirm(&set(99), list(true)).await;
        assert_eq!(again, None, "the LIST failed");
        let starts = starts.lock().clone();
        assert!(starts.len() <= 3, "{} LISTs for 21 passes", starts.len());
        for w in starts.windows(2) {
            assert!(w[1] - w[0] >= LIST_EVERY);
        }
    }
}
