//! Eno's reconciliation semantics, end to end: the `echo` test synthesizer emits exactly the
//! items a test writes into a ConfigMap, and `enoki run` carries them out against the real
//! control plane. Cases run with both annotation prefixes where the prefix matters.
#![allow(clippy::unwrap_used, clippy::needless_pass_by_value)] // test helpers outside #[test] fns

use std::time::Duration;

use crds::Composition;
use harness::{Enoki, TestEnv, echo_module, eventually, install_crds, install_synthesizer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// Namespace, synthesizer, the items ConfigMap and a Composition `echo` bound to it.
async fn setup(items: &Value, comp_annotations: Value) -> TestEnv {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    set_items(&env, items).await;
    let comp = json!({
        "apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": "echo", "annotations": comp_annotations},
        "spec": {"synthesizer": {"name": synth}, "bindings": [{"key": "config", "resource": {"name": "items"}}]},
    });
    let comps: Api<Composition> = env.api();
    comps
        .patch(
            "echo",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&comp),
        )
        .await
        .unwrap();
    env
}

async fn set_items(env: &TestEnv, items: &Value) {
    harness::set_echo_items(env, "items", items).await;
}

fn cm(name: &str, annotations: Value, data: Value) -> Value {
    harness::config_map(name, annotations, data)
}

async fn ready(env: &TestEnv) -> bool {
    let comps: Api<Composition> = env.api();
    comps.get("echo").await.unwrap().status.is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

/// The Widgets of the e2e group `group`.
fn widgets_api(env: &TestEnv, group: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &ApiResource {
            group: group.to_string(),
            version: "v1".into(),
            api_version: format!("{group}/v1"),
            kind: "Widget".into(),
            plural: "widgets".into(),
        },
    )
}

/// The ready times recorded in the first slice of Composition `echo`'s current synthesis.
async fn ready_times(env: &TestEnv) -> Vec<String> {
    let comps: Api<Composition> = env.api();
    let st = comps.get("echo").await.unwrap().status.unwrap();
    let slices: Api<crds::ResourceSlice> = env.api();
    let slice = slices
        .get(&st.current_synthesis.unwrap().resource_slices[0].name)
        .await
        .unwrap();
    slice
        .status
        .unwrap()
        .resources
        .into_iter()
        .filter_map(|r| r.ready)
        .map(|t| t.0.to_string())
        .collect()
}

async fn readiness_groups_wait_for_readiness(prefix: &str) {
    let group = format!("{}.e2e.enoki.dev", TestEnv::new().await.namespace);
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    });
    let widget = json!({
        "apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": {"name": "w", "annotations": {
            format!("{prefix}/readiness-group"): "0",
            format!("{prefix}/readiness"): "has(self.status) && self.status.ok == true",
            format!("{prefix}/readiness-conditions"): "self.status.conditions.filter(c, c.type == 'Ready' && c.status == 'True')",
        }},
        "spec": {"size": 1},
    });
    let after = cm(
        "after",
        json!({format!("{prefix}/readiness-group"): "1"}),
        json!({"x": "y"}),
    );
    let first = cm(
        "first",
        json!({format!("{prefix}/readiness-group"): "-5"}),
        json!({"x": "y"}),
    );
    let env = setup(
        &json!([after, widget.clone(), crd.clone(), first.clone()]),
        json!({}),
    )
    .await;
    let enoki = Enoki::start(&env.namespace);

    let widgets = widgets_api(&env, &group);
    eventually(
        "the Widget (after its CRD, after group -5)",
        WAIT,
        || async { widgets.get_opt("w").await.ok().flatten().map(|_| ()) },
    )
    .await;
    assert!(
        harness::config_map_exists(&env, "first").await,
        "negative groups go first"
    );
    // Group 0 is not ready: group 1 stays absent.
    enoki.wait_pass(&env, "echo").await;
    assert!(
        !harness::config_map_exists(&env, "after").await,
        "group 1 applied before group 0 was ready:\n{}",
        enoki.logs()
    );
    let comps: Api<Composition> = env.api();
    let msg = comps
        .get("echo")
        .await
        .unwrap()
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .message;
    assert!(
        msg.contains("default") && msg.contains("conditions"),
        "unsatisfied check names in status: {msg}"
    );

    // One check true is not enough (ANDed) ...
    let status = json!({"status": {"ok": true, "conditions": []}});
    widgets
        .patch_status("w", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    enoki.wait_pass(&env, "echo").await;
    assert!(
        !harness::config_map_exists(&env, "after").await,
        "checks are ANDed"
    );
    // ... both make it ready; the condition's lastTransitionTime becomes the ready time.
    let status = json!({"status": {"ok": true, "conditions": [{"type": "Ready", "status": "True", "reason": "Done", "lastTransitionTime": "2026-01-02T03:04:05Z"}]}});
    widgets
        .patch_status("w", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    eventually("group 1 to appear", WAIT, || async {
        harness::config_map_exists(&env, "after")
            .await
            .then_some(())
    })
    .await;
    eventually("Ready", WAIT, || async { ready(&env).await.then_some(()) }).await;
    let times = ready_times(&env).await;
    assert!(
        times.iter().any(|t| t.starts_with("2026-01-02T03:04:05")),
        "{times:?}"
    );
    // Readiness latches: making the widget not ready does not take group 1 back.
    widgets
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"ok": false}})),
        )
        .await
        .unwrap();
    enoki.wait_pass(&env, "echo").await;
    assert!(ready(&env).await, "readiness latches within a synthesis");
    dropped_group_waits_for_the_group_below(&env, &enoki, &widgets, &json!([widget, crd, first]))
        .await;
    harness::invariants::assert_converged(&env.client, &env.namespace, "echo").await;
}

/// A new synthesis (`items`) drops `after` (group 1): its tombstone keeps the group, so it is
/// deleted only once group 0 — the Widget, not ready now — is ready in that synthesis (Eno's
/// tree).
async fn dropped_group_waits_for_the_group_below(
    env: &TestEnv,
    enoki: &Enoki,
    widgets: &Api<DynamicObject>,
    items: &Value,
) {
    let comps: Api<Composition> = env.api();
    let uuid = |c: Composition| c.status?.current_synthesis.map(|s| s.uuid);
    let before = uuid(comps.get("echo").await.unwrap());
    set_items(env, items).await;
    eventually("the synthesis without group 1", WAIT, || async {
        (uuid(comps.get("echo").await.unwrap()) != before).then_some(())
    })
    .await;
    enoki.wait_pass(env, "echo").await;
    assert!(
        harness::config_map_exists(env, "after").await,
        "group 1 was deleted while group 0 was not ready:\n{}",
        enoki.logs()
    );
    let status = json!({"status": {"ok": true}});
    widgets
        .patch_status("w", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    eventually("group 1 deleted once group 0 is ready", WAIT, || async {
        (!harness::config_map_exists(env, "after").await).then_some(())
    })
    .await;
    eventually("Ready", WAIT, || async { ready(env).await.then_some(()) }).await;
}

#[tokio::test]
async fn readiness_groups_crd_order_and_cel_readiness_enoki_keys() {
    readiness_groups_wait_for_readiness("enoki.dev").await;
}

#[tokio::test]
async fn readiness_groups_crd_order_and_cel_readiness_eno_keys() {
    readiness_groups_wait_for_readiness("eno.azure.io").await;
}

/// Eno's deletion order (`internal/resource/tree.go`): a group waits for the lower groups to be
/// released — a background delete once it is terminating, a foreground one once it is gone.
async fn deletion_follows_deletion_groups_case(p: &str) {
    let hold = json!(["test.enoki.dev/hold"]);
    let mut a = cm("a", json!({format!("{p}/deletion-group"): "0"}), json!({}));
    let mut b = cm(
        "b",
        json!({format!("{p}/deletion-group"): "1", format!("{p}/deletion-strategy"): "foreground"}),
        json!({}),
    );
    let mut c = cm("c", json!({format!("{p}/deletion-group"): "2"}), json!({}));
    for x in [&mut a, &mut b, &mut c] {
        x["metadata"]["finalizers"] = hold.clone();
    }
    let env = setup(&json!([a, b, c]), json!({})).await;
    let enoki = Enoki::start(&env.namespace);
    eventually("Ready", WAIT, || async { ready(&env).await.then_some(()) }).await;
    let comps: Api<Composition> = env.api();
    comps
        .delete("echo", &DeleteParams::default())
        .await
        .unwrap();
    let cms: Api<ConfigMap> = env.api();
    let deleting = |name: &'static str| {
        let cms = cms.clone();
        async move {
            cms.get_opt(name)
                .await
                .unwrap()
                .is_some_and(|c| c.metadata.deletion_timestamp.is_some())
        }
    };
    eventually("group 0 to be deleted first", WAIT, || async {
        deleting("a").await.then_some(())
    })
    .await;
    // Background: group 0 terminating releases group 1 (it is still there, held).
    eventually("group 1 once group 0 is terminating", WAIT, || async {
        deleting("b").await.then_some(())
    })
    .await;
    assert!(
        deleting("a").await,
        "group 0 still exists (held by its finalizer)"
    );
    // Foreground: group 2 waits until group 1 is gone.
    enoki.wait_pass(&env, "echo").await;
    assert!(
        !deleting("c").await,
        "group 2 was deleted while the foreground group 1 still existed"
    );
    let release = json!({"metadata": {"finalizers": null}});
    cms.patch("b", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    eventually("group 2 once group 1 is gone", WAIT, || async {
        deleting("c").await.then_some(())
    })
    .await;
    for name in ["a", "c"] {
        cms.patch(name, &PatchParams::default(), &Patch::Merge(&release))
            .await
            .unwrap();
    }
    eventually("the composition to be gone", WAIT, || async {
        comps.get_opt("echo").await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn deletion_follows_deletion_groups_enoki_keys() {
    deletion_follows_deletion_groups_case("enoki.dev").await;
}

#[tokio::test]
async fn deletion_follows_deletion_groups_eno_keys() {
    deletion_follows_deletion_groups_case("eno.azure.io").await;
}

async fn orphan_keeps_resources_on_deletion_but_still_prunes_dropped_ones_case(p: &str) {
    let items = json!([
        cm("kept", json!({}), json!({})),
        cm("dropped", json!({}), json!({}))
    ]);
    let env = setup(&items, json!({format!("{p}/deletion-strategy"): "orphan"})).await;
    let _enoki = Enoki::start(&env.namespace);
    eventually("Ready", WAIT, || async { ready(&env).await.then_some(()) }).await;
    set_items(&env, &json!([cm("kept", json!({}), json!({}))])).await;
    eventually("the dropped resource to be pruned", WAIT, || async {
        (!harness::config_map_exists(&env, "dropped").await).then_some(())
    })
    .await;
    let comps: Api<Composition> = env.api();
    harness::delete_and_wait(&comps, "echo").await;
    assert!(
        harness::config_map_exists(&env, "kept").await,
        "orphaned resources stay"
    );
}

#[tokio::test]
async fn orphan_keeps_resources_on_deletion_but_still_prunes_dropped_ones_enoki_keys() {
    orphan_keeps_resources_on_deletion_but_still_prunes_dropped_ones_case("enoki.dev").await;
}

#[tokio::test]
async fn orphan_keeps_resources_on_deletion_but_still_prunes_dropped_ones_eno_keys() {
    orphan_keeps_resources_on_deletion_but_still_prunes_dropped_ones_case("eno.azure.io").await;
}

async fn apply_modes_case(p: &str) {
    let items = json!([
        cm(
            "create-only",
            json!({format!("{p}/disable-updates"): "true"}),
            json!({"v": "1"})
        ),
        cm(
            "untouched",
            json!({format!("{p}/disable-reconciliation"): "true"}),
            json!({"v": "1"})
        ),
        cm(
            "replaced",
            json!({format!("{p}/replace"): "true"}),
            json!({"v": "1"})
        ),
    ]);
    let env = setup(&items, json!({})).await;
    let _enoki = Enoki::start_with(&env.namespace, &["--resync", "1s"]);
    eventually("Ready", WAIT, || async { ready(&env).await.then_some(()) }).await;
    assert!(harness::config_map_exists(&env, "create-only").await);
    assert!(
        !harness::config_map_exists(&env, "untouched").await,
        "disable-reconciliation never creates"
    );

    // A foreign writer adds a key to the replaced object: the PUT on the next pass removes it.
    let cms: Api<ConfigMap> = env.api();
    cms.patch(
        "replaced",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"foreign": "x"}})),
    )
    .await
    .unwrap();
    eventually("replace to remove the foreign field", WAIT, || async {
        let data = cms.get("replaced").await.unwrap().data.unwrap_or_default();
        (!data.contains_key("foreign")).then_some(())
    })
    .await;

    // A new desired value is not applied to the create-only object.
    let items = json!([
        cm(
            "create-only",
            json!({format!("{p}/disable-updates"): "true"}),
            json!({"v": "2"})
        ),
        cm(
            "untouched",
            json!({format!("{p}/disable-reconciliation"): "true"}),
            json!({"v": "1"})
        ),
        cm(
            "replaced",
            json!({format!("{p}/replace"): "true"}),
            json!({"v": "2"})
        ),
    ]);
    set_items(&env, &items).await;
    eventually("replaced to get v=2", WAIT, || async {
        (cms.get("replaced")
            .await
            .unwrap()
            .data
            .unwrap_or_default()
            .get("v")
            .map(String::as_str)
            == Some("2"))
        .then_some(())
    })
    .await;
    let v = cms
        .get("create-only")
        .await
        .unwrap()
        .data
        .unwrap_or_default();
    assert_eq!(
        v.get("v").map(String::as_str),
        Some("1"),
        "disable-updates never updates"
    );
    let labels = cms.get("create-only").await.unwrap().labels().clone();
    assert!(labels.contains_key("enoki.dev/managed-by"));
}

#[tokio::test]
async fn apply_modes_disable_updates_disable_reconciliation_and_replace_enoki_keys() {
    apply_modes_case("enoki.dev").await;
}

#[tokio::test]
async fn apply_modes_disable_updates_disable_reconciliation_and_replace_eno_keys() {
    apply_modes_case("eno.azure.io").await;
}

async fn drift_watch_and_off_case(p: &str) {
    let items = json!([
        cm("watched", json!({}), json!({"v": "1"})),
        cm(
            "hands-off",
            json!({format!("{p}/drift"): "off"}),
            json!({"v": "1"})
        ),
    ]);
    let env = setup(&items, json!({})).await;
    // Once everything is ready the next periodic pass is the 5 min resync: nothing but the
    // watches can explain a quick revert.
    let enoki = Enoki::start_with(&env.namespace, &["--resync", "1s"]);
    eventually("Ready", WAIT, || async { ready(&env).await.then_some(()) }).await;
    enoki.wait_pass(&env, "echo").await;
    let checks = enoki.metric("enoki_resource_checks_total").unwrap_or(0.0);
    let since = harness::now_rfc3339();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        enoki.metric("enoki_resource_checks_total").unwrap_or(0.0) >= checks + 4.0,
        "passes over both resources ran meanwhile"
    );
    harness::audit_barrier(&env).await;
    let writes: Vec<_> = harness::audited_requests(&env.namespace, &since)
        .into_iter()
        .filter(|r| r.by_enoki() && r.is_write() && r.resource == "configmaps")
        .collect();
    assert!(
        writes.is_empty(),
        "enoki's own writes must not trigger re-applies: {writes:?}"
    );

    let cms: Api<ConfigMap> = env.api();
    let intruder = PatchParams {
        field_manager: Some("intruder".into()),
        ..PatchParams::default()
    };
    let hack = json!({"data": {"v": "hacked"}});
    cms.patch("watched", &intruder, &Patch::Merge(&hack))
        .await
        .unwrap();
    cms.patch("hands-off", &intruder, &Patch::Merge(&hack))
        .await
        .unwrap();
    let v = |name: &'static str| {
        let cms = cms.clone();
        async move {
            cms.get_opt(name)
                .await
                .unwrap()
                .and_then(|c| c.data)
                .and_then(|d| d.get("v").cloned())
        }
    };
    let reverted = tokio::time::timeout(Duration::from_secs(15), async {
        while v("watched").await.as_deref() != Some("1") {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        reverted.is_ok(),
        "a foreign update was not reverted quickly:\n{}",
        enoki.logs()
    );
    cms.delete("watched", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "a foreign delete to be undone",
        Duration::from_secs(15),
        || async { (v("watched").await.as_deref() == Some("1")).then_some(()) },
    )
    .await;
    enoki.wait_pass(&env, "echo").await;
    assert_eq!(
        v("hands-off").await.as_deref(),
        Some("hacked"),
        "drift: off leaves foreign writes alone"
    );
}

#[tokio::test]
async fn drift_is_reverted_at_once_through_watches_and_drift_off_is_left_alone_enoki_keys() {
    drift_watch_and_off_case("enoki.dev").await;
}

#[tokio::test]
async fn drift_is_reverted_at_once_through_watches_and_drift_off_is_left_alone_eno_keys() {
    drift_watch_and_off_case("eno.azure.io").await;
}

#[tokio::test]
async fn client_side_mode_removes_a_field_the_synthesizer_stopped_emitting() {
    let env = setup(
        &json!([cm(
            "shrinking",
            json!({}),
            json!({"keep": "1", "drop": "2"})
        )]),
        json!({}),
    )
    .await;
    let _enoki = Enoki::start_with(&env.namespace, &["--disable-ssa"]);
    eventually("Ready", WAIT, || async { ready(&env).await.then_some(()) }).await;
    set_items(
        &env,
        &json!([cm("shrinking", json!({}), json!({"keep": "1"}))]),
    )
    .await;
    let cms: Api<ConfigMap> = env.api();
    eventually(
        "the dropped key to be removed by the merge patch",
        WAIT,
        || async {
            let data = cms.get("shrinking").await.unwrap().data.unwrap_or_default();
            (!data.contains_key("drop") && data.get("keep").map(String::as_str) == Some("1"))
                .then_some(())
        },
    )
    .await;
}

async fn fail_open_case(p: &str) {
    let broken = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "broken", "annotations": {format!("{p}/fail-open"): "true"}},
                        "spec": {"type": "ClusterIP", "ports": []}});
    let env = setup(
        &json!([broken, cm("fine", json!({}), json!({}))]),
        json!({}),
    )
    .await;
    let _enoki = Enoki::start(&env.namespace);
    let comps: Api<Composition> = env.api();
    eventually("Reconciled despite the invalid Service", WAIT, || async {
        let st = comps.get("echo").await.unwrap().status?;
        let slices: Api<crds::ResourceSlice> = env.api();
        let slice = slices
            .get(&st.current_synthesis?.resource_slices.first()?.name)
            .await
            .ok()?;
        let states = slice.status?.resources;
        let broken = states.iter().find(|s| s.error.is_some())?;
        broken.reconciled.then_some(())
    })
    .await;
    assert!(harness::config_map_exists(&env, "fine").await);
    // Eno's fail-open: reconciled, and ready, since it has no readiness checks
    // (`edgecase_test.go` `TestFailOpen_NoReadinessChecks`).
    eventually("Reconciled=True, Ready=True", WAIT, || async {
        let reconciled = harness::composition_condition(&env, "echo", "Reconciled").await?;
        let ready = harness::composition_condition(&env, "echo", "Ready").await?;
        (reconciled.0 == "True" && ready.0 == "True").then_some(())
    })
    .await;
}

#[tokio::test]
async fn fail_open_reports_an_unappliable_resource_as_reconciled_enoki_keys() {
    fail_open_case("enoki.dev").await;
}

#[tokio::test]
async fn fail_open_reports_an_unappliable_resource_as_reconciled_eno_keys() {
    fail_open_case("eno.azure.io").await;
}

async fn overrides_case(p: &str) {
    let overrides = json!([
        // Eno's idiom: once another manager owns the field, stop applying it (null removes it
        // from enoki's snapshot, so server-side apply leaves the other owner's value alone).
        {"path": "self.data.replicas", "value": null, "condition": "has(self.data) && has(self.data.replicas) && !pathManagedByEnoki"}
    ]);
    let item = cm(
        "scaled",
        json!({format!("{p}/overrides"): overrides.to_string()}),
        json!({"replicas": "1", "image": "app:1"}),
    );
    let env = setup(&json!([item]), json!({})).await;
    let enoki = Enoki::start(&env.namespace);
    eventually("Ready", WAIT, || async { ready(&env).await.then_some(()) }).await;
    let cms: Api<ConfigMap> = env.api();
    // An autoscaler takes ownership of data.replicas (server-side apply, force) and changes
    // data.image too.
    let hpa = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "scaled"}, "data": {"replicas": "5"}});
    cms.patch(
        "scaled",
        &PatchParams::apply("autoscaler").force(),
        &Patch::Apply(&hpa),
    )
    .await
    .unwrap();
    let intruder = PatchParams {
        field_manager: Some("intruder".into()),
        ..PatchParams::default()
    };
    cms.patch(
        "scaled",
        &intruder,
        &Patch::Merge(json!({"data": {"image": "evil:1"}})),
    )
    .await
    .unwrap();
    eventually("enoki's field (image) enforced", WAIT, || async {
        let d = cms.get("scaled").await.unwrap().data.unwrap_or_default();
        (d.get("image").map(String::as_str) == Some("app:1")).then_some(())
    })
    .await;
    enoki.wait_pass(&env, "echo").await;
    let d = cms.get("scaled").await.unwrap().data.unwrap_or_default();
    assert_eq!(
        d.get("replicas").map(String::as_str),
        Some("5"),
        "the autoscaler's field is left alone"
    );
}

#[tokio::test]
async fn overrides_leave_fields_another_manager_owns_and_enforce_enokis_enoki_keys() {
    overrides_case("enoki.dev").await;
}

#[tokio::test]
async fn overrides_leave_fields_another_manager_owns_and_enforce_enokis_eno_keys() {
    overrides_case("eno.azure.io").await;
}

/// Write requests (create/update/patch/delete, dry runs included) the audit log recorded in
/// `namespace` after `since` (RFC 3339), as (verb, resource, name).
fn writes_since(namespace: &str, since: &str) -> Vec<(String, String, String)> {
    harness::audited_requests(namespace, since)
        .into_iter()
        .filter(|r| matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete"))
        .map(|r| (r.verb, r.resource, r.name))
        .collect()
}

#[tokio::test]
async fn a_resync_of_many_in_sync_resources_writes_nothing_and_a_change_writes_only_what_changed() {
    let items: Vec<Value> = (0..120)
        .map(|i| cm(&format!("r{i}"), json!({}), json!({"i": i.to_string()})))
        .collect();
    let env = setup(&Value::Array(items.clone()), json!({})).await;
    let mut enoki = Enoki::start_with(&env.namespace, &["--resync", "2s"]);
    eventually("Ready", WAIT, || async { ready(&env).await.then_some(()) }).await;
    enoki.wait_pass(&env, "echo").await;

    // Periodic resyncs (every 2 s) of 120 in-sync resources: no GET, no write at all.
    let checks = |e: &Enoki| e.metric("enoki_resource_checks_total").unwrap_or(0.0);
    let before = checks(&enoki);
    let since = harness::now_rfc3339();
    tokio::time::sleep(Duration::from_secs(7)).await;
    let passes = (checks(&enoki) - before) / 120.0;
    assert!(passes >= 2.0, "expected at least two resyncs, saw {passes}");
    harness::audit_barrier(&env).await;
    let reads_or_writes: Vec<_> = harness::audited_requests(&env.namespace, &since)
        .into_iter()
        .filter(|r| r.by_enoki() && (r.verb == "get" || r.is_write()))
        .collect();
    assert!(
        reads_or_writes.is_empty(),
        "a resync of in-sync resources made requests: {reads_or_writes:?}"
    );

    // A restart is a full resync from fresh caches: zero writes, zero GETs of managed objects
    // (the module's ConfigMap is read once per process).
    enoki.stop();
    let since = harness::now_rfc3339();
    let restarted = Enoki::start(&env.namespace);
    eventually(
        "the restarted controller to check every resource",
        WAIT,
        || async { (checks(&restarted) >= 120.0).then_some(()) },
    )
    .await;
    // The controller has had its chance (every resource checked); the audit log catches up.
    harness::audit_barrier(&env).await;
    let requests: Vec<_> = harness::audited_requests(&env.namespace, &since)
        .into_iter()
        .filter(|r| {
            r.by_enoki()
                && (r.is_write()
                    || (r.verb == "get"
                        && r.resource == "configmaps"
                        && !r.name.starts_with("module")))
        })
        .collect();
    assert!(
        requests.is_empty(),
        "a resync of in-sync resources wrote or read: {requests:?}"
    );

    // Change one item: exactly that ConfigMap is written (plus enoki's own bookkeeping).
    let mut changed = items;
    changed[7] = cm("r7", json!({}), json!({"i": "seven"}));
    let since = k8s_openapi::jiff::Timestamp::now().to_string();
    set_items(&env, &Value::Array(changed)).await;
    let cms: Api<ConfigMap> = env.api();
    eventually("r7 to change", WAIT, || async {
        (cms.get("r7")
            .await
            .unwrap()
            .data
            .unwrap_or_default()
            .get("i")
            .map(String::as_str)
            == Some("seven"))
        .then_some(())
    })
    .await;
    restarted.wait_pass(&env, "echo").await;
    harness::audit_barrier(&env).await;
    let cm_writes: Vec<_> = writes_since(&env.namespace, &since)
        .into_iter()
        .filter(|(_, resource, name)| resource == "configmaps" && name != "items")
        .collect();
    assert_eq!(
        cm_writes,
        [(
            "patch".to_string(),
            "configmaps".to_string(),
            "r7".to_string()
        )],
        "{cm_writes:?}"
    );
    harness::invariants::wait_converged(&env.client, &env.namespace, "echo", WAIT).await;
}

/// enoki's write requests (its User-Agent) to one object since `since`.
fn enoki_writes_to(namespace: &str, name: &str, since: &str) -> usize {
    harness::audited_requests(namespace, since)
        .iter()
        .filter(|r| r.by_enoki() && r.name == name)
        .filter(|r| matches!(r.verb.as_str(), "patch" | "update" | "create"))
        .count()
}

#[tokio::test]
async fn a_fighting_writer_gets_backoff_and_a_field_conflict_event_not_a_hot_loop() {
    let env = setup(
        &json!([cm("contested", json!({}), json!({"v": "ours"}))]),
        json!({}),
    )
    .await;
    let enoki = Enoki::start(&env.namespace);
    eventually("Ready", WAIT, || async { ready(&env).await.then_some(()) }).await;
    let cms: Api<ConfigMap> = env.api();
    let fighter = PatchParams {
        field_manager: Some("fighter".into()),
        ..PatchParams::default()
    };
    // A minute of another writer changing the object every 300 ms (200 foreign writes).
    let since = k8s_openapi::jiff::Timestamp::now().to_string();
    let fight_started = std::time::Instant::now();
    let mut i = 0u32;
    while fight_started.elapsed() < Duration::from_secs(60) {
        i += 1;
        let theirs = json!({"data": {"v": format!("theirs-{i}")}});
        cms.patch("contested", &fighter, &Patch::Merge(&theirs))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    enoki.wait_pass(&env, "echo").await;
    harness::audit_barrier(&env).await;
    let writes = enoki_writes_to(&env.namespace, "contested", &since);
    // A hot loop would answer every foreign write (~200); the backoff allows three immediate
    // corrections, then 1 s, 2 s, 4 s, … — about nine in a minute.
    assert!(
        (3..=15).contains(&writes),
        "enoki wrote {writes} times during {i} foreign writes:\n{}",
        enoki.logs()
    );
    let conflict = harness::wait_event(&env, "a FieldConflict event", |e| {
        e.reason.as_deref() == Some("FieldConflict")
    })
    .await;
    assert_eq!(conflict.type_.as_deref(), Some("Warning"));
    let note = conflict.note.unwrap_or_default();
    assert!(
        note.contains("contested") && note.contains("fighter"),
        "{note}"
    );
    // Once the other writer stops, the managed value comes back (after the current backoff).
    eventually(
        "the managed value to be restored",
        Duration::from_secs(90),
        || async {
            (cms.get("contested")
                .await
                .unwrap()
                .data
                .unwrap_or_default()
                .get("v")
                .map(String::as_str)
                == Some("ours"))
            .then_some(())
        },
    )
    .await;
}

async fn drift_interval_case(p: &str) {
    let items = json!([
        cm("watched", json!({}), json!({"v": "1"})),
        cm(
            "periodic",
            json!({format!("{p}/drift"): "interval", format!("{p}/reconcile-interval"): "20s"}),
            json!({"v": "1"})
        ),
    ]);
    let env = setup(&items, json!({})).await;
    let enoki = Enoki::start(&env.namespace);
    eventually("Ready", WAIT, || async { ready(&env).await.then_some(()) }).await;
    let cms: Api<ConfigMap> = env.api();
    let intruder = PatchParams {
        field_manager: Some("intruder".into()),
        ..PatchParams::default()
    };
    let v = |name: &'static str| {
        let cms = cms.clone();
        async move {
            cms.get(name)
                .await
                .unwrap()
                .data
                .unwrap_or_default()
                .get("v")
                .cloned()
        }
    };
    let hack = json!({"data": {"v": "hacked"}});
    cms.patch("periodic", &intruder, &Patch::Merge(&hack))
        .await
        .unwrap();
    let hacked_at = std::time::Instant::now();
    // The watched resource's drift triggers a reconcile at once; it reverts only that one.
    cms.patch("watched", &intruder, &Patch::Merge(&hack))
        .await
        .unwrap();
    eventually(
        "the watched resource to be reverted",
        Duration::from_secs(15),
        || async { (v("watched").await.as_deref() == Some("1")).then_some(()) },
    )
    .await;
    assert_eq!(
        v("periodic").await.as_deref(),
        Some("hacked"),
        "drift: interval must not revert at once:\n{}",
        enoki.logs()
    );
    eventually(
        "the interval to revert it",
        Duration::from_secs(40),
        || async { (v("periodic").await.as_deref() == Some("1")).then_some(()) },
    )
    .await;
    assert!(
        hacked_at.elapsed() > Duration::from_secs(1),
        "reverted before the interval could have come round"
    );
}

#[tokio::test]
async fn drift_interval_reapplies_on_the_reconcile_interval_not_at_once_enoki_keys() {
    drift_interval_case("enoki.dev").await;
}

#[tokio::test]
async fn drift_interval_reapplies_on_the_reconcile_interval_not_at_once_eno_keys() {
    drift_interval_case("eno.azure.io").await;
}

async fn foreground_deletion_case(p: &str) {
    let mut held = cm(
        "held",
        json!({format!("{p}/deletion-strategy"): "foreground"}),
        json!({}),
    );
    held["metadata"]["finalizers"] = json!(["test.enoki.dev/hold"]);
    let env = setup(&json!([held, cm("other", json!({}), json!({}))]), json!({})).await;
    let enoki = Enoki::start(&env.namespace);
    eventually("Ready", WAIT, || async { ready(&env).await.then_some(()) }).await;
    // Dropped from the output: deleted, and the composition waits for it to be gone.
    set_items(&env, &json!([cm("other", json!({}), json!({}))])).await;
    let cms: Api<ConfigMap> = env.api();
    let deleting = eventually("the dropped resource to be deleting", WAIT, || async {
        cms.get_opt("held")
            .await
            .unwrap()
            .filter(|c| c.metadata.deletion_timestamp.is_some())
    })
    .await;
    // Eno deletes with the default propagation (no `foregroundDeletion` finalizer: its
    // dependents are not waited for), and waits for the object itself.
    assert_eq!(
        deleting.metadata.finalizers,
        Some(vec!["test.enoki.dev/hold".to_string()]),
        "deleted with the default propagation"
    );
    enoki.wait_pass(&env, "echo").await;
    let comps: Api<Composition> = env.api();
    let reconciled = |c: &Composition| {
        c.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Reconciled" && c.status == "True")
        })
    };
    assert!(
        !reconciled(&comps.get("echo").await.unwrap()),
        "reconciled while a foreground delete was still pending:\n{}",
        enoki.logs()
    );
    let release = json!({"metadata": {"finalizers": null}});
    cms.patch("held", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    eventually("reconciled once the object is gone", WAIT, || async {
        reconciled(&comps.get("echo").await.unwrap()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn foreground_deletion_waits_until_the_object_is_gone_enoki_keys() {
    foreground_deletion_case("enoki.dev").await;
}

#[tokio::test]
async fn foreground_deletion_waits_until_the_object_is_gone_eno_keys() {
    foreground_deletion_case("eno.azure.io").await;
}

#[tokio::test]
async fn a_not_ready_resource_is_rechecked_at_the_readiness_poll_interval() {
    // drift: off — no watch on the object; only the poll can see it become ready.
    let env = setup(
        &json!([cm(
            "gate",
            json!({"enoki.dev/drift": "off", "enoki.dev/readiness": "has(self.data.open) && self.data.open == 'yes'"}),
            json!({"x": "y"})
        )]),
        json!({}),
    )
    .await;
    let enoki = Enoki::start_with(&env.namespace, &["--readiness-poll", "2s"]);
    let cms: Api<ConfigMap> = env.api();
    eventually("the resource", WAIT, || async {
        cms.get_opt("gate").await.unwrap().map(|_| ())
    })
    .await;
    enoki.wait_pass(&env, "echo").await;
    assert!(!ready(&env).await, "ready before its check held");
    let comps: Api<Composition> = env.api();
    let msg = comps
        .get("echo")
        .await
        .unwrap()
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .message;
    assert!(msg.contains("gate"), "{msg}");
    let open = PatchParams {
        field_manager: Some("operator".into()),
        ..PatchParams::default()
    };
    cms.patch(
        "gate",
        &open,
        &Patch::Merge(&json!({"data": {"open": "yes"}})),
    )
    .await
    .unwrap();
    eventually(
        "Ready after the next poll",
        Duration::from_secs(15),
        || async { ready(&env).await.then_some(()) },
    )
    .await;
}
