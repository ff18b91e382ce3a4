//! The metadata watches of managed objects (one per kind): what each object's resourceVersion,
//! uid and deletion are, and which Composition a change wakes.

use super::*;
use crate::run::shard::Shards;

/// What the apply pass reads of a managed object: its version and whether it is being
/// deleted (kept compact: a hundred thousand of these live in memory; the owner UID is
/// shared by the rows of one Composition, a UUID is kept as its 16 bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Live {
    /// `metadata.resourceVersion`.
    pub resource_version: Option<Box<str>>,
    /// `metadata.uid`.
    uid: Uid,
    /// `metadata.deletionTimestamp`, RFC 3339.
    pub deletion_timestamp: Option<Box<str>>,
    /// The owning Composition's UID (the `managed-by` label).
    pub owner: Option<Arc<str>>,
}

/// An object's UID: a UUID in its canonical form as 16 bytes, any other as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Uid {
    None,
    Uuid([u8; 16]),
    Other(Box<str>),
}

impl Uid {
    fn of(s: Option<&str>) -> Uid {
        let Some(s) = s else { return Uid::None };
        // Only a UUID written back exactly as it came is kept as bytes.
        match uuid::Uuid::try_parse(s) {
            Ok(u) if u.hyphenated().to_string() == s => Uid::Uuid(u.into_bytes()),
            _ => Uid::Other(s.into()),
        }
    }
}

impl Live {
    /// `metadata.uid`, as the API server wrote it.
    pub fn uid(&self) -> Option<String> {
        match &self.uid {
            Uid::None => None,
            Uid::Uuid(b) => Some(uuid::Uuid::from_bytes(*b).hyphenated().to_string()),
            Uid::Other(s) => Some(s.to_string()),
        }
    }
}

impl table::Row for Live {
    type Object = Meta;
    /// The row without its owner, and the owner UID to intern.
    type Draft = (Live, Option<String>);

    fn draft(m: &Meta) -> (Live, Option<String>) {
        let live = Live {
            owner: None,
            resource_version: m.metadata.resource_version.as_deref().map(Into::into),
            uid: Uid::of(m.metadata.uid.as_deref()),
            deletion_timestamp: m
                .metadata
                .deletion_timestamp
                .as_ref()
                .map(|t| t.0.to_string().into()),
        };
        (live, m.labels().get(managed_label()).cloned())
    }

    fn of((live, owner): (Live, Option<String>), table: &mut table::Table<Live>) -> Live {
        Live {
            owner: owner.map(|o| table.intern(&o)),
            ..live
        }
    }

    fn release(&self, table: &mut table::Table<Live>) {
        if let Some(o) = &self.owner {
            table.release(o);
        }
    }
}

/// One managed kind's watch, the Compositions that need it.
pub(super) struct ManagedWatch {
    pub(crate) view: ManagedView,
    pub(crate) task: tokio::task::AbortHandle,
    pub(crate) users: HashSet<String>,
}

impl Drop for ManagedWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// For an event about an object another shard's Composition owns: its (namespace, name) and
/// whether it is an update (`Apply`); `None` for this shard's objects and list markers.
pub(super) fn foreign(
    shards: Shards,
    event: &watcher::Event<Meta>,
) -> Option<(String, String, bool)> {
    let (m, apply) = match event {
        watcher::Event::Apply(m) => (m, true),
        watcher::Event::InitApply(m) | watcher::Event::Delete(m) => (m, false),
        watcher::Event::Init | watcher::Event::InitDone => return None,
    };
    let owner = m.labels().get(managed_label())?;
    (!shards.owns_uid(owner)).then(|| (m.namespace().unwrap_or_default(), m.name_any(), apply))
}

/// What one watch event touched.
pub(super) struct Touched {
    pub namespace: String,
    pub name: String,
    /// The owner UID now and, when it was relabelled, the owner UID its row had before.
    pub owners: [Option<String>; 2],
    /// Its resourceVersion, for a change (`None` for a deletion).
    pub changed_at: Option<String>,
}

/// Applies one watch event to the table; returns what it touched (`None` for list markers).
pub(super) fn apply_event(
    feeder: &mut table::Feeder<Live>,
    event: watcher::Event<Meta>,
) -> Option<Touched> {
    let before = match &event {
        watcher::Event::Apply(m) => feeder
            .row(&m.namespace().unwrap_or_default(), &m.name_any())
            .and_then(|l| l.owner.map(|o| o.to_string())),
        _ => None,
    };
    let deleted = matches!(event, watcher::Event::Delete(_));
    let m = feeder.apply(event)?;
    let owner = m.labels().get(managed_label()).cloned();
    let before = before.filter(|b| Some(b) != owner.as_ref());
    Some(Touched {
        namespace: m.namespace().unwrap_or_default(),
        name: m.name_any(),
        owners: [owner, before],
        changed_at: (!deleted).then(|| m.resource_version()).flatten(),
    })
}

/// A kind's synced metadata cache of managed objects.
#[derive(Clone)]
pub struct ManagedView {
    pub(crate) synced: table::Synced<Live>,
    /// The API server refused to list or watch this kind (403).
    pub(crate) forbidden: Arc<AtomicBool>,
}

impl ManagedView {
    /// The cached state of one object (`None`: not labelled as managed, or absent).
    pub fn get(&self, namespace: &str, name: &str) -> Option<Live> {
        self.synced.table.read().get(namespace, name).cloned()
    }
}

/// The label selector of the managed-object watch of a replica holding `held`: every object
/// labelled as managed but those labelled for the shards it does not hold.
pub(super) fn ours(held: Shards) -> String {
    match held.ours_selector() {
        Some(s) => format!("{},{s}", managed_label()),
        None => managed_label().to_string(),
    }
}

/// A metadata-only watch event as the input store keeps objects (no data).
pub(super) fn metadata_only(
    event: watcher::Event<PartialObjectMeta<DynamicObject>>,
) -> watcher::Event<DynamicObject> {
    let object = |p: PartialObjectMeta<DynamicObject>| DynamicObject {
        types: p.types,
        metadata: p.metadata,
        data: serde_json::Value::Null,
    };
    match event {
        watcher::Event::Apply(p) => watcher::Event::Apply(object(p)),
        watcher::Event::Delete(p) => watcher::Event::Delete(object(p)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(p) => watcher::Event::InitApply(object(p)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(uid: &str) -> Meta {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "n", "uid": uid, "resourceVersion": "7",
                         "labels": {managed_label(): "owner"}},
        }))
        .unwrap()
    }

    #[test]
    fn a_uid_reads_back_exactly_as_the_server_wrote_it() {
        let mut t = table::Table::<Live>::default();
        for uid in [
            "3f2a1c6e-5b7d-4e8f-9a0b-1c2d3e4f5a6b",
            // Not in canonical form: kept as it is, not normalised.
            "3F2A1C6E-5B7D-4E8F-9A0B-1C2D3E4F5A6B",
            "3f2a1c6e5b7d4e8f9a0b1c2d3e4f5a6b",
            "not-a-uuid",
            "",
        ] {
            let live = <Live as table::Row>::of(<Live as table::Row>::draft(&meta(uid)), &mut t);
            assert_eq!(live.uid().as_deref(), Some(uid));
            assert_eq!(live.resource_version.as_deref(), Some("7"));
            assert_eq!(live.owner.as_deref(), Some("owner"));
        }
        let mut m = meta("x");
        m.metadata.uid = None;
        let live = <Live as table::Row>::of(<Live as table::Row>::draft(&m), &mut t);
        assert_eq!(live.uid(), None);
    }
}
