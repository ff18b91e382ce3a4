//! Eno's synthesizer output contract against the real control plane: the failure output,
//! the results of a failed synthesis, lenient override items, and which optional-input
//! changes re-synthesize. Each test names the Eno document or code it restates (Eno's
//! repository: github.com/Azure/eno; read, not copied).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crds::Composition;
use harness::{Enoki, TestEnv, echo_module, eventually, install_crds, install_synthesizer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

async fn setup() -> (TestEnv, String) {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    (env, synth)
}

async fn current_uuid(comps: &Api<Composition>, name: &str) -> Option<String> {
    Some(comps.get(name).await.ok()?.status?.current_synthesis?.uuid)
}

/// Eno `docs/synthesis.md` ("Error Handling": a ResourceList with only `results`; "the first
/// error will appear in the composition status"), `internal/execution/executor.go` (every
/// result kept on the in-flight synthesis) and `internal/controllers/composition/controller.go`
/// (`simplified.error` is the first error result's message): the message reaches
/// `status.simplified.error` verbatim, every result is kept, and what was applied stays.
#[tokio::test]
async fn an_error_result_reaches_the_simplified_error_verbatim_and_results_are_kept() {
    let (env, synth) = setup().await;
    let _enoki = Enoki::start(&env.namespace);
    let cm = harness::config_map("kept", json!({}), json!({"v": "1"}));
    harness::set_echo_items(&env, "items", &json!([cm])).await;
    harness::apply_composition(&env, "echo", &synth, "items", json!({})).await;
    harness::wait_ready(&env, "echo").await;
    let comps: Api<Composition> = env.api();
    let uuid = current_uuid(&comps, "echo").await;
    let first = "Invalid configuration: replicas must be a positive integer";
    let raw = json!({"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList",
        "results": [{"severity": "warning", "message": "w", "tags": {"team": "a"}},
                    {"severity": "error", "message": first},
                    {"severity": "error", "message": "second"}]});
    let input = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "items"},
        "data": {"raw": raw.to_string()}});
    env.api::<ConfigMap>()
        .patch(
            "items",
            &PatchParams::apply("test-raw").force(),
            &Patch::Apply(&input),
        )
        .await
        .unwrap();
    let st = eventually("the first error as simplified.error", WAIT, || async {
        let st = comps.get("echo").await.unwrap().status?;
        (st.simplified.as_ref()?.error.as_deref() == Some(first)).then_some(st)
    })
    .await;
    let results: Vec<(String, String)> = st
        .in_flight_synthesis
        .as_ref()
        .unwrap()
        .results
        .iter()
        .map(|r| (r.severity.to_string(), r.message.clone()))
        .collect();
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[1], ("error".to_string(), first.to_string()));
    let tags = &st.in_flight_synthesis.as_ref().unwrap().results[0].tags;
    assert_eq!(tags.get("team").map(String::as_str), Some("a"));
    let synthesized = harness::composition_condition(&env, "echo", "Synthesized")
        .await
        .unwrap();
    assert_eq!(
        (synthesized.0.as_str(), synthesized.1.as_str()),
        ("False", "ErrorResult")
    );
    assert!(
        env.api::<ConfigMap>()
            .get_opt("kept")
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        current_uuid(&comps, "echo").await,
        uuid,
        "the current synthesis stays"
    );
}

/// Eno `internal/resource/mutation/mutation.go` (override items decoded by Go's
/// encoding/json): an item without a value removes the field, an empty condition always
/// applies, unknown fields are ignored (enoki names them in a warning result).
#[tokio::test]
async fn override_items_are_as_lenient_as_in_eno() {
    let (env, synth) = setup().await;
    let _enoki = Enoki::start(&env.namespace);
    let plain = harness::config_map("ov", json!({}), json!({"a": "1", "keep": "k"}));
    harness::set_echo_items(&env, "items", &json!([plain])).await;
    harness::apply_composition(&env, "echo", &synth, "items", json!({})).await;
    harness::wait_ready(&env, "echo").await;
    let overrides = json!([{"path": "self.data.a"},
        {"path": "self.data.b", "value": "x", "condition": ""},
        {"path": "self.data.c", "value": "y", "note": "n"}]);
    let with = harness::config_map(
        "ov",
        json!({"eno.azure.io/overrides": overrides.to_string()}),
        json!({"a": "1", "keep": "k"}),
    );
    harness::set_echo_items(&env, "items", &json!([with])).await;
    let want = json!({"keep": "k", "b": "x", "c": "y"});
    eventually("the overrides applied", WAIT, || async {
        let data = env.api::<ConfigMap>().get("ov").await.unwrap().data?;
        (serde_json::to_value(&data).unwrap() == want).then_some(())
    })
    .await;
    let comps: Api<Composition> = env.api();
    let results = comps
        .get("echo")
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
            .any(|r| r.severity == "warning" && r.message.contains("\"note\"")),
        "the unknown field is named in a warning: {results:?}"
    );
}

/// Eno `internal/controllers/scheduling/op.go` (`inputChangeCount`): an optional input that
/// appears does not re-synthesize unless it says `ignore-side-effects: "false"`; one that goes
/// away never does; one that comes back with a newer revision does.
#[tokio::test]
async fn an_optional_input_appearing_or_going_resynthesizes_only_as_in_eno() {
    let (env, synth) = setup().await;
    let extra = json!({"key": "extra", "optional": true,
        "resource": {"group": "", "version": "v1", "kind": "ConfigMap", "name": "extra"}});
    let refs = json!({"spec": {"refs": [
        {"key": "config", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}, extra]}});
    Api::<crds::Synthesizer>::all(env.client.clone())
        .patch(&synth, &PatchParams::default(), &Patch::Merge(&refs))
        .await
        .unwrap();
    harness::set_echo_items(
        &env,
        "items",
        &json!([harness::config_map("x", json!({}), json!({}))]),
    )
    .await;
    harness::apply_composition(&env, "echo", &synth, "items", json!({})).await;
    let enoki = Enoki::start(&env.namespace);
    harness::wait_ready(&env, "echo").await;
    let comps: Api<Composition> = env.api();
    let read = |c: &Composition| -> Vec<String> {
        let s = c.status.as_ref().and_then(|s| s.current_synthesis.as_ref());
        s.map(|s| s.input_revisions.iter().map(|r| r.key.clone()).collect())
            .unwrap_or_default()
    };
    assert!(!read(&comps.get("echo").await.unwrap()).contains(&"extra".to_string()));
    let cms: Api<ConfigMap> = env.api();
    let mk = |annotations: serde_json::Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "extra", "annotations": annotations}, "data": {"k": "v"}})
    };
    // Appears: no new synthesis.
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(mk(json!({}))).unwrap(),
    )
    .await
    .unwrap();
    enoki.wait_pass(&env, "echo").await;
    assert!(!read(&comps.get("echo").await.unwrap()).contains(&"extra".to_string()));
    // Says it has side effects: a new synthesis reads it.
    let insist =
        json!({"metadata": {"annotations": {"eno.azure.io/ignore-side-effects": "false"}}});
    cms.patch("extra", &PatchParams::default(), &Patch::Merge(&insist))
        .await
        .unwrap();
    eventually("a synthesis that read extra", WAIT, || async {
        read(&comps.get("echo").await.unwrap())
            .contains(&"extra".to_string())
            .then_some(())
    })
    .await;
    // Goes away: no new synthesis (the current one still records what it read).
    cms.delete("extra", &DeleteParams::default()).await.unwrap();
    enoki.wait_pass(&env, "echo").await;
    assert!(read(&comps.get("echo").await.unwrap()).contains(&"extra".to_string()));
}

/// Eno `internal/resource/mutation` (`pathManagedByEno` reads the `eno` field manager) and
/// `docs/overrides.md`: after a move from Eno, a field Eno applied still counts as managed, so
/// the usual "set to null unless managed" override leaves enoki's value in place.
#[tokio::test]
async fn path_managed_by_eno_counts_what_eno_applied() {
    let (env, synth) = setup().await;
    let before = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "moved"},
        "data": {"x": "old"}});
    env.api::<ConfigMap>()
        .patch("moved", &PatchParams::apply("eno"), &Patch::Apply(&before))
        .await
        .unwrap();
    let overrides =
        json!([{"path": "self.data.x", "value": null, "condition": "!pathManagedByEno"}]);
    let cm = harness::config_map(
        "moved",
        json!({"eno.azure.io/overrides": overrides.to_string()}),
        json!({"x": "new"}),
    );
    harness::set_echo_items(&env, "items", &json!([cm])).await;
    harness::apply_composition(&env, "echo", &synth, "items", json!({})).await;
    let _enoki = Enoki::start(&env.namespace);
    harness::wait_ready(&env, "echo").await;
    eventually("enoki's value applied over Eno's field", WAIT, || async {
        let data = env.api::<ConfigMap>().get("moved").await.unwrap().data?;
        (data.get("x").map(String::as_str) == Some("new")).then_some(())
    })
    .await;
}

/// Eno's `summarizeError` (`internal/controllers/reconciliation/controller.go`) and its slice
/// controller (`internal/controllers/resourceslice/slice.go`: the greatest resource error):
/// a server-side apply refused for its schema shows in `simplified.error` as the tail after
/// "failed to create typed patch object" (no resource name, no reason), while the Composition
/// is `Reconciling`; enoki's `Reconciled` condition names the resource in full.
#[tokio::test]
async fn a_refused_write_is_summarized_in_the_simplified_error_as_eno_summarizes_it() {
    let (env, synth) = setup().await;
    let _enoki = Enoki::start(&env.namespace);
    let bad = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "bad"}, "data": {"x": 1}});
    harness::set_echo_items(&env, "items", &json!([bad])).await;
    harness::apply_composition(&env, "echo", &synth, "items", json!({})).await;
    let comps: Api<Composition> = env.api();
    let st = eventually("the write's error summarized", WAIT, || async {
        let st = comps.get("echo").await.unwrap().status?;
        st.simplified.as_ref()?.error.as_ref()?;
        Some(st)
    })
    .await;
    let simplified = st.simplified.unwrap();
    assert_eq!(simplified.status, "Reconciling");
    let error = simplified.error.unwrap();
    // e.g. `(ns/bad; /v1, Kind=ConfigMap): .data.x: expected string, got …`
    assert!(
        error.starts_with('(') && error.contains("Kind=ConfigMap)") && error.contains(".data.x"),
        "{error}"
    );
    let reconciled = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Reconciled")
        .unwrap();
    assert!(
        reconciled.status == "False"
            && reconciled.message.contains("ConfigMap")
            && reconciled.message.contains("bad"),
        "{reconciled:?}"
    );
}

/// Eno's `reconcileResource` evaluates readiness before it looks at `disable-reconciliation`
/// (`internal/controllers/reconciliation/controller.go`), and its tree releases the next
/// readiness group on that readiness: a hands-off object with an unmet check holds the next
/// group (and the Composition's Ready) back, however many passes go by, until the object
/// itself meets it.
#[tokio::test]
async fn a_hands_off_resource_with_an_unmet_check_holds_the_next_group_back() {
    let (env, synth) = setup().await;
    let cms: Api<ConfigMap> = env.api();
    let handsoff = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "handsoff"}, "data": {"ok": "no"}});
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(handsoff).unwrap(),
    )
    .await
    .unwrap();
    let items = json!([
        harness::config_map(
            "handsoff",
            json!({"eno.azure.io/disable-reconciliation": "true",
            "eno.azure.io/readiness": "self.data.ok == 'yes'"}),
            json!({"ok": "synthesized"})
        ),
        harness::config_map(
            "after",
            json!({"eno.azure.io/readiness-group": "1"}),
            json!({})
        ),
    ]);
    harness::set_echo_items(&env, "items", &items).await;
    harness::apply_composition(&env, "echo", &synth, "items", json!({})).await;
    let enoki = Enoki::start(&env.namespace);
    for _ in 0..3 {
        enoki.wait_pass(&env, "echo").await;
    }
    assert!(
        cms.get_opt("after").await.unwrap().is_none(),
        "the next group went ahead: {}",
        enoki.logs()
    );
    assert!(!harness::composition_ready(&env, "echo").await);
    let held = cms.get("handsoff").await.unwrap();
    assert_eq!(held.data.unwrap()["ok"], "no", "hands off: never written");
    let ok = json!({"data": {"ok": "yes"}});
    cms.patch("handsoff", &PatchParams::default(), &Patch::Merge(&ok))
        .await
        .unwrap();
    harness::wait_ready(&env, "echo").await;
    assert!(cms.get_opt("after").await.unwrap().is_some());
}
