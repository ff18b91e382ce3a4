//! Operating enoki: metrics and probes, Events, leader election with two replicas, and the
//! client-side (`--disable-ssa`) apply mode — each against the real control plane.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::time::Duration;

use crds::Composition;
use harness::{
    Enoki, TestEnv, eventually, free_port, http_get, install_crds, install_synthesizer,
    sample_module,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

async fn setup(greeting: &str) -> TestEnv {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "ops", &sample_module()).await;
    set_input(&env, greeting).await;
    let comp = json!({
        "apiVersion": "enoki.dev/v1alpha1", "kind": "Composition", "metadata": {"name": "hello"},
        "spec": {"synthesizer": {"name": synth}, "bindings": [{"key": "config", "resource": {"name": "hello-config"}}]},
    });
    let comps: Api<Composition> = env.api();
    comps
        .patch(
            "hello",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&comp),
        )
        .await
        .unwrap();
    env
}

async fn set_input(env: &TestEnv, greeting: &str) {
    let cms: Api<ConfigMap> = env.api();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hello-config"}, "data": {"greeting": greeting}});
    cms.patch(
        "hello-config",
        &PatchParams::apply("test").force(),
        &Patch::Apply(&cm),
    )
    .await
    .unwrap();
}

async fn is_ready(env: &TestEnv) -> bool {
    let comps: Api<Composition> = env.api();
    let c = comps.get("hello").await.unwrap();
    c.status.is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

async fn message(env: &TestEnv) -> Option<String> {
    let cms: Api<ConfigMap> = env.api();
    cms.get_opt("hello-message")
        .await
        .unwrap()
        .and_then(|c| c.data)
        .and_then(|d| d.get("message").cloned())
}

#[tokio::test]
async fn metrics_and_probes_are_served() {
    let env = setup("hello").await;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let enoki = Enoki::start_with(&env.namespace, &["--metrics-addr", &addr]);
    eventually("Ready", WAIT, || async {
        is_ready(&env).await.then_some(())
    })
    .await;
    assert_eq!(http_get(port, "/healthz").0, 200, "{}", enoki.logs());
    assert_eq!(http_get(port, "/readyz").0, 200);
    let (code, body) = http_get(port, "/metrics");
    assert_eq!(code, 200);
    for needle in [
        "enoki_synthesis_runs_total{outcome=\"Success\"} 1",
        "enoki_apply_operations_total{outcome=\"apply-ok\"}",
        "enoki_reconcile_duration_seconds_count",
        "enoki_synthesis_duration_seconds_count 1",
        "enoki_managed_resources 3",
    ] {
        assert!(body.contains(needle), "{needle} missing from:\n{body}");
    }
}

#[tokio::test]
async fn synthesis_failures_become_warning_events() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let guest = std::fs::read(harness::workspace_root().join("tests/guests/exit3.wat")).unwrap();
    let synth = install_synthesizer(&env, "bad", &guest).await;
    set_input(&env, "x").await;
    let comp = json!({
        "apiVersion": "enoki.dev/v1alpha1", "kind": "Composition", "metadata": {"name": "hello"},
        "spec": {"synthesizer": {"name": synth}, "bindings": [{"key": "config", "resource": {"name": "hello-config"}}]},
    });
    let comps: Api<Composition> = env.api();
    comps
        .patch(
            "hello",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&comp),
        )
        .await
        .unwrap();
    let _enoki = Enoki::start(&env.namespace);
    let events: Api<k8s_openapi::api::events::v1::Event> = env.api();
    let ev = eventually("a Warning event with reason ExitCode", WAIT, || async {
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("ExitCode")
                    && e.type_.as_deref() == Some("Warning")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("hello")
            })
    })
    .await;
    assert!(ev.note.unwrap_or_default().contains("bad input"));
}

#[tokio::test]
async fn with_two_replicas_only_the_leader_writes_and_the_other_takes_over() {
    let env = setup("hello").await;
    let (p1, p2) = (free_port(), free_port());
    let (a1, a2) = (format!("127.0.0.1:{p1}"), format!("127.0.0.1:{p2}"));
    let le = [
        "--leader-election-namespace",
        env.namespace.as_str(),
        "--lease-duration-secs",
        "3",
    ];
    let mut first = Enoki::start_with(
        &env.namespace,
        &[&le[..], &["--metrics-addr", &a1]].concat(),
    );
    eventually("the first replica to lead", WAIT, || async {
        (http_get(p1, "/readyz").0 == 200).then_some(())
    })
    .await;
    let second = Enoki::start_with(
        &env.namespace,
        &[&le[..], &["--metrics-addr", &a2]].concat(),
    );
    eventually("Ready", WAIT, || async {
        is_ready(&env).await.then_some(())
    })
    .await;
    eventually("the second replica's probe to answer", WAIT, || async {
        (http_get(p2, "/healthz").0 == 200).then_some(())
    })
    .await;
    assert_eq!(
        http_get(p2, "/readyz").0,
        503,
        "the standby must not be ready"
    );
    assert!(
        !second.logs().contains("applied"),
        "the standby wrote:\n{}",
        second.logs()
    );
    assert!(first.logs().contains("applied"));

    first.stop();
    eventually("the standby to take over", WAIT, || async {
        (http_get(p2, "/readyz").0 == 200).then_some(())
    })
    .await;
    set_input(&env, "failover").await;
    eventually("the new leader to reconcile the change", WAIT, || async {
        (message(&env).await.as_deref() == Some("failover, world")).then_some(())
    })
    .await;
    assert!(second.logs().contains("acquired leadership"));
}

#[tokio::test]
async fn client_side_mode_creates_and_merge_patches() {
    let env = setup("hello").await;
    let enoki = Enoki::start_with(&env.namespace, &["--disable-ssa"]);
    eventually("Ready", WAIT, || async {
        is_ready(&env).await.then_some(())
    })
    .await;
    let cms: Api<ConfigMap> = env.api();
    let cm = cms.get("hello-message").await.unwrap();
    let ops: Vec<_> = cm
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.manager.as_deref() == Some("enoki"))
        .map(|m| m.operation.unwrap_or_default())
        .collect();
    assert_eq!(ops, ["Update"], "no server-side apply in client-side mode");
    set_input(&env, "merge").await;
    eventually("the merge patch to land", WAIT, || async {
        (message(&env).await.as_deref() == Some("merge, world")).then_some(())
    })
    .await;
    assert!(
        enoki.logs().contains("op=\"merge-patch\"") || enoki.logs().contains("merge-patch"),
        "{}",
        enoki.logs()
    );
}
