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
    harness::apply_composition(&env, "hello", &synth, "hello-config", json!({})).await;
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
        "enoki_wasm_peak_memory_bytes_count 1",
        // The work queue and the process.
        "enoki_queue_depth ",
        "enoki_queue_wait_seconds_count ",
        "enoki_reconciles_in_flight ",
        "process_resident_memory_bytes ",
        "process_cpu_seconds_total ",
        "process_open_fds ",
        "process_start_time_seconds ",
    ] {
        assert!(body.contains(needle), "{needle} missing from:\n{body}");
    }
    let waited = body
        .lines()
        .find_map(|l| l.strip_prefix("enoki_queue_wait_seconds_count "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(
        waited >= 1.0,
        "the Composition's creation was timed through the queue:\n{body}"
    );
}

#[tokio::test]
async fn synthesis_failures_become_warning_events() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let guest = std::fs::read(harness::workspace_root().join("tests/guests/exit3.wat")).unwrap();
    let synth = install_synthesizer(&env, "bad", &guest).await;
    set_input(&env, "x").await;
    harness::apply_composition(&env, "hello", &synth, "hello-config", json!({})).await;
    let _enoki = Enoki::start(&env.namespace);
    let ev = harness::wait_event(&env, "a Warning event with reason ExitCode", |e| {
        e.reason.as_deref() == Some("ExitCode")
            && e.type_.as_deref() == Some("Warning")
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("hello")
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
    let since = harness::now_rfc3339();
    let mut first = Enoki::start_as(
        &env.namespace,
        &[&le[..], &["--metrics-addr", &a1]].concat(),
        &harness::kubeconfig_path(),
        &[("HOSTNAME", "first")],
    );
    eventually("the first replica to lead", WAIT, || async {
        lease_holder(&env)
            .await
            .filter(|h| h.starts_with("first-"))
            .map(|_| ())
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
        200,
        "a standby waiting for the Lease is Ready (it can take over at once)"
    );
    // Both replicas carry enoki's User-Agent; the standby's metrics show it never checked a
    // resource, the leader's that it did, and the leader's writes reached the server.
    assert_eq!(
        second.metric("enoki_resource_checks_total"),
        Some(0.0),
        "the standby reconciled:\n{}",
        second.logs()
    );
    assert!(first.metric("enoki_resource_checks_total").unwrap_or(0.0) > 0.0);
    assert!(
        harness::audited_requests(&env.namespace, &since)
            .iter()
            .any(|r| r.by_enoki() && r.is_write() && r.resource == "configmaps"),
        "the leader applied its resources"
    );

    first.stop();
    eventually("the standby to take over", WAIT, || async {
        lease_holder(&env)
            .await
            .filter(|h| !h.starts_with("first-"))
            .map(|_| ())
    })
    .await;
    set_input(&env, "failover").await;
    eventually("the new leader to reconcile the change", WAIT, || async {
        (message(&env).await.as_deref() == Some("failover, world")).then_some(())
    })
    .await;
    assert_eq!(http_get(p2, "/readyz").0, 200);
}

/// The holder of the leader Lease `enoki-controller` in the test's namespace.
async fn lease_holder(env: &TestEnv) -> Option<String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = env.api();
    leases
        .get_opt("enoki-controller")
        .await
        .ok()??
        .spec?
        .holder_identity
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
    let merge_patches = enoki
        .metric("enoki_apply_operations_total{outcome=\"merge-patch-ok\"}")
        .unwrap_or(0.0);
    assert!(merge_patches >= 1.0, "{}", enoki.logs());
}

#[tokio::test]
async fn a_resource_that_keeps_failing_backs_off_and_reports_its_error() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let guest =
        std::fs::read(harness::workspace_root().join("tests/guests/invalid_service.wat")).unwrap();
    let synth = install_synthesizer(&env, "invalid", &guest).await;
    set_input(&env, "unused").await;
    harness::apply_composition(&env, "hello", &synth, "hello-config", json!({})).await;
    let comps: Api<Composition> = env.api();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let enoki = Enoki::start_with(&env.namespace, &["--metrics-addr", &addr]);
    let cond = eventually("Reconciled=False with ApplyFailed", WAIT, || async {
        let c = comps.get("hello").await.unwrap();
        c.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Reconciled" && c.reason == "ApplyFailed")
    })
    .await;
    assert!(
        cond.message.contains("Service/") && cond.message.contains("broken"),
        "{}",
        cond.message
    );
    let cms: Api<ConfigMap> = env.api();
    assert!(
        cms.get_opt("fine").await.unwrap().is_some(),
        "the valid resource is applied regardless"
    );

    // The per-resource error is in the ResourceSlice status.
    let st = comps.get("hello").await.unwrap().status.unwrap();
    let slices: Api<crds::ResourceSlice> = env.api();
    let slice = slices
        .get(&st.current_synthesis.unwrap().resource_slices[0].name)
        .await
        .unwrap();
    let errors: Vec<String> = slice
        .status
        .unwrap()
        .resources
        .into_iter()
        .filter_map(|r| r.error)
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("Invalid") || errors[0].contains("ports"),
        "{errors:?}"
    );

    // Retries back off (1 s, 2 s, 4 s, …) although the readiness poll is 1 s and every status
    // write triggers a reconcile: only a handful of attempts in 6 s — while the controller
    // passes over the Composition again and again (counted, so a controller that stopped
    // reconciling cannot pass this check).
    let passes = enoki.composition_passes(&env.namespace, "hello");
    tokio::time::sleep(Duration::from_secs(6)).await;
    let passed = enoki.composition_passes(&env.namespace, "hello") - passes;
    assert!(passed >= 3.0, "{passed} passes in 6 s");
    let (_, body) = http_get(port, "/metrics");
    let attempts: u64 = body
        .lines()
        .find(|l| l.starts_with("enoki_apply_operations_total{outcome=\"apply-error\"}"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no apply-error counter in:\n{body}\nlogs:\n{}",
                enoki.logs()
            )
        });
    assert!((1..=5).contains(&attempts), "{attempts} attempts in ~6 s");
}

#[tokio::test]
async fn a_synthesizer_change_rolls_out_one_composition_per_cooldown() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "rollout", &sample_module()).await;
    set_input(&env, "hello").await;
    let comps: Api<Composition> = env.api();
    let names = ["one", "two", "three"];
    for n in names {
        let comp = json!({
            "apiVersion": "enoki.dev/v1alpha1", "kind": "Composition", "metadata": {"name": n},
            "spec": {"synthesizer": {"name": synth}, "bindings": [{"key": "config", "resource": {"name": "hello-config"}}]},
        });
        comps
            .patch(n, &PatchParams::apply("test").force(), &Patch::Apply(&comp))
            .await
            .unwrap();
    }
    let _enoki = Enoki::start_with(&env.namespace, &["--rollout-cooldown", "3s"]);
    let first: Vec<String> = eventually("all three synthesized", WAIT, || async {
        let mut uuids = Vec::new();
        for n in names {
            uuids.push(comps.get(n).await.unwrap().status?.current_synthesis?.uuid);
        }
        Some(uuids)
    })
    .await;
    let synths: Api<crds::Synthesizer> = Api::all(env.client.clone());
    synths
        .patch(
            &synth,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"env": [{"name": "ROLLOUT", "value": "2"}]}})),
        )
        .await
        .unwrap();
    let times = eventually("all three re-synthesized", WAIT, || async {
        let mut times = Vec::new();
        for (n, old) in names.iter().zip(&first) {
            let cur = comps.get(n).await.unwrap().status?.current_synthesis?;
            if cur.uuid == *old {
                return None;
            }
            times.push(cur.synthesized?.0);
        }
        Some(times)
    })
    .await;
    let mut times = times;
    times.sort();
    for pair in times.windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        assert!(
            gap.as_secs() >= 2,
            "re-syntheses {:?} apart; the cooldown is 3 s: {times:?}",
            gap
        );
    }
}
