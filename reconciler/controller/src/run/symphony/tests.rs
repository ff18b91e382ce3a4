use super::desired::{merged_bindings, merged_env};
use super::*;
use crds::{SynthesizerRef, VariationDependency};

fn var(name: &str, deps: &[&str]) -> Variation {
    Variation {
        synthesizer: SynthesizerRef { name: name.into() },
        depends_on: deps
            .iter()
            .map(|d| VariationDependency {
                synthesizer: (*d).into(),
            })
            .collect(),
        ..Variation::default()
    }
}

#[test]
fn variations_are_ordered_by_depends_on_and_cycles_are_left_out() {
    let vs = [
        var("app", &["db"]),
        var("db", &["net"]),
        var("net", &[]),
        var("a", &["b"]),
        var("b", &["a"]),
        var("c", &["a"]),
        var("lonely", &["missing"]),
    ];
    let (order, stuck) = topo_order(&vs);
    let order: Vec<&str> = order.iter().map(|v| v.synthesizer.name.as_str()).collect();
    let stuck: Vec<&str> = stuck.iter().map(|v| v.synthesizer.name.as_str()).collect();
    assert_eq!(order, ["net", "lonely", "db", "app"]);
    assert_eq!(stuck, ["a", "b", "c"]);
}

/// A Symphony's name may be up to 253 characters: its Compositions' label stays a valid
/// label value, and two long Composition names that share a prefix stay apart.
#[test]
fn long_names_make_valid_labels_and_distinct_composition_names() {
    let sym = "s".repeat(200);
    let label = symphony_label(&sym);
    assert!(label.len() <= 63 && label != symphony_label(&"s".repeat(201)));
    assert_eq!(symphony_label("stack"), "stack");
    let a = composition_name(&sym, &format!("{}-a", "x".repeat(60)));
    let b = composition_name(&sym, &format!("{}-b", "x".repeat(60)));
    assert!(a.len() <= 253 && b.len() <= 253 && a != b, "{a} {b}");
    assert!(!a.ends_with(['-', '.']));
    assert_eq!(composition_name("stack", "web"), "stack-web");
}

#[test]
fn variation_bindings_and_env_win_by_key() {
    let b = |k: &str, n: &str| Binding {
        key: k.into(),
        resource: crds::BoundResource {
            name: n.into(),
            namespace: None,
        },
    };
    let merged = merged_bindings(&[b("a", "base"), b("b", "base")], &[b("b", "mine")]);
    assert_eq!(merged, [b("a", "base"), b("b", "mine")]);
    let e = |n: &str, v: &str| EnvVar {
        name: n.into(),
        value: v.into(),
    };
    assert_eq!(
        merged_env(&[e("X", "1"), e("Y", "1")], &[e("Y", "2")]),
        [e("X", "1"), e("Y", "2")]
    );
}

/// Phase one prunes `""` keys whoever set them and keys this controller set and no longer
/// asks for, never a key the Composition is to carry (the `enoki.dev/symphony` label even
/// when a variation names it with `""`), so pruning and applying never undo each other.
#[test]
fn stale_keys_never_include_what_the_composition_is_to_carry() {
    let live: BTreeMap<String, String> = [
        ("enoki.dev/symphony", "stack"),
        ("moved", "true"),
        ("theirs", "x"),
        ("dropped", "1"),
        ("kept", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let asked: BTreeMap<String, String> =
        [("enoki.dev/symphony", ""), ("moved", ""), ("kept", "1")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    let want = serde_json::json!({"enoki.dev/symphony": "stack", "kept": "1"});
    let mine: BTreeSet<String> = ["dropped", "kept"].into_iter().map(String::from).collect();
    let stale: Vec<String> = stale_keys(&live, &asked, &want, &mine)
        .keys()
        .cloned()
        .collect();
    assert_eq!(stale, ["dropped", "moved"]);
}
