//! Leader failover under load, with two replicas and leader election, during a 1,000-object
//! rollout:
//!
//! - the leader is killed (SIGKILL): the standby takes the Lease over within the Lease
//!   duration (plus its retry period) and converges the Composition;
//! - the leader is cut off from the API server (a TCP proxy in front of it drops every
//!   connection): it cannot renew, its fence closes before the Lease can expire, the standby
//!   takes over, and when the partition heals the old leader writes nothing more (then stops)
//!   — checked in the API server's audit log by its User-Agent;
//! - the leader is frozen (SIGSTOP) past its Lease and resumed after the takeover: it wakes
//!   with reconciles in flight, and its fence refuses every new write. What it cannot take
//!   back are the requests already handed to its HTTP connections when it froze: at most
//!   `--apply-concurrency` of them reach the server late, and nothing else (no slice or
//!   Composition status, no further object). Without the fence the rest of the rollout
//!   (hundreds of writes) would go out.
#![allow(clippy::unwrap_used)] // test code

use std::time::{Duration, Instant};

use harness::invariants::wait_converged;
use harness::{
    Enoki, Partition, TestEnv, apply_composition, audited_requests, echo_module, eventually,
    install_crds, install_synthesizer, kubeconfig_path, now_rfc3339, set_echo_items,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

const LEASE_SECS: u64 = 6;

fn start(env: &TestEnv, name: &str, kubeconfig: &std::path::Path) -> Enoki {
    let secs = LEASE_SECS.to_string();
    Enoki::start_as(
        &env.namespace,
        &[
            "--leader-election-namespace",
            &env.namespace,
            "--lease-duration-secs",
            &secs,
        ],
        kubeconfig,
        &[("HOSTNAME", name)],
    )
}

async fn holder(env: &TestEnv) -> Option<(String, k8s_openapi::jiff::Timestamp)> {
    let leases: Api<Lease> = env.api();
    let spec = leases.get_opt("enoki-controller").await.unwrap()?.spec?;
    Some((spec.holder_identity?, spec.acquire_time?.0))
}

async fn rollout(env: &TestEnv, synth: &str) {
    let items: Vec<Value> = (0..1000)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i}")}, "data": {"v": "1"}})
        })
        .collect();
    set_echo_items(env, "items", &Value::Array(items)).await;
    apply_composition(env, "app", synth, "items", json!({})).await;
    let cms: Api<ConfigMap> = env.api();
    eventually(
        "the rollout has started",
        Duration::from_secs(60),
        || async {
            let n = cms
                .list_metadata(&ListParams::default())
                .await
                .ok()?
                .items
                .len();
            (n > 5).then_some(())
        },
    )
    .await;
}

async fn leader_is(env: &TestEnv, name: &str) -> k8s_openapi::jiff::Timestamp {
    eventually(
        &format!("{name} holds the Lease"),
        Duration::from_secs(60),
        || async {
            holder(env)
                .await
                .filter(|(h, _)| h.starts_with(name))
                .map(|(_, t)| t)
        },
    )
    .await
}

/// Waits for the old leader to exit after losing its Lease.
async fn stopped(old: &mut Enoki) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while old.running() {
        assert!(
            Instant::now() < deadline,
            "the old leader did not stop after losing its Lease:\n{}",
            old.logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The old leader's writes (Leases aside) that reached the API server after `acquired`.
fn late_writes(
    env: &TestEnv,
    since: &str,
    acquired: k8s_openapi::jiff::Timestamp,
) -> Vec<harness::Request> {
    audited_requests(&env.namespace, since)
        .into_iter()
        .filter(|r| {
            r.by_enoki()
                && r.is_write()
                && r.user_agent.contains("leader-a")
                && r.resource != "leases"
                && r.received.parse::<k8s_openapi::jiff::Timestamp>().unwrap() > acquired
        })
        .collect()
}

#[tokio::test]
async fn a_killed_leader_is_replaced_within_the_lease_duration() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "failover", &echo_module()).await;
    let mut a = start(&env, "leader-a", &kubeconfig_path());
    leader_is(&env, "leader-a").await;
    let b = start(&env, "standby-b", &kubeconfig_path());
    rollout(&env, &synth).await;
    a.stop(); // SIGKILL mid-rollout
    let killed = Instant::now();
    leader_is(&env, "standby-b").await;
    let failover = killed.elapsed();
    eprintln!("failover: the standby took over {failover:.1?} after the leader was killed");
    assert!(
        failover <= Duration::from_secs(LEASE_SECS + 3),
        "took {failover:?} (Lease duration {LEASE_SECS} s)"
    );
    wait_converged(&env.client, &env.namespace, "app", Duration::from_secs(120)).await;
    drop(b);
}

#[tokio::test]
async fn a_partitioned_leader_is_fenced_before_its_lease_can_be_taken() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "fence", &echo_module()).await;
    let proxy = Partition::start(harness::api_server_port()).await;
    let proxied = std::env::temp_dir().join(format!("kubeconfig-{}", env.namespace));
    proxy.kubeconfig(&proxied);
    let since = now_rfc3339();
    let mut a = start(&env, "leader-a", &proxied);
    leader_is(&env, "leader-a").await;
    let b = start(&env, "standby-b", &kubeconfig_path());
    rollout(&env, &synth).await;

    proxy.cut();
    let acquired = leader_is(&env, "standby-b").await;
    // Let the old leader's retries pile up behind the partition, then heal it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.heal();
    stopped(&mut a).await;
    wait_converged(&env.client, &env.namespace, "app", Duration::from_secs(120)).await;
    harness::audit_barrier(&env).await;
    let late = late_writes(&env, &since, acquired);
    assert!(
        late.is_empty(),
        "the old leader wrote after the takeover at {acquired}: {late:#?}\n{}",
        a.logs()
    );
    let _ = std::fs::remove_file(&proxied);
    drop(b);
}

fn signal(enoki: &Enoki, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &enoki.pid().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig}");
}

#[tokio::test]
async fn a_frozen_leader_resumed_after_the_takeover_makes_no_new_write() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "freeze", &echo_module()).await;
    let since = now_rfc3339();
    let mut a = start(&env, "leader-a", &kubeconfig_path());
    leader_is(&env, "leader-a").await;
    let b = start(&env, "standby-b", &kubeconfig_path());
    rollout(&env, &synth).await;

    signal(&a, "-STOP");
    let acquired = leader_is(&env, "standby-b").await;
    signal(&a, "-CONT");
    stopped(&mut a).await;
    wait_converged(&env.client, &env.namespace, "app", Duration::from_secs(120)).await;
    harness::audit_barrier(&env).await;
    let late = late_writes(&env, &since, acquired);
    eprintln!(
        "failover: {} request(s) in flight when the leader froze arrived after the takeover",
        late.len()
    );
    assert!(
        late.len() <= 32 && late.iter().all(|r| r.resource == "configmaps"),
        "the old leader made new writes after the takeover at {acquired}: {late:#?}\n{}",
        a.logs()
    );
    drop(b);
}

/// The Lease duration of the rolling upgrade.
const UPGRADE_LEASE_SECS: u64 = 15;

/// Whether `enoki`'s /readyz answers 200.
fn ready(enoki: &Enoki) -> bool {
    harness::http_get(enoki.metrics_port.unwrap(), "/readyz").0 == 200
}

/// The writes (Leases aside) each replica made, with when they reached the API server.
fn writes_by(env: &TestEnv, since: &str, who: &str) -> Vec<k8s_openapi::jiff::Timestamp> {
    audited_requests(&env.namespace, since)
        .into_iter()
        .filter(|r| {
            r.by_enoki() && r.is_write() && r.resource != "leases" && r.user_agent.contains(who)
        })
        .map(|r| r.received.parse().unwrap())
        .collect()
}

/// A rolling upgrade of three replicas the way a Deployment walks it (maxSurge 1,
/// maxUnavailable 0): start a new replica, wait for its /readyz, stop (SIGTERM) an old one;
/// three times. Every standby is Ready while it waits for the Lease, so the rollout completes;
/// an input changed mid-rollout converges; the leader releases its Lease as it stops and a
/// standby takes it within seconds (well inside the Lease duration); and no replica writes
/// after the next one acquired the Lease (the fence).
#[tokio::test]
async fn a_rolling_upgrade_of_three_replicas_completes_with_ready_standbys() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "upgrade", &echo_module()).await;
    let items = |v: &str| -> Value {
        (0..20)
            .map(|i| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i}")}, "data": {"v": v}})
            })
            .collect()
    };
    set_echo_items(&env, "items", &items("1")).await;
    apply_composition(&env, "app", &synth, "items", json!({})).await;
    let since = now_rfc3339();
    // A long Lease: a handover within seconds can only come from the released Lease being
    // taken at once, not from waiting for it to expire.
    let start = |name: String| {
        Enoki::start_as(
            &env.namespace,
            &[
                "--leader-election-namespace",
                &env.namespace,
                "--lease-duration-secs",
                &UPGRADE_LEASE_SECS.to_string(),
            ],
            &kubeconfig_path(),
            &[("HOSTNAME", name.as_str())],
        )
    };
    let mut old: Vec<Option<Enoki>> = Vec::new();
    for i in 0..3 {
        old.push(Some(start(format!("old-{i}"))));
    }
    leader_is(&env, "old-").await;
    let all_ready = |replicas: &[&Enoki]| replicas.iter().all(|e| ready(e));
    eventually(
        "every replica Ready, standbys included",
        Duration::from_secs(60),
        || async {
            let r: Vec<&Enoki> = old.iter().flatten().collect();
            all_ready(&r).then_some(())
        },
    )
    .await;
    harness::wait_ready(&env, "app").await;

    let mut fresh = Vec::new();
    let mut handovers = Vec::new();
    for i in 0..3 {
        let new = start(format!("new-{i}"));
        let t = Instant::now();
        eventually(
            &format!("new-{i} /readyz 200"),
            Duration::from_secs(60),
            || async { ready(&new).then_some(()) },
        )
        .await;
        eprintln!(
            "upgrade: new-{i} Ready {:.1?} after it started",
            t.elapsed()
        );
        fresh.push(new);
        if i == 1 {
            set_echo_items(&env, "items", &items("2")).await;
        }
        let was_leader = holder(&env)
            .await
            .is_some_and(|(h, _)| h.starts_with(&format!("old-{i}")));
        let mut stopping = old[i].take().unwrap();
        assert!(
            stopping.terminate(Duration::from_secs(30)),
            "old-{i} stops on SIGTERM"
        );
        let exited = Instant::now();
        if was_leader {
            let (next, acquired) = eventually("a new leader", Duration::from_secs(60), || async {
                holder(&env)
                    .await
                    .filter(|(h, _)| !h.starts_with(&format!("old-{i}")))
            })
            .await;
            let gap = exited.elapsed();
            eprintln!("upgrade: old-{i} led; {next} took over {gap:.1?} after it exited");
            assert!(
                gap <= Duration::from_secs(3),
                "no leader for {gap:?} (Lease {UPGRADE_LEASE_SECS} s): the released Lease was not taken at once"
            );
            handovers.push((format!("old-{i}"), acquired));
        }
        let running: Vec<&Enoki> = old.iter().flatten().chain(fresh.iter()).collect();
        assert!(
            all_ready(&running),
            "a replica left Ready during the rollout"
        );
    }
    assert!(
        !handovers.is_empty(),
        "the leader was among the replaced ones"
    );
    leader_is(&env, "new-").await;
    eventually(
        "the mid-rollout change converged",
        Duration::from_secs(120),
        || async {
            let cms: Api<ConfigMap> = env.api();
            let list = cms.list(&ListParams::default()).await.ok()?;
            let done = list
                .items
                .iter()
                .filter(|c| {
                    c.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("cm-"))
                })
                .filter(|c| {
                    c.data.as_ref().and_then(|d| d.get("v")).map(String::as_str) == Some("2")
                })
                .count();
            (done == 20).then_some(())
        },
    )
    .await;
    wait_converged(&env.client, &env.namespace, "app", Duration::from_secs(120)).await;
    harness::audit_barrier(&env).await;
    for (who, acquired) in &handovers {
        let late: Vec<_> = writes_by(&env, &since, who)
            .into_iter()
            .filter(|t| t > acquired)
            .collect();
        assert!(
            late.is_empty(),
            "{who} wrote after the next leader acquired the Lease at {acquired}: {late:?}"
        );
    }
    drop(fresh);
}
