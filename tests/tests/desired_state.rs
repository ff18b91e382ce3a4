//! The last good synthesis is enforced whatever blocks the next one (Eno runs reconciliation
//! apart from synthesis): for each blocker — the rollout cooldown, inputs out of lockstep,
//! `dependsOn`, a failing synthesizer in backoff, a missing Synthesizer, module or required
//! input — an output of the current synthesis that is deleted comes back and a drifted field
//! is reverted while the blocker holds, and the `Synthesized` condition names the blocker.
//! The resources carry Eno's `eno.azure.io/*` keys.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crds::{Composition, Synthesizer};
use harness::{Enoki, TestEnv, echo_module, eventually, install_crds, install_synthesizer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

/// The output every test checks: a ConfigMap with Eno's keys on it.
fn output(name: &str) -> serde_json::Value {
    harness::config_map(
        name,
        json!({"eno.azure.io/readiness": "self.data.x == '1'",
               "eno.azure.io/deletion-strategy": "delete"}),
        json!({"x": "1"}),
    )
}

/// A test namespace with enoki running (`extra` flags), an echo Synthesizer and Composition
/// `app` converged on one output named `out`.
async fn converged(extra: &[&str]) -> (TestEnv, Enoki, String) {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    harness::set_echo_items(&env, "items", &json!([output("out")])).await;
    harness::apply_composition(&env, "app", &synth, "items", json!({})).await;
    let enoki = Enoki::start_with(&env.namespace, extra);
    harness::wait_ready(&env, "app").await;
    (env, enoki, synth)
}

/// Waits until `Synthesized=False` names `reason`; then proves the current synthesis is still
/// enforced: `out` deleted comes back, `out` drifted is reverted — and the blocker still holds.
async fn enforced_while_blocked(env: &TestEnv, comp: &str, out: &str, reason: &str) {
    let blocked = || async {
        let (s, r, _) = harness::composition_condition(env, comp, "Synthesized").await?;
        (s == "False" && r == reason).then_some(())
    };
    eventually(
        &format!("{comp}: Synthesized=False {reason}"),
        WAIT,
        blocked,
    )
    .await;
    let cms: Api<ConfigMap> = env.api();
    cms.delete(out, &DeleteParams::default()).await.unwrap();
    eventually(
        &format!("{out} comes back while {reason}"),
        WAIT,
        || async { cms.get_opt(out).await.unwrap().map(|_| ()) },
    )
    .await;
    cms.patch(
        out,
        &PatchParams::apply("someone-else").force(),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": out}, "data": {"x": "drifted"}})),
    )
    .await
    .unwrap();
    eventually(
        &format!("{out}'s drift reverted while {reason}"),
        WAIT,
        || async {
            let data = cms.get(out).await.ok()?.data?;
            (data.get("x").map(String::as_str) == Some("1")).then_some(())
        },
    )
    .await;
    assert!(
        blocked().await.is_some(),
        "{comp}: the blocker {reason} no longer holds"
    );
}

#[tokio::test]
async fn a_missing_required_input_does_not_stop_enforcement() {
    let (env, _enoki, _) = converged(&[]).await;
    let cms: Api<ConfigMap> = env.api();
    cms.delete("items", &DeleteParams::default()).await.unwrap();
    enforced_while_blocked(&env, "app", "out", "MissingInput").await;
}

#[tokio::test]
async fn a_missing_synthesizer_does_not_stop_enforcement() {
    let (env, _enoki, synth) = converged(&[]).await;
    let synths: Api<Synthesizer> = Api::all(env.client.clone());
    synths
        .delete(&synth, &DeleteParams::default())
        .await
        .unwrap();
    enforced_while_blocked(&env, "app", "out", "SynthesizerNotFound").await;
}

#[tokio::test]
async fn a_missing_module_does_not_stop_enforcement() {
    let (env, _enoki, synth) = converged(&[]).await;
    // The module's ConfigMap goes, and a new Synthesizer generation makes enoki fetch again.
    let cms: Api<ConfigMap> = env.api();
    cms.delete("module-echo", &DeleteParams::default())
        .await
        .unwrap();
    let synths: Api<Synthesizer> = Api::all(env.client.clone());
    synths
        .patch(
            &synth,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"env": [{"name": "BUMP", "value": "1"}]}})),
        )
        .await
        .unwrap();
    enforced_while_blocked(&env, "app", "out", "ModuleUnavailable").await;
}

#[tokio::test]
async fn a_failing_synthesizer_in_backoff_does_not_stop_enforcement() {
    let (env, _enoki, _) = converged(&[]).await;
    let cms: Api<ConfigMap> = env.api();
    cms.patch(
        "items",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"raw": "this is not a ResourceList"}})),
    )
    .await
    .unwrap();
    enforced_while_blocked(&env, "app", "out", "MalformedOutput").await;
}

#[tokio::test]
async fn inputs_out_of_lockstep_do_not_stop_enforcement() {
    let (env, _enoki, synth) = converged(&[]).await;
    // The input says it was written for Synthesizer generation 1; the Synthesizer moves on to
    // generation 2 (Eno's lockstep: no synthesis until the input's producer catches up).
    let cms: Api<ConfigMap> = env.api();
    cms.patch(
        "items",
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"annotations": {"eno.azure.io/synthesizer-generation": "1"}}})),
    )
    .await
    .unwrap();
    let synths: Api<Synthesizer> = Api::all(env.client.clone());
    synths
        .patch(
            &synth,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"env": [{"name": "BUMP", "value": "1"}]}})),
        )
        .await
        .unwrap();
    enforced_while_blocked(&env, "app", "out", "MismatchedInputs").await;
}

#[tokio::test]
async fn depends_on_does_not_stop_enforcement_of_the_current_synthesis() {
    let (env, _enoki, _) = converged(&[]).await;
    let comps: Api<Composition> = env.api();
    comps
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"dependsOn": [{"name": "never-there"}]}})),
        )
        .await
        .unwrap();
    let (_, reason, _) = eventually("app: blocked by dependsOn", WAIT, || async {
        let c = harness::composition_condition(&env, "app", "Synthesized").await?;
        (c.0 == "False").then_some(c)
    })
    .await;
    enforced_while_blocked(&env, "app", "out", &reason).await;
    let st = comps.get("app").await.unwrap().status.unwrap();
    let deps = st.dependency_status.unwrap();
    assert!(
        deps.blocked && deps.blocked_by[0].name == "never-there",
        "{deps:?}"
    );
}

#[tokio::test]
async fn the_rollout_cooldown_does_not_stop_enforcement() {
    let (env, _enoki, synth) = converged(&["--rollout-cooldown", "10m"]).await;
    // A second Composition on the same Synthesizer: a Synthesizer change rolls out to one of
    // them, and the other waits out the (long) cooldown.
    let synth_name = synth.clone();
    harness::set_echo_items(&env, "items-b", &json!([output("out-b")])).await;
    harness::apply_composition(&env, "b", &synth_name, "items-b", json!({})).await;
    harness::wait_ready(&env, "b").await;
    let synths: Api<Synthesizer> = Api::all(env.client.clone());
    synths
        .patch(
            &synth,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"env": [{"name": "ROLL", "value": "1"}]}})),
        )
        .await
        .unwrap();
    let waiting = eventually("one Composition waits for the cooldown", WAIT, || async {
        for (name, out) in [("app", "out"), ("b", "out-b")] {
            let (s, r, _) = harness::composition_condition(&env, name, "Synthesized").await?;
            if s == "False" && r == "RolloutCooldown" {
                return Some((name, out));
            }
        }
        None
    })
    .await;
    enforced_while_blocked(&env, waiting.0, waiting.1, "RolloutCooldown").await;
}
