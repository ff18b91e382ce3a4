use super::*;

fn cm() -> GroupVersionKind {
    GroupVersionKind::gvk("", "v1", "ConfigMap")
}

fn secret() -> GroupVersionKind {
    GroupVersionKind::gvk("", "v1", "Secret")
}

fn obj(name: &str, rv: &str) -> DynamicObject {
    let mut o = DynamicObject::new(name, &kube::core::ApiResource::from_gvk(&cm())).within("n");
    o.metadata.resource_version = Some(rv.into());
    o.data = serde_json::json!({"data": {"k": "v"}});
    o
}

const CREATED: Came = Came::Created;
const KNOWN: Came = Came::Known;

#[test]
fn a_copy_is_taken_at_the_version_the_table_has_and_only_once() {
    let (mut a, t0) = (Arrivals::default(), Instant::now());
    a.arrived(&cm(), obj("in", "5"), 10, (CREATED, t0));
    assert!(a.take(&cm(), ("n", "in"), "4").is_none(), "another version");
    assert!(
        a.take(&secret(), ("n", "in"), "5").is_none(),
        "another kind"
    );
    let got = a.take(&cm(), ("n", "in"), "5").expect("the copy");
    assert_eq!(got.metadata.resource_version.as_deref(), Some("5"));
    assert!(a.take(&cm(), ("n", "in"), "5").is_none(), "taken");
    assert_eq!((a.len(), a.unpinned, a.unpinned_bytes), (0, 0, 0));
}

#[test]
fn a_newer_arrival_replaces_the_older_and_a_deletion_drops_it() {
    let (mut a, t0) = (Arrivals::default(), Instant::now());
    a.arrived(&cm(), obj("in", "5"), 10, (CREATED, t0));
    a.arrived(&cm(), obj("in", "6"), 12, (CREATED, t0));
    assert_eq!((a.len(), a.unpinned, a.unpinned_bytes), (1, 1, 12));
    assert!(a.take(&cm(), ("n", "in"), "5").is_none());
    a.gone(&cm(), "n", "in");
    assert_eq!((a.len(), a.unpinned, a.unpinned_bytes), (0, 0, 0));
}

#[test]
fn unpinned_copies_go_after_their_age_pinned_ones_after_the_pin() {
    let (mut a, t0) = (Arrivals::default(), Instant::now());
    a.arrived(&cm(), obj("read-later", "1"), 10, (CREATED, t0));
    a.arrived(&cm(), obj("nobody", "1"), 10, (CREATED, t0));
    a.want("n", "read-later", t0);
    assert_eq!(
        a.unpinned, 1,
        "the pinned copy is not counted against the bound"
    );
    a.sweep(t0 + ARRIVAL_AGE + Duration::from_secs(1));
    assert_eq!(a.len(), 1, "only the pinned copy is left");
    assert!(a.take(&cm(), ("n", "read-later"), "1").is_some());
    assert!(a.wanted.is_empty(), "read: no longer wanted");
    // A pin that is never read goes with its copy.
    a.want("n", "never-read", t0);
    a.arrived(&cm(), obj("never-read", "1"), 10, (CREATED, t0));
    a.sweep(t0 + PIN_FOR - Duration::from_secs(1));
    assert_eq!(a.len(), 1, "pinned");
    a.sweep(t0 + PIN_FOR + Duration::from_secs(1));
    assert_eq!((a.len(), a.unpinned, a.unpinned_bytes), (0, 0, 0));
    assert!(a.wanted.is_empty());
}

#[test]
fn a_change_or_listing_is_kept_only_when_a_composition_here_wants_it() {
    let (mut a, t0) = (Arrivals::default(), Instant::now());
    a.want("n", "bound", t0);
    a.arrived(&cm(), obj("bound", "1"), 10, (KNOWN, t0));
    a.arrived(&cm(), obj("other", "1"), 10, (KNOWN, t0));
    assert_eq!((a.len(), a.unpinned), (1, 0));
    assert!(a.take(&cm(), ("n", "bound"), "1").is_some());
}

#[test]
fn unpinned_copies_are_bounded_and_wanted_ones_still_kept() {
    let (mut a, t0) = (Arrivals::default(), Instant::now());
    a.arrived(&cm(), obj("big", "1"), MAX_UNPINNED_BYTES, (CREATED, t0));
    a.arrived(&cm(), obj("one-more", "1"), 1, (CREATED, t0));
    assert_eq!(a.len(), 1, "over the byte bound: not kept");
    a.want("n", "bound", t0);
    a.arrived(&cm(), obj("bound", "1"), 1, (CREATED, t0));
    assert_eq!(a.len(), 2, "a wanted copy is kept past the bound");
    for i in 0..MAX_UNPINNED + 1 {
        a.arrived(&secret(), obj(&format!("s{i}"), "1"), 0, (CREATED, t0));
    }
    assert_eq!(a.unpinned, MAX_UNPINNED);
}

#[test]
fn a_read_unpins_a_name_only_when_no_other_copy_waits_under_it() {
    let (mut a, t0) = (Arrivals::default(), Instant::now());
    a.want("n", "x", t0);
    a.want("", "x", t0);
    a.arrived(&cm(), obj("x", "1"), 10, (CREATED, t0));
    let mut s = obj("x", "1");
    s.types = Some(kube::core::TypeMeta {
        api_version: "v1".into(),
        kind: "Secret".into(),
    });
    a.arrived(&secret(), s, 10, (CREATED, t0));
    assert!(a.take(&cm(), ("n", "x"), "1").is_some());
    assert!(
        a.wanted.contains_key(&("n".into(), "x".into())),
        "the Secret still waits"
    );
    assert!(!a.wanted.contains_key(&(String::new(), "x".into())));
    assert_eq!(a.unpinned, 0);
    assert!(a.take(&secret(), ("n", "x"), "1").is_some());
    assert!(a.wanted.is_empty());
    assert_eq!((a.len(), a.unpinned, a.unpinned_bytes), (0, 0, 0));
}

#[test]
fn all_copies_are_bounded_in_bytes() {
    let (mut a, t0) = (Arrivals::default(), Instant::now());
    for i in 0..8 {
        a.want("n", &format!("p{i}"), t0);
        a.arrived(
            &cm(),
            obj(&format!("p{i}"), "1"),
            MAX_BYTES / 8,
            (CREATED, t0),
        );
    }
    assert_eq!(a.len(), 8);
    a.want("n", "one-more", t0);
    a.arrived(&cm(), obj("one-more", "1"), 1, (CREATED, t0));
    assert_eq!(a.len(), 8, "past the bound: not kept");
    assert!(a.take(&cm(), ("n", "p0"), "1").is_some());
    a.arrived(&cm(), obj("one-more", "1"), 1, (CREATED, t0));
    assert_eq!((a.len(), a.bytes), (8, MAX_BYTES / 8 * 7 + 1));
}

#[test]
fn a_copy_is_sized_by_what_it_holds() {
    let small = obj("a", "1");
    let mut many = obj("b", "1");
    let keys: serde_json::Map<String, serde_json::Value> = (0..1000)
        .map(|i| (format!("k{i}"), serde_json::json!("")))
        .collect();
    many.data = serde_json::json!({ "data": keys });
    let (s, m) = (estimated_size(&small), estimated_size(&many));
    assert!((1024..2048).contains(&s), "{s}");
    // A thousand tiny keys: about 7 KB as JSON, far more on the heap.
    assert!(m > 80_000, "{m}");
}

#[test]
fn keeps_says_what_arrived_would_keep() {
    let (mut a, t0) = (Arrivals::default(), Instant::now());
    let name = ("n".to_string(), "x".to_string());
    assert!(a.keeps(&name, CREATED));
    assert!(!a.keeps(&name, KNOWN), "a change nobody here wants");
    a.want("n", "x", t0);
    assert!(a.keeps(&name, KNOWN));
}

#[test]
fn a_replaced_copy_keeps_the_age_of_the_first() {
    let (mut a, t0) = (Arrivals::default(), Instant::now());
    a.arrived(&cm(), obj("busy", "1"), 10, (CREATED, t0));
    a.arrived(&cm(), obj("busy", "2"), 10, (CREATED, t0 + ARRIVAL_AGE));
    a.sweep(t0 + ARRIVAL_AGE + Duration::from_secs(1));
    assert_eq!(a.len(), 0, "changed often, still dropped after its age");
}
