use super::*;
use crate::run::tree::{Next, State};

fn res(kind: &str, api_version: &str, name: &str, group: i64, state: State) -> Resource {
    Resource {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: if kind == "CustomResourceDefinition" {
            String::new()
        } else {
            "ns".into()
        },
        name: name.into(),
        group,
        checks: Vec::new(),
        defines: (kind == "CustomResourceDefinition").then(|| "x.example/Widget".to_string()),
        state,
    }
}

#[test]
fn groups_are_columns_with_order_defines_and_depends_on_edges() {
    let view = View {
        namespace: "ns".into(),
        name: "app".into(),
        synthesizer: "s".into(),
        ready: false,
        conditions: Vec::new(),
        synthesis: None,
        synthesized: None,
        next: Next {
            state: "up-to-date".into(),
            reason: None,
            message: None,
        },
        resources: vec![
            res(
                "CustomResourceDefinition",
                "apiextensions.k8s.io/v1",
                "widgets.x.example",
                0,
                State::Ready,
            ),
            res("ConfigMap", "v1", "a", 0, State::Ready),
            res(
                "Widget",
                "x.example/v1",
                "w",
                1,
                State::Waiting {
                    unsatisfied: vec!["c: false".into()],
                },
            ),
            res("Gadget", "x.example/v1", "g", 1, State::Ready),
            res("Widget", "other.example/v1", "w2", 1, State::Ready),
        ],
        note: None,
        revision: None,
    };
    let g = graph(&view, &[("ns/db".into(), true)]);
    let edge = |from: &str, to: &str, kind: &str| {
        g.edges
            .iter()
            .any(|e| e.from == from && e.to == to && e.kind == kind)
    };
    assert!(edge("group:0", "group:1", "order"));
    assert!(edge("r:0", "r:2", "defines"), "{:?}", g.edges);
    assert!(!edge("r:0", "r:3", "defines"), "another kind of the group");
    assert!(!edge("r:0", "r:4", "defines"), "the kind of another group");
    assert!(edge("dep:ns/db", "group:0", "dependsOn"));
    let node = |id: &str| g.nodes.iter().find(|n| n.id == id).unwrap();
    assert_eq!((node("group:0").column, node("group:1").column), (1, 2));
    assert_eq!(node("group:1").state, "waiting");
    assert_eq!(node("r:2").detail, "waiting on c: false");
    assert_eq!(node("dep:ns/db").column, 0);
}
