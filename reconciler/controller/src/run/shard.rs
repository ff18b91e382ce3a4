//! Sharding: which Compositions one controller stack reconciles.
//!
//! With `--shards N`, Composition `c` belongs to shard `fnv1a64(c.metadata.uid) mod N` (UIDs
//! never change, so a Composition never moves between shards). Every shard is a Lease of its
//! own (`enoki-controller-shard-<i>-of-<N>`); a replica runs the controllers of each shard whose
//! Lease it holds, and each of those stacks caches only its shard: Compositions, their
//! ResourceSlices (by owner reference) and the managed objects (by the `enoki.dev/managed-by`
//! label, whose value is the owning Composition's UID) of other shards are dropped before
//! they reach a cache. Cluster-wide work that is not per Composition (Synthesizer status,
//! built-in CRDs and instance Compositions, Symphonies) runs in the holder of shard 0.

use crds::{Composition, ResourceSlice};
use kube::ResourceExt;

/// One shard of `count`; [`Shard::ALL`] is the whole (unsharded) set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shard {
    /// This shard, `0..count`.
    pub index: u32,
    /// How many shards there are.
    pub count: u32,
}

impl Shard {
    /// No sharding: one shard holding everything.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// The shard a Composition of this UID belongs to, out of `count`.
    pub fn of_uid(uid: &str, count: u32) -> u32 {
        if count <= 1 {
            return 0;
        }
        // FNV-1a, 64 bit: stable across processes, versions and platforms (std's hasher
        // is not).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in uid.as_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        u32::try_from(h % u64::from(count)).unwrap_or(0)
    }

    /// Whether the Composition of this UID belongs here.
    pub fn owns_uid(&self, uid: &str) -> bool {
        self.count <= 1 || Shard::of_uid(uid, self.count) == self.index
    }

    /// Whether `comp` belongs here.
    pub fn owns(&self, comp: &Composition) -> bool {
        self.count <= 1 || comp.uid().is_some_and(|u| self.owns_uid(&u))
    }

    /// Whether `slice` belongs here (by its owning Composition's UID; a slice without one
    /// belongs to shard 0, which is also where garbage collection of such leftovers runs).
    pub fn owns_slice(&self, slice: &ResourceSlice) -> bool {
        if self.count <= 1 {
            return true;
        }
        match slice
            .owner_references()
            .iter()
            .find(|o| o.kind == crds::names::kinds::COMPOSITION)
        {
            Some(o) => self.owns_uid(&o.uid),
            None => self.index == 0,
        }
    }

    /// Whether the cluster-wide work (Synthesizers, built-ins, Symphonies) runs here.
    pub fn is_first(&self) -> bool {
        self.index == 0
    }

    /// The name of this shard's Lease.
    pub fn lease_name(&self) -> String {
        if self.count <= 1 {
            "enoki-controller".to_string()
        } else {
            format!("enoki-controller-shard-{}-of-{}", self.index, self.count)
        }
    }

    /// The metrics label value (`"0"` when unsharded).
    pub fn label(&self) -> String {
        self.index.to_string()
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::Shard;

    #[test]
    fn every_uid_belongs_to_exactly_one_shard_and_the_split_is_even() {
        let count = 4;
        let mut per = [0u32; 4];
        for i in 0..4000 {
            let uid = format!("3f6c1a2e-0000-4000-8000-{i:012x}");
            let owners: Vec<u32> = (0..count)
                .filter(|&index| Shard { index, count }.owns_uid(&uid))
                .collect();
            assert_eq!(owners.len(), 1, "{uid} -> {owners:?}");
            per[owners[0] as usize] += 1;
        }
        for n in per {
            assert!((800..1200).contains(&n), "uneven split: {per:?}");
        }
        assert!(Shard::ALL.owns_uid("anything"));
    }

    #[test]
    fn the_hash_is_stable_across_releases() {
        // Changing it would move every Composition to another shard on an upgrade.
        let fnv_of_a: u64 = 0xaf63_dc4c_8601_ec8c;
        assert_eq!(
            u64::from(Shard::of_uid("a", 1_000_003)),
            fnv_of_a % 1_000_003
        );
        assert_eq!(
            Shard { index: 1, count: 2 }.lease_name(),
            "enoki-controller-shard-1-of-2"
        );
    }
}
