//! Planning rules restated from Eno's code paths, one test each (the Eno function each
//! follows is named in its doc comment).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use common::*;
use plan::{Op, SkipReason};
use serde_json::{Value, json};
use std::time::Duration;

/// Eno's `reconcileResource` evaluates readiness (`EvalOptionally`) before it looks at
/// `disable-reconciliation`, and its tree unblocks the next group on that readiness: a
/// hands-off resource with an unmet check holds the next group back (and is polled); without
/// checks it is ready even when it does not exist.
#[test]
fn disable_reconciliation_still_evaluates_readiness_checks() {
    let a = deploy(
        "a",
        json!({"eno.azure.io/disable-reconciliation": "true",
               "eno.azure.io/readiness": "self.status.ok == true"}),
    );
    let b = deploy("b", json!({"enoki.dev/readiness-group": "1"}));
    let w = World::new(desired(&[a.clone(), b.clone()]));
    assert_eq!(
        w.op_of(&b),
        Op::Wait { on: vec![key(&a)] },
        "absent: not ready"
    );
    let w = w.observe(live(&a, "1", json!({"ok": false})));
    assert_eq!(w.op_of(&b), Op::Wait { on: vec![key(&a)] });
    assert_eq!(w.plan().requeue, Some(Duration::from_secs(5)), "polled");
    let w = w.observe(live(&a, "2", json!({"ok": true})));
    assert!(matches!(w.op_of(&b), Op::Apply { .. }));
    assert_eq!(
        w.op_of(&a),
        Op::Skip {
            reason: SkipReason::ReconciliationDisabled
        }
    );
}

/// Eno's `resource.go` takes a Patch's readiness and deletion defaults from its target's GVK
/// (`managedCreateOrder[res.GVK.Kind]`): a Patch of a ConfigMap is in group -100 like the
/// ConfigMap, so an ordinary resource (group 0) waits for it; and its tree orders it after the
/// CRD of its target kind in the same synthesis, as the object itself would be.
#[test]
fn a_patch_takes_its_targets_default_group_and_waits_for_its_crd() {
    let patch = |api_version: &str, kind: &str, name: &str, annotations: Value| {
        json!({"apiVersion": "eno.azure.io/v1", "kind": "Patch",
            "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
            "patch": {"apiVersion": api_version, "kind": kind,
                      "ops": [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]}})
    };
    // Not ready yet (its check is unmet): the Deployment (group 0) waits for it (group -100).
    let p = patch(
        "v1",
        "ConfigMap",
        "settings",
        json!({"eno.azure.io/readiness": "has(self.metadata.labels)"}),
    );
    let d = deploy("web", json!({}));
    let mut w = World::new(desired(&[p.clone(), d.clone()]));
    w.observed
        .insert(key(&p), live(&cm("settings", json!({})), "3", Value::Null));
    assert!(matches!(w.op_of(&p), Op::JsonPatch { .. }));
    assert_eq!(w.op_of(&d), Op::Wait { on: vec![key(&p)] }, "-100 before 0");
    // Its target absent, a Patch with checks is not ready (Eno's `EvalOptionally` of a nil
    // object); without checks it would be.
    let w = World::new(desired(&[p.clone(), d.clone()]));
    assert_eq!(w.op_of(&d), Op::Wait { on: vec![key(&p)] }, "absent target");
    // An explicit group still wins.
    let late = patch(
        "v1",
        "ConfigMap",
        "settings",
        json!({"eno.azure.io/readiness": "has(self.metadata.labels)",
               "eno.azure.io/readiness-group": "0"}),
    );
    let mut w = World::new(desired(&[late.clone(), d.clone()]));
    w.observed.insert(
        key(&late),
        live(&cm("settings", json!({})), "3", Value::Null),
    );
    assert!(matches!(w.op_of(&d), Op::Apply { .. }));
    // A Patch of a custom resource waits for the CRD of its kind in the same synthesis.
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"},
                 "scope": "Namespaced", "versions": []}});
    let on_widget = patch("example.com/v1", "Widget", "w", json!({}));
    let w = World::new(desired(&[crd.clone(), on_widget.clone()]));
    assert_eq!(
        w.op_of(&on_widget),
        Op::Wait {
            on: vec![key(&crd)]
        }
    );
}

/// Eno's tree unblocks a resource's dependents on the readiness it records for it in the
/// current synthesis, which it records only once it reconciles it: a resource still waiting
/// for the group before it holds back the group after it, even though its live object (the
/// previous synthesis's) is ready.
#[test]
fn a_waiting_resource_holds_back_the_group_after_it_whatever_its_live_object_says() {
    let gate = deploy(
        "gate",
        json!({"eno.azure.io/readiness-group": "0",
               "eno.azure.io/readiness": "self.status.ok == true"}),
    );
    let api = deploy("api", json!({"eno.azure.io/readiness-group": "1"}));
    let worker = deploy("worker", json!({"eno.azure.io/readiness-group": "2"}));
    let w = World::new(desired(&[gate.clone(), api.clone(), worker.clone()]))
        .observe(live(&ours(&gate, "1"), "1", json!({"ok": false})))
        .observe(ours(&api, "2"))
        .observe(ours(&worker, "3"));
    assert_eq!(
        w.op_of(&api),
        Op::Wait {
            on: vec![key(&gate)]
        }
    );
    assert_eq!(
        w.op_of(&worker),
        Op::Wait {
            on: vec![key(&api)]
        },
        "api exists and has no checks, but waits for its turn"
    );
    let w = w.observe(live(&ours(&gate, "1"), "4", json!({"ok": true})));
    assert!(!matches!(w.op_of(&api), Op::Wait { .. }));
}

/// Eno's tree keeps a tombstone in its readiness group (the dropped manifest keeps its
/// annotations): it is deleted only once the group below it is ready in this synthesis; a
/// tombstone with no group below it, or one whose group below is ready, goes at once.
#[test]
fn a_tombstone_is_deleted_once_the_group_below_it_is_ready() {
    let gate = deploy(
        "gate",
        json!({"eno.azure.io/readiness-group": "0",
               "eno.azure.io/readiness": "self.status.ok == true"}),
    );
    let old = deploy("old", json!({"eno.azure.io/readiness-group": "1"}));
    let first = deploy("first", json!({"eno.azure.io/readiness-group": "-5"}));
    let mut items = desired(std::slice::from_ref(&gate));
    for m in [&old, &first] {
        items.push(plan::Desired {
            manifest: m.clone(),
            tombstone: true,
        });
    }
    let w = World::new(items)
        .observe(live(&ours(&gate, "1"), "1", json!({"ok": false})))
        .observe(ours(&old, "2"))
        .observe(ours(&first, "3"));
    assert_eq!(
        w.op_of(&old),
        Op::Wait {
            on: vec![key(&gate)]
        }
    );
    assert_eq!(w.plan().requeue, Some(Duration::from_secs(5)), "polled");
    assert_eq!(
        w.op_of(&first),
        Op::Delete { foreground: false },
        "nothing below it"
    );
    let w = w.observe(live(&ours(&gate, "1"), "4", json!({"ok": true})));
    assert_eq!(w.op_of(&old), Op::Delete { foreground: false });
}

/// Eno's resource-migration recipe protects a dropped (or, on Composition deletion, any)
/// resource through an override; a pass that spent its CEL time before that override ran
/// deletes nothing: it skips the resource and plans again at the next poll.
#[test]
fn a_deletion_waits_for_overrides_a_spent_cel_budget_deferred() {
    let keep = r#"[{"path": "self.metadata.annotations['eno.azure.io/disable-reconciliation']",
                    "value": "true",
                    "condition": "composition.metadata.annotations['migration/owner'] != 'true'"}]"#;
    let m = cm("moving", json!({"eno.azure.io/overrides": keep}));
    let dropped = vec![plan::Desired {
        manifest: m.clone(),
        tombstone: true,
    }];
    // Not the owner (the recipe sets the annotation empty): the override protects it.
    let not_owner = plan::CompositionInfo {
        annotations: [("migration/owner".to_string(), String::new())].into(),
        ..comp()
    };
    let deleting = plan::CompositionInfo {
        deleting: true,
        ..not_owner.clone()
    };
    for (info, items) in [
        (not_owner, dropped),
        (deleting, desired(std::slice::from_ref(&m))),
    ] {
        let w = World::new(items.clone())
            .with_comp(info, &items)
            .observe(live(&m, "3", Value::Null));
        let (op, requeue, settled) = plan::expr::with_pass_budget(Duration::ZERO, || {
            std::thread::sleep(Duration::from_millis(2));
            let p = w.plan();
            (w.op_of(&m), p.requeue, p.settled())
        });
        assert!(
            !settled,
            "a deferred resource is not done (the finalizer stays)"
        );
        assert_eq!(
            op,
            Op::Skip {
                reason: SkipReason::CelTimeSpent
            }
        );
        assert!(requeue.is_some(), "planned again at the next poll");
        assert_eq!(
            w.op_of(&m),
            Op::Skip {
                reason: SkipReason::ReconciliationDisabled
            },
            "with time left, the override protects it"
        );
    }
}
