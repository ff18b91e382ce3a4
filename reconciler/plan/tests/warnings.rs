//! A warning about an annotation costs the same whatever the annotation holds: its value is
//! quoted up to `settings::QUOTED_VALUE` characters.

use std::collections::BTreeMap;

use plan::ResourceKey;
use plan::settings::{self, QUOTED_VALUE};

fn key() -> ResourceKey {
    ResourceKey {
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: "ns".into(),
        name: "x".into(),
    }
}

#[test]
fn a_huge_unparsable_annotation_is_quoted_in_part() {
    let huge = "é".repeat(200_000);
    let composition = BTreeMap::from([("enoki.dev/drift".to_string(), huge.clone())]);
    let s = settings::parse(&key(), &BTreeMap::new(), &composition).unwrap();
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    let w = &s.warnings[0];
    assert!(w.contains("enoki.dev/drift"), "{w}");
    assert!(w.contains(&format!("({} bytes)", huge.len())), "{w}");
    assert!(w.len() < 400, "a warning of {} bytes: {w}", w.len());
    assert!(w.contains(&"é".repeat(QUOTED_VALUE)), "{w}");
}

#[test]
fn a_short_unparsable_annotation_is_quoted_whole() {
    let own = BTreeMap::from([("enoki.dev/drift".to_string(), "sometimes".to_string())]);
    let s = settings::parse(&key(), &own, &BTreeMap::new()).unwrap();
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    assert!(
        s.warnings[0].contains("\"sometimes\" is not"),
        "{}",
        s.warnings[0]
    );
}
