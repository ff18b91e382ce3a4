//! With `--shards`, what the input caches keep for a Composition's first read: the copies
//! of [`super::arrivals`], fed by the input watches and wanted by the Compositions of the
//! shards held here (see that module for the rules and bounds).

use super::arrivals::{Came, estimated_size, name_of};
use super::*;

/// An input table a Composition reads through: its scope, the namespaces whose objects it
/// does not serve (see [`Watches::tables_read_by`]), the table.
type Readable = (String, Vec<String>, Synced<Kept>);

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
    /// With `--shards`, that a Composition of a shard held here (UID `uid`, just changed)
    /// binds these inputs, by namespace and name: their copies that arrive (or arrived)
    /// before its first read are kept for it. Each name is also wanted cluster-scoped. Once
    /// a pass of it has started here, a name that an input table it reads through keeps whole
    /// (the table reads of that kind go to) is not wanted: that row serves its next read when
    /// it is of the bound kind (see [`Watches::tables_read_by`]).
    pub fn expect_reads<'a>(
        &self,
        uid: Option<&str>,
        bound: impl Iterator<Item = (String, &'a str)>,
    ) {
        if !self.expects_reads() {
            return;
        }
        let bound: Vec<(String, &str)> = bound.collect();
        if bound.is_empty() {
            return;
        }
        let mut whole = vec![false; bound.len()];
        // No pass of it here yet (created, or of a shard just taken over): it reads through
        // no table, and every name is wanted.
        let known = uid.filter(|uid| self.owners.lock().contains_key(*uid));
        for (scope, shadowed, synced) in known
            .map(|uid| self.tables_read_by(uid, &bound))
            .unwrap_or_default()
        {
            let t = synced.table.read();
            let is_whole = |ns: &str, name: &str| matches!(t.get(ns, name), Some(Kept::Whole(_)));
            for ((namespace, name), whole) in bound.iter().zip(&mut whole) {
                let in_row = if scope.is_empty() {
                    // A cluster-scoped object, or one of a namespace without a watch of its own.
                    is_whole("", name)
                        || (!shadowed.contains(namespace) && is_whole(namespace, name))
                } else {
                    *namespace == scope && is_whole(namespace, name)
                };
                *whole = *whole || in_row;
            }
        }
        let now = std::time::Instant::now();
        let mut arrivals = self.arrivals.lock();
        for ((namespace, name), _) in bound.iter().zip(whole).filter(|(_, whole)| !whole) {
            arrivals.want(namespace, name, now);
            arrivals.want("", name, now);
        }
    }

    /// The input tables that may hold the objects of `bound` (their namespaces' watches and
    /// the cluster-wide ones) that the Composition of UID `uid` reads through, with their
    /// scopes and, for a cluster-wide one, the bound namespaces that have a watch of its kind
    /// of their own (reads of their objects go there); one pass over the input watches. A
    /// binding names no kind: a whole row of the bound name in any of them counts — when it
    /// is not the bound object's kind, that read costs one GET, which keeps the bound object
    /// whole from then on — but the kinds enoki itself reads for every Composition (its own
    /// API's, Namespaces) are left out.
    fn tables_read_by(&self, uid: &str, bound: &[(String, &str)]) -> Vec<Readable> {
        let namespaces: HashSet<&str> = bound.iter().map(|(ns, _)| ns.as_str()).collect();
        let enokis = |gvk: &GroupVersionKind| {
            gvk.group == crds::GROUP || (gvk.group.is_empty() && gvk.kind == "Namespace")
        };
        // The inputs' lock is let go before any table's is taken (`prune_whole` holds a
        // table's while it looks at the inputs).
        let inputs = self.inputs.lock();
        let own_watch = |gvk: &GroupVersionKind, ns: &str| {
            !ns.is_empty() && inputs.contains_key(&(gvk.clone(), ns.to_string()))
        };
        inputs
            .iter()
            .filter(|((gvk, scope), w)| {
                (scope.is_empty() || namespaces.contains(scope.as_str()))
                    && w.users.contains(uid)
                    && !enokis(gvk)
            })
            .map(|((gvk, scope), w)| {
                let shadowed = if scope.is_empty() {
                    let own = namespaces.iter().filter(|ns| own_watch(gvk, ns));
                    own.map(|ns| (*ns).to_string()).collect()
                } else {
                    Vec::new()
                };
                (scope.clone(), shadowed, w.synced.clone())
            })
            .collect()
    }

    /// Whether [`Watches::expect_reads`] keeps anything: sharded, with whole inputs (without,
    /// every read is a GET as a ServiceAccount).
    pub fn expects_reads(&self) -> bool {
        self.sharded() && self.whole_inputs
    }

    /// Names wanted for a first read (see [`Watches::expect_reads`]).
    pub fn wanted_inputs(&self) -> usize {
        self.arrivals.lock().wanted()
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
