//! Control-plane outages on a control plane of the test's own (so stopping it disturbs no
//! other test): the API server restarted in the middle of an apply, etcd restarted, and the
//! API server unreachable for 60 s. enoki keeps running through all three, `/readyz` reports
//! each outage, its watches resume, and it converges afterwards without a restart and without
//! re-running a synthesis whose inputs did not change.
#![allow(clippy::unwrap_used)] // test code

use std::time::Duration;

use harness::invariants::violations;
use harness::{
    Enoki, OwnControlPlane, TestEnv, apply_composition, create_namespace, echo_module, eventually,
    http_get, install_synthesizer, set_echo_items,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

fn items(n: usize, v: &str) -> Value {
    Value::Array(
        (0..n)
            .map(|i| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("cm-{i}")}, "data": {"v": v}})
            })
            .collect(),
    )
}

async fn readyz_is(enoki: &Enoki, code: u16, what: &str) {
    let port = enoki.metrics_port.unwrap();
    eventually(what, Duration::from_secs(30), || async {
        (http_get(port, "/readyz").0 == code).then_some(())
    })
    .await;
}

async fn converged(env: &TestEnv, v: &str, n: usize, what: &str) {
    let cms: Api<ConfigMap> = env.api();
    eventually(what, Duration::from_secs(240), || async {
        if !violations(&env.client, &env.namespace, "app")
            .await
            .is_empty()
        {
            return None;
        }
        let all = cms.list(&ListParams::default()).await.ok()?.items;
        let done = all
            .iter()
            .filter(|c| c.data.as_ref().and_then(|d| d.get("v")).map(String::as_str) == Some(v))
            .count();
        (done == n).then_some(())
    })
    .await;
}

#[tokio::test]
async fn survives_api_server_and_etcd_restarts_and_a_60s_outage() {
    let cp = OwnControlPlane::start();
    let env = TestEnv {
        client: cp.client().await,
        namespace: "outages".into(),
    };
    create_namespace(&env.client, &env.namespace).await;
    let n = 300;
    let synth = install_synthesizer(&env, "outage", &echo_module()).await;
    set_echo_items(&env, "items", &items(n, "1")).await;
    apply_composition(&env, "app", &synth, "items", json!({})).await;
    let mut enoki = Enoki::start_as(&env.namespace, &[], &cp.kubeconfig, &[]);

    // 1. The API server stops as soon as the first objects are written (mid-apply).
    let cms: Api<ConfigMap> = env.api();
    eventually("the apply has started", Duration::from_secs(60), || async {
        let listed = cms.list(&ListParams::default()).await.ok()?;
        (listed.items.len() > 2).then_some(())
    })
    .await;
    cp.run("stop-apiserver");
    readyz_is(&enoki, 503, "/readyz reports the stopped API server").await;
    cp.run("start-apiserver");
    readyz_is(&enoki, 200, "/readyz recovers").await;
    converged(&env, "1", n, "converged after the API server restart").await;
    assert!(enoki.running(), "enoki exited:\n{}", enoki.logs());
    let runs = enoki.metric("enoki_synthesis_runs_total").unwrap();

    // 2. etcd restarts under the API server.
    cp.run("stop-etcd");
    readyz_is(
        &enoki,
        503,
        "/readyz reports the API server failing without etcd",
    )
    .await;
    cp.run("start-etcd");
    readyz_is(&enoki, 200, "/readyz recovers after etcd").await;

    // 3. The API server is unreachable for 60 s.
    cp.run("stop-apiserver");
    readyz_is(&enoki, 503, "/readyz reports the outage").await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        enoki.running(),
        "enoki exited during the outage:\n{}",
        enoki.logs()
    );
    cp.run("start-apiserver");
    readyz_is(&enoki, 200, "/readyz recovers after the outage").await;
    converged(&env, "1", n, "still converged after the outage").await;
    // Its inputs did not change: nothing was synthesized again.
    enoki.wait_pass(&env, "app").await;
    assert_eq!(
        enoki.metric("enoki_synthesis_runs_total").unwrap(),
        runs,
        "a synthesis ran again although no input changed"
    );

    // The watches resumed: an input change is seen and applied, with one synthesis. (How long
    // it takes is a figure for docs/reliability.md, not a bound asserted here.)
    let changed = std::time::Instant::now();
    set_echo_items(&env, "items", &items(n, "2")).await;
    converged(&env, "2", n, "an input change after the outages converges").await;
    eprintln!(
        "outages: an input change after the outage converged in {:.1} s ({n} objects)",
        changed.elapsed().as_secs_f64()
    );
    assert_eq!(
        enoki.metric("enoki_synthesis_runs_total").unwrap(),
        runs + 1.0
    );
    assert!(enoki.running(), "enoki exited:\n{}", enoki.logs());
}
