use super::*;

fn comp(name: &str, uid: &str) -> Composition {
    let mut c = Composition::new(name, crds::CompositionSpec::default());
    c.metadata.namespace = Some("ns".into());
    c.metadata.uid = Some(uid.into());
    c
}

fn slice(name: &str, generation: i64) -> ResourceSlice {
    let mut s = ResourceSlice::new(name, crds::ResourceSliceSpec::default());
    s.metadata.namespace = Some("ns".into());
    s.metadata.generation = Some(generation);
    s
}

#[tokio::test]
async fn slices_deleted_while_the_watch_was_away_are_forgotten_at_the_next_list() {
    use watcher::Event::{Apply, Init, InitApply, InitDone};
    let events = vec![
        Init,
        InitApply(slice("a", 1)),
        InitApply(slice("b", 1)),
        InitDone,
        // Relisted without b (deleted meanwhile), then a b of the same name made again.
        Init,
        InitApply(slice("a", 1)),
        InitDone,
        Apply(slice("b", 2)),
        Apply(slice("a", 2)),
    ];
    let woken: Vec<String> = slice_changes(futures::stream::iter(events.into_iter().map(Ok)))
        .map(|s| s.map(|s| s.name_any()).unwrap_or_default())
        .collect()
        .await;
    // The new b is enoki's own write (not remembered); a's spec changed.
    assert_eq!(woken, ["a"]);
}

/// A UID of shard `index` of 2.
fn uid_in(index: u32) -> String {
    (0..)
        .map(|i| format!("uid-{i}"))
        .find(|u| Shard::of_uid(u, 2) == index)
        .unwrap_or_default()
}

#[test]
fn the_compositions_of_added_shards_are_woken_once_their_list_is_done() {
    let (store, mut writer) = reflector::store::<Composition>();
    let (c0, c1) = (comp("c0", &uid_in(0)), comp("c1", &uid_in(1)));
    let listing_for = Arc::new(parking_lot::Mutex::new(Listing::of(
        Shards::none(2).with(0),
    )));
    let (wake, mut woken) = tokio::sync::mpsc::unbounded_channel();
    let mut listed = added_shards_listed(store, listing_for.clone(), wake);
    writer.apply_watcher_event(&watcher::Event::Apply(c0.clone()));
    // The first list: the Controller waits for it, nothing to wake.
    listed(&Ok(watcher::Event::InitDone));
    assert!(woken.try_recv().is_err());
    // Shard 1 added: its list is buffered until done, then only c1 is woken.
    listing_for
        .lock()
        .restarted(Shards::none(2).with(0).with(1));
    listed(&Ok(watcher::Event::Init));
    writer.apply_watcher_event(&watcher::Event::Apply(c1.clone()));
    listed(&Ok(watcher::Event::InitApply(c1.clone())));
    assert!(woken.try_recv().is_err(), "woken before the list was done");
    listed(&Ok(watcher::Event::InitDone));
    assert_eq!(woken.try_recv().map(|r| r.name).ok().as_deref(), Some("c1"));
    assert!(woken.try_recv().is_err(), "c0 was woken too");
    // Another list of the same set (a 410): nothing.
    listed(&Ok(watcher::Event::InitDone));
    assert!(woken.try_recv().is_err());
    // Shard 0 handed back and taken again before a list completed: c0 is woken (its
    // reconciles in between did nothing).
    {
        let mut s = listing_for.lock();
        s.restarted(Shards::none(2).with(1));
        s.restarted(Shards::none(2).with(0).with(1));
    }
    listed(&Ok(watcher::Event::InitDone));
    assert_eq!(woken.try_recv().map(|r| r.name).ok().as_deref(), Some("c0"));
    assert!(woken.try_recv().is_err());
}
