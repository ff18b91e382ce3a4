//! With `--shards`, what the input caches keep for a Composition's first read: the copies
//! of [`super::arrivals`], fed by the input watches and wanted by the Compositions of the
//! shards held here (see that module for the rules and bounds).

use super::arrivals::{Came, estimated_size, name_of};
use super::*;

/// How an input watch saw an object.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// Created or changed.
    Changed,
    /// In a (re)list.
    Listed,
    Deleted,
}

impl Watches {
    /// With `--shards`, that a Composition of a shard held here (just changed) binds these
    /// inputs, by namespace and name: their copies that arrive (or arrived) before its first
    /// read are kept for it. Each name is also wanted cluster-scoped.
    pub fn expect_reads<'a>(&self, bound: impl Iterator<Item = (String, &'a str)>) {
        if !self.expects_reads() {
            return;
        }
        let now = std::time::Instant::now();
        let mut arrivals = self.arrivals.lock();
        for (namespace, name) in bound {
            arrivals.want(&namespace, name, now);
            arrivals.want("", name, now);
        }
    }

    /// Whether [`Watches::expect_reads`] keeps anything: sharded, with whole inputs (without,
    /// every read is a GET as a ServiceAccount).
    pub fn expects_reads(&self) -> bool {
        self.sharded() && self.whole_inputs
    }

    /// Copies of inputs kept for a first read.
    pub fn arrived_inputs(&self) -> usize {
        self.arrivals.lock().len()
    }

    /// Keeps what an input watch brought of an object no Composition here reads (sharded, a
    /// kind kept whole), when [`super::arrivals`] does; drops its copy when it is deleted.
    pub(super) fn arrival(&self, gvk: &GroupVersionKind, mut o: DynamicObject, seen: Seen) {
        let name = name_of(&o);
        let came = match seen {
            Seen::Deleted => {
                self.arrivals.lock().gone(gvk, &name.0, &name.1);
                return;
            }
            // A change of an object the table does not have yet (its creation, or the first
            // change this watch sees of it), or of one whose creation is kept here.
            Seen::Changed
                if self.in_table(gvk, &name.0, &name.1).is_none()
                    || self.arrivals.lock().has(gvk, &name) =>
            {
                Came::Created
            }
            Seen::Changed | Seen::Listed => Came::Known,
        };
        if !self.arrivals.lock().keeps(&name, came) {
            // An older copy is not kept past this change.
            self.arrivals.lock().gone(gvk, &name.0, &name.1);
            return;
        }
        o.managed_fields_mut().clear();
        let size = estimated_size(&o);
        let at = (came, std::time::Instant::now());
        self.arrivals.lock().arrived(gvk, o, size, at);
    }

    /// The copy of this object at the table's `version`, for a Composition that reads it now
    /// (its reader recorded by `serve`): kept whole from now on.
    pub(super) fn take_arrival(
        &self,
        (gvk, namespace, name): (&GroupVersionKind, &str, &str),
        version: &str,
    ) -> Option<Arc<DynamicObject>> {
        let arrived = self.arrivals.lock().take(gvk, (namespace, name), version)?;
        if self.read_here(gvk, namespace, name) {
            // In place of its stub (a row the watch made whole meanwhile stays).
            self.keep_whole(gvk, namespace, name, &arrived);
        }
        Some(arrived)
    }

    /// A Composition here read this object (from the cache, or with a GET): its name is no
    /// longer wanted, and a copy of it left among the arrivals goes.
    pub(super) fn first_read(&self, gvk: &GroupVersionKind, namespace: &str, name: &str) {
        let mut arrivals = self.arrivals.lock();
        arrivals.gone(gvk, namespace, name);
        arrivals.read(namespace, name);
    }

    /// The row the input table of `gvk` has for this object (`Some(None)`: a row without a
    /// resourceVersion); `None` when it has none or the kind is not watched.
    pub(super) fn in_table(
        &self,
        gvk: &GroupVersionKind,
        namespace: &str,
        name: &str,
    ) -> Option<Option<String>> {
        let synced = self.store_of(gvk, namespace)?;
        let t = synced.table.read();
        Some(
            t.get(namespace, name)?
                .resource_version()
                .map(str::to_string),
        )
    }
}
