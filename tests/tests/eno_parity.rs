//! Eno's behaviours, scenario by scenario, against the real control plane, with Eno's
//! `eno.azure.io/*` spellings. Each test names the Eno document or code it mirrors (Eno's
//! repository: github.com/Azure/eno; read, not copied).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crds::Composition;
use harness::{Enoki, TestEnv, echo_module, eventually, install_crds, install_synthesizer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// An input ConfigMap of the echo synthesizer: `items` plus annotations and extra data.
async fn input(env: &TestEnv, name: &str, annotations: Value, items: &Value, extra: Value) {
    let mut data = json!({"items": items.to_string()});
    if let (Some(d), Some(e)) = (data.as_object_mut(), extra.as_object()) {
        d.extend(e.clone());
    }
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "annotations": annotations}, "data": data});
    env.api::<ConfigMap>()
        .patch(
            name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&cm),
        )
        .await
        .unwrap();
}

/// The resourceVersion of input `key` that the current synthesis of `name` read (an identical
/// output keeps the synthesis's UUID; this tells a new synthesis apart).
async fn config_rv(comps: &Api<Composition>, name: &str, key: &str) -> Option<String> {
    comps
        .get(name)
        .await
        .unwrap()
        .status?
        .current_synthesis?
        .input_revisions
        .into_iter()
        .find(|r| r.key == key)?
        .resource_version
}

async fn data_of(env: &TestEnv, name: &str) -> Option<std::collections::BTreeMap<String, String>> {
    env.api::<ConfigMap>().get_opt(name).await.unwrap()?.data
}

/// Eno docs/synthesis.md, "Input Synchronization" and `internal/inputs.OutOfLockstep`
/// (`MismatchedInputs`), `api/v1.InputRevisions.Less` (with revisions on both sides, only a
/// revision change counts).
#[tokio::test]
async fn input_revisions_hold_synthesis_until_inputs_agree() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let refs = json!({"spec": {"refs": [
        {"key": "config", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}},
        {"key": "second", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}]}});
    Api::<crds::Synthesizer>::all(env.client.clone())
        .patch(&synth, &PatchParams::default(), &Patch::Merge(&refs))
        .await
        .unwrap();
    let out = |v: &str| json!([harness::config_map("out", json!({}), json!({"v": v}))]);
    let rev = |r: &str| json!({"eno.azure.io/revision": r});
    input(&env, "config", rev("1"), &out("1"), json!({})).await;
    input(&env, "second", rev("1"), &json!([]), json!({})).await;
    harness::apply_composition(
        &env,
        "locked",
        &synth,
        "config",
        json!({"bindings": [{"key": "config", "resource": {"name": "config"}},
                            {"key": "second", "resource": {"name": "second"}}]}),
    )
    .await;
    let enoki = Enoki::start(&env.namespace);
    eventually("revision 1 applied", WAIT, || async {
        (data_of(&env, "out").await?.get("v")? == "1").then_some(())
    })
    .await;

    // One input moves to revision 2: no synthesis until the other follows.
    input(&env, "config", rev("2"), &out("2"), json!({})).await;
    let (_, _, message) = eventually("Synthesized=False MismatchedInputs", WAIT, || async {
        let c = harness::composition_condition(&env, "locked", "Synthesized").await?;
        (c.0 == "False" && c.1 == "MismatchedInputs").then_some(c)
    })
    .await;
    assert!(
        message.contains("config: revision 1") || message.contains("second: revision 1"),
        "{message}"
    );
    let comps: Api<Composition> = env.api();
    let st = comps.get("locked").await.unwrap().status.unwrap();
    assert_eq!(st.simplified.unwrap().status, "MismatchedInputs");
    let seen: Vec<(String, Option<i64>)> = st
        .input_revisions
        .iter()
        .map(|r| (r.key.clone(), r.revision))
        .collect();
    assert!(
        seen.contains(&("config".to_string(), Some(2))),
        "status.inputRevisions: {seen:?}"
    );
    assert_eq!(
        data_of(&env, "out").await.unwrap()["v"],
        "1",
        "nothing new applied"
    );
    input(&env, "second", rev("2"), &json!([]), json!({})).await;
    eventually("revision 2 applied once both agree", WAIT, || async {
        (data_of(&env, "out").await?.get("v")? == "2").then_some(())
    })
    .await;

    // Same revision, new content: not a new synthesis (only a revision change is).
    let before = comps
        .get("locked")
        .await
        .unwrap()
        .status
        .unwrap()
        .current_synthesis
        .unwrap()
        .uuid;
    input(&env, "config", rev("2"), &out("3"), json!({})).await;
    enoki.wait_pass(&env, "locked").await;
    let after = comps
        .get("locked")
        .await
        .unwrap()
        .status
        .unwrap()
        .current_synthesis
        .unwrap()
        .uuid;
    assert_eq!(before, after, "re-synthesized without a revision change");
    assert_eq!(data_of(&env, "out").await.unwrap()["v"], "2");
}

/// Eno `internal/execution/executor.go` (`COMPOSITION_NAME`, `COMPOSITION_NAMESPACE`,
/// `SYNTHESIS_UUID` set for the synthesizer) and `pkg/function` (inputs by
/// `eno.azure.io/input-key`, `functionConfig.optionalRefs`).
#[tokio::test]
async fn the_synthesizer_gets_enos_environment_and_cannot_be_lied_to() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    input(
        &env,
        "config",
        json!({}),
        &json!([]),
        json!({"env-mirror": "seen"}),
    )
    .await;
    harness::apply_composition(
        &env,
        "envy",
        &synth,
        "config",
        json!({"synthesisEnv": [{"name": "COMPOSITION_NAME", "value": "spoofed"}]}),
    )
    .await;
    let _enoki = Enoki::start(&env.namespace);
    let seen = eventually("the module's environment", WAIT, || async {
        data_of(&env, "seen").await
    })
    .await;
    assert_eq!(
        seen["COMPOSITION_NAME"], "envy",
        "synthesisEnv cannot override it"
    );
    assert_eq!(seen["COMPOSITION_NAMESPACE"], env.namespace);
    let comps: Api<Composition> = env.api();
    // The output is applied before the pass's status write records the synthesis.
    let uuid = eventually("the synthesis in the status", WAIT, || async {
        let c = comps.get("envy").await.ok()?;
        Some(c.status?.current_synthesis?.uuid)
    })
    .await;
    assert_eq!(seen["SYNTHESIS_UUID"], uuid, "the synthesis's own UUID");
}

/// Eno `internal/resource/tree.go` (`treeBuilder.Add`: conflicting refs resolved
/// deterministically by manifest hash): a resource emitted twice is applied once, the same
/// copy whatever the order, and the synthesis reports it.
#[tokio::test]
async fn a_resource_emitted_twice_is_resolved_as_eno_resolves_it() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let copy = |v: &str| harness::config_map("twice", json!({}), json!({"v": v}));
    input(
        &env,
        "ab",
        json!({}),
        &json!([copy("a"), copy("b")]),
        json!({}),
    )
    .await;
    harness::apply_composition(&env, "ab", &synth, "ab", json!({})).await;
    let _enoki = Enoki::start(&env.namespace);
    eventually("ab Ready", WAIT, || async {
        harness::composition_ready(&env, "ab").await.then_some(())
    })
    .await;
    let first = data_of(&env, "twice").await.unwrap()["v"].clone();
    let comps: Api<Composition> = env.api();
    let results = comps
        .get("ab")
        .await
        .unwrap()
        .status
        .unwrap()
        .current_synthesis
        .unwrap()
        .results;
    assert!(
        results
            .iter()
            .any(|r| r.severity == "warning" && r.message.contains("duplicate resource")),
        "{results:?}"
    );
    // The other order gives the same copy.
    let before = config_rv(&comps, "ab", "config").await;
    input(
        &env,
        "ab",
        json!({}),
        &json!([copy("b"), copy("a")]),
        json!({}),
    )
    .await;
    eventually("re-synthesized and Ready", WAIT, || async {
        (config_rv(&comps, "ab", "config").await != before
            && harness::composition_ready(&env, "ab").await)
            .then_some(())
    })
    .await;
    assert_eq!(data_of(&env, "twice").await.unwrap()["v"], first);
}

/// Eno `internal/resource` readiness (a resource without readiness checks is ready once it
/// exists; docs/reconciliation.md "Readiness Checks"); kstatus health is opt-in through the
/// cascading `health` annotation.
#[tokio::test]
async fn without_readiness_checks_a_resource_is_ready_once_it_exists_and_kstatus_is_opt_in() {
    use k8s_openapi::api::apps::v1::Deployment;
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let deployment = |name: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "example.com/x:1"}]}}}})
    };
    let _enoki = Enoki::start(&env.namespace);
    // No kubelet here: the Deployments never become Available by themselves.
    harness::set_echo_items(&env, "plain-items", &json!([deployment("plain")])).await;
    harness::apply_composition(&env, "plain", &synth, "plain-items", json!({})).await;
    harness::set_echo_items(&env, "strict-items", &json!([deployment("strict")])).await;
    // Opted in from the start (readiness latches for a synthesis).
    let strict = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": "strict", "annotations": {"eno.azure.io/health": "kstatus"}},
        "spec": {"synthesizer": {"name": synth},
                 "bindings": [{"key": "config", "resource": {"name": "strict-items"}}]}});
    let comps: Api<Composition> = env.api();
    comps
        .patch(
            "strict",
            &PatchParams::apply("test"),
            &Patch::Apply(&strict),
        )
        .await
        .unwrap();
    eventually("plain Ready once its Deployment exists", WAIT, || async {
        harness::composition_ready(&env, "plain")
            .await
            .then_some(())
    })
    .await;
    let deployments: Api<Deployment> = env.api();
    eventually("strict's Deployment applied", WAIT, || async {
        deployments.get_opt("strict").await.unwrap().map(|_| ())
    })
    .await;
    let c = eventually("strict reconciled but not ready", WAIT, || async {
        let c = harness::composition_condition(&env, "strict", "Ready").await?;
        (c.0 == "False").then_some(c)
    })
    .await;
    assert!(!harness::composition_ready(&env, "strict").await, "{c:?}");
    // The Deployment becomes Available: kstatus is satisfied.
    let d = deployments.get("strict").await.unwrap();
    let status = json!({"status": {"observedGeneration": d.metadata.generation, "replicas": 1,
        "availableReplicas": 1, "readyReplicas": 1,
        "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                        "message": "ok", "lastTransitionTime": harness::now_rfc3339()}]}});
    deployments
        .patch_status("strict", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    eventually("strict Ready once Available", WAIT, || async {
        harness::composition_ready(&env, "strict")
            .await
            .then_some(())
    })
    .await;
}

/// Eno docs/synthesis.md "Opting out of deferred synthesis" and
/// `internal/controllers/scheduling/op.go` (`inputChangeCount`): a Composition annotated
/// `ignore-side-effects: "true"` is not re-synthesized by input changes, unless the input
/// itself says `ignore-side-effects: "false"`.
#[tokio::test]
async fn ignore_side_effects_on_the_composition_and_on_inputs() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let out = |v: &str| json!([harness::config_map("quiet-out", json!({}), json!({"v": v}))]);
    input(&env, "quiet", json!({}), &out("1"), json!({})).await;
    let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": "quiet", "annotations": {"eno.azure.io/ignore-side-effects": "true"}},
        "spec": {"synthesizer": {"name": synth},
                 "bindings": [{"key": "config", "resource": {"name": "quiet"}}]}});
    let comps: Api<Composition> = env.api();
    comps
        .patch("quiet", &PatchParams::apply("test"), &Patch::Apply(&comp))
        .await
        .unwrap();
    let enoki = Enoki::start(&env.namespace);
    eventually("first synthesis applied", WAIT, || async {
        (data_of(&env, "quiet-out").await?.get("v")? == "1").then_some(())
    })
    .await;
    input(&env, "quiet", json!({}), &out("2"), json!({})).await;
    enoki.wait_pass(&env, "quiet").await;
    assert_eq!(
        data_of(&env, "quiet-out").await.unwrap()["v"],
        "1",
        "a side effect re-synthesized"
    );
    // The input insists.
    input(
        &env,
        "quiet",
        json!({"eno.azure.io/ignore-side-effects": "false"}),
        &out("3"),
        json!({}),
    )
    .await;
    eventually(
        "an input with ignore-side-effects false re-synthesizes",
        WAIT,
        || async { (data_of(&env, "quiet-out").await?.get("v")? == "3").then_some(()) },
    )
    .await;
}

/// Eno `api/v1.Ref.Defer` and docs/synthesis.md "Deferral for Large-Scale Changes": a change of
/// a `defer: true` input is rolled out under the global rollout cooldown, one Composition at a
/// time, and the cooldown survives a restart (`scheduling.getNextCooldownSlot`: persisted in
/// the syntheses' `initialized`/`deferred`).
#[tokio::test]
async fn deferred_inputs_roll_out_under_the_cooldown() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let refs = json!({"spec": {"refs": [
        {"key": "config", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}},
        {"key": "shared", "defer": true, "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}]}});
    Api::<crds::Synthesizer>::all(env.client.clone())
        .patch(&synth, &PatchParams::default(), &Patch::Merge(&refs))
        .await
        .unwrap();
    input(
        &env,
        "shared",
        json!({}),
        &json!([]),
        json!({"generation": "1"}),
    )
    .await;
    for name in ["one", "two"] {
        let out = json!([harness::config_map(
            &format!("{name}-out"),
            json!({}),
            json!({})
        )]);
        input(&env, name, json!({}), &out, json!({})).await;
        harness::apply_composition(
            &env,
            name,
            &synth,
            name,
            json!({"bindings": [{"key": "config", "resource": {"name": name}},
                                {"key": "shared", "resource": {"name": "shared"}}]}),
        )
        .await;
    }
    let enoki = Enoki::start_with(&env.namespace, &["--rollout-cooldown", "20s"]);
    let comps: Api<Composition> = env.api();
    // Which version of `shared` each Composition's current synthesis read.
    let uuid = |name: &'static str| {
        let comps = comps.clone();
        async move { config_rv(&comps, name, "shared").await }
    };
    let first = eventually("both synthesized", WAIT, || async {
        Some((uuid("one").await?, uuid("two").await?))
    })
    .await;
    input(
        &env,
        "shared",
        json!({}),
        &json!([]),
        json!({"generation": "2"}),
    )
    .await;
    let changed =
        |now: &(String, String)| usize::from(now.0 != first.0) + usize::from(now.1 != first.1);
    let after_one = eventually("one Composition re-synthesized", WAIT, || async {
        let now = (uuid("one").await?, uuid("two").await?);
        (changed(&now) >= 1).then_some(now)
    })
    .await;
    // A restart keeps the pace: the cooldown is persisted in the Compositions' status.
    drop(enoki);
    let enoki = Enoki::start_with(&env.namespace, &["--rollout-cooldown", "20s"]);
    enoki.wait_pass(&env, "one").await;
    enoki.wait_pass(&env, "two").await;
    let now = (uuid("one").await.unwrap(), uuid("two").await.unwrap());
    assert_eq!(
        changed(&now),
        1,
        "the second waits for the cooldown: {after_one:?} {now:?}"
    );
    eventually(
        "the other after the cooldown",
        Duration::from_secs(90),
        || async {
            let now = (uuid("one").await?, uuid("two").await?);
            (changed(&now) == 2).then_some(())
        },
    )
    .await;
}

/// Eno `--migrating-field-managers` with `--migrating-fields` (`cmd/eno-reconciler/main.go`,
/// `internal/resource/fieldmanager.go` `NormalizeConflictingManagers`): the fields a listed
/// manager applied under a listed path become enoki's, so what the synthesizer no longer emits
/// there is removed; the manager keeps its other fields, and managers not listed keep theirs.
#[tokio::test]
async fn migrating_field_managers_hand_their_fields_under_the_paths_to_enoki() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    // Applied before enoki by Eno (manager `eno`) and by another tool (`helm`).
    for (name, manager) in [("from-eno", "eno"), ("from-helm", "helm")] {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"x": "1"}}, "data": {"a": "1", "b": "old"}});
        env.api::<ConfigMap>()
            .patch(name, &PatchParams::apply(manager), &Patch::Apply(&cm))
            .await
            .unwrap();
    }
    // The synthesizer emits both without `b` and without the label.
    let items = json!([
        harness::config_map("from-eno", json!({}), json!({"a": "1"})),
        harness::config_map("from-helm", json!({}), json!({"a": "1"})),
    ]);
    input(&env, "items", json!({}), &items, json!({})).await;
    harness::apply_composition(&env, "moved", &synth, "items", json!({})).await;
    let flags = [
        "--migrating-field-managers",
        "eno",
        "--migrating-fields",
        "data",
    ];
    let _enoki = Enoki::start_with(&env.namespace, &flags);
    eventually("moved Ready", WAIT, || async {
        harness::composition_ready(&env, "moved")
            .await
            .then_some(())
    })
    .await;
    let from_eno = env.api::<ConfigMap>().get("from-eno").await.unwrap();
    assert_eq!(
        from_eno.data.as_ref().unwrap().get("b"),
        None,
        "eno's field under `data` handed over and pruned"
    );
    assert_eq!(
        from_eno
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("x"))
            .map(String::as_str),
        Some("1"),
        "eno keeps its label: `metadata.labels` is not a migrating path"
    );
    let eno_entry = from_eno
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("eno"))
        .expect("eno keeps an entry for its other fields");
    let fields = serde_json::to_value(eno_entry.fields_v1.unwrap()).unwrap();
    assert!(fields.get("f:data").is_none(), "{fields}");
    let from_helm = env.api::<ConfigMap>().get("from-helm").await.unwrap();
    assert_eq!(
        from_helm.data.unwrap().get("b").map(String::as_str),
        Some("old"),
        "a manager that is not migrating keeps its field"
    );
}

/// Eno reads cascading annotation values leniently (`internal/resource`: a bool is true only
/// when `"true"`, a bad strategy is a background delete): a bad value is reported — a warning
/// result on the synthesis, an `InvalidAnnotation` Event for the Composition's own — and never
/// blocks applying.
#[tokio::test]
async fn bad_cascading_annotation_values_warn_and_do_not_block() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let items = json!([harness::config_map(
        "lenient",
        json!({"eno.azure.io/disable-updates": "yes"}),
        json!({"v": "1"})
    )]);
    input(&env, "lenient-items", json!({}), &items, json!({})).await;
    let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": "lenient", "annotations": {"eno.azure.io/deletion-strategy": "shred"}},
        "spec": {"synthesizer": {"name": synth},
                 "bindings": [{"key": "config", "resource": {"name": "lenient-items"}}]}});
    let comps: Api<Composition> = env.api();
    comps
        .patch("lenient", &PatchParams::apply("test"), &Patch::Apply(&comp))
        .await
        .unwrap();
    let _enoki = Enoki::start(&env.namespace);
    eventually("Ready despite the bad values", WAIT, || async {
        harness::composition_ready(&env, "lenient")
            .await
            .then_some(())
    })
    .await;
    assert_eq!(data_of(&env, "lenient").await.unwrap()["v"], "1", "applied");
    let results = comps
        .get("lenient")
        .await
        .unwrap()
        .status
        .unwrap()
        .current_synthesis
        .unwrap()
        .results;
    assert!(
        results.iter().any(|r| r.severity == "warning"
            && r.message.contains("eno.azure.io/disable-updates")
            && r.message.contains("\"yes\"")),
        "{results:?}"
    );
    let event = harness::wait_event(&env, "an InvalidAnnotation event", |e| {
        e.reason.as_deref() == Some("InvalidAnnotation")
    })
    .await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains("eno.azure.io/deletion-strategy") && note.contains("shred"),
        "{note}"
    );
}

/// Eno `internal/controllers/composition` (`shouldForceRemoveFinalizer`): a Composition
/// annotated `forceDeleteWhenSymphonyGone: "true"` whose Symphony no longer exists is released
/// at once, even while its deletion would otherwise wait (here: on a dependent Composition).
#[tokio::test]
async fn force_delete_when_symphony_gone_releases_a_stuck_composition() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    input(&env, "items", json!({}), &json!([]), json!({})).await;
    let symphony = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Symphony",
        "metadata": {"name": "stack"},
        "spec": {"bindings": [{"key": "config", "resource": {"name": "items"}}],
                 "variations": [{"synthesizer": {"name": synth},
                     "annotations": {"eno.azure.io/forceDeleteWhenSymphonyGone": "true"}}]}});
    let syms: Api<crds::Symphony> = env.api();
    syms.patch(
        "stack",
        &PatchParams::apply("test"),
        &Patch::Apply(&symphony),
    )
    .await
    .unwrap();
    let generated = format!("stack-{synth}");
    // A Composition outside the Symphony depends on the generated one: its deletion waits.
    harness::apply_composition(
        &env,
        "dependent",
        &synth,
        "items",
        json!({"dependsOn": [{"name": generated}]}),
    )
    .await;
    let _enoki = Enoki::start(&env.namespace);
    let comps: Api<Composition> = env.api();
    eventually("the generated Composition Ready", WAIT, || async {
        harness::composition_ready(&env, &generated)
            .await
            .then_some(())
    })
    .await;
    // The Symphony goes away for good (its finalizer removed by hand, as a force delete).
    syms.delete("stack", &Default::default()).await.unwrap();
    syms.patch(
        "stack",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("the generated Composition released", WAIT, || async {
        comps
            .get_opt(&generated)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        comps.get_opt("dependent").await.unwrap().is_some(),
        "its dependent is still there: the wait was skipped, not satisfied"
    );
}

/// Eno docs/patches.md (`eno.azure.io/v1 Patch`): JSON patches modify existing objects
/// enoki does not manage, never create one, delete one with a `/metadata/deletionTimestamp` op,
/// and are not reverted when dropped.
#[tokio::test]
async fn patches_modify_and_delete_existing_objects() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let cms = env.api::<ConfigMap>();
    for name in ["legacy", "doomed"] {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"a": "1"}});
        cms.patch(
            name,
            &PatchParams::apply("someone-else"),
            &Patch::Apply(&cm),
        )
        .await
        .unwrap();
    }
    let patch = |name: &str, api_version: &str, ops: Value| {
        json!({"apiVersion": api_version, "kind": "Patch", "metadata": {"name": name},
            "patch": {"apiVersion": "v1", "kind": "ConfigMap", "ops": ops}})
    };
    let hello = json!([{"op": "add", "path": "/data/hello", "value": "world"}]);
    let delete = json!([{"op": "add", "path": "/metadata/deletionTimestamp", "value": "now"}]);
    let items = json!([
        patch("legacy", "eno.azure.io/v1", hello.clone()),
        patch("ghost", "enoki.dev/v1alpha1", hello),
    ]);
    input(&env, "patches", json!({}), &items, json!({})).await;
    harness::apply_composition(&env, "patcher", &synth, "patches", json!({})).await;
    let _enoki = Enoki::start(&env.namespace);
    eventually("patched and Ready", WAIT, || async {
        let data = data_of(&env, "legacy").await?;
        (data.get("hello").map(String::as_str) == Some("world")
            && harness::composition_ready(&env, "patcher").await)
            .then_some(())
    })
    .await;
    assert_eq!(
        data_of(&env, "legacy").await.unwrap()["a"],
        "1",
        "a patch, not a replace"
    );
    assert!(
        cms.get_opt("ghost").await.unwrap().is_none(),
        "a patch never creates"
    );
    // Now a Patch that deletes `doomed`; the `legacy` patch is dropped.
    input(
        &env,
        "patches",
        json!({}),
        &json!([patch("doomed", "eno.azure.io/v1", delete)]),
        json!({}),
    )
    .await;
    eventually("doomed deleted", WAIT, || async {
        cms.get_opt("doomed").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(
        data_of(&env, "legacy")
            .await
            .unwrap()
            .get("hello")
            .map(String::as_str),
        Some("world"),
        "a dropped patch is not reverted"
    );
}

/// Eno docs/synthesis.md "Generation-based synchronization" (`internal/inputs.Mismatched`): an
/// input that says which Composition generation its producer has seen holds synthesis back
/// while the Composition is newer.
#[tokio::test]
async fn composition_generation_on_an_input_holds_synthesis_back() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let out = |v: &str| json!([harness::config_map("gen-out", json!({}), json!({"v": v}))]);
    let seen = |g: &str| json!({"eno.azure.io/composition-generation": g});
    input(&env, "gen", seen("1"), &out("1"), json!({})).await;
    harness::apply_composition(&env, "gen", &synth, "gen", json!({})).await;
    let _enoki = Enoki::start(&env.namespace);
    eventually("generation 1 synthesized", WAIT, || async {
        (data_of(&env, "gen-out").await?.get("v")? == "1").then_some(())
    })
    .await;
    // The Composition moves to generation 2; its input's producer has not caught up.
    harness::apply_composition(
        &env,
        "gen",
        &synth,
        "gen",
        json!({"synthesisEnv": [{"name": "STEP", "value": "2"}]}),
    )
    .await;
    let (_, _, message) = eventually("MismatchedInputs", WAIT, || async {
        let c = harness::composition_condition(&env, "gen", "Synthesized").await?;
        (c.0 == "False" && c.1 == "MismatchedInputs").then_some(c)
    })
    .await;
    assert!(message.contains("composition-generation 1"), "{message}");
    input(&env, "gen", seen("2"), &out("2"), json!({})).await;
    eventually("synthesized once the input caught up", WAIT, || async {
        (data_of(&env, "gen-out").await?.get("v")? == "2").then_some(())
    })
    .await;
}

/// Eno docs/resource-migration.md and docs/overrides.md: an override conditioned on the
/// Composition's deletion that sets `deletion-strategy: orphan` keeps the resource when the
/// Composition is deleted, while the others go.
#[tokio::test]
async fn an_override_can_orphan_a_resource_on_composition_deletion() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let keep = r#"[{"path": "self.metadata.annotations['eno.azure.io/deletion-strategy']",
                    "value": "orphan",
                    "condition": "composition.metadata.deletionTimestamp != null"}]"#;
    let items = json!([
        harness::config_map("kept", json!({"eno.azure.io/overrides": keep}), json!({})),
        harness::config_map("gone", json!({}), json!({})),
    ]);
    input(&env, "items", json!({}), &items, json!({})).await;
    harness::apply_composition(&env, "migrating", &synth, "items", json!({})).await;
    let _enoki = Enoki::start(&env.namespace);
    eventually("Ready", WAIT, || async {
        harness::composition_ready(&env, "migrating")
            .await
            .then_some(())
    })
    .await;
    let comps: Api<Composition> = env.api();
    comps
        .delete("migrating", &Default::default())
        .await
        .unwrap();
    eventually("the Composition gone", WAIT, || async {
        comps
            .get_opt("migrating")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let cms = env.api::<ConfigMap>();
    assert!(cms.get_opt("gone").await.unwrap().is_none());
    assert!(
        cms.get_opt("kept").await.unwrap().is_some(),
        "orphaned by the override"
    );
}

/// Eno `--min-reconcile-interval` (`internal/controllers/reconciliation`: an interval below
/// it is raised to it): a 1 ms `reconcile-interval` is checked at the minimum's pace, not in a
/// hot loop.
#[tokio::test]
async fn min_reconcile_interval_clamps_a_tiny_reconcile_interval() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let ticker = harness::config_map(
        "ticker",
        json!({"eno.azure.io/reconcile-interval": "1ms", "enoki.dev/drift": "interval"}),
        json!({"v": "1"}),
    );
    input(&env, "items", json!({}), &json!([ticker]), json!({})).await;
    harness::apply_composition(&env, "ticking", &synth, "items", json!({})).await;
    let enoki = Enoki::start_with(&env.namespace, &["--min-reconcile-interval", "2s"]);
    eventually("Ready", WAIT, || async {
        harness::composition_ready(&env, "ticking")
            .await
            .then_some(())
    })
    .await;
    // Passes over the Composition, from enoki's own /metrics (an in-sync pass makes no
    // request, so the audit log cannot see them).
    let passes = || {
        enoki
            .metric("enoki_reconcile_duration_seconds_count")
            .unwrap_or(0.0)
    };
    let before = passes();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let during = passes() - before;
    assert!(
        (2.0..=8.0).contains(&during),
        "{during} passes in 8 s: the 2 s minimum gives about 4 (a 1 ms interval would spin)"
    );
}
