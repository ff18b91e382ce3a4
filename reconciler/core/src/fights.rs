//! Backoff for resources that keep failing or that another writer keeps changing.
//!
//! A write that restores an unchanged snapshot over a live object is a drift correction; three
//! within a minute of each other are a fight: a `FieldConflict` Event naming the other field
//! managers, and exponential backoff before the next correction. A write that keeps failing is
//! retried after 1 s, 2 s, 4 s, … (at most 5 min), not on every pass. The decisions are pure
//! functions over the remembered state; callers hold the memory.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use plan::{Op, Recorded, ResourceKey, Step};
use serde_json::Value;

use crds::names::FIELD_MANAGER;

/// Drift corrections of one resource: how many in a row (each within [`FIGHT_WINDOW`] of the
/// last), when the last one happened and when the next one is allowed.
#[derive(Clone, Debug)]
pub struct Fight {
    corrections: u32,
    last: Instant,
    next: Instant,
}

/// Two drift corrections further apart than this are unrelated.
pub const FIGHT_WINDOW: Duration = Duration::from_secs(60);
/// The third correction in a row is a fight: a `FieldConflict` Event, and backoff from here.
pub const FIGHT_THRESHOLD: u32 = 3;

/// The delay before the next drift correction after `corrections` corrections in a row:
/// none below [`FIGHT_THRESHOLD`], then 1 s, 2 s, 4 s, … up to 5 min.
pub fn fight_delay(corrections: u32) -> Duration {
    if corrections < FIGHT_THRESHOLD {
        return Duration::ZERO;
    }
    Duration::from_secs(1u64 << (corrections - FIGHT_THRESHOLD).min(9))
        .min(Duration::from_secs(300))
}

/// The delay before retrying a write that failed `failures` times in a row.
pub fn failure_delay(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.min(9).saturating_sub(1)).min(Duration::from_secs(300))
}

/// The other field managers that last wrote `live` (for the `FieldConflict` Event).
pub fn other_managers(live: Option<&Value>) -> Vec<String> {
    let mut out: Vec<String> = live
        .and_then(|l| l.pointer("/metadata/managedFields"))
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter_map(|e| e.get("manager").and_then(Value::as_str))
                .filter(|m| *m != FIELD_MANAGER)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out.dedup();
    out
}

/// Whether `step` restores an unchanged snapshot over a live object.
pub fn is_correction(step: &Step, exists: bool, recorded: Option<&Recorded>) -> bool {
    step.op.is_write()
        && !matches!(step.op, Op::Delete { .. })
        && exists
        && recorded.is_some_and(|r| r.applied_hash.is_some() && r.applied_hash == step.hash)
}

/// The corrections to hold back now (their fight backoff has not elapsed) and the shortest
/// remaining wait among them.
pub fn deferred(
    fights: &std::collections::HashMap<ResourceKey, Fight>,
    corrections: impl Iterator<Item = ResourceKey>,
    now: Instant,
) -> (BTreeSet<ResourceKey>, Option<Duration>) {
    let mut wait: Option<Duration> = None;
    let mut out = BTreeSet::new();
    for key in corrections {
        if let Some(next) = fights.get(&key).map(|f| f.next).filter(|n| *n > now) {
            let w = next - now;
            wait = Some(wait.map_or(w, |x| x.min(w)));
            out.insert(key);
        }
    }
    (out, wait)
}

/// Records one correction that took effect; returns the new count and the delay before the
/// next one is allowed.
pub fn count_correction(
    fights: &mut std::collections::HashMap<ResourceKey, Fight>,
    key: &ResourceKey,
    now: Instant,
) -> (u32, Duration) {
    let corrections = match fights.get(key) {
        Some(f) if now.duration_since(f.last) < FIGHT_WINDOW => f.corrections + 1,
        _ => 1,
    };
    let delay = fight_delay(corrections);
    fights.insert(
        key.clone(),
        Fight {
            corrections,
            last: now,
            next: now + delay,
        },
    );
    (corrections, delay)
}

/// The `FieldConflict` message for a resource that was corrected `corrections` times.
pub fn conflict_message(
    key: &ResourceKey,
    live: Option<&Value>,
    corrections: u32,
    delay: Duration,
) -> Option<String> {
    if corrections < FIGHT_THRESHOLD {
        return None;
    }
    let others = other_managers(live);
    Some(format!(
        "{key} was changed by another writer ({}) {corrections} times in a row; \
         enoki restored it and backs off: next correction in at least {}",
        if others.is_empty() {
            "unknown".to_string()
        } else {
            others.join(", ")
        },
        humantime::format_duration(delay)
    ))
}

/// The resources whose writes are held back by failure backoff now, with their last error.
pub fn held(
    backoff: &std::collections::HashMap<ResourceKey, crate::model::Backoff>,
    now: Instant,
) -> HashMap<ResourceKey, crate::model::Failure> {
    backoff
        .iter()
        .filter(|(_, (_, next, _))| *next > now)
        .map(|(k, (_, _, e))| (k.clone(), e.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fight_delay_grows_exponentially_from_the_threshold_and_is_capped() {
        let d: Vec<u64> = (1..=14).map(|c| fight_delay(c).as_secs()).collect();
        assert_eq!(d, [0, 0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
    }

    #[test]
    fn the_third_correction_in_a_minute_is_a_fight_and_is_deferred() {
        let mut fights = std::collections::HashMap::new();
        let key = ResourceKey {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: "n".into(),
            name: "a".into(),
        };
        let t0 = Instant::now();
        assert_eq!(count_correction(&mut fights, &key, t0).0, 1);
        assert_eq!(count_correction(&mut fights, &key, t0).0, 2);
        let (n, delay) = count_correction(&mut fights, &key, t0);
        assert_eq!((n, delay), (3, Duration::from_secs(1)));
        assert!(conflict_message(&key, None, n, delay).is_some());
        let (held_back, wait) = deferred(&fights, [key.clone()].into_iter(), t0);
        assert!(held_back.contains(&key));
        assert_eq!(wait, Some(Duration::from_secs(1)));
        let later = t0 + Duration::from_secs(2);
        assert!(
            deferred(&fights, [key.clone()].into_iter(), later)
                .0
                .is_empty()
        );
        assert_eq!(
            count_correction(&mut fights, &key, t0 + FIGHT_WINDOW * 2).0,
            1
        );
    }

    #[test]
    fn failures_back_off_from_one_second_to_five_minutes() {
        let d: Vec<u64> = (1..=11).map(|c| failure_delay(c).as_secs()).collect();
        assert_eq!(d, [1, 2, 4, 8, 16, 32, 64, 128, 256, 256, 256]);
    }
}
