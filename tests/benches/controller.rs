//! Controller benchmarks on the real control plane, every figure next to a baseline measured
//! in the same run (`make bench`; not part of `make test`):
//!
//! 1. converge: one Composition of 1,000 ConfigMaps, against the raw floor (the same 1,000
//!    server-side applies from a plain client at several concurrencies) and one
//!    `kubectl apply --server-side`;
//! 2. steady state: requests and enoki CPU per resync of 1,000 in-sync resources;
//!    With `BENCH_PERF=1`, CPU per write of the client, the API server and etcd, and a
//!    `perf record` of enoki during its writes (`target/bench-perf-converge.data`);
//! 3. many: 10,000 Compositions × 10 ConfigMaps (`BENCH_MANY`), time until all are Ready
//!    next to the raw server-side-apply floor for the same objects and the protocol floor
//!    (the writes Eno's API needs per Composition, from a plain client), enoki's RSS per
//!    Composition, and a steady-state window longer than the default resync
//!    (`BENCH_STEADY_SECS`, 330): GETs, writes and resource checks; enoki runs with
//!    `--concurrency` `BENCH_CONCURRENCY` (8);
//! 4. outage: the API server stopped for 60 s (enoki's CPU meanwhile), then SIGTERM while a
//!    synthesis runs (time to exit);
//! 5. shards (`controller/shards.rs`): 5,000 Compositions × 10 ConfigMaps (`BENCH_SHARDS`)
//!    reconciled by one unsharded replica (the baseline) and by two replicas with
//!    `--shards 4`, `BENCH_SHARDS_ROUNDS` (2) times in alternating order after a priming
//!    fleet (`BENCH_SHARDS_PRIME=0` leaves it out): time until all are Ready, and per replica
//!    the shards it holds, the Compositions and managed objects it caches, its RSS above its
//!    idle process and above its warm base (after 32 warm-up Compositions of the fleet's
//!    shape per replica), and its allocator's heap in use and held free.
//!
//! Needs the control plane (`hack/testenv.sh up`), the echo guest (`hack/build-samples.sh`)
//! and a release build of enoki named by `ENOKI_BIN`. `BENCH_ONLY=converge,steady,many,outage,shards`
//! selects cases.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::{
    Enoki, TestEnv, anon_rss_mib, echo_module, install_crds, install_synthesizer, status_mib,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

#[path = "controller/converge.rs"]
mod converge;
#[path = "controller/floors.rs"]
mod floors;
#[path = "controller/many.rs"]
mod many;
#[path = "controller/procs.rs"]
mod procs;
#[path = "controller/shards.rs"]
mod shards;
use floors::*;
use procs::*;

async fn wait_ready(env: &TestEnv, name: &str, timeout: Duration) -> Duration {
    let start = Instant::now();
    while !harness::composition_ready(env, name).await {
        assert!(
            start.elapsed() < timeout,
            "{name} not Ready within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

async fn wait_readyz(enoki: &Enoki) {
    let port = enoki.metrics_port.expect("metrics port");
    for _ in 0..600 {
        if harness::http_get(port, "/readyz").0 == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("enoki did not become ready:\n{}", enoki.logs());
}

/// Compositions of the namespace with `Ready=True`.
async fn count_ready(env: &TestEnv) -> usize {
    let api: Api<crds::Composition> = env.api();
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items.iter().filter(|c| is_ready(c)).count()
}

/// Whether the Composition's `Ready` condition is `True`.
fn is_ready(c: &crds::Composition) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|x| x.type_ == "Ready" && x.status == "True")
    })
}

/// The Ready Compositions of a namespace, counted from a watch: one more watcher of the API
/// server through the whole run, where a LIST of every Composition per poll (thousands of
/// them, twice a second) would cost the API server and this process about as much as the
/// fleet's own work, and the more the longer a setup takes.
struct ReadyCount {
    store: kube::runtime::reflector::Store<crds::Composition>,
    task: tokio::task::JoinHandle<()>,
}

impl ReadyCount {
    async fn start(env: &TestEnv) -> ReadyCount {
        use kube::runtime::{WatchStreamExt, reflector, watcher};
        let api: Api<crds::Composition> = env.api();
        let (store, writer) = reflector::store();
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer);
        let task = tokio::spawn(stream.for_each(|_| futures::future::ready(())));
        store.wait_until_ready().await.expect("Composition watch");
        ReadyCount { store, task }
    }

    fn ready(&self) -> usize {
        self.store.state().iter().filter(|c| is_ready(c)).count()
    }
}

impl Drop for ReadyCount {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A positive count from the environment, or `default`.
fn count_from_env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

/// enoki's counters that say what a steady state costs.
fn steady_counters(enoki: &Enoki) -> [f64; 4] {
    [
        enoki.metric("enoki_observe_gets_total").unwrap_or(0.0),
        enoki.metric("enoki_apply_operations_total").unwrap_or(0.0),
        enoki.metric("enoki_resource_checks_total").unwrap_or(0.0),
        enoki.metric("enoki_api_requests_total").unwrap_or(0.0),
    ]
}

/// The fleets of `many` and `shards` live in one namespace: the per-namespace synthesis
/// rate and slice-write rate (a tenant's guard: 60 syntheses a minute after a burst of 300,
/// 1 MiB/s of new slices) would pace them, so they are lifted; what is measured is the
/// controller's own throughput.
const UNTHROTTLED: [&str; 4] = [
    "--namespace-synthesis-rate",
    "0",
    "--namespace-slice-write-rate",
    "0",
];

/// Applies `count` Compositions of `per` ConfigMaps each (the fleet's shape, so what a process
/// keeps after its first syntheses and applies of that size is in its warm base) and waits
/// until they are Ready (5 minutes at most), then for a sweep (every 15 s) to settle the
/// caches.
async fn warm_up(env: &TestEnv, synth: &str, count: usize, per: usize) {
    futures::stream::iter(0..count)
        .for_each_concurrent(16, |i| async move {
            let cm = format!("warm-items-{i}");
            let objects = items(&format!("w{i}-"), per);
            harness::set_echo_items(env, &cm, &Value::Array(objects)).await;
            harness::apply_composition(env, &format!("warm-{i}"), synth, &cm, json!({})).await;
        })
        .await;
    let warming = Instant::now();
    while count_ready(env).await < count {
        assert!(
            warming.elapsed() < Duration::from_secs(300),
            "the warm-up Compositions not Ready after 5 minutes"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(20)).await;
}

/// Creates a fleet's inputs and Compositions (`comp-<i>` of `per` ConfigMaps each) from 16
/// clients.
pub(crate) async fn create_fleet(env: &TestEnv, synth: &str, comps: usize, per: usize) {
    futures::stream::iter(0..comps)
        .for_each_concurrent(16, |i| async move {
            let cm = format!("items-{i}");
            let objects = items(&format!("c{i}-"), per);
            harness::set_echo_items(env, &cm, &Value::Array(objects)).await;
            harness::apply_composition(env, &format!("comp-{i}"), synth, &cm, json!({})).await;
        })
        .await;
}

/// Deletes every object of `api` that `selected` selects: a collection of 50,000 may outlast
/// one request's timeout, so again until none is left.
async fn delete_all<K>(api: &Api<K>, selected: &ListParams, what: &str)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    for attempt in 0.. {
        let left = api
            .list_metadata(&selected.clone().limit(1))
            .await
            .map(|l| l.items.len());
        if left.as_ref().is_ok_and(|n| *n == 0) {
            break;
        }
        assert!(attempt < 20, "{what} left after 20 deletions: {left:?}");
        if let Err(e) = api
            .delete_collection(&kube::api::DeleteParams::default(), selected)
            .await
        {
            eprintln!("deleting the {what}: {e}; again");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Warm-up Compositions of a fleet, Ready before its clock starts and its base RSS is read.
const WARM: usize = 32;

fn testenv(cmd: &str) {
    let status = std::process::Command::new("bash")
        .arg(harness::workspace_root().join("hack/testenv.sh"))
        .arg(cmd)
        .status()
        .expect("testenv.sh runs");
    assert!(status.success(), "testenv.sh {cmd} failed");
}

async fn outage() {
    let env = TestEnv::new().await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    harness::set_echo_items(&env, "items", &Value::Array(items("o", 10))).await;
    let enoki = Enoki::start(&env.namespace);
    harness::apply_composition(&env, "echo", &synth, "items", json!({})).await;
    wait_ready(&env, "echo", Duration::from_secs(60)).await;
    // The baseline: the same kind of input change with the server up all along.
    let t = Instant::now();
    harness::set_echo_items(&env, "items", &Value::Array(items("b", 3))).await;
    converge_on(&env, &enoki, "b2", t).await;
    let baseline = t.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle0 = cpu_seconds(enoki.pid());
    tokio::time::sleep(Duration::from_secs(20)).await;
    let idle = cpu_seconds(enoki.pid()) - idle0;
    testenv("stop-apiserver");
    let cpu0 = cpu_seconds(enoki.pid());
    let log0 = enoki.logs().lines().count();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let cpu = cpu_seconds(enoki.pid()) - cpu0;
    let lines = enoki.logs().lines().count() - log0;
    testenv("start-apiserver");
    // The server is back (its /readyz answers): the input changes at once.
    let back = Instant::now();
    harness::set_echo_items(&env, "items", &Value::Array(items("p", 3))).await;
    converge_on(&env, &enoki, "p2", back).await;
    let recovered = back.elapsed();
    println!("\n## outage: API server stopped for 60 s\n");
    println!("| figure | value |");
    println!("| --- | --- |");
    println!(
        "| enoki CPU, 20 s idle before the outage | {:.2}% of a core |",
        idle / 20.0 * 100.0
    );
    println!(
        "| enoki CPU during the 60 s outage | {:.2}% of a core |",
        cpu / 60.0 * 100.0
    );
    println!("| log lines during the outage | {lines} |");
    println!(
        "| an input change converges, server up all along (baseline) | {:.1} s |",
        baseline.as_secs_f64()
    );
    println!(
        "| the same change made as the server returns: converged after the server's return, without a restart | {:.1} s ({:.1}× the baseline) |",
        recovered.as_secs_f64(),
        recovered.as_secs_f64() / baseline.as_secs_f64()
    );
    sigterm_during_synthesis().await;
}

/// Waits until ConfigMap `name` exists and Composition `echo` is Ready (120 s from `since`
/// at most).
async fn converge_on(env: &TestEnv, enoki: &Enoki, name: &str, since: Instant) {
    loop {
        let cms: Api<ConfigMap> = env.api();
        if cms.get_opt(name).await.ok().flatten().is_some()
            && harness::composition_ready(env, "echo").await
        {
            return;
        }
        assert!(
            since.elapsed() < Duration::from_secs(120),
            "no convergence on {name}:\n{}",
            enoki.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn sigterm_during_synthesis() {
    let env = TestEnv::new().await;
    let looping = std::fs::read_to_string(harness::workspace_root().join("tests/guests/loop.wat"))
        .expect("tests/guests/loop.wat");
    let synth = install_synthesizer(&env, "loop", looping.as_bytes()).await;
    let synths: Api<crds::Synthesizer> = Api::all(env.client.clone());
    synths
        .patch(
            &synth,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(
                json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
                "metadata": {"name": synth}, "spec": {"limits": {"timeout": "120s"}}}),
            ),
        )
        .await
        .unwrap();
    harness::set_echo_items(&env, "items", &json!([])).await;
    let mut enoki = Enoki::start(&env.namespace);
    harness::apply_composition(&env, "echo", &synth, "items", json!({})).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let t = Instant::now();
    let exited = enoki.terminate(Duration::from_secs(30));
    println!(
        "| SIGTERM while a 120 s synthesis runs: exited | {} after {:.1} s (grace 10 s) |",
        if exited { "yes" } else { "NO" },
        t.elapsed().as_secs_f64()
    );
}

fn main() {
    if std::env::var("ENOKI_BIN").is_err() {
        eprintln!("ENOKI_BIN must name a release build of enoki (make bench sets it)");
        std::process::exit(1);
    }
    let only =
        std::env::var("BENCH_ONLY").unwrap_or_else(|_| "converge,steady,many,outage,shards".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        install_crds(&harness::client().await).await;
        println!(
            "# enoki controller benchmarks ({} cores)",
            std::thread::available_parallelism().map_or(0, usize::from)
        );
        if only.contains("converge") || only.contains("steady") {
            converge::converge_and_steady(only.contains("steady")).await;
        }
        if only.contains("many") {
            many::many().await;
        }
        if only.contains("outage") {
            outage().await;
        }
        if only.contains("shards") {
            shards::shards().await;
        }
    });
}
