//! Controller core against the real control plane: slice hygiene (a partial or refused set of
//! ResourceSlices, slices deleted by someone), bounded memory (state of deleted Compositions
//! is dropped), and shutdown on SIGTERM.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crds::{Composition, ResourceSlice};
use harness::{Enoki, TestEnv, echo_module, eventually, install_crds, install_synthesizer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

async fn setup(items: serde_json::Value) -> (TestEnv, String) {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    harness::set_echo_items(&env, "items", &items).await;
    harness::apply_composition(&env, "echo", &synth, "items", json!({})).await;
    (env, synth)
}

async fn status(env: &TestEnv) -> crds::CompositionStatus {
    let comps: Api<Composition> = env.api();
    comps.get("echo").await.unwrap().status.unwrap_or_default()
}

fn condition(st: &crds::CompositionStatus, type_: &str) -> Option<(String, String, String)> {
    st.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn set_pad(env: &TestEnv, bytes: usize) {
    let cms: Api<ConfigMap> = env.api();
    cms.patch(
        "items",
        &PatchParams::apply("test-pad").force(),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "items"}, "data": {"pad": bytes.to_string()}})),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn deleted_resource_slices_of_the_current_synthesis_cause_a_new_synthesis() {
    let cm = harness::config_map("a", json!({}), json!({"v": "1"}));
    let (env, _) = setup(json!([cm])).await;
    let enoki = Enoki::start(&env.namespace);
    eventually("Ready", WAIT, || async {
        harness::composition_ready(&env, "echo").await.then_some(())
    })
    .await;
    let first = status(&env).await.current_synthesis.unwrap();
    let slices: Api<ResourceSlice> = env.api();
    for r in &first.resource_slices {
        slices
            .delete(&r.name, &DeleteParams::default())
            .await
            .unwrap();
    }
    let second = eventually("a new synthesis", WAIT, || async {
        let cur = status(&env).await.current_synthesis?;
        (cur.uuid != first.uuid && harness::composition_ready(&env, "echo").await).then_some(cur)
    })
    .await;
    for r in &second.resource_slices {
        assert!(
            slices.get_opt(&r.name).await.unwrap().is_some(),
            "slice {} exists",
            r.name
        );
    }
    let cms: Api<ConfigMap> = env.api();
    assert!(
        cms.get_opt("a").await.unwrap().is_some(),
        "{}",
        enoki.logs()
    );
    // Eno's `handleMissingSlice`: a Composition that ignores side effects is not synthesized
    // again for a deleted slice, and is not looked at in a hot loop either.
    let comps: Api<Composition> = env.api();
    let ignore = json!({"metadata": {"annotations": {"eno.azure.io/ignore-side-effects": "true"}}});
    comps
        .patch("echo", &PatchParams::default(), &Patch::Merge(&ignore))
        .await
        .unwrap();
    enoki.wait_pass(&env, "echo").await;
    for r in &second.resource_slices {
        slices
            .delete(&r.name, &DeleteParams::default())
            .await
            .unwrap();
    }
    let before = enoki.composition_passes(&env.namespace, "echo");
    enoki.wait_pass(&env, "echo").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let passes = enoki.composition_passes(&env.namespace, "echo") - before;
    assert!(passes < 10.0, "{passes} passes in ~3 s: a hot loop");
    let after = status(&env).await.current_synthesis.unwrap();
    assert_eq!(after.uuid, second.uuid, "{}", enoki.logs());
    assert!(cms.get_opt("a").await.unwrap().is_some(), "nothing deleted");
}

#[tokio::test]
async fn a_manifest_too_large_to_store_is_a_terminal_condition_with_no_slices_left_and_no_hot_loop()
{
    let items = json!([
        harness::config_map("small", json!({}), json!({"v": "1"})),
        harness::config_map("huge", json!({}), json!({"v": "1"})),
    ]);
    let (env, _) = setup(items.clone()).await;
    let enoki = Enoki::start(&env.namespace);
    eventually("Ready", WAIT, || async {
        harness::composition_ready(&env, "echo").await.then_some(())
    })
    .await;
    let good = status(&env).await.current_synthesis.unwrap();

    // The last item becomes 2 MB: more than etcd stores in one object. The first slice (the
    // small item) is written, the second refused.
    let since = harness::now_rfc3339();
    set_pad(&env, 2_000_000).await;
    let message = eventually("SliceWriteFailed", WAIT, || async {
        let (s, reason, message) = condition(&status(&env).await, "Synthesized")?;
        (s == "False" && reason == "SliceWriteFailed").then_some(message)
    })
    .await;
    assert!(message.contains("too large"), "{message}");
    // Watch it for a while: no retry loop, the previous synthesis stays current and applied.
    enoki.wait_pass(&env, "echo").await;
    harness::audit_barrier(&env).await;
    let creates = harness::audited_requests(&env.namespace, &since)
        .into_iter()
        .filter(|r| r.by_enoki() && r.verb == "create" && r.resource == "resourceslices")
        .count();
    assert!(
        creates <= 2,
        "slice writes are not retried in a loop: {creates} creates\n{}",
        enoki.logs()
    );
    let st = status(&env).await;
    assert_eq!(st.current_synthesis.unwrap().uuid, good.uuid);
    let slices: Api<ResourceSlice> = env.api();
    let names: Vec<String> = slices
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    let expected: Vec<String> = good
        .resource_slices
        .iter()
        .map(|r| r.name.clone())
        .collect();
    assert_eq!(names, expected, "the partial set was removed at once");

    // Fixing the input synthesizes again (the output equals the current one: slices kept).
    set_pad(&env, 0).await;
    eventually("recovery", WAIT, || async {
        let st = status(&env).await;
        let (s, _, _) = condition(&st, "Synthesized")?;
        (s == "True" && harness::composition_ready(&env, "echo").await).then_some(())
    })
    .await;
}

#[tokio::test]
async fn state_of_a_deleted_composition_is_forgotten_and_sigterm_stops_the_controller() {
    let cm = harness::config_map("a", json!({}), json!({"v": "1"}));
    let (env, _) = setup(json!([cm])).await;
    let mut enoki = Enoki::start(&env.namespace);
    eventually("Ready", WAIT, || async {
        harness::composition_ready(&env, "echo").await.then_some(())
    })
    .await;
    eventually("the memory gauge to count it", WAIT, || async {
        (enoki.metric("enoki_remembered_compositions")? >= 1.0).then_some(())
    })
    .await;
    let comps: Api<Composition> = env.api();
    harness::delete_and_wait(&comps, "echo").await;
    eventually("its memory and watches to be dropped", WAIT, || async {
        (enoki.metric("enoki_remembered_compositions")? == 0.0
            && enoki.metric("enoki_watched_kinds")? == 0.0)
            .then_some(())
    })
    .await;
    assert!(
        enoki.terminate(Duration::from_secs(12)),
        "enoki did not exit within the grace period after SIGTERM"
    );
}
