use super::*;
use plan::Settings;

fn key(name: &str) -> ResourceKey {
    ResourceKey {
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: "n".into(),
        name: name.into(),
    }
}

fn step(name: &str, op: Op, readiness: ReadinessState) -> Step {
    Step {
        key: key(name),
        op,
        hash: Some(format!("v1:{name}")),
        readiness,
        overrides: Vec::new(),
        settings: Settings::default(),
        previous: None,
    }
}

fn empty() -> plan::Prepared {
    plan::prepare(&[], &plan::CompositionInfo::default()).unwrap()
}

fn loaded(names: &[&str]) -> Loaded {
    Loaded::for_test(&names.iter().map(|n| (key(n), false)).collect::<Vec<_>>())
}

#[test]
fn an_applied_resource_records_its_hash_and_version_and_a_failure_its_error() {
    let the_plan = Plan {
        steps: vec![
            step(
                "a",
                Op::Apply {
                    object: serde_json::json!({}),
                },
                ReadinessState::Ready { at: None },
            ),
            step(
                "b",
                Op::Apply {
                    object: serde_json::json!({}),
                },
                ReadinessState::Absent,
            ),
        ],
        requeue: None,
    };
    let outcomes = vec![
        StepResult {
            resource_version: Some("5".into()),
            ..StepResult::default()
        },
        StepResult {
            error: Some("Forbidden: no".into()),
            ..StepResult::default()
        },
    ];
    let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let rec = record(
        &|_: &str| None,
        &the_plan,
        &outcomes,
        &loaded(&["a", "b"]),
        &HashMap::new(),
        &empty(),
        false,
        &now,
    );
    let a = &rec.states[0][0];
    assert_eq!(a.applied_hash.as_deref(), Some("v1:a"));
    assert_eq!(a.applied_resource_version.as_deref(), Some("5"));
    assert!(a.reconciled && a.ready == Some(now.clone()));
    let b = &rec.states[0][1];
    assert!(!b.reconciled && b.error.as_deref() == Some("Forbidden: no"));
    assert_eq!(rec.errors, [format!("{}: Forbidden: no", key("b"))]);
    assert_eq!(rec.not_ready, [format!("{} (not created yet)", key("b"))]);
}

/// Eno evaluates a hands-off resource's readiness like any other's: an unmet check is
/// not recorded ready (so it keeps holding its group back), one without checks is.
#[test]
fn a_hands_off_resource_is_recorded_ready_only_as_its_checks_say() {
    let off = || Op::Skip {
        reason: SkipReason::ReconciliationDisabled,
    };
    let unmet = ReadinessState::NotReady {
        unsatisfied: vec!["default".into()],
    };
    let the_plan = Plan {
        steps: vec![
            step("a", off(), unmet),
            step("b", off(), ReadinessState::Ready { at: None }),
        ],
        requeue: None,
    };
    let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let outcomes = vec![StepResult::default(), StepResult::default()];
    let rec = record(
        &|_: &str| None,
        &the_plan,
        &outcomes,
        &loaded(&["a", "b"]),
        &HashMap::new(),
        &empty(),
        false,
        &now,
    );
    let (a, b) = (&rec.states[0][0], &rec.states[0][1]);
    assert!(a.reconciled && a.ready.is_none(), "{a:?}");
    assert!(b.reconciled && b.ready == Some(now), "{b:?}");
    assert_eq!(rec.not_ready, [format!("{} (default)", key("a"))]);
}

#[test]
fn an_in_sync_resource_without_a_record_adopts_the_carried_version() {
    let the_plan = Plan {
        steps: vec![step(
            "a",
            Op::Skip {
                reason: SkipReason::InSync,
            },
            ReadinessState::Ready { at: None },
        )],
        requeue: None,
    };
    let carried = HashMap::from([(
        key("a"),
        Recorded {
            applied_hash: Some("v1:a".into()),
            applied_resource_version: Some("9".into()),
            ready: None,
            interval_due: false,
        },
    )]);
    let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let rec = record(
        &|_: &str| None,
        &the_plan,
        &[StepResult::default()],
        &loaded(&["a"]),
        &carried,
        &empty(),
        false,
        &now,
    );
    assert_eq!(
        rec.states[0][0].applied_resource_version.as_deref(),
        Some("9")
    );
    assert!(rec.errors.is_empty() && rec.not_ready.is_empty());
}

#[test]
fn a_resource_is_ready_from_the_object_its_write_returned() {
    let manifest = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "n"}});
    let prepared = plan::prepare(
        &[plan::Desired {
            manifest: manifest.clone(),
            tombstone: false,
        }],
        &plan::CompositionInfo::default(),
    )
    .unwrap();
    let the_plan = Plan {
        steps: vec![step(
            "a",
            Op::Apply {
                object: manifest.clone(),
            },
            ReadinessState::Absent,
        )],
        requeue: None,
    };
    let written = StepResult {
        resource_version: Some("3".into()),
        object: Some(manifest),
        ..StepResult::default()
    };
    let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let rec = record(
        &|_: &str| None,
        &the_plan,
        &[written],
        &loaded(&["a"]),
        &HashMap::new(),
        &prepared,
        false,
        &now,
    );
    assert!(rec.states[0][0].ready.is_some(), "{rec:?}");
    assert!(rec.not_ready.is_empty());
}

/// The object before the write met the check; the written one does not: not ready.
#[test]
fn a_check_the_old_object_met_is_evaluated_again_on_the_written_one() {
    let manifest = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "n",
            "annotations": {"enoki.dev/readiness": "self.data.x == 'yes'"}},
        "data": {"x": "no"}});
    let desired = plan::Desired {
        manifest: manifest.clone(),
        tombstone: false,
    };
    let prepared = plan::prepare(&[desired], &plan::CompositionInfo::default()).unwrap();
    let op = Op::Apply {
        object: manifest.clone(),
    };
    let the_plan = Plan {
        steps: vec![step("a", op, ReadinessState::Ready { at: None })],
        requeue: None,
    };
    let written = StepResult {
        object: Some(manifest),
        ..StepResult::default()
    };
    let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let rec = record(
        &|_: &str| None,
        &the_plan,
        &[written],
        &loaded(&["a"]),
        &HashMap::new(),
        &prepared,
        false,
        &now,
    );
    assert!(rec.states[0][0].ready.is_none(), "{rec:?}");
    assert_eq!(rec.not_ready.len(), 1, "{rec:?}");
}

#[test]
fn a_long_error_is_clipped_on_the_resources_state() {
    assert_eq!(clipped("Forbidden: no"), "Forbidden: no");
    let long = "é".repeat(2000);
    let c = clipped(&long);
    assert!(
        c.len() <= MAX_RESOURCE_ERROR + 20 && c.ends_with("…(truncated)"),
        "{c}"
    );
    // Counted as escaped: characters JSON writes as `\u003c` take six bytes each.
    let escaped = clipped(&"<".repeat(1000));
    assert_eq!(escaped.matches('<').count(), MAX_RESOURCE_ERROR / 6);
}

/// A resource waiting for the group before it is not recorded ready from its live object
/// (the previous synthesis's): its checks are evaluated once it is written.
#[test]
fn a_waiting_resource_is_not_recorded_ready() {
    let the_plan = Plan {
        steps: vec![step(
            "a",
            Op::Wait { on: vec![key("b")] },
            ReadinessState::Ready { at: None },
        )],
        requeue: None,
    };
    let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let rec = record(
        &|_: &str| None,
        &the_plan,
        &[StepResult::default()],
        &loaded(&["a"]),
        &HashMap::new(),
        &empty(),
        false,
        &now,
    );
    let a = &rec.states[0][0];
    assert!(!a.reconciled && a.ready.is_none(), "{a:?}");
    assert_eq!(
        rec.not_ready,
        [format!(
            "{} (waiting for the resources before it)",
            key("a")
        )]
    );
}

/// Eno's `patchResourceError`: a write that fails on a resource already reconciled in this
/// synthesis (a drift revert) leaves it reconciled and out of the roll-up's errors; the error
/// stays on its state and is reported apart.
#[test]
fn a_failed_write_of_a_reconciled_resource_keeps_it_reconciled() {
    let the_plan = Plan {
        steps: vec![step(
            "a",
            Op::Apply {
                object: serde_json::json!({}),
            },
            ReadinessState::Ready { at: None },
        )],
        requeue: None,
    };
    let mut loaded = loaded(&["a"]);
    loaded.slices[0].states[0].reconciled = true;
    let outcomes = [StepResult {
        error: Some("the webhook said no".into()),
        ..StepResult::default()
    }];
    let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let rec = record(
        &|_: &str| None,
        &the_plan,
        &outcomes,
        &loaded,
        &HashMap::new(),
        &empty(),
        false,
        &now,
    );
    let a = &rec.states[0][0];
    assert!(a.reconciled && a.error.as_deref() == Some("the webhook said no"));
    assert!(rec.errors.is_empty(), "{:?}", rec.errors);
    assert_eq!(
        rec.later_errors,
        [format!("{}: the webhook said no", key("a"))]
    );
}

/// A resource left unwritten because the pass ran out of CEL time is not reconciled by that
/// pass: a write of it that fails later is an error of the roll-up, not a later error.
#[test]
fn a_resource_deferred_for_cel_time_is_not_reconciled() {
    let deferred = Plan {
        steps: vec![step(
            "a",
            Op::Skip {
                reason: SkipReason::CelTimeSpent,
            },
            ReadinessState::Ready { at: None },
        )],
        requeue: None,
    };
    let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let rec = record(
        &|_: &str| None,
        &deferred,
        &[StepResult::default()],
        &loaded(&["a"]),
        &HashMap::new(),
        &empty(),
        false,
        &now,
    );
    let a = &rec.states[0][0];
    assert!(!a.reconciled && a.ready.is_none(), "{a:?}");
}
