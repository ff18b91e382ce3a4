//! The compact stores the input and managed-object watches keep, in place of reflector stores:
//! per namespace (one shared `Arc<str>`), per name, one small row. A reflector store keeps,
//! per object, a key that repeats the kind's `ApiResource` and a whole `DynamicObject`; at
//! 100,000 managed objects and 10,000 inputs that is most of what a watch costs.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use kube::ResourceExt;
use kube::runtime::watcher;

/// Rows by (namespace, name); namespace `""` for cluster-scoped objects.
pub struct Table<V> {
    by_namespace: HashMap<Arc<str>, HashMap<Box<str>, V>>,
    /// Interned strings the rows share (the owner UIDs of managed objects), with how many
    /// rows hold each (a reader's clone of a row does not count).
    pool: HashMap<Arc<str>, usize>,
}

impl<V> Default for Table<V> {
    fn default() -> Self {
        Table {
            by_namespace: HashMap::new(),
            pool: HashMap::new(),
        }
    }
}

impl<V> Table<V> {
    pub fn get(&self, namespace: &str, name: &str) -> Option<&V> {
        self.by_namespace.get(namespace)?.get(name)
    }

    /// An object's row, to change in place (what it took from the pool stays its own: a
    /// row of pooled strings is replaced with [`Table::insert`] instead).
    pub fn get_mut(&mut self, namespace: &str, name: &str) -> Option<&mut V> {
        self.by_namespace.get_mut(namespace)?.get_mut(name)
    }

    /// Every row with its (namespace, name).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &V)> {
        self.by_namespace
            .iter()
            .flat_map(|(ns, rows)| rows.iter().map(move |(n, v)| (&**ns, &**n, v)))
    }

    fn put(&mut self, namespace: &str, name: &str, row: V) -> Option<V> {
        if let Some(rows) = self.by_namespace.get_mut(namespace) {
            return rows.insert(name.into(), row);
        }
        self.by_namespace
            .insert(namespace.into(), [(name.into(), row)].into());
        None
    }

    fn take(&mut self, namespace: &str, name: &str) -> Option<V> {
        let rows = self.by_namespace.get_mut(namespace)?;
        let row = rows.remove(name);
        if rows.is_empty() {
            self.by_namespace.remove(namespace);
        }
        row
    }

    /// The pooled copy of `s` (added when new) for one more row.
    pub(super) fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(rows) = self.pool.get_mut(s) {
            *rows += 1;
            if let Some((a, _)) = self.pool.get_key_value(s) {
                return a.clone();
            }
        }
        let a: Arc<str> = s.into();
        self.pool.insert(a.clone(), 1);
        a
    }

    /// Gives back a row's copy of `a`: dropped from the pool with the last row that holds it.
    pub(super) fn release(&mut self, a: &Arc<str>) {
        if let Some(rows) = self.pool.get_mut(a) {
            *rows -= 1;
            if *rows == 0 {
                self.pool.remove(a);
            }
        }
    }
}

/// A row a watch keeps for each object it sees.
pub trait Row: Sized {
    type Object: ResourceExt;
    /// What the row keeps of an object, made before the table is locked (a large object is
    /// copied here, not while readers wait).
    type Draft;
    fn draft(o: &Self::Object) -> Self::Draft;
    /// The row of a draft, with its shared strings interned in `table`'s pool.
    fn of(draft: Self::Draft, table: &mut Table<Self>) -> Self;
    /// Gives back what the row took from the pool.
    fn release(&self, _table: &mut Table<Self>) {}
}

/// An object's (namespace, name) and draft row.
type Drafted<V> = (String, String, <V as Row>::Draft);

fn drafted<V: Row>(o: &V::Object) -> Drafted<V> {
    (o.namespace().unwrap_or_default(), o.name_any(), V::draft(o))
}

impl<V: Row> Table<V> {
    /// Keeps the row of a drafted object; returns the row it replaced (released from the
    /// pool; callers drop it after unlocking: it may be a large object's last copy).
    #[must_use]
    fn insert(&mut self, (namespace, name, draft): Drafted<V>) -> Option<V> {
        let row = V::of(draft, self);
        let old = self.put(&namespace, &name, row)?;
        old.release(self);
        Some(old)
    }

    /// Removes an object's row and returns it, released as with [`Table::insert`].
    #[must_use]
    pub fn remove(&mut self, namespace: &str, name: &str) -> Option<V> {
        let old = self.take(namespace, name)?;
        old.release(self);
        Some(old)
    }
}

/// A table shared between the watch that feeds it and the readers, and whether its first
/// list finished.
pub struct Synced<V> {
    pub table: Arc<RwLock<Table<V>>>,
    pub ready: tokio::sync::watch::Receiver<bool>,
}

impl<V> Clone for Synced<V> {
    fn clone(&self) -> Self {
        Synced {
            table: self.table.clone(),
            ready: self.ready.clone(),
        }
    }
}

/// The writing side of a [`Synced`] table: applies watch events to it. A relist is built
/// aside and swapped in whole when its last page has come, so an object deleted while the
/// watch was away is gone after it. Readers that wait for the first list hear that it will
/// never come when the feeder is dropped.
pub struct Feeder<V> {
    table: Arc<RwLock<Table<V>>>,
    relist: Option<Table<V>>,
    ready: tokio::sync::watch::Sender<bool>,
}

impl<V: Row> Feeder<V> {
    pub fn new() -> (Feeder<V>, Synced<V>) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let table = Arc::new(RwLock::new(Table::default()));
        (
            Feeder {
                table: table.clone(),
                relist: None,
                ready: tx,
            },
            Synced { table, ready: rx },
        )
    }

    /// Applies `event`; returns the object it touched (`None` for list markers).
    pub fn apply(&mut self, event: watcher::Event<V::Object>) -> Option<V::Object> {
        use watcher::Event;
        match event {
            Event::Init => {
                self.relist = Some(Table::default());
                None
            }
            Event::InitApply(o) => {
                let old = self
                    .relist
                    .as_mut()
                    .and_then(|r| r.insert(drafted::<V>(&o)));
                drop(old);
                Some(o)
            }
            Event::InitDone => {
                // The old table is dropped after the lock is let go: it may hold thousands
                // of objects.
                let old = self
                    .relist
                    .take()
                    .map(|r| std::mem::replace(&mut *self.table.write(), r));
                drop(old);
                self.ready.send_replace(true);
                None
            }
            Event::Apply(o) => {
                let row = drafted::<V>(&o);
                let old = self.table.write().insert(row);
                drop(old);
                Some(o)
            }
            Event::Delete(o) => {
                let (namespace, name) = (o.namespace().unwrap_or_default(), o.name_any());
                let old = self.table.write().remove(&namespace, &name);
                drop(old);
                Some(o)
            }
        }
    }

    /// The row of an object in the visible table.
    pub fn row(&self, namespace: &str, name: &str) -> Option<V>
    where
        V: Clone,
    {
        self.table.read().get(namespace, name).cloned()
    }

    /// Removes an object's row (from a relist under way too).
    pub fn remove(&mut self, namespace: &str, name: &str) {
        let old = self.relist.as_mut().and_then(|r| r.remove(namespace, name));
        drop(old);
        let old = self.table.write().remove(namespace, name);
        drop(old);
    }

    /// Marks the table as never to be synced (readers stop waiting for it).
    pub fn unready(&self) {
        self.ready.send_replace(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::DynamicObject;

    /// A row of a name's resourceVersion and an interned label value.
    struct Versioned {
        rv: Option<Box<str>>,
        tag: Option<Arc<str>>,
    }

    impl Row for Versioned {
        type Object = DynamicObject;
        type Draft = (Option<String>, Option<String>);
        fn draft(o: &DynamicObject) -> Self::Draft {
            (
                o.metadata.resource_version.clone(),
                o.labels().get("tag").cloned(),
            )
        }
        fn of((rv, tag): Self::Draft, table: &mut Table<Self>) -> Self {
            Versioned {
                rv: rv.map(Into::into),
                tag: tag.map(|t| table.intern(&t)),
            }
        }
        fn release(&self, table: &mut Table<Self>) {
            if let Some(t) = &self.tag {
                table.release(t);
            }
        }
    }

    fn obj(ns: &str, name: &str, rv: &str, tag: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": rv,
                         "labels": {"tag": tag}},
        }))
        .unwrap()
    }

    fn rv(s: &Synced<Versioned>, ns: &str, name: &str) -> Option<String> {
        let t = s.table.read();
        t.get(ns, name)
            .map(|r| r.rv.as_deref().unwrap_or("").to_string())
    }

    #[test]
    fn a_relist_replaces_the_table_whole_and_marks_it_ready() {
        use watcher::Event;
        let (mut f, s) = Feeder::<Versioned>::new();
        f.apply(Event::Apply(obj("a", "x", "1", "t")));
        f.apply(Event::Apply(obj("a", "gone", "2", "t")));
        assert!(!*s.ready.borrow());
        f.apply(Event::Init);
        f.apply(Event::InitApply(obj("a", "x", "3", "t")));
        f.apply(Event::InitApply(obj("", "cluster", "4", "u")));
        // Until the relist is complete, readers see the old table.
        assert_eq!(rv(&s, "a", "gone").as_deref(), Some("2"));
        f.apply(Event::InitDone);
        assert!(*s.ready.borrow());
        assert_eq!(rv(&s, "a", "x").as_deref(), Some("3"));
        assert_eq!(rv(&s, "", "cluster").as_deref(), Some("4"));
        assert_eq!(rv(&s, "a", "gone"), None);
        assert_eq!(s.table.read().iter().count(), 2);
        f.apply(Event::Delete(obj("a", "x", "5", "t")));
        assert_eq!(rv(&s, "a", "x"), None);
        // An emptied namespace is dropped.
        assert!(!s.table.read().by_namespace.contains_key("a"));
    }

    #[test]
    fn interned_values_are_shared_and_dropped_with_their_last_row() {
        use watcher::Event;
        let (mut f, s) = Feeder::<Versioned>::new();
        f.apply(Event::Apply(obj("a", "x", "1", "owner-1")));
        f.apply(Event::Apply(obj("a", "y", "1", "owner-1")));
        {
            let t = s.table.read();
            let (x, y) = (t.get("a", "x").unwrap(), t.get("a", "y").unwrap());
            assert!(Arc::ptr_eq(
                x.tag.as_ref().unwrap(),
                y.tag.as_ref().unwrap()
            ));
            assert_eq!(t.pool.len(), 1);
        }
        // A row replaced with another owner gives its old one back.
        f.apply(Event::Apply(obj("a", "x", "2", "owner-2")));
        assert_eq!(s.table.read().pool.len(), 2);
        // A reader's clone of the last row's owner does not keep the owner pooled.
        let held = s.table.read().get("a", "y").unwrap().tag.clone();
        f.apply(Event::Delete(obj("a", "y", "2", "owner-1")));
        assert_eq!(s.table.read().pool.len(), 1);
        drop(held);
        f.apply(Event::Delete(obj("a", "x", "3", "owner-2")));
        assert!(s.table.read().pool.is_empty());
    }

    #[test]
    fn readers_waiting_for_the_first_list_stop_when_the_feeder_is_gone() {
        let (f, mut s) = Feeder::<Versioned>::new();
        drop(f);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(rt.block_on(s.ready.wait_for(|r| *r)).is_err());
    }
}
