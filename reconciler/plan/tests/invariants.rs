//! Property tests: every dependency edge is respected, input order never matters, planning is
//! a pure function.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use common::*;
use plan::{Desired, Op, PlanInput, PlanOptions};
use proptest::prelude::*;
use serde_json::{Value, json};

#[derive(Clone, Debug)]
struct Spec {
    kind: usize,
    name: u8,
    group: i8,
    ready: bool,
    present: bool,
}

const KINDS: &[(&str, &str)] = &[
    ("apps/v1", "Deployment"),
    ("v1", "ConfigMap"),
    ("example.com/v1", "Widget"),
    ("batch/v1", "Job"),
];

fn manifest(s: &Spec) -> Value {
    let (api, kind) = KINDS[s.kind];
    json!({
        "apiVersion": api, "kind": kind,
        "metadata": {"name": format!("r{}", s.name), "namespace": "ns", "annotations": {
            "enoki.dev/readiness-group": s.group.to_string(),
            "enoki.dev/readiness": "self.status.ok == true",
        }},
    })
}

fn specs() -> impl Strategy<Value = (Vec<Spec>, bool)> {
    (
        prop::collection::vec(
            (
                0..KINDS.len(),
                0u8..12,
                -2i8..3,
                any::<bool>(),
                any::<bool>(),
            )
                .prop_map(|(kind, name, group, ready, present)| Spec {
                    kind,
                    name,
                    group,
                    ready,
                    present,
                }),
            0..24,
        ),
        any::<bool>(),
    )
        .prop_map(|(mut v, with_crd)| {
            v.sort_by_key(|s| (s.kind, s.name));
            v.dedup_by_key(|s| (s.kind, s.name));
            (v, with_crd)
        })
}

fn world(specs: &[Spec], with_crd: bool) -> (Vec<Desired>, plan::Observed) {
    let mut items: Vec<Desired> = specs
        .iter()
        .map(|s| Desired {
            manifest: manifest(s),
            tombstone: false,
        })
        .collect();
    let mut observed = plan::Observed::new();
    for s in specs.iter().filter(|s| s.present) {
        let l = live(&manifest(s), "1", json!({"ok": s.ready}));
        observed.insert(key(&l), l);
    }
    if with_crd {
        items.push(Desired {
            manifest: json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "widgets.example.com", "annotations": {"enoki.dev/readiness-group": "-3"}},
                "spec": {"group": "example.com", "names": {"kind": "Widget"}},
            }),
            tombstone: false,
        });
    }
    (items, observed)
}

fn run(items: &[Desired], observed: &plan::Observed) -> plan::Plan {
    let comp = comp();
    let prepared = plan::prepare(items, &comp).unwrap();
    plan::plan(PlanInput {
        prepared: &prepared,
        composition: &comp,
        observed,
        recorded: &Default::default(),
        previous: &Default::default(),
        options: PlanOptions::default(),
    })
}

proptest! {
    #[test]
    fn every_dependency_edge_is_respected((specs, with_crd) in specs()) {
        let (items, observed) = world(&specs, with_crd);
        let comp = comp();
        let prepared = plan::prepare(&items, &comp).unwrap();
        let p = run(&items, &observed);
        let position: std::collections::BTreeMap<_, _> =
            p.steps.iter().enumerate().map(|(i, s)| (s.key.clone(), i)).collect();
        for step in &p.steps {
            for dep in &prepared.ordering.depends_on(&step.key) {
                prop_assert!(position[dep] < position[&step.key], "{dep} after {}", step.key);
                let dep_step = &p.steps[position[dep]];
                if step.op.is_write() {
                    prop_assert!(dep_step.readiness.is_ready(), "{} written before {dep} is ready", step.key);
                }
            }
            if let Op::Wait { on } = &step.op {
                prop_assert!(!on.is_empty());
            }
        }
    }

    #[test]
    fn permuting_the_input_never_changes_the_plan((specs, with_crd) in specs(), seed in any::<u64>()) {
        let (items, observed) = world(&specs, with_crd);
        let mut shuffled = items.clone();
        // Deterministic Fisher-Yates from the seed.
        let mut x = seed | 1;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        prop_assert_eq!(run(&items, &observed), run(&shuffled, &observed));
    }

    #[test]
    fn planning_is_a_pure_function((specs, with_crd) in specs()) {
        let (items, observed) = world(&specs, with_crd);
        prop_assert_eq!(run(&items, &observed), run(&items, &observed));
    }
}
