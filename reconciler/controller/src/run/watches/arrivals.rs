//! With `--shards`, copies of input objects kept for a first read. The input tables keep
//! stubs, and a whole copy only of what a Composition of this replica's shards reads; an input
//! is usually created a moment before the Composition that binds it (applied together).
//! When the input watch brings an object's creation, its whole copy waits here for
//! [`ARRIVAL_AGE`] (the sweep every 15 s drops it 10–25 s after it came). A Composition of
//! the shards held here that binds it by namespace and name — reading as the controller, not
//! being deleted — *wants* the name for [`PIN_FOR`] from its first event (a later event of a
//! Composition reconciled here does not want a name an input table it reads through keeps
//! whole):
//! a copy already here is pinned, and the object's later creation, change or listing is kept
//! too. The first read
//! takes the copy (no GET) and keeps it whole, as a GET's copy would be, and unpins the name.
//! Bounds: unpinned copies [`MAX_UNPINNED`] and [`MAX_UNPINNED_BYTES`]; all copies
//! [`MAX_BYTES`] (as [`estimated_size`]s: the heap they hold). A copy past a bound is not
//! kept, and its reader GETs it as without this; the bounds are the replica's, shared by
//! every namespace. Pure: the caller passes the clock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::DynamicObject;
use kube::core::GroupVersionKind;

/// How long an unpinned copy is kept at least (the 15 s sweep drops the older ones).
pub(super) const ARRIVAL_AGE: Duration = Duration::from_secs(10);

/// How long a bound name stays wanted, from the first event of the Composition that binds
/// it (a Composition queued longer reads it with a GET).
pub(super) const PIN_FOR: Duration = Duration::from_secs(300);

/// Most unpinned copies kept at once.
pub(super) const MAX_UNPINNED: usize = 4096;

/// Most bytes of unpinned copies kept at once.
pub(super) const MAX_UNPINNED_BYTES: usize = 8 << 20;

/// Most bytes of all copies kept at once.
pub(super) const MAX_BYTES: usize = 64 << 20;

/// How the input watch brought an object.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Came {
    /// Created: kept even when no Composition here wants it (yet).
    Created,
    /// Changed, or in a (re)list: kept only when wanted.
    Known,
}

/// (namespace, name): `""` for a cluster-scoped object.
pub(super) type Name = (String, String);

struct Arrival {
    gvk: GroupVersionKind,
    obj: Arc<DynamicObject>,
    size: usize,
    at: Instant,
}

/// See the module docs.
#[derive(Default)]
pub(super) struct Arrivals {
    copies: HashMap<Name, Vec<Arrival>>,
    /// Names a Composition here binds and has not read yet, since when.
    wanted: HashMap<Name, Instant>,
    unpinned: usize,
    unpinned_bytes: usize,
    bytes: usize,
}

impl Arrivals {
    /// Whether a copy of this object is kept.
    pub(super) fn has(&self, gvk: &GroupVersionKind, name: &Name) -> bool {
        self.copies
            .get(name)
            .is_some_and(|list| list.iter().any(|a| a.gvk == *gvk))
    }

    /// Whether a copy of `name` that came so would be kept (pinned, or created while the
    /// unpinned copies are under their count): the caller then sizes it, outside the lock.
    pub(super) fn keeps(&self, name: &Name, came: Came) -> bool {
        self.wanted.contains_key(name) || (came == Came::Created && self.unpinned < MAX_UNPINNED)
    }

    /// Keeps `obj` (of `gvk`) as the input watch brought it, when wanted or created and
    /// within the bounds; `size`: its [`estimated_size`].
    pub(super) fn arrived(
        &mut self,
        gvk: &GroupVersionKind,
        obj: DynamicObject,
        size: usize,
        (came, now): (Came, Instant),
    ) {
        let name = name_of(&obj);
        // A copy replacing an earlier one of the same object keeps its age.
        let first = self
            .copies
            .get(&name)
            .and_then(|list| list.iter().find(|a| a.gvk == *gvk))
            .map_or(now, |a| a.at);
        self.gone(gvk, &name.0, &name.1);
        let pinned = self.wanted.contains_key(&name);
        if !pinned && came != Came::Created {
            return;
        }
        let full = if pinned {
            false
        } else {
            self.unpinned >= MAX_UNPINNED
                || self.unpinned_bytes.saturating_add(size) > MAX_UNPINNED_BYTES
        };
        if full || self.bytes.saturating_add(size) > MAX_BYTES {
            return;
        }
        if !pinned {
            self.unpinned += 1;
            self.unpinned_bytes += size;
        }
        self.bytes += size;
        let a = Arrival {
            gvk: gvk.clone(),
            obj: Arc::new(obj),
            size,
            at: first,
        };
        self.copies.entry(name).or_default().push(a);
    }

    /// Drops the copy of this object (deleted, or read).
    pub(super) fn gone(&mut self, gvk: &GroupVersionKind, namespace: &str, name: &str) {
        if self.copies.is_empty() {
            return;
        }
        let key = (namespace.to_string(), name.to_string());
        let Some(list) = self.copies.get_mut(&key) else {
            return;
        };
        if let Some(i) = list.iter().position(|a| a.gvk == *gvk) {
            let a = list.swap_remove(i);
            self.bytes = self.bytes.saturating_sub(a.size);
            if !self.wanted.contains_key(&key) {
                self.unpinned = self.unpinned.saturating_sub(1);
                self.unpinned_bytes = self.unpinned_bytes.saturating_sub(a.size);
            }
        }
        if list.is_empty() {
            self.copies.remove(&key);
        }
    }

    /// A Composition here binds this name and will read it (from `now`, unless already
    /// wanted: a later event does not extend the pin).
    pub(super) fn want(&mut self, namespace: &str, name: &str, now: Instant) {
        let key = (namespace.to_string(), name.to_string());
        if let std::collections::hash_map::Entry::Vacant(v) = self.wanted.entry(key.clone()) {
            v.insert(now);
            // Its copies count as pinned from now on.
            for a in self.copies.get(&key).into_iter().flatten() {
                self.unpinned = self.unpinned.saturating_sub(1);
                self.unpinned_bytes = self.unpinned_bytes.saturating_sub(a.size);
            }
        }
    }

    /// Takes the copy of this object at `version` (the one the input table has), for a
    /// Composition that reads it now; `None` when there is none at that version. Its reader
    /// keeps what it reads whole from now on: the name is no longer wanted (see
    /// [`Arrivals::read`]).
    pub(super) fn take(
        &mut self,
        gvk: &GroupVersionKind,
        (namespace, name): (&str, &str),
        version: &str,
    ) -> Option<Arc<DynamicObject>> {
        let key = (namespace.to_string(), name.to_string());
        let obj = self
            .copies
            .get(&key)?
            .iter()
            .find(|a| a.gvk == *gvk && a.obj.metadata.resource_version.as_deref() == Some(version))?
            .obj
            .clone();
        self.gone(gvk, namespace, name);
        self.read(namespace, name);
        Some(obj)
    }

    /// A Composition here read this name (from a copy, or with a GET): it is no longer
    /// wanted, nor the same name cluster-scoped, unless copies of other kinds wait under them
    /// (another Composition that wants this name then finds no pin).
    pub(super) fn read(&mut self, namespace: &str, name: &str) {
        if self.wanted.is_empty() {
            return;
        }
        for namespace in [namespace, ""] {
            let key = (namespace.to_string(), name.to_string());
            if !self.copies.contains_key(&key) {
                self.wanted.remove(&key);
            }
        }
    }

    /// Drops unpinned copies older than [`ARRIVAL_AGE`] and pins older than [`PIN_FOR`]
    /// (with their copies).
    pub(super) fn sweep(&mut self, now: Instant) {
        let expired = |at: Instant, age| now.saturating_duration_since(at) > age;
        self.wanted.retain(|key, at| {
            let keep = !expired(*at, PIN_FOR);
            if !keep {
                // Unpinned now: counted so, then dropped below when old enough.
                for a in self.copies.get(key).into_iter().flatten() {
                    self.unpinned += 1;
                    self.unpinned_bytes += a.size;
                }
            }
            keep
        });
        let old: Vec<(GroupVersionKind, Name)> = self
            .copies
            .iter()
            .filter(|(key, _)| !self.wanted.contains_key(*key))
            .flat_map(|(key, list)| {
                list.iter()
                    .filter(|a| expired(a.at, ARRIVAL_AGE))
                    .map(|a| (a.gvk.clone(), key.clone()))
            })
            .collect();
        for (gvk, (namespace, name)) in old {
            self.gone(&gvk, &namespace, &name);
        }
        // Past a burst (a replica's start wants every bound name), the tables shrink back.
        if self.wanted.len() < self.wanted.capacity() / 4 {
            self.wanted.shrink_to_fit();
        }
        if self.copies.len() < self.copies.capacity() / 4 {
            self.copies.shrink_to_fit();
        }
    }

    /// Copies kept (pinned or not).
    pub(super) fn len(&self) -> usize {
        self.copies.values().map(Vec::len).sum()
    }

    /// Names wanted (a bound name in its namespace, and cluster-scoped: one entry for every
    /// namespace that binds it).
    pub(super) fn wanted(&self) -> usize {
        self.wanted.len()
    }
}

/// An estimate of the heap a copy holds: 1 KiB (its metadata and kind), its labels' and
/// annotations' text, and per JSON value of its body 48 bytes beside its text.
pub(super) fn estimated_size(o: &DynamicObject) -> usize {
    let text = |m: &Option<std::collections::BTreeMap<String, String>>| {
        m.iter()
            .flatten()
            .map(|(k, v)| k.len() + v.len() + 64)
            .sum::<usize>()
    };
    1024 + text(&o.metadata.labels) + text(&o.metadata.annotations) + value_size(&o.data)
}

/// What [`estimated_size`] counts for one JSON value (its depth is bounded by the decoder).
fn value_size(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    48 + match v {
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(value_size).sum(),
        Value::Object(m) => m.iter().map(|(k, v)| k.len() + 32 + value_size(v)).sum(),
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
    }
}

pub(super) fn name_of(o: &DynamicObject) -> Name {
    (
        o.metadata.namespace.clone().unwrap_or_default(),
        o.metadata.name.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
#[path = "arrivals_tests.rs"]
mod tests;
