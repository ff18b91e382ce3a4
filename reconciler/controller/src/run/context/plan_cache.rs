//! The plan cache: ingested syntheses by Composition UID, bounded by their weight, and the
//! share of it a replica keeps.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::super::shard::Held;

/// The share of `--plan-cache-resources` (`total`) a replica holding `held` keeps: the flag
/// bounds the cache of the whole fleet, so a replica serving 2 of 4 shards keeps half of it
/// (at least one resource). Unsharded, all of it.
pub(super) fn plan_cache_share(total: usize, held: super::super::shard::Shards) -> usize {
    let (held, count) = (held.len() as usize, held.count().max(1) as usize);
    if count <= 1 {
        return total.max(1);
    }
    (total.saturating_mul(held) / count).max(1)
}
/// Manifest bytes that count as one more resource in the plan cache's bound.
pub(crate) const BYTES_PER_RESOURCE: usize = 1024;

/// Ingested syntheses by Composition UID, bounded by their total weight (resources, and one
/// more per [`BYTES_PER_RESOURCE`] of manifests).
#[derive(Default)]
struct PreparedLru {
    /// uid → (key, the ingested synthesis, its weight, last use).
    entries: HashMap<String, (String, Arc<plan::Prepared>, usize, u64)>,
    resources: usize,
    tick: u64,
}

impl PreparedLru {
    fn get(&mut self, uid: &str, key: &str) -> Option<Arc<plan::Prepared>> {
        self.tick += 1;
        let tick = self.tick;
        let e = self.entries.get_mut(uid).filter(|e| e.0 == key)?;
        e.3 = tick;
        Some(e.1.clone())
    }

    /// Caches `p`, then drops the least recently used until at most `capacity` resources
    /// are held (the newest is always kept).
    fn insert(
        &mut self,
        uid: &str,
        key: String,
        (p, weight): (Arc<plan::Prepared>, usize),
        capacity: usize,
    ) {
        self.remove(uid);
        self.tick += 1;
        self.resources += weight;
        self.entries
            .insert(uid.to_string(), (key, p, weight, self.tick));
        self.trim(capacity);
    }

    /// Keeps the entries of the UIDs `keep` accepts, at most `capacity` resources of them.
    fn retain(&mut self, keep: impl Fn(&str) -> bool, capacity: usize) {
        let dropped: Vec<String> = self.entries.keys().filter(|u| !keep(u)).cloned().collect();
        for uid in &dropped {
            self.remove(uid);
        }
        self.trim(capacity);
    }

    /// Drops the least recently used until at most `capacity` resources are held (the
    /// newest is always kept).
    fn trim(&mut self, capacity: usize) {
        while self.resources > capacity && self.entries.len() > 1 {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.3)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            self.remove(&oldest);
        }
    }

    fn remove(&mut self, uid: &str) {
        if let Some(old) = self.entries.remove(uid) {
            self.resources -= old.2;
        }
    }
}

/// The plan cache handle: ingested syntheses by Composition UID, least recently used dropped
/// first once they weigh more than this replica's share of `--plan-cache-resources`; a dropped
/// one is ingested again from its slices when next needed.
pub(crate) struct PlanCache {
    lru: Mutex<PreparedLru>,
    /// `--plan-cache-resources` (the whole fleet's bound).
    total: usize,
    /// The shards this replica serves (its share of `total`).
    shards: Held,
}

impl PlanCache {
    /// An empty cache holding this replica's share (`shards`) of `total` resources.
    pub(crate) fn new(total: usize, shards: Held) -> PlanCache {
        PlanCache {
            lru: Mutex::new(PreparedLru::default()),
            total,
            shards,
        }
    }

    /// The ingested synthesis of Composition `uid` under `key`, if cached.
    pub(crate) fn get(&self, uid: &str, key: &str) -> Option<Arc<plan::Prepared>> {
        self.lru.lock().get(uid, key)
    }

    /// Caches the ingested synthesis of Composition `uid` under `key`.
    /// It counts as its resources plus one per [`BYTES_PER_RESOURCE`] of the manifests it was
    /// ingested from (`bytes`): the cache is bounded by what it holds, however large the
    /// objects a synthesis emits.
    pub(crate) fn keep(&self, uid: &str, key: String, p: Arc<plan::Prepared>, bytes: usize) {
        let capacity = plan_cache_share(self.total, *self.shards.borrow());
        let weight = p.resources.len() + bytes / BYTES_PER_RESOURCE;
        // One synthesis worth more than the whole cache is not kept (it is ingested again
        // from its slices when next reconciled); any other evicts the least recently used.
        if weight > capacity && capacity > 1 {
            return;
        }
        self.lru.lock().insert(uid, key, (p, weight), capacity);
    }

    /// Drops the synthesis of Composition `uid`.
    pub(crate) fn remove(&self, uid: &str) {
        self.lru.lock().remove(uid);
    }

    /// Drops the syntheses of shards no longer served and holds the cache to its share.
    pub(crate) fn hold_to_share(&self) {
        let held = *self.shards.borrow();
        let share = plan_cache_share(self.total, held);
        self.lru.lock().retain(|uid| held.owns_uid(uid), share);
    }
}
