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

#[tokio::test]
async fn an_unsharded_replica_marks_nothing() {
    let (_fake, w) = watches(Shards::ALL);
    let (v1, ar) = config_map("v1");
    let reader = comp("reader");
    w.track(&v1, &ar, "n", "cm", &reader);
    w.serve(&v1, "n", "cm", &reader);
    assert!(!w.read_here(&v1, "n", "cm"));
}
