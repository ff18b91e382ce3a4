//! One test per planning rule.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use common::*;
use plan::{ApplyMode, CompositionInfo, Desired, Op, PlanError, ReadinessState, SkipReason};
use serde_json::{Value, json};
use std::time::Duration;

#[test]
fn absent_resources_are_server_side_applied_with_managed_by_label_and_stripped_keys() {
    let m = deploy(
        "web",
        json!({"enoki.dev/readiness-group": "1", "note": "kept"}),
    );
    let w = World::new(desired(std::slice::from_ref(&m)));
    let Op::Apply { object } = w.op_of(&m) else {
        panic!("{:?}", w.op_of(&m))
    };
    assert_eq!(
        object["metadata"]["labels"]["enoki.dev/managed-by"],
        "uid-1"
    );
    assert_eq!(object["metadata"]["annotations"], json!({"note": "kept"}));
}

#[test]
fn in_sync_resources_make_no_call_at_all() {
    let m = deploy("web", json!({}));
    let w = World::new(desired(std::slice::from_ref(&m)))
        .observe(live(&m, "10", Value::Null))
        .record_applied();
    assert_eq!(
        w.op_of(&m),
        Op::Skip {
            reason: SkipReason::InSync
        }
    );
    assert!(w.plan().settled());
}

#[test]
fn a_foreign_write_changes_the_resource_version_and_triggers_a_reapply() {
    let m = deploy("web", json!({}));
    let mut w = World::new(desired(std::slice::from_ref(&m)))
        .observe(live(&m, "10", Value::Null))
        .record_applied();
    w = w.observe(live(&m, "11", Value::Null));
    assert!(matches!(w.op_of(&m), Op::Apply { .. }));
}

#[test]
fn a_changed_snapshot_changes_the_hash_and_triggers_a_reapply() {
    let m = deploy("web", json!({}));
    let w = World::new(desired(std::slice::from_ref(&m)))
        .observe(live(&m, "10", Value::Null))
        .record_applied();
    let mut changed = m.clone();
    changed["spec"]["replicas"] = json!(3);
    let w2 = World {
        prepared: plan::prepare(&desired(std::slice::from_ref(&changed)), &w.comp).unwrap(),
        ..w
    };
    assert!(matches!(w2.op_of(&changed), Op::Apply { .. }));
}

#[test]
fn group_one_waits_until_group_zero_is_ready() {
    let a = deploy(
        "a",
        json!({"enoki.dev/readiness": "self.status.ok == true"}),
    );
    let b = deploy("b", json!({"enoki.dev/readiness-group": "1"}));
    let w =
        World::new(desired(&[a.clone(), b.clone()])).observe(live(&a, "1", json!({"ok": false})));
    assert_eq!(w.op_of(&b), Op::Wait { on: vec![key(&a)] });
    assert_eq!(
        w.plan().requeue,
        Some(Duration::from_secs(5)),
        "not ready: poll"
    );
    let w = w.observe(live(&a, "2", json!({"ok": true})));
    assert!(matches!(w.op_of(&b), Op::Apply { .. }));
}

#[test]
fn readiness_latches_for_the_synthesis() {
    let a = deploy(
        "a",
        json!({"enoki.dev/readiness": "self.status.ok == true"}),
    );
    let mut w =
        World::new(desired(std::slice::from_ref(&a))).observe(live(&a, "1", json!({"ok": false})));
    w.recorded.insert(
        key(&a),
        plan::Recorded {
            ready: Some("2026-01-01T00:00:00Z".into()),
            ..Default::default()
        },
    );
    let step = w.plan().steps.remove(0);
    assert_eq!(
        step.readiness,
        ReadinessState::Ready {
            at: Some("2026-01-01T00:00:00Z".into())
        }
    );
}

#[test]
fn disable_updates_creates_but_never_updates() {
    let m = deploy("web", json!({"eno.azure.io/disable-updates": "true"}));
    let w = World::new(desired(std::slice::from_ref(&m)));
    assert!(matches!(w.op_of(&m), Op::Create { .. }));
    let w = w.observe(live(&m, "1", Value::Null));
    assert_eq!(
        w.op_of(&m),
        Op::Skip {
            reason: SkipReason::UpdatesDisabled
        }
    );
}

#[test]
fn disable_reconciliation_never_touches_and_counts_as_ready() {
    let a = deploy("a", json!({"enoki.dev/disable-reconciliation": "true"}));
    let b = deploy("b", json!({"enoki.dev/readiness-group": "1"}));
    let w = World::new(desired(&[a.clone(), b.clone()]));
    assert_eq!(
        w.op_of(&a),
        Op::Skip {
            reason: SkipReason::ReconciliationDisabled
        }
    );
    assert!(matches!(w.op_of(&b), Op::Apply { .. }));
}

#[test]
fn replace_creates_then_puts() {
    let m = deploy("web", json!({"enoki.dev/replace": "true"}));
    let w = World::new(desired(std::slice::from_ref(&m)));
    assert!(matches!(w.op_of(&m), Op::Create { .. }));
    let w = w.observe(live(&m, "1", Value::Null));
    assert!(matches!(w.op_of(&m), Op::Replace { .. }));
}

#[test]
fn client_side_mode_merge_patches_from_the_previous_snapshot_so_dropped_fields_go() {
    let m = deploy("web", json!({}));
    let mut w = World::new(desired(std::slice::from_ref(&m))).observe(live(&m, "1", Value::Null));
    w.options.mode = ApplyMode::ClientSide;
    let mut prev = m.clone();
    prev["spec"]["paused"] = json!(true);
    w.previous.insert(key(&m), prev);
    let Op::MergePatch { patch, .. } = w.op_of(&m) else {
        panic!()
    };
    assert_eq!(patch["spec"], json!({"paused": null}));
}

#[test]
fn tombstones_are_deleted_foreground_when_asked() {
    let m = deploy("old", json!({"enoki.dev/deletion-strategy": "foreground"}));
    let mut items = desired(&[]);
    items.push(Desired {
        manifest: m.clone(),
        tombstone: true,
    });
    let w = World::new(items).observe(live(&m, "1", Value::Null));
    assert_eq!(w.op_of(&m), Op::Delete { foreground: true });
    let gone = World {
        observed: Default::default(),
        ..w
    };
    assert_eq!(
        gone.op_of(&m),
        Op::Skip {
            reason: SkipReason::AlreadyDeleted
        }
    );
}

/// `prune: disabled` (Flux's `kustomize.toolkit.fluxcd.io/prune: disabled`): enoki never
/// deletes the object — not when the output drops it, not when the Composition is deleted —
/// while `deletion-strategy: orphan` alone (Eno) still lets a dropped object go.
#[test]
fn prune_disabled_keeps_dropped_objects_and_survives_composition_deletion() {
    for value in ["disabled", "false", "Disabled"] {
        let m = deploy("kept", json!({"enoki.dev/prune": value}));
        let items = vec![Desired {
            manifest: m.clone(),
            tombstone: true,
        }];
        let w = World::new(items).observe(live(&m, "1", Value::Null));
        assert_eq!(
            w.op_of(&m),
            Op::Skip {
                reason: SkipReason::PruneDisabled
            },
            "{value}"
        );
        assert_eq!(w.plan().requeue, None, "nothing to wait for");
        let items = desired(std::slice::from_ref(&m));
        let deleting = CompositionInfo {
            deleting: true,
            ..comp()
        };
        let w = World::new(items.clone())
            .with_comp(deleting, &items)
            .observe(live(&m, "1", Value::Null));
        assert_eq!(
            w.op_of(&m),
            Op::Skip {
                reason: SkipReason::PruneDisabled
            }
        );
    }
    let orphan_only = deploy("dropped", json!({"enoki.dev/deletion-strategy": "orphan"}));
    let items = vec![Desired {
        manifest: orphan_only.clone(),
        tombstone: true,
    }];
    let w = World::new(items).observe(live(&orphan_only, "1", Value::Null));
    assert_eq!(w.op_of(&orphan_only), Op::Delete { foreground: false });
}

#[test]
fn composition_deletion_follows_deletion_groups() {
    let a = deploy("a", json!({"enoki.dev/deletion-group": "0"}));
    let b = deploy("b", json!({"enoki.dev/deletion-group": "1"}));
    let items = desired(&[a.clone(), b.clone()]);
    let comp = CompositionInfo {
        deleting: true,
        ..comp()
    };
    let w = World::new(items.clone())
        .with_comp(comp, &items)
        .observe(live(&a, "1", Value::Null))
        .observe(live(&b, "1", Value::Null));
    assert_eq!(w.op_of(&a), Op::Delete { foreground: false });
    assert_eq!(w.op_of(&b), Op::Wait { on: vec![key(&a)] });
    let mut w = w;
    w.observed.remove(&key(&a));
    assert_eq!(w.op_of(&b), Op::Delete { foreground: false });
}

/// Eno (`internal/resource/tree.go`, `kind_ordering.go`): on Composition deletion only
/// resources with a deletion group are ordered — an explicit `deletion-group`, or the
/// infrastructure kinds (ConfigMap, CRD, …) at 100; everything else goes at once. A group waits
/// until the lower groups are released: terminating for a background delete, gone for a
/// foreground one.
#[test]
fn composition_deletion_orders_only_grouped_resources() {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Widget"}},
    });
    let free = deploy("free", json!({"enoki.dev/readiness-group": "2"}));
    let first = deploy("first", json!({"eno.azure.io/deletion-group": "1"}));
    let config = cm("config", json!({}));
    let items = desired(&[crd.clone(), free.clone(), first.clone(), config.clone()]);
    let deleting = CompositionInfo {
        deleting: true,
        ..comp()
    };
    let w = World::new(items.clone())
        .with_comp(deleting.clone(), &items)
        .observe(live(&crd, "1", Value::Null))
        .observe(live(&free, "1", Value::Null))
        .observe(live(&first, "1", Value::Null))
        .observe(live(&config, "1", Value::Null));
    assert_eq!(
        w.op_of(&free),
        Op::Delete { foreground: false },
        "ungrouped: at once"
    );
    assert_eq!(w.op_of(&first), Op::Delete { foreground: false });
    assert_eq!(
        w.op_of(&config),
        Op::Wait {
            on: vec![key(&first)]
        },
        "infra kinds go last"
    );
    assert_eq!(
        w.op_of(&crd),
        Op::Wait {
            on: vec![key(&first)]
        }
    );
    // A background delete releases the next group as soon as it is terminating.
    let mut terminating = live(&first, "2", Value::Null);
    terminating["metadata"]["deletionTimestamp"] = json!("2026-11-26T00:00:00Z");
    let w = w.observe(terminating.clone());
    assert_eq!(w.op_of(&config), Op::Delete { foreground: false });
    // A foreground one only once it is gone.
    let mut fg = first.clone();
    fg["metadata"]["annotations"]["eno.azure.io/deletion-strategy"] = json!("foreground");
    let items = desired(&[fg.clone(), config.clone()]);
    let mut terminating = live(&fg, "2", Value::Null);
    terminating["metadata"]["deletionTimestamp"] = json!("2026-11-26T00:00:00Z");
    let w = World::new(items.clone())
        .with_comp(deleting, &items)
        .observe(terminating)
        .observe(live(&config, "1", Value::Null));
    assert_eq!(w.op_of(&config), Op::Wait { on: vec![key(&fg)] });
}

#[test]
fn orphan_on_the_composition_leaves_everything() {
    let a = deploy("a", json!({}));
    let items = desired(std::slice::from_ref(&a));
    let mut comp = CompositionInfo {
        deleting: true,
        ..comp()
    };
    comp.annotations
        .insert("eno.azure.io/deletion-strategy".into(), "orphan".into());
    let w = World::new(items.clone())
        .with_comp(comp, &items)
        .observe(live(&a, "1", Value::Null));
    assert_eq!(
        w.op_of(&a),
        Op::Skip {
            reason: SkipReason::Orphaned
        }
    );
    assert_eq!(w.plan().requeue, None);
}

/// Eno's reconciliation controller: a Composition labelled `symphony-deleting` deletes
/// nothing — not a resource whose own strategy is `foreground` or `delete`, not one an
/// override gives a strategy, not one in a deletion group.
#[test]
fn a_symphony_being_deleted_deletes_nothing_whatever_the_resources_say() {
    let override_fg = r#"[{"path": "self.metadata.annotations['eno.azure.io/deletion-strategy']",
        "value": "foreground", "condition": "composition.metadata.deletionTimestamp != null"}]"#;
    let items = [
        deploy(
            "fg",
            json!({"eno.azure.io/deletion-strategy": "foreground"}),
        ),
        deploy("bg", json!({"enoki.dev/deletion-strategy": "delete"})),
        deploy("grouped", json!({"eno.azure.io/deletion-group": "1"})),
        deploy("ovr", json!({"eno.azure.io/overrides": override_fg})),
    ];
    for label in [
        "eno.azure.io/symphony-deleting",
        "enoki.dev/symphony-deleting",
    ] {
        let mut comp = CompositionInfo {
            deleting: true,
            deletion_timestamp: Some("2026-11-27T00:00:00Z".into()),
            ..comp()
        };
        comp.labels.insert(label.into(), "true".into());
        let d = desired(&items);
        let mut w = World::new(d.clone()).with_comp(comp, &d);
        for m in &items {
            w = w.observe(live(m, "1", Value::Null));
        }
        for m in &items {
            assert_eq!(
                w.op_of(m),
                Op::Skip {
                    reason: SkipReason::Orphaned
                },
                "{label} {}",
                m["metadata"]["name"]
            );
        }
    }
}

#[test]
fn overrides_apply_before_hashing_and_can_flip_cascaded_flags() {
    let overrides = json!([
        {"path": "self.spec.replicas", "valueExpression": "self.spec.replicas", "condition": "has(self.spec)"},
        {"path": "self.metadata.annotations[\"enoki.dev/disable-updates\"]", "value": "true", "condition": "self.metadata.labels.frozen == 'yes'"}
    ]);
    let m = deploy("web", json!({"enoki.dev/overrides": overrides.to_string()}));
    let mut l = live(&m, "1", Value::Null);
    l["spec"]["replicas"] = json!(9);
    let w = World::new(desired(std::slice::from_ref(&m))).observe(l.clone());
    let Op::Apply { object } = w.op_of(&m) else {
        panic!()
    };
    assert_eq!(
        object["spec"]["replicas"], 9,
        "live value kept by valueExpression"
    );
    l["metadata"]["labels"] = json!({"frozen": "yes"});
    let w = w.observe(l);
    assert_eq!(
        w.op_of(&m),
        Op::Skip {
            reason: SkipReason::UpdatesDisabled
        }
    );
}

/// A pass that spent its CEL time before a resource's overrides were evaluated does not
/// write the resource without them (an HPA-owned `replicas` would be fought): it skips it and
/// plans again at the next poll.
#[test]
fn a_spent_cel_budget_defers_a_resource_with_overrides_never_writes_it_without_them() {
    let overrides = json!([
        {"path": "self.spec.replicas", "value": null, "condition": "!pathManagedByEnoki"}
    ]);
    let m = deploy("web", json!({"enoki.dev/overrides": overrides.to_string()}));
    let plain = cm("plain", json!({}));
    let mut l = live(&m, "1", Value::Null);
    l["spec"]["replicas"] = json!(9);
    let w = World::new(desired(&[m.clone(), plain.clone()])).observe(l);
    let spent = plan::expr::with_pass_budget(Duration::ZERO, || {
        std::thread::sleep(Duration::from_millis(2));
        (w.op_of(&m), w.op_of(&plain), w.plan().requeue)
    });
    assert_eq!(
        spent.0,
        Op::Skip {
            reason: SkipReason::CelTimeSpent
        }
    );
    assert!(matches!(spent.1, Op::Apply { .. }), "{:?}", spent.1);
    assert!(spent.2.is_some(), "planned again at the next poll");
    // With time left, the resource is planned as usual.
    let op = w.op_of(&m);
    assert!(
        !matches!(
            op,
            Op::Skip {
                reason: SkipReason::CelTimeSpent
            }
        ),
        "{op:?}"
    );
}

#[test]
fn reconcile_interval_sets_the_requeue_once_ready() {
    let m = deploy(
        "web",
        json!({"enoki.dev/reconcile-interval": "1m", "enoki.dev/readiness": "true"}),
    );
    let w = World::new(desired(std::slice::from_ref(&m)))
        .observe(live(&m, "1", Value::Null))
        .record_applied();
    assert_eq!(w.plan().requeue, Some(Duration::from_secs(60)));
}

/// Eno's `fail-open` (internal/resource/resource.go, reconciliation/controller.go): the
/// resource's own annotation, parsed as Go's `strconv.ParseBool`, never from the Composition;
/// without it `--fail-open` applies; never for a foreground delete. A fail-open resource whose
/// readiness check fails still holds its dependents back (Eno's readiness tree).
#[test]
fn fail_open_is_the_resources_own_go_bool_else_the_flag() {
    let resolved = |annotations: Value, flag: bool| {
        let a = deploy("a", annotations);
        let mut w = World::new(desired(std::slice::from_ref(&a)));
        w.options.fail_open = flag;
        w.plan().steps[0].settings.fail_open
    };
    for v in ["1", "t", "T", "TRUE", "true", "True"] {
        assert_eq!(
            resolved(json!({"eno.azure.io/fail-open": v}), false),
            Some(true),
            "{v}"
        );
    }
    for v in ["0", "f", "F", "FALSE", "false", "False"] {
        assert_eq!(
            resolved(json!({"eno.azure.io/fail-open": v}), true),
            Some(false),
            "{v}"
        );
    }
    assert_eq!(resolved(json!({}), false), Some(false));
    assert_eq!(resolved(json!({}), true), Some(true));
    // A value ParseBool refuses is refused (the synthesis fails on it) and read as absent.
    for bad in ["yes", "", " true", "tRuE"] {
        let a = deploy("a", json!({"eno.azure.io/fail-open": bad}));
        let p = plan::prepare(&desired(&[a]), &Default::default()).unwrap();
        let s = &p.resources[0].settings;
        assert_eq!(s.fail_open, None, "{bad:?}");
        assert!(
            s.refused[0].contains("eno.azure.io/fail-open"),
            "{bad:?}: {:?}",
            s.refused
        );
    }
    // Not cascaded from the Composition.
    let a = deploy("a", json!({}));
    let mut comp = CompositionInfo::default();
    comp.annotations
        .insert("eno.azure.io/fail-open".into(), "true".into());
    let items = desired(std::slice::from_ref(&a));
    let w = World::new(items.clone()).with_comp(comp, &items);
    assert_eq!(w.plan().steps[0].settings.fail_open, Some(false));

    let a = deploy(
        "a",
        json!({"enoki.dev/fail-open": "true", "enoki.dev/readiness": "false"}),
    );
    let b = deploy("b", json!({"enoki.dev/readiness-group": "1"}));
    let w = World::new(desired(&[a.clone(), b.clone()])).observe(live(&a, "1", Value::Null));
    assert!(
        matches!(w.op_of(&b), Op::Wait { .. }),
        "a fail-open resource that is not ready holds its dependents"
    );
}

#[test]
fn ingestion_errors_name_the_resource_and_key() {
    let bad = deploy(
        "web",
        json!({"eno.azure.io/readiness-ready": "self.status.("}),
    );
    let err = plan::prepare(&desired(&[bad]), &comp()).unwrap_err();
    assert!(
        matches!(&err, PlanError::CompileCel { key, .. } if key == "eno.azure.io/readiness-ready"),
        "{err}"
    );
    assert!(err.to_string().contains("apps/Deployment/ns/web"));

    let bad = deploy(
        "web",
        json!({"enoki.dev/overrides": "[{\"path\": \"spec\"}]"}),
    );
    let err = plan::prepare(&desired(&[bad]), &comp()).unwrap_err();
    assert!(err.to_string().contains("enoki.dev/overrides"), "{err}");

    let dup = deploy("web", json!({}));
    let err = plan::prepare(&desired(&[dup.clone(), dup]), &comp()).unwrap_err();
    assert_eq!(err.category(), "DuplicateResource");

    let err = plan::prepare(&desired(&[json!({"kind": "X"})]), &comp()).unwrap_err();
    assert!(err.to_string().contains("resource #0") && err.to_string().contains("apiVersion"));
}

#[test]
fn drift_interval_reapplies_foreign_writes_only_when_the_interval_is_due() {
    let m = deploy(
        "web",
        json!({"enoki.dev/drift": "interval", "enoki.dev/reconcile-interval": "30s"}),
    );
    let mut w = World::new(desired(std::slice::from_ref(&m)))
        .observe(live(&m, "10", Value::Null))
        .record_applied();
    w = w.observe(ours(&m, "11"));
    assert_eq!(
        w.op_of(&m),
        Op::Skip {
            reason: SkipReason::InSync
        },
        "not due: a foreign write waits for the interval"
    );
    w.recorded.get_mut(&key(&m)).unwrap().interval_due = true;
    assert!(
        matches!(w.op_of(&m), Op::Apply { .. }),
        "due: the foreign write is reverted"
    );
    w = w.observe(ours(&m, "10"));
    assert_eq!(
        w.op_of(&m),
        Op::Skip {
            reason: SkipReason::InSync
        },
        "due but unchanged: nothing to write"
    );
}

#[test]
fn drift_off_ignores_foreign_writes_but_not_new_output() {
    let m = deploy("web", json!({"enoki.dev/drift": "off"}));
    let mut w = World::new(desired(std::slice::from_ref(&m)))
        .observe(live(&m, "10", Value::Null))
        .record_applied();
    w = w.observe(ours(&m, "11"));
    assert_eq!(
        w.op_of(&m),
        Op::Skip {
            reason: SkipReason::InSync
        },
        "a foreign write is left alone"
    );
    let mut changed = m.clone();
    changed["spec"]["replicas"] = json!(3);
    let w2 = World {
        prepared: plan::prepare(&desired(std::slice::from_ref(&changed)), &w.comp).unwrap(),
        ..w
    };
    assert!(
        matches!(w2.op_of(&changed), Op::Apply { .. }),
        "a new synthesis is still applied"
    );
}

/// A live copy labelled for the Composition with `owner` as UID.
fn owned_by(m: &Value, owner: &str) -> Value {
    let mut l = live(m, "7", Value::Null);
    l["metadata"]["labels"] = json!({"enoki.dev/managed-by": owner});
    l
}

#[test]
fn an_object_whose_owner_is_gone_is_adopted_a_live_owner_keeps_it() {
    let m = cm("restored", json!({}));
    let mut w = World::new(desired(std::slice::from_ref(&m))).observe(owned_by(&m, "uid-old"));
    w.comp.gone_owners.insert("uid-old".into());
    assert!(
        matches!(w.op_of(&m), Op::Apply { .. }),
        "the object of a Composition that no longer exists is adopted"
    );
    // `adopt: never` refuses it all the same (no live Composition manages it).
    let never = cm("restored", json!({"enoki.dev/adopt": "never"}));
    let mut n =
        World::new(desired(std::slice::from_ref(&never))).observe(owned_by(&never, "uid-old"));
    n.comp.gone_owners.insert("uid-old".into());
    assert_eq!(
        n.op_of(&never),
        Op::Conflict {
            owner: String::new()
        }
    );
    w.comp.gone_owners.clear();
    w.comp.gone_owners.insert("uid-someone-else".into());
    assert_eq!(
        w.op_of(&m),
        Op::Conflict {
            owner: "uid-old".into()
        },
        "an owner not confirmed gone keeps its object"
    );
}

#[test]
fn an_object_another_composition_owns_is_a_conflict_not_a_write() {
    let m = cm("shared", json!({}));
    let w = World::new(desired(std::slice::from_ref(&m))).observe(owned_by(&m, "uid-other"));
    assert_eq!(
        w.op_of(&m),
        Op::Conflict {
            owner: "uid-other".into()
        }
    );
    let p = w.plan();
    assert!(!p.all_ready() && !p.settled());
    // Its own label (uid-1) or none at all: applied as usual.
    let w = World::new(desired(std::slice::from_ref(&m))).observe(owned_by(&m, "uid-1"));
    assert!(matches!(w.op_of(&m), Op::Apply { .. }));
    let w = World::new(desired(std::slice::from_ref(&m))).observe(live(&m, "7", Value::Null));
    assert!(
        matches!(w.op_of(&m), Op::Apply { .. }),
        "adopted (Eno semantics)"
    );
}

#[test]
fn another_compositions_object_is_never_deleted() {
    let m = cm("shared", json!({}));
    // Composition deletion.
    let mut comp = comp();
    comp.deleting = true;
    let w = World::new(desired(std::slice::from_ref(&m)))
        .with_comp(comp, &desired(std::slice::from_ref(&m)))
        .observe(owned_by(&m, "uid-other"));
    assert_eq!(
        w.op_of(&m),
        Op::Skip {
            reason: SkipReason::OwnedElsewhere
        }
    );
    assert!(w.plan().settled(), "nothing waits for it");
    // A tombstone.
    let w = World::new(vec![Desired {
        manifest: m.clone(),
        tombstone: true,
    }])
    .observe(owned_by(&m, "uid-other"));
    assert_eq!(
        w.op_of(&m),
        Op::Skip {
            reason: SkipReason::OwnedElsewhere
        }
    );
}

#[test]
fn adopt_never_refuses_an_unmanaged_object_but_not_its_own() {
    let m = cm("guarded", json!({"enoki.dev/adopt": "never"}));
    let w = World::new(desired(std::slice::from_ref(&m))).observe(live(&m, "7", Value::Null));
    assert_eq!(
        w.op_of(&m),
        Op::Conflict {
            owner: String::new()
        }
    );
    // Absent: created. Applied by this Composition before: kept in sync.
    let w = World::new(desired(std::slice::from_ref(&m)));
    assert!(matches!(w.op_of(&m), Op::Apply { .. }));
    let w = World::new(desired(std::slice::from_ref(&m)))
        .observe(live(&m, "7", Value::Null))
        .record_applied();
    assert!(!matches!(w.op_of(&m), Op::Conflict { .. }));
    // A value that does not parse is read as the default (adopt) and reported.
    let bad = cm("x", json!({"enoki.dev/adopt": "sometimes"}));
    let p = plan::prepare(&desired(&[bad]), &comp()).unwrap();
    assert!(!p.resources[0].settings.adopt_never);
    assert!(p.resources[0].settings.warnings[0].contains("enoki.dev/adopt"));
}

/// Eno docs/resource-migration.md and docs/overrides.md: an override that sets
/// `disable-reconciliation` or `deletion-strategy: orphan` also protects the resource from
/// being deleted — when dropped from the output and when the Composition is deleted.
#[test]
fn overrides_decide_deletion_too() {
    let keep = r#"[{"path": "self.metadata.annotations['eno.azure.io/disable-reconciliation']",
                    "value": "true",
                    "condition": "composition.metadata.annotations['migration/owner'] != 'true'"}]"#;
    let m = cm("moving", json!({"eno.azure.io/overrides": keep}));
    // Dropped from the output while this Composition is not the owner (the recipe sets the
    // annotation empty): left alone.
    let not_owner = CompositionInfo {
        annotations: [("migration/owner".to_string(), String::new())].into(),
        ..comp()
    };
    let items = vec![Desired {
        manifest: m.clone(),
        tombstone: true,
    }];
    let w = World::new(items.clone())
        .with_comp(not_owner, &items)
        .observe(live(&m, "3", Value::Null));
    assert_eq!(
        w.op_of(&m),
        Op::Skip {
            reason: SkipReason::ReconciliationDisabled
        }
    );
    // While it is the owner, the tombstone deletes as usual.
    let owner = CompositionInfo {
        annotations: [("migration/owner".to_string(), "true".to_string())].into(),
        ..comp()
    };
    let items = vec![Desired {
        manifest: m.clone(),
        tombstone: true,
    }];
    let w = World::new(items.clone())
        .with_comp(owner, &items)
        .observe(live(&m, "3", Value::Null));
    assert_eq!(w.op_of(&m), Op::Delete { foreground: false });

    // Orphaned only when the Composition is being deleted.
    let orphan = r#"[{"path": "self.metadata.annotations['eno.azure.io/deletion-strategy']",
                      "value": "orphan",
                      "condition": "composition.metadata.deletionTimestamp != null"}]"#;
    let o = cm("kept", json!({"eno.azure.io/overrides": orphan}));
    let items = desired(std::slice::from_ref(&o));
    let deleting = CompositionInfo {
        deleting: true,
        deletion_timestamp: Some("2026-11-26T00:00:00Z".into()),
        ..comp()
    };
    let w = World::new(items.clone())
        .with_comp(deleting, &items)
        .observe(live(&o, "1", Value::Null));
    assert_eq!(
        w.op_of(&o),
        Op::Skip {
            reason: SkipReason::Orphaned
        }
    );
}

/// Eno docs/patches.md: a `Patch` JSON-patches an existing object, never creates it, deletes
/// it when an op sets `/metadata/deletionTimestamp`, and is not reverted when dropped or when
/// its Composition is deleted (unless, through an override, it then deletes).
/// Eno `internal/resource/tree.go` (`Backtracks`) and `patch_test.go`
/// (`TestPatchDeletionBeforeCreation`, `TestPatchDeleteOrphanedResources`): a Patch and the
/// resource it patches in adjacent readiness groups settle — the earlier one, once recorded
/// ready, is left alone while the later one goes ahead — in both orders.
#[test]
fn a_patch_and_the_object_it_patches_in_adjacent_groups_do_not_fight() {
    let deleting = json!({"eno.azure.io/readiness-group": "1"});
    let del = json!({"apiVersion": "eno.azure.io/v1", "kind": "Patch",
        "metadata": {"name": "target", "namespace": "ns", "annotations": deleting},
        "patch": {"apiVersion": "v1", "kind": "ConfigMap",
            "ops": [{"op": "add", "path": "/metadata/deletionTimestamp", "value": "x"}]}});
    let later = cm("target", json!({"eno.azure.io/readiness-group": "2"}));
    let existing = live(&cm("target", json!({})), "5", Value::Null);
    let latch = |mut w: World, v: &Value| {
        w.recorded.entry(key(v)).or_default().ready = Some("2026-11-27T00:00:00Z".into());
        w
    };
    // Patch first: it deletes, the resource waits; then the Patch is left alone and the
    // resource is created — and stays (no delete again).
    let mut w = World::new(desired(&[del.clone(), later.clone()]));
    w.observed.insert(key(&del), existing.clone());
    w.observed.insert(key(&later), existing.clone());
    assert_eq!(w.op_of(&del), Op::Delete { foreground: false });
    assert!(matches!(w.op_of(&later), Op::Wait { .. }));
    let mut w = latch(w, &del);
    w.observed.clear();
    let superseded = Op::Skip {
        reason: SkipReason::Superseded,
    };
    assert_eq!(w.op_of(&del), superseded);
    assert!(matches!(w.op_of(&later), Op::Apply { .. }));
    w.observed.insert(key(&del), existing.clone());
    w.observed.insert(key(&later), existing.clone());
    assert_eq!(
        w.op_of(&del),
        superseded,
        "the created object is not deleted again"
    );

    // Resource first, then a Patch that deletes it: once the resource is recorded ready it is
    // left alone, so it is never created again.
    let first = cm("target", json!({"eno.azure.io/readiness-group": "1"}));
    let mut del2 = del.clone();
    del2["metadata"]["annotations"] = json!({"eno.azure.io/readiness-group": "2"});
    let w = World::new(desired(&[first.clone(), del2.clone()]));
    assert!(matches!(w.op_of(&first), Op::Apply { .. }));
    assert!(matches!(w.op_of(&del2), Op::Wait { .. }));
    let w = latch(w, &first);
    assert_eq!(w.op_of(&first), superseded);
    assert_eq!(
        w.op_of(&del2),
        Op::Skip {
            reason: SkipReason::PatchTargetAbsent
        }
    );
    assert!(w.plan().all_ready());
}

/// A Patch carries the Composition's namespace even when its target is cluster-scoped: it
/// still pairs with that object (Eno compares group, kind and name).
#[test]
fn a_patch_of_a_cluster_scoped_object_pairs_with_it() {
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "r", "annotations": {"eno.azure.io/readiness-group": "1"}}});
    let patch = json!({"apiVersion": "eno.azure.io/v1", "kind": "Patch",
        "metadata": {"name": "r", "namespace": "ns", "annotations": {"eno.azure.io/readiness-group": "2"}},
        "patch": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "ops": [{"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}]}});
    let p = plan::prepare(
        &desired(&[role.clone(), patch.clone()]),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(p.superseded_by.get(&key(&role)), Some(&vec![key(&patch)]));
}

/// Eno marks a fail-open resource deleted once its delete was tried: a failing one holds no
/// later deletion group back.
#[test]
fn a_fail_open_delete_holds_no_deletion_group_back() {
    let first = deploy(
        "first",
        json!({"eno.azure.io/deletion-group": "1", "eno.azure.io/fail-open": "true"}),
    );
    let then = deploy("then", json!({"eno.azure.io/deletion-group": "2"}));
    let items = desired(&[first.clone(), then.clone()]);
    let comp = CompositionInfo {
        deleting: true,
        ..comp()
    };
    let w = World::new(items.clone())
        .with_comp(comp, &items)
        .observe(live(&first, "1", Value::Null))
        .observe(live(&then, "1", Value::Null));
    assert_eq!(w.op_of(&then), Op::Delete { foreground: false });
}

#[test]
fn patches_modify_or_delete_existing_objects_only() {
    let patch = |ops: Value, annotations: Value| {
        json!({"apiVersion": "eno.azure.io/v1", "kind": "Patch",
            "metadata": {"name": "target", "namespace": "ns", "annotations": annotations},
            "patch": {"apiVersion": "v1", "kind": "ConfigMap", "ops": ops}})
    };
    let add = json!([{"op": "add", "path": "/data/hello", "value": "world"}]);
    let p = patch(add.clone(), json!({}));
    let target = live(&cm("target", json!({})), "5", Value::Null);
    // Absent target: nothing, and nothing to wait for.
    let w = World::new(desired(std::slice::from_ref(&p)));
    assert_eq!(
        w.op_of(&p),
        Op::Skip {
            reason: SkipReason::PatchTargetAbsent
        }
    );
    assert!(w.plan().all_ready());
    // Present: the JSON patch; once applied to this version, nothing more.
    let mut w = World::new(desired(std::slice::from_ref(&p)));
    w.observed.insert(key(&p), target.clone());
    assert_eq!(w.op_of(&p), Op::JsonPatch { ops: add.clone() });
    let w = w.record_applied();
    assert_eq!(
        w.op_of(&p),
        Op::Skip {
            reason: SkipReason::InSync
        }
    );
    // A deletionTimestamp op deletes it.
    let del = patch(
        json!([{"op": "add", "path": "/metadata/deletionTimestamp", "value": "anything"}]),
        json!({}),
    );
    let mut w = World::new(desired(std::slice::from_ref(&del)));
    w.observed.insert(key(&del), target.clone());
    assert_eq!(w.op_of(&del), Op::Delete { foreground: false });
    // Dropped: the target is left as it is.
    let mut w = World::new(vec![Desired {
        manifest: p.clone(),
        tombstone: true,
    }]);
    w.observed.insert(key(&p), target.clone());
    assert_eq!(
        w.op_of(&p),
        Op::Skip {
            reason: SkipReason::PatchLeft
        }
    );
    // Composition deletion: left, unless an override makes it delete then.
    let on_delete = r#"[{"path": "self.patch.ops", "condition": "composition.metadata.deletionTimestamp != null",
                         "value": [{"op": "add", "path": "/metadata/deletionTimestamp", "value": "x"}]}]"#;
    let cleanup = patch(json!([]), json!({"eno.azure.io/overrides": on_delete}));
    let deleting = CompositionInfo {
        deleting: true,
        deletion_timestamp: Some("2026-11-26T00:00:00Z".into()),
        ..comp()
    };
    for (manifest, want) in [
        (
            p.clone(),
            Op::Skip {
                reason: SkipReason::PatchLeft,
            },
        ),
        (cleanup.clone(), Op::Delete { foreground: false }),
    ] {
        let items = desired(std::slice::from_ref(&manifest));
        let mut w = World::new(items.clone()).with_comp(deleting.clone(), &items);
        w.observed.insert(key(&manifest), target.clone());
        assert_eq!(w.op_of(&manifest), want);
    }
    // A Patch without a target kind is refused at ingestion.
    let bad = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Patch",
        "metadata": {"name": "x", "namespace": "ns"}, "patch": {"apiVersion": "v1"}});
    let err = plan::prepare(&desired(&[bad]), &comp()).unwrap_err();
    assert!(err.to_string().contains("patch.kind"), "{err}");
}

/// A `managed-by` label taken off (handed over under `disable-reconciliation`) is put back by
/// the next write once the resource is reconciled again: an apply, or in client-side mode a
/// merge patch that sets it (never an empty patch every pass).
#[test]
fn a_label_taken_off_is_put_back_by_the_next_write_in_either_mode() {
    let m = cm("handed", json!({}));
    let mut w = World::new(desired(std::slice::from_ref(&m)))
        .observe(live(&m, "7", Value::Null))
        .record_applied();
    assert_eq!(
        w.op_of(&m),
        Op::Skip {
            reason: SkipReason::InSync
        }
    );
    w = w.observe(live(&m, "7", Value::Null));
    assert!(
        matches!(w.op_of(&m), Op::Apply { .. }),
        "server-side: applied"
    );
    w.options.mode = ApplyMode::ClientSide;
    let mut previous = ours(&m, "7");
    previous["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    w.previous.insert(key(&m), previous);
    let Op::MergePatch { patch, .. } = w.op_of(&m) else {
        panic!("client-side: a merge patch")
    };
    assert_eq!(patch["metadata"]["labels"]["enoki.dev/managed-by"], "uid-1");
}
