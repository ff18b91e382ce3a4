//! Which input objects a sharded replica keeps whole: those a Composition reconciled here
//! read from the cache as the controller, in the version it read them in.

use super::*;
use crate::run::shard::{Shards, fixed};

fn comp(name: &str) -> Composition {
    let mut c = Composition::new(name, crds::CompositionSpec::default());
    c.metadata.namespace = Some("n".into());
    c.metadata.uid = Some(format!("uid-{name}"));
    c
}

fn config_map(version: &str) -> (GroupVersionKind, ApiResource) {
    let gvk = GroupVersionKind::gvk("", version, "ConfigMap");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "configmaps");
    (gvk, ar)
}

/// Watches on the in-memory fake API (kept with them: the watches `track` starts list it).
fn watches(shards: Shards) -> (crate::run::fake_api::FakeApi, Arc<Watches>) {
    let (fake, client) = crate::run::fake_api::FakeApi::start();
    let (wake, _) = tokio::sync::mpsc::unbounded_channel();
    let w = Watches::new(client.clone(), client, wake, fixed(shards), true);
    (fake, w)
}

#[tokio::test]
async fn a_sharded_replica_keeps_whole_what_it_served_in_that_version_until_the_reader_goes() {
    let (_fake, w) = watches(Shards::none(4).with(0).with(1));
    let ((v1, ar), (v2, _)) = (config_map("v1"), config_map("v2"));
    let (reader, other) = (comp("reader"), comp("other"));
    w.track(&v1, &ar, "n", "cm", &reader);
    assert!(
        !w.read_here(&v1, "n", "cm"),
        "tracked, never read from the cache"
    );
    w.serve(&v1, "n", "cm", &reader);
    // Another reader tracking it later (say, as a ServiceAccount) leaves the mark as it is.
    w.track(&v1, &ar, "n", "cm", &other);
    w.track(&v1, &ar, "n", "cm", &reader);
    assert!(w.read_here(&v1, "n", "cm"));
    assert!(!w.read_here(&v2, "n", "cm"), "served in v1 only");
    // Read in a second version too: kept whole in both.
    w.serve(&v2, "n", "cm", &reader);
    assert!(w.read_here(&v1, "n", "cm") && w.read_here(&v2, "n", "cm"));
    assert!(!w.read_here(&v1, "n", "other-cm"));
    w.forget(&ObjectRef::from_obj(&other), other.metadata.uid.as_deref());
    assert!(w.read_here(&v1, "n", "cm"));
    w.forget(
        &ObjectRef::from_obj(&reader),
        reader.metadata.uid.as_deref(),
    );
    assert!(!w.read_here(&v1, "n", "cm"), "its reader is gone");
    assert!(!w.read_here(&v2, "n", "cm"));
}

#[test]
fn a_served_mark_is_no_larger_than_a_vec_and_holds_one_version_inline() {
    assert!(std::mem::size_of::<Served>() <= std::mem::size_of::<Vec<Arc<str>>>());
    assert_eq!(Served::new().inline_size(), 1);
}

#[tokio::test]
async fn an_unsharded_replica_marks_nothing() {
    let (_fake, w) = watches(Shards::ALL);
    let (v1, ar) = config_map("v1");
    let reader = comp("reader");
    w.track(&v1, &ar, "n", "cm", &reader);
    w.serve(&v1, "n", "cm", &reader);
    assert!(!w.read_here(&v1, "n", "cm"));
}

fn cm_json(name: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "n"}, "data": {"k": name}})
}

/// Polls `done` every 10 ms for up to 5 s (the fake API's watch delivers in its own task).
async fn until(mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Changes n/cm's data to `changed` on the fake API and waits until the watch saw it.
async fn change_cm(fake: &crate::run::fake_api::FakeApi, w: &Arc<Watches>) {
    let v1 = config_map("v1").0;
    let before = w.seen_version(&v1, "n", "cm");
    let mut changed = cm_json("cm");
    changed["data"]["k"] = "changed".into();
    fake.put("/api/v1/namespaces/n/configmaps/cm", changed);
    fake.deliver();
    until(|| w.seen_version(&v1, "n", "cm") != before).await;
}

/// Sharded, an input created a moment before the Composition that binds it is served from
/// the copy its creation brought (no GET) and kept whole from then on, and so is one listed
/// after a Composition here bound it; one listed while no Composition here wanted it is not
/// kept.
#[tokio::test]
async fn a_sharded_replica_serves_an_input_created_before_its_reader_from_its_arrival() {
    let (fake, w) = watches(Shards::none(4).with(0).with(1));
    let (v1, ar) = config_map("v1");
    let (early, reader, bound) = (comp("early"), comp("reader"), comp("bound"));
    fake.put("/api/v1/namespaces/n/configmaps/listed", cm_json("listed"));
    fake.put("/api/v1/namespaces/n/configmaps/wanted", cm_json("wanted"));
    w.expect_reads(None, [("n".to_string(), "wanted")].into_iter());
    // An earlier Composition's read starts the namespace's ConfigMap watch; its first list.
    w.track(&v1, &ar, "n", "absent", &early);
    assert!(matches!(w.input(&v1, "n", "absent").await, Some(None)));
    assert!(w.seen_version(&v1, "n", "listed").is_some());
    assert_eq!(w.arrived_inputs(), 1, "listed: only the wanted one is kept");
    fake.put("/api/v1/namespaces/n/configmaps/in", cm_json("in"));
    fake.deliver();
    until(|| w.seen_version(&v1, "n", "in").is_some()).await;
    assert_eq!(w.arrived_inputs(), 2, "and its creation");
    w.expect_reads(None, [("n".to_string(), "in")].into_iter());
    for (c, name) in [(&reader, "in"), (&bound, "wanted")] {
        w.track(&v1, &ar, "n", name, c);
        w.serve(&v1, "n", name, c);
        let got = w.input(&v1, "n", name).await.flatten().expect("served");
        assert_eq!(got.data["data"]["k"], name);
        assert!(
            w.input(&v1, "n", name).await.flatten().is_some(),
            "kept whole"
        );
    }
    assert_eq!(w.arrived_inputs(), 0, "taken");
    assert_eq!(
        w.input_objects(),
        (2, 1),
        "whole: in, wanted; a stub: listed"
    );
}

/// Sharded, a read object is kept whole in its row (from the copy its listing brought while
/// it was wanted), and turned back into a stub once no Composition here reads it; a GET's copy
/// at the row's version makes it whole again, another version's does not, and the watch's
/// next copy of an object read here does.
#[tokio::test]
async fn a_sharded_replica_keeps_what_it_reads_in_the_row_and_lets_it_go_with_its_reader() {
    let (fake, w) = watches(Shards::none(4).with(0).with(1));
    let (v1, ar) = config_map("v1");
    let (reader, keeper) = (comp("reader"), comp("keeper"));
    fake.put("/api/v1/namespaces/n/configmaps/cm", cm_json("cm"));
    w.expect_reads(None, [("n".to_string(), "cm")].into_iter());
    // Another Composition's read starts the namespace's watch (and keeps it and its table
    // while readers of cm come and go); its first list lists cm, wanted: a copy waits.
    w.track(&v1, &ar, "n", "absent", &keeper);
    assert!(matches!(w.input(&v1, "n", "absent").await, Some(None)));
    assert_eq!((w.input_objects(), w.arrived_inputs()), ((0, 1), 1));
    w.track(&v1, &ar, "n", "cm", &reader);
    w.serve(&v1, "n", "cm", &reader);
    let got = w.input(&v1, "n", "cm").await.flatten().expect("served");
    assert_eq!(got.data["data"]["k"], "cm");
    assert_eq!(
        (w.input_objects(), w.arrived_inputs()),
        ((1, 0), 0),
        "taken into its row"
    );
    w.forget(
        &ObjectRef::from_obj(&reader),
        reader.metadata.uid.as_deref(),
    );
    w.prune_whole();
    assert_eq!(w.input_objects(), (0, 1), "a stub once its reader went");
    // A new reader: no copy left, so a GET; its copy (the row's version) is kept whole.
    let again = comp("again");
    let read_again = |w: &Arc<Watches>| {
        w.track(&v1, &ar, "n", "cm", &again);
        w.serve(&v1, "n", "cm", &again);
    };
    read_again(&w);
    assert!(w.input(&v1, "n", "cm").await.is_none(), "read with a GET");
    let mut fetched: DynamicObject = serde_json::from_value(cm_json("cm")).expect("object");
    fetched.metadata.resource_version = w.seen_version(&v1, "n", "cm");
    w.fetched(&v1, "n", "cm", &fetched);
    assert_eq!(w.input_objects(), (1, 0), "whole again");
    assert!(w.input(&v1, "n", "cm").await.flatten().is_some(), "served");
    w.forget(&ObjectRef::from_obj(&again), again.metadata.uid.as_deref());
    w.prune_whole();
    read_again(&w);
    let mut newer = fetched.clone();
    newer.metadata.resource_version = Some("not-the-row's".into());
    w.fetched(&v1, "n", "cm", &newer);
    assert_eq!(
        w.input_objects(),
        (0, 1),
        "a copy of another version than the row's is not kept"
    );
    change_cm(&fake, &w).await;
    assert_eq!(w.input_objects(), (1, 0), "the watch's copy is kept whole");
    let got = w.input(&v1, "n", "cm").await.flatten().expect("served");
    assert_eq!(got.data["data"]["k"], "changed");
}

/// Sharded, an object read here is kept whole only in the table reads go to (its namespace's
/// watch), not also in a cluster-wide watch of its kind; nor does that watch keep a copy of
/// it for a first read.
#[tokio::test]
async fn a_sharded_replica_keeps_a_read_object_whole_in_one_table() {
    let (fake, w) = watches(Shards::none(4).with(0).with(1));
    let (v1, ar) = config_map("v1");
    let (reader, everywhere) = (comp("reader"), comp("everywhere"));
    fake.put("/api/v1/namespaces/n/configmaps/cm", cm_json("cm"));
    w.expect_reads(None, [("n".to_string(), "cm")].into_iter());
    w.track(&v1, &ar, "", "*", &everywhere);
    w.track(&v1, &ar, "n", "cm", &reader);
    w.serve(&v1, "n", "cm", &reader);
    assert!(w.input(&v1, "n", "cm").await.flatten().is_some());
    until(|| w.input_objects() == (1, 1)).await;
    assert_eq!(
        w.input_objects(),
        (1, 1),
        "whole in the namespace's table, a stub cluster-wide"
    );
    change_cm(&fake, &w).await;
    // Both watches have had their turn at the change.
    tokio::time::sleep(Duration::from_millis(100)).await;
    w.prune_whole();
    assert_eq!(w.input_objects(), (1, 1), "still whole in one table only");
    assert_eq!(w.arrived_inputs(), 0, "no copy waits for a first read");
    let got = w.input(&v1, "n", "cm").await.flatten().expect("served");
    assert_eq!(got.data["data"]["k"], "changed");
}

/// `reader` reads the ConfigMap n/cm (bound, so its listing is kept) from the cache, and
/// keeps it whole; `keeper` reads n/absent (and keeps the namespace's watch); both get
/// `own`ed when `owned`.
async fn cm_read(fake: &crate::run::fake_api::FakeApi, w: &Arc<Watches>, owned: bool) {
    let (v1, ar) = config_map("v1");
    let (reader, keeper) = (comp("reader"), comp("keeper"));
    fake.put("/api/v1/namespaces/n/configmaps/cm", cm_json("cm"));
    // Wanted (its listing is kept for the read).
    w.expect_reads(None, bound("n"));
    w.track(&v1, &ar, "n", "absent", &keeper);
    assert!(matches!(w.input(&v1, "n", "absent").await, Some(None)));
    w.track(&v1, &ar, "n", "cm", &reader);
    w.serve(&v1, "n", "cm", &reader);
    assert!(w.input(&v1, "n", "cm").await.flatten().is_some());
    if owned {
        w.own(&reader);
        w.own(&keeper);
    }
}

fn bound(ns: &str) -> std::array::IntoIter<(String, &'static str), 1> {
    [(ns.to_string(), "cm")].into_iter()
}

/// Sharded, a later event of a Composition with a pass here (an edit) does not want again a
/// name an input table it reads through keeps whole: that row serves its read. One without
/// a pass here yet, one that reads through no table, or a name whose row went back to a stub
/// is wanted.
#[tokio::test]
async fn a_sharded_replica_wants_no_name_it_keeps_whole() {
    let (fake, w) = watches(Shards::none(4).with(0).with(1));
    let v1 = config_map("v1").0;
    let wanted = |w: &Arc<Watches>| w.arrivals.lock().wanted();
    let (r, k) = (Some("uid-reader"), Some("uid-keeper"));
    w.expect_reads(r, bound("n"));
    assert_eq!(wanted(&w), 2, "in n and cluster-scoped");
    cm_read(&fake, &w, false).await;
    assert_eq!(wanted(&w), 0, "a read unpins n/cm and cluster-scoped cm");
    w.expect_reads(r, bound("n"));
    assert_eq!(wanted(&w), 2, "no pass here yet: wanted");
    // As a pass's read would.
    w.first_read(&v1, "n", "cm");
    assert_eq!(wanted(&w), 0);
    let other = comp("other");
    for c in [&comp("reader"), &comp("keeper"), &other] {
        w.own(c);
    }
    for uid in [r, k] {
        w.expect_reads(uid, bound("n"));
        assert_eq!(wanted(&w), 0, "kept whole, serves {uid:?}: not wanted");
    }
    assert!(w.input(&v1, "n", "cm").await.flatten().is_some(), "served");
    w.expect_reads(Some("uid-other"), bound("n"));
    assert_eq!(wanted(&w), 2, "reads through no table: wanted");
    w.first_read(&v1, "n", "cm");
    assert_eq!(wanted(&w), 0);
    w.forget(&ObjectRef::from_obj(&comp("reader")), r);
    w.prune_whole();
    assert_eq!(w.input_objects(), (0, 1), "its reader gone: a stub");
    w.expect_reads(k, bound("n"));
    assert_eq!(wanted(&w), 2, "a stub again: wanted");
}

/// Sharded, a whole Synthesizer or Namespace of a bound name (cluster-scoped, read by enoki
/// for the Composition) is not taken for the bound object: the name is wanted.
#[tokio::test]
async fn a_sharded_replica_takes_no_row_of_enokis_own_kinds_for_a_bound_input() {
    let (fake, w) = watches(Shards::none(4).with(0).with(1));
    cm_read(&fake, &w, true).await;
    let reader = comp("reader");
    let kinds = [
        (crds::GROUP, "v1alpha1", "Synthesizer", "synthesizers"),
        ("", "v1", "Namespace", "namespaces"),
    ];
    for (group, version, kind, plural) in kinds {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api = if group.is_empty() { "api" } else { "apis" };
        let path = format!("/{api}/{}/{plural}/cm", ar.api_version);
        let obj = serde_json::json!({"apiVersion": ar.api_version, "kind": kind,
            "metadata": {"name": "cm"}});
        fake.put(&path, obj);
        w.track(&gvk, &ar, "", "cm", &reader);
        w.serve(&gvk, "", "cm", &reader);
        assert!(w.input(&gvk, "", "cm").await.flatten().is_some(), "{kind}");
    }
    assert_eq!(
        w.input_objects().0,
        3,
        "cm, the Synthesizer and the Namespace whole"
    );
    assert_eq!(w.arrivals.lock().wanted(), 0);
    w.expect_reads(Some("uid-reader"), bound("m"));
    assert_eq!(
        w.arrivals.lock().wanted(),
        2,
        "a whole Synthesizer and Namespace named cm do not count: m/cm and cluster-scoped cm"
    );
}

/// Sharded, a whole row in a cluster-wide table counts for a namespace's object only while
/// the namespace has no watch of the kind of its own (reads go there then).
#[tokio::test]
async fn a_sharded_replica_counts_a_cluster_wide_row_only_where_reads_go_to_it() {
    let (fake, w) = watches(Shards::none(4).with(0).with(1));
    let (v1, ar) = config_map("v1");
    let (reader, keeper) = (comp("reader"), comp("keeper"));
    fake.put("/api/v1/namespaces/n/configmaps/cm", cm_json("cm"));
    w.expect_reads(None, bound("n"));
    w.track(&v1, &ar, "", "*", &reader);
    w.serve(&v1, "n", "cm", &reader);
    assert!(w.input(&v1, "n", "cm").await.flatten().is_some());
    assert_eq!(w.input_objects(), (1, 0), "whole in the cluster-wide table");
    w.own(&reader);
    let wanted = |w: &Arc<Watches>| w.arrivals.lock().wanted();
    w.expect_reads(Some("uid-reader"), bound("n"));
    assert_eq!(
        wanted(&w),
        0,
        "reads go to the cluster-wide table: not wanted"
    );
    // n's own watch (not listed yet): reads of n's objects go there.
    w.track(&v1, &ar, "n", "absent", &keeper);
    w.expect_reads(Some("uid-reader"), bound("n"));
    assert_eq!(wanted(&w), 2, "shadowed by n's own watch: wanted");
}
