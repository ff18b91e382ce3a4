//! With `--shards`, copies of input objects that arrived before any Composition here read
//! them. The input tables keep stubs, and a whole copy only of what a Composition of this
//! replica's shards reads; an input is usually written a moment before the Composition that
//! binds it (applied together). Its whole copy, as the watch brought it, waits here for
//! [`ARRIVAL_AGE`]; a Composition of the shards held here that binds its name (namespace and
//! name, any kind) pins it for [`PIN_FOR`], whichever came first, and the Composition's first
//! read takes it from here: no GET. Unpinned copies are bounded ([`MAX_UNPINNED`],
//! [`MAX_UNPINNED_BYTES`]: a new one past them is not kept, and its reader GETs it as
//! without this); pinned ones are what the replica keeps whole once read anyway. Pure: the
//! caller passes the clock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::DynamicObject;
use kube::core::GroupVersionKind;

/// How long an unpinned copy is kept (a sweep every 15 s drops the older ones).
pub(super) const ARRIVAL_AGE: Duration = Duration::from_secs(10);

/// How long a bound name stays pinned without being read (a Composition queued longer is
/// read with a GET).
pub(super) const PIN_FOR: Duration = Duration::from_secs(300);

/// Most unpinned copies kept at once.
pub(super) const MAX_UNPINNED: usize = 4096;

/// Most bytes of unpinned copies (their `data` as JSON) kept at once.
pub(super) const MAX_UNPINNED_BYTES: usize = 8 << 20;

/// (namespace, name): `""` for a cluster-scoped object.
type Name = (String, String);

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
}

impl Arrivals {
    /// Keeps `obj` (of `gvk`), a live change the input watch brought (`listed`: from a
    /// list, kept only when wanted). `size`: its `data` as JSON.
    pub(super) fn arrived(
        &mut self,
        gvk: &GroupVersionKind,
        obj: DynamicObject,
        size: usize,
        (listed, now): (bool, Instant),
    ) {
        let name = name_of(&obj);
        self.gone(gvk, &name.0, &name.1);
        let pinned = self.wanted.contains_key(&name);
        if !pinned {
            let full = self.unpinned >= MAX_UNPINNED
                || self.unpinned_bytes.saturating_add(size) > MAX_UNPINNED_BYTES;
            if listed || full {
                return;
            }
            self.unpinned += 1;
            self.unpinned_bytes += size;
        }
        let a = Arrival {
            gvk: gvk.clone(),
            obj: Arc::new(obj),
            size,
            at: now,
        };
        self.copies.entry(name).or_default().push(a);
    }

    /// Drops the copy of this object (deleted, or read).
    pub(super) fn gone(&mut self, gvk: &GroupVersionKind, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        let Some(list) = self.copies.get_mut(&key) else {
            return;
        };
        if let Some(i) = list.iter().position(|a| a.gvk == *gvk) {
            let a = list.swap_remove(i);
            if !self.wanted.contains_key(&key) {
                self.unpinned = self.unpinned.saturating_sub(1);
                self.unpinned_bytes = self.unpinned_bytes.saturating_sub(a.size);
            }
        }
        if list.is_empty() {
            self.copies.remove(&key);
        }
    }

    /// A Composition here binds this name and will read it.
    pub(super) fn want(&mut self, namespace: &str, name: &str, now: Instant) {
        let key = (namespace.to_string(), name.to_string());
        if self.wanted.insert(key.clone(), now).is_none() {
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

    /// A Composition here read this name (from a kept copy): it is no longer wanted, nor the
    /// same name cluster-scoped, unless copies of other kinds wait under them (another
    /// Composition that wants one of those reads it with a GET).
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
    }

    /// Copies kept (pinned or not).
    pub(super) fn len(&self) -> usize {
        self.copies.values().map(Vec::len).sum()
    }
}

fn name_of(o: &DynamicObject) -> Name {
    (
        o.metadata.namespace.clone().unwrap_or_default(),
        o.metadata.name.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
#[path = "arrivals_tests.rs"]
mod tests;
