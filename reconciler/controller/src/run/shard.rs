//! Sharding: which Compositions one replica reconciles.
//!
//! With `--shards N`, Composition `c` belongs to shard `fnv1a64(c.metadata.uid) mod N` (UIDs
//! never change, so a Composition never moves between shards). Every shard is a Lease of its
//! own (`enoki-controller-shard-<i>-of-<N>`). A replica runs one controller stack for the set
//! of shards whose Leases it holds ([`Held`]: it grows as Leases are taken, and the stack's
//! watches list again to fill their caches with the added shards), and that stack caches
//! only those shards:
//! Compositions, their ResourceSlices (by owner reference) and the managed objects (by the
//! `enoki.dev/managed-by` label, whose value is the owning Composition's UID) of other shards
//! are dropped before they reach a cache. Cluster-wide work that is not per Composition
//! (Synthesizer status, built-in CRDs and instance Compositions, Symphonies) runs in the
//! holder of shard 0.

use crds::{Composition, ResourceSlice};
use kube::ResourceExt;

/// One shard of `count`: a Lease, and a metrics label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shard {
    /// This shard, `0..count`.
    pub index: u32,
    /// How many shards there are.
    pub count: u32,
}

impl Shard {
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

/// The shards a replica serves: a watch of [`Shards`]. It grows as shards are taken and
/// shrinks when one is handed back (a replica that loses a shard stops); [`fixed`] makes
/// one that never changes.
pub type Held = tokio::sync::watch::Receiver<Shards>;

/// What a relisting watch was started for: the set at its last start, and the shards held
/// through every start since the last complete list (a shard taken out and back in between
/// is not in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listing {
    /// The set the current list was started for.
    pub current: Shards,
    /// The shards in every set started for since the last complete list.
    pub kept: Shards,
}

impl Listing {
    /// A watch started for `shards`.
    pub fn of(shards: Shards) -> Listing {
        Listing {
            current: shards,
            kept: shards,
        }
    }

    /// Started again for `shards`.
    pub fn restarted(&mut self, shards: Shards) {
        self.current = shards;
        self.kept = self.kept.and(shards);
    }
}

/// A [`Held`] that stays `shards`.
pub fn fixed(shards: Shards) -> Held {
    tokio::sync::watch::channel(shards).1
}

/// The reconciles running per shard: a shard is handed back only once none of its runs.
#[derive(Debug)]
pub struct InFlight(Vec<std::sync::atomic::AtomicUsize>);

impl InFlight {
    /// Counters for `count` shards.
    pub fn new(count: u32) -> std::sync::Arc<InFlight> {
        let n = usize::try_from(count.clamp(1, Shards::MAX)).unwrap_or(1);
        std::sync::Arc::new(InFlight(
            (0..n)
                .map(|_| std::sync::atomic::AtomicUsize::new(0))
                .collect(),
        ))
    }

    /// Counts a run of shard `index` until the guard is dropped. Enter first, then check
    /// that the shard is still served: a shard taken out of the set after that check waits
    /// for the guard.
    pub fn enter(self: &std::sync::Arc<Self>, index: u32) -> Serving {
        let i = usize::try_from(index).unwrap_or(0).min(self.0.len() - 1);
        self.0[i].fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Serving(self.clone(), i)
    }

    /// Whether a run of shard `index` is counted.
    pub fn busy(&self, index: u32) -> bool {
        let i = usize::try_from(index).unwrap_or(0).min(self.0.len() - 1);
        self.0[i].load(std::sync::atomic::Ordering::SeqCst) > 0
    }
}

/// One run counted by [`InFlight::enter`].
#[derive(Debug)]
pub struct Serving(std::sync::Arc<InFlight>, usize);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.0[self.1].fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A set of the `count` shards (at most [`Shards::MAX`]): the ones a replica holds and
/// reconciles. [`Shards::ALL`] is the whole (unsharded) set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shards {
    /// Bit `i` set: shard `i` is in the set.
    mask: u64,
    /// How many shards there are.
    count: u32,
}

impl Shards {
    /// No sharding: one shard holding everything.
    pub const ALL: Shards = Shards { mask: 1, count: 1 };

    /// The most shards `--shards` accepts (one bit each).
    pub const MAX: u32 = 64;

    /// The empty set of `count` shards.
    pub fn none(count: u32) -> Shards {
        Shards {
            mask: 0,
            count: count.clamp(1, Self::MAX),
        }
    }

    /// This set and shard `index`.
    #[must_use]
    pub fn with(self, index: u32) -> Shards {
        Shards {
            mask: self.mask | Self::bit(index),
            ..self
        }
    }

    /// This set without shard `index`.
    #[must_use]
    pub fn without(self, index: u32) -> Shards {
        Shards {
            mask: self.mask & !Self::bit(index),
            ..self
        }
    }

    /// The shards in both sets.
    #[must_use]
    pub fn and(self, other: Shards) -> Shards {
        Shards {
            mask: self.mask & other.mask,
            ..self
        }
    }

    fn bit(index: u32) -> u64 {
        1_u64.checked_shl(index).unwrap_or(0)
    }

    /// Whether shard `index` is in the set.
    pub fn contains(&self, index: u32) -> bool {
        self.mask & Self::bit(index) != 0
    }

    /// How many shards the set holds.
    pub fn len(&self) -> u32 {
        self.mask.count_ones()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.mask == 0
    }

    /// How many shards there are in all (`--shards`).
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The shards in the set, in order.
    pub fn iter(&self) -> impl Iterator<Item = Shard> + use<> {
        let (mask, count) = (self.mask, self.count);
        (0..count)
            .filter(move |i| mask & Self::bit(*i) != 0)
            .map(move |index| Shard { index, count })
    }

    /// Whether the Composition of this UID belongs here.
    pub fn owns_uid(&self, uid: &str) -> bool {
        self.count <= 1 || self.contains(Shard::of_uid(uid, self.count))
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
            None => self.contains(0),
        }
    }

    /// Whether the cluster-wide work (Synthesizers, built-ins, Symphonies) runs here.
    pub fn has_first(&self) -> bool {
        self.contains(0)
    }

    /// The `enoki.dev/shard` label of the objects and slices of the Composition of this UID:
    /// `<index>-of-<count>`; `None` unsharded (no label).
    pub fn label_value_of(&self, uid: &str) -> Option<String> {
        (self.count > 1).then(|| shard_value(Shard::of_uid(uid, self.count), self.count))
    }

    /// The label selector of a watch of labelled objects that leaves out, at the API server,
    /// those of the shards not in this set (`None` when none is left out). Objects without
    /// the label, or labelled for another `--shards`, are still sent (and sorted here).
    pub fn ours_selector(&self) -> Option<String> {
        let others: Vec<String> = (0..self.count)
            .filter(|i| !self.contains(*i))
            .map(|i| shard_value(i, self.count))
            .collect();
        (self.count > 1 && !others.is_empty())
            .then(|| format!("{} notin ({})", crds::names::SHARD_LABEL, others.join(",")))
    }

    /// The metrics label of the shard the Composition of this UID belongs to.
    pub fn label_of(&self, uid: &str) -> String {
        Shard::of_uid(uid, self.count).to_string()
    }
}

/// The `enoki.dev/shard` label's value for shard `index` of `count`.
fn shard_value(index: u32, count: u32) -> String {
    format!("{index}-of-{count}")
}

impl std::fmt::Display for Shards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held: Vec<String> = self.iter().map(|s| s.index.to_string()).collect();
        write!(f, "{{{}}}/{}", held.join(","), self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::{Shard, Shards};

    #[test]
    fn every_uid_belongs_to_exactly_one_shard_and_the_split_is_even() {
        let count = 4;
        let mut per = [0u32; 4];
        for i in 0..4000 {
            let uid = format!("3f6c1a2e-0000-4000-8000-{i:012x}");
            let owners: Vec<u32> = (0..count)
                .filter(|&index| Shards::none(count).with(index).owns_uid(&uid))
                .collect();
            assert_eq!(owners.len(), 1, "{uid} -> {owners:?}");
            per[owners[0] as usize] += 1;
        }
        for n in per {
            assert!((800..1200).contains(&n), "uneven split: {per:?}");
        }
        assert!(Shards::ALL.owns_uid("anything"));
    }

    #[test]
    fn a_set_of_shards_owns_the_uids_of_each_of_its_shards() {
        let two = Shards::none(4).with(1).with(3);
        assert_eq!(
            (two.len(), two.count(), two.to_string()),
            (2, 4, "{1,3}/4".into())
        );
        assert!(!two.has_first() && two.with(0).has_first());
        assert_eq!(two.without(3), Shards::none(4).with(1));
        for i in 0..400 {
            let uid = format!("0b7e-{i}");
            let shard = Shard::of_uid(&uid, 4);
            assert_eq!(two.owns_uid(&uid), shard == 1 || shard == 3, "{uid}");
            assert_eq!(two.label_of(&uid), shard.to_string());
        }
        assert!(Shards::none(4).is_empty() && !Shards::ALL.is_empty());
        // Out-of-range indices are no shard at all.
        assert!(Shards::none(64).with(64).is_empty());
    }

    #[test]
    fn the_label_selector_leaves_out_the_other_shards() {
        let held = Shards::none(4).with(0).with(2);
        assert_eq!(
            held.ours_selector().as_deref(),
            Some("enoki.dev/shard notin (1-of-4,3-of-4)")
        );
        let all = (0..4).fold(Shards::none(4), Shards::with);
        assert_eq!(
            (all.ours_selector(), Shards::ALL.ours_selector()),
            (None, None)
        );
        for i in 0..100 {
            let uid = format!("9a1f-{i}");
            let value = held.label_value_of(&uid).unwrap();
            let shard = Shard::of_uid(&uid, 4);
            assert_eq!(value, format!("{shard}-of-4"));
            // An object of ours passes our selector's exclusions, another shard's does not.
            let excluded = held.ours_selector().unwrap().contains(&value);
            assert_eq!(excluded, !held.owns_uid(&uid), "{uid}");
        }
        assert_eq!(Shards::ALL.label_value_of("x"), None);
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
