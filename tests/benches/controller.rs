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
//!    `--shards 4`, `BENCH_SHARDS_ROUNDS` (2) times in alternating order: time until all are
//!    Ready, and per replica the shards it holds, the Compositions and managed objects it
//!    caches, its RSS above its idle process and above its warm base (after 32 warm-up
//!    Compositions per replica), and its allocator's heap in use.
//!
//! Needs the control plane (`hack/testenv.sh up`), the echo guest (`hack/build-samples.sh`)
//! and a release build of enoki named by `ENOKI_BIN`. `BENCH_ONLY=converge,steady,many,outage,shards`
//! selects cases.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::{Enoki, TestEnv, echo_module, install_crds, install_synthesizer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

#[path = "controller/shards.rs"]
mod shards;

const CLK_TCK: f64 = 100.0;

fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = after.split_whitespace().collect();
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / CLK_TCK
}

/// CPU seconds used so far by the processes named `names` (`/proc/*/comm`): the local control
/// plane's kube-apiserver and etcd.
fn cpu_seconds_named(names: &[&str]) -> f64 {
    pids_named(names).into_iter().map(cpu_seconds).sum()
}

/// Whether a process named one of `names` runs.
fn any_process_named(names: &[&str]) -> bool {
    !pids_named(names).is_empty()
}

/// The processes named one of `names` (`/proc/*/comm`, 15 characters of a name at most).
fn pids_named(names: &[&str]) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            names.contains(&comm.trim())
        })
        .collect()
}

/// A `/proc/<pid>/status` field (`key` with its colon, in KiB) in MiB; 0 when unreadable.
fn status_mib(pid: u32, key: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// (current RSS, peak RSS) in MiB.
fn rss_mib(pid: u32) -> (f64, f64) {
    (status_mib(pid, "VmRSS:"), status_mib(pid, "VmHWM:"))
}

/// Anonymous RSS in MiB (the heap and stacks; without the binary's mapped code).
fn anon_rss_mib(pid: u32) -> f64 {
    status_mib(pid, "RssAnon:")
}

/// The pids of the control plane's API server and etcd (`$TESTENV_DIR/*.pid`).
fn server_pids() -> (u32, u32) {
    let dir = std::env::var("TESTENV_DIR").expect("TESTENV_DIR (make bench sets it)");
    let pid = |name: &str| {
        std::fs::read_to_string(format!("{dir}/{name}.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
            .unwrap_or_else(|| panic!("{dir}/{name}.pid"))
    };
    (pid("apiserver"), pid("etcd"))
}

/// CPU seconds of (this process or enoki, the API server, etcd) now.
fn cpu_now(client: u32) -> [f64; 3] {
    let (apiserver, etcd) = server_pids();
    [
        cpu_seconds(client),
        cpu_seconds(apiserver),
        cpu_seconds(etcd),
    ]
}

/// Microseconds of CPU per write of each process between two `cpu_now` readings.
fn per_write_us(before: [f64; 3], after: [f64; 3], writes: usize) -> [f64; 3] {
    let mut out = [0.0; 3];
    for i in 0..3 {
        out[i] = (after[i] - before[i]) / writes as f64 * 1e6;
    }
    out
}

/// `perf record` of process `pid` (its own threads; DWARF call graphs, so `perf report -G`
/// shows callers), when `BENCH_PERF` is set; stopped and summarised by [`perf_report`].
fn perf_start(pid: u32, name: &str) -> Option<(std::process::Child, std::path::PathBuf)> {
    std::env::var_os("BENCH_PERF")?;
    let out = harness::workspace_root().join(format!("target/bench-perf-{name}.data"));
    let child = std::process::Command::new("perf")
        .args([
            "record",
            "--no-inherit",
            "--call-graph",
            "dwarf,16384",
            "-F",
            "999",
            "-p",
            &pid.to_string(),
            "-o",
        ])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("perf (BENCH_PERF is set)");
    std::thread::sleep(Duration::from_millis(300));
    Some((child, out))
}

/// Stops `perf record` and prints enoki's CPU by shared object and its top symbols.
fn perf_report(perf: Option<(std::process::Child, std::path::PathBuf)>, during: &str) {
    let Some((mut child, out)) = perf else {
        return;
    };
    let _ = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let _ = child.wait();
    for sort in ["dso", "symbol"] {
        let report = std::process::Command::new("perf")
            .args(["report", "--stdio", "--no-children", "--sort", sort, "-i"])
            .arg(&out)
            .output()
            .expect("perf report");
        let text = String::from_utf8_lossy(&report.stdout);
        println!(
            "
`perf report --sort {sort}` of enoki during {during} (top 25):
"
        );
        println!("```");
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .take(25)
        {
            println!("{}", line.chars().take(140).collect::<String>());
        }
        println!("```");
    }
}

fn items(prefix: &str, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{prefix}{i}")},
                "data": {"index": i.to_string(), "payload": "x".repeat(64)}})
        })
        .collect()
}

/// The raw floor: `n` server-side applies of the items from a plain client.
async fn raw_apply(env: &TestEnv, objects: &[Value], concurrency: usize) -> Duration {
    let cms: Api<ConfigMap> = env.api();
    let pp = PatchParams::apply("bench-raw").force();
    let start = Instant::now();
    let results: Vec<_> = futures::stream::iter(objects.iter().map(|o| {
        let (cms, pp) = (cms.clone(), pp.clone());
        async move {
            let name = o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            cms.patch(&name, &pp, &Patch::Apply(o)).await
        }
    }))
    .buffer_unordered(concurrency)
    .collect()
    .await;
    let elapsed = start.elapsed();
    assert!(results.iter().all(Result::is_ok), "raw applies failed");
    elapsed
}

/// The protocol floor: the writes any reconciler of Eno's API makes per Composition, from a
/// plain client with no reads and nothing between them — the input and the Composition created
/// (as the fleet's clients do), its finalizer (here an annotation of the same size of write,
/// so nothing is left blocking), the ResourceSlice created, its `per` objects server-side
/// applied (at once), the slice's status and the Composition's status written once each.
/// `concurrency` Compositions at a time. No controller runs meanwhile (the enoki of the
/// `many` case starts later, in a namespace of its own); everything written is deleted
/// afterwards, outside the timing.
async fn protocol_floor(env: &TestEnv, comps: usize, per: usize, concurrency: usize) -> Duration {
    let start = Instant::now();
    futures::stream::iter(0..comps)
        // One request in flight per Composition: `concurrency` in all, as the raw floor.
        .for_each_concurrent(concurrency, |i| {
            protocol_one(env, i, items(&format!("p{i}-"), per), 1)
        })
        .await;
    let elapsed = start.elapsed();
    protocol_cleanup(env).await;
    elapsed
}

/// What Eno's API needs for one Composition `i` of `objects`, from a plain client: its input
/// and the Composition, the finalizer, the ResourceSlice, the objects (`within` requests in
/// flight), the slice's status and the Composition's.
async fn protocol_one(env: &TestEnv, i: usize, objects: Vec<Value>, within: usize) {
    let cms: Api<ConfigMap> = env.api();
    let compositions: Api<crds::Composition> = env.api();
    let slices: Api<crds::ResourceSlice> = env.api();
    let pp = PatchParams::apply("bench-protocol").force();
    let input = format!("items-{i}");
    harness::set_echo_items(env, &input, &Value::Array(objects.clone())).await;
    let name = format!("proto-{i}");
    harness::apply_composition(env, &name, "bench-protocol-none", &input, json!({})).await;
    let mark = json!({"metadata": {"annotations": {"bench.enoki.dev/finalizer": "x"}}});
    compositions
        .patch(&name, &PatchParams::default(), &Patch::Merge(&mark))
        .await
        .expect("the finalizer's write");
    let slice = crds::ResourceSlice::new(
        &format!("{name}-slice"),
        crds::ResourceSliceSpec {
            synthesis_uuid: format!("uuid-{i}"),
            resources: objects
                .iter()
                .map(|o| crds::Manifest {
                    manifest: o.to_string(),
                    ..crds::Manifest::default()
                })
                .collect(),
            compact_bytes: None,
        },
    );
    slices
        .create(&kube::api::PostParams::default(), &slice)
        .await
        .expect("the ResourceSlice");
    let (cms, pp) = (&cms, &pp);
    futures::stream::iter(&objects)
        .for_each_concurrent(within, |o| async move {
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            cms.patch(name, pp, &Patch::Apply(o))
                .await
                .expect("a protocol apply");
        })
        .await;
    let states: Vec<Value> = (0..objects.len())
        .map(|_| json!({"reconciled": true, "ready": "2026-01-01T00:00:00Z"}))
        .collect();
    slices
        .patch_status(
            &format!("{name}-slice"),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"resources": states}})),
        )
        .await
        .expect("the slice's status");
    compositions
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"simplified": {"status": "Ready"}}})),
        )
        .await
        .expect("the Composition's status");
}

/// Deletes what the protocol floors wrote.
async fn protocol_cleanup(env: &TestEnv) {
    let cms: Api<ConfigMap> = env.api();
    let compositions: Api<crds::Composition> = env.api();
    let slices: Api<crds::ResourceSlice> = env.api();
    let all = ListParams::default();
    delete_all(&compositions, &all, "protocol floor's Compositions").await;
    delete_all(&slices, &all, "protocol floor's ResourceSlices").await;
    delete_all(&cms, &created_here(), "protocol floor's ConfigMaps").await;
}

/// The ConfigMaps a bench created in its namespace (not a root CA ConfigMap, which a control
/// plane that publishes one puts back).
fn created_here() -> ListParams {
    ListParams::default().fields("metadata.name!=kube-root-ca.crt")
}

fn at(t: &str) -> k8s_openapi::jiff::Timestamp {
    t.parse().expect("an RFC 3339 time")
}

/// (Composition applied → enoki's first ConfigMap write, first → last write), from the
/// audit log.
fn write_phase(env: &TestEnv, since: &str) -> (Duration, Duration) {
    let writes: Vec<String> = harness::audited_requests(&env.namespace, since)
        .into_iter()
        .filter(|r| r.by_enoki() && r.verb == "patch" && r.resource == "configmaps")
        .map(|r| r.received)
        .collect();
    let first = writes.iter().min().expect("enoki wrote");
    let last = writes.iter().max().expect("enoki wrote");
    let span = |a: &str, b: &str| {
        let d = at(b).duration_since(at(a));
        Duration::try_from(d).unwrap_or_default()
    };
    (span(since, first), span(first, last))
}

fn kubectl_apply(env: &TestEnv, objects: &[Value]) -> Duration {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let path = std::env::temp_dir().join(format!("bench-{}.json", env.namespace));
    std::fs::write(&path, list.to_string()).unwrap();
    let start = Instant::now();
    let out = std::process::Command::new("kubectl")
        .args(["apply", "--server-side", "-n", &env.namespace, "-f"])
        .arg(&path)
        .env("KUBECONFIG", harness::kubeconfig_path())
        .output()
        .expect("kubectl runs");
    let elapsed = start.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    elapsed
}

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

async fn converge_and_steady(run_steady: bool) {
    let n = 1000;
    let objects = items("cm", n);
    println!("\n## converge: one Composition of {n} ConfigMaps\n");
    println!("| what | wall time | vs best raw floor |");
    println!("| --- | --- | --- |");
    let mut floors = Vec::new();
    let mut floor_cpu = Vec::new();
    for c in [4, 8, 16, 32] {
        let env = TestEnv::new().await;
        let before = cpu_now(std::process::id());
        floors.push((c, raw_apply(&env, &objects, c).await));
        floor_cpu.push(per_write_us(before, cpu_now(std::process::id()), n));
    }
    let (best_i, &(best_c, best)) = floors
        .iter()
        .enumerate()
        .min_by_key(|(_, (_, d))| *d)
        .unwrap();
    let best_cpu = floor_cpu[best_i];
    for (c, d) in &floors {
        println!(
            "| raw server-side apply, concurrency {c} | {:.2} s | {:.2}× |",
            d.as_secs_f64(),
            d.as_secs_f64() / best.as_secs_f64()
        );
    }
    let env = TestEnv::new().await;
    let k = kubectl_apply(&env, &objects);
    println!(
        "| one `kubectl apply --server-side` | {:.2} s | {:.2}× |",
        k.as_secs_f64(),
        k.as_secs_f64() / best.as_secs_f64()
    );
    // The protocol floor of this Composition: the same writes at the best concurrency, plus
    // what Eno's API asks (input, Composition, finalizer, slice, the statuses).
    let penv = TestEnv::new().await;
    let pstart = Instant::now();
    protocol_one(&penv, 0, objects.clone(), best_c).await;
    let protocol = pstart.elapsed();
    protocol_cleanup(&penv).await;
    println!(
        "| protocol floor: the same writes (concurrency {best_c}) with the input, Composition, finalizer, ResourceSlice of 1,000 manifests and the two statuses, plain client | {:.2} s | {:.2}× |",
        protocol.as_secs_f64(),
        protocol.as_secs_f64() / best.as_secs_f64()
    );
    let mut started_at: Vec<String> = Vec::new();
    for apply_concurrency in ["16", "32"] {
        let env = TestEnv::new().await;
        let synth = install_synthesizer(&env, "echo", &echo_module()).await;
        harness::set_echo_items(&env, "items", &Value::Array(objects.clone())).await;
        let enoki = Enoki::start_with(
            &env.namespace,
            &["--apply-concurrency", apply_concurrency, "--resync", "2s"],
        );
        wait_readyz(&enoki).await;
        // Warm: one Composition of one ConfigMap first makes the process compile and load
        // the module and start the ConfigMap watch (what a running controller has done
        // already); the figure is then the protocol's own work and the writes.
        let warm = items("warm-", 1);
        harness::set_echo_items(&env, "warm-items", &Value::Array(warm)).await;
        harness::apply_composition(&env, "warm", &synth, "warm-items", json!({})).await;
        let _ = wait_ready(&env, "warm", Duration::from_secs(300)).await;
        let start = Instant::now();
        let since = harness::now_rfc3339();
        started_at.push(since.clone());
        let profiled = apply_concurrency == "32";
        let perf = if profiled {
            perf_start(enoki.pid(), "converge")
        } else {
            None
        };
        let cpu_before = cpu_now(enoki.pid());
        harness::apply_composition(&env, "echo", &synth, "items", json!({})).await;
        let _ = wait_ready(&env, "echo", Duration::from_secs(300)).await;
        let d = start.elapsed();
        let enoki_cpu = per_write_us(cpu_before, cpu_now(enoki.pid()), n);
        println!(
            "| enoki, Composition applied → Ready, apply concurrency {apply_concurrency} | {:.2} s | {:.2}× (floor at concurrency {best_c}); {:.2}× the protocol floor |",
            d.as_secs_f64(),
            d.as_secs_f64() / best.as_secs_f64(),
            d.as_secs_f64() / protocol.as_secs_f64()
        );
        let (before, writing) = write_phase(&env, started_at.last().expect("recorded"));
        println!(
            "| … of which: Composition applied → first write (finalizer, synthesis, slice, status; the module already loaded) | {:.2} s | |",
            before.as_secs_f64()
        );
        println!(
            "| … of which: first → last of the 1,000 writes (audit log) | {:.2} s | {:.2}× |",
            writing.as_secs_f64(),
            writing.as_secs_f64() / best.as_secs_f64()
        );
        if profiled {
            println!("\n### CPU per write, microseconds (the same {n} server-side applies)\n");
            println!("| who | the writing client | kube-apiserver | etcd |");
            println!("| --- | --- | --- | --- |");
            println!(
                "| raw client, concurrency {best_c} (floor) | {:.0} | {:.0} | {:.0} |",
                best_cpu[0], best_cpu[1], best_cpu[2]
            );
            println!(
                "| enoki, Composition applied → Ready (also finalizer, synthesis, slice, status) | {:.0} | {:.0} | {:.0} |",
                enoki_cpu[0], enoki_cpu[1], enoki_cpu[2]
            );
            println!(
                "| enoki / raw client | {:.2}× | {:.2}× | {:.2}× |",
                enoki_cpu[0] / best_cpu[0].max(1e-9),
                enoki_cpu[1] / best_cpu[1].max(1e-9),
                enoki_cpu[2] / best_cpu[2].max(1e-9)
            );
            perf_report(perf, "the write phase");
        }
        if run_steady && apply_concurrency == "32" {
            steady(&env, &enoki, n).await;
        }
    }
}

async fn steady(env: &TestEnv, enoki: &Enoki, n: usize) {
    tokio::time::sleep(Duration::from_secs(5)).await;
    let checks = || enoki.metric("enoki_resource_checks_total").unwrap_or(0.0);
    let (c0, cpu0) = (checks(), cpu_seconds(enoki.pid()));
    let since = harness::now_rfc3339();
    let window = Duration::from_secs(30);
    tokio::time::sleep(window).await;
    let (c1, cpu1) = (checks(), cpu_seconds(enoki.pid()));
    let requests: Vec<_> = harness::audited_requests(&env.namespace, &since)
        .into_iter()
        .filter(harness::Request::by_enoki)
        .collect();
    let gets = requests.iter().filter(|r| r.verb == "get").count();
    let writes = requests.iter().filter(|r| r.is_write()).count();
    let resyncs = (c1 - c0) / n as f64;
    let cpu = cpu1 - cpu0;
    println!("\n## steady state: {n} in-sync resources, resync every 2 s, {window:?} window\n");
    println!("| figure | value |");
    println!("| --- | --- |");
    println!("| resyncs of all {n} resources | {resyncs:.1} |");
    println!("| GETs by enoki | {gets} |");
    println!("| writes by enoki | {writes} |");
    println!("| enoki CPU (whole process, incl. watches) | {cpu:.3} s |");
    println!(
        "| resource checks per CPU-second | {:.0} |",
        (c1 - c0) / cpu.max(0.01)
    );
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

async fn many() {
    let comps = count_from_env("BENCH_MANY", 10_000);
    let per = 10;
    // The floor: the same objects server-side applied by a plain client (concurrency 32,
    // the best of the converge case) in a namespace of their own.
    let floor_env = TestEnv::new().await;
    let all_objects: Vec<Value> = (0..comps)
        .flat_map(|i| items(&format!("c{i}-"), per))
        .collect();
    let floor = raw_apply(&floor_env, &all_objects, 32).await;
    drop(all_objects);
    // The floors' objects are deleted before enoki starts: the API server and etcd then hold
    // the same as when the floors ran.
    let floor_cms: Api<ConfigMap> = floor_env.api();
    delete_all(&floor_cms, &created_here(), "raw floor's ConfigMaps").await;
    let protocol_env = TestEnv::new().await;
    let protocol = protocol_floor(&protocol_env, comps, per, 32).await;
    let env = TestEnv::new().await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let concurrency = count_from_env("BENCH_CONCURRENCY", 8).to_string();
    // `BENCH_RESYNC` (e.g. `5s`) shortens the resync so the steady window holds several.
    let resync = std::env::var("BENCH_RESYNC").unwrap_or_else(|_| "5m".into());
    let mut args = vec!["--concurrency", concurrency.as_str(), "--resync", &resync];
    args.extend(UNTHROTTLED);
    let enoki = Enoki::start_with(&env.namespace, &args);
    wait_readyz(&enoki).await;
    let (_, rss_idle) = rss_mib(enoki.pid());
    let (envr, synth) = (&env, &synth);
    // The fixed base, as in the shards case: WARM Compositions make enoki compile and load
    // the module, run its instance pool and start its watches before the clock starts.
    warm_up(envr, synth, WARM).await;
    let (rss_warm, _) = rss_mib(enoki.pid());
    let since = harness::now_rfc3339();
    let start = Instant::now();
    futures::stream::iter(0..comps)
        .for_each_concurrent(16, |i| async move {
            let cm = format!("items-{i}");
            let objects = items(&format!("c{i}-"), per);
            harness::set_echo_items(envr, &cm, &Value::Array(objects)).await;
            harness::apply_composition(envr, &format!("comp-{i}"), synth, &cm, json!({})).await;
        })
        .await;
    let created = start.elapsed();
    let mut ready = 0;
    while start.elapsed() < Duration::from_secs(3600) {
        ready = count_ready(&env).await.saturating_sub(WARM);
        if ready == comps {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let all = start.elapsed();
    let queue = [
        enoki.metric("enoki_queue_wait_seconds_sum").unwrap_or(0.0),
        enoki
            .metric("enoki_queue_wait_seconds_count")
            .unwrap_or(0.0),
        enoki
            .metric("enoki_composition_reconciles_total")
            .unwrap_or(0.0),
    ];
    let per_composition = requests_per_composition(&env, &since, comps + WARM);
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (rss, peak) = rss_mib(enoki.pid());
    // Steady state at the default resync (5 min): a window longer than one resync.
    let window = Duration::from_secs(count_from_env("BENCH_STEADY_SECS", 330) as u64);
    let before = steady_counters(&enoki);
    let cpu0 = cpu_seconds(enoki.pid());
    let perf = perf_start(enoki.pid(), "many-steady");
    tokio::time::sleep(window).await;
    let after = steady_counters(&enoki);
    let cpu = cpu_seconds(enoki.pid()) - cpu0;
    perf_report(perf, "the steady window");
    let (rss_steady, _) = rss_mib(enoki.pid());
    println!("\n## many: {comps} Compositions × {per} ConfigMaps\n");
    println!("| figure | value |");
    println!("| --- | --- |");
    println!(
        "| raw server-side apply of the same {} objects from a plain client, concurrency 32 (floor) | {:.1} s |",
        comps * per,
        floor.as_secs_f64()
    );
    println!(
        "| protocol floor: per Composition the writes Eno's API needs ({} in all: input, Composition, finalizer, ResourceSlice, its {per} objects, the slice's and the Composition's status), plain client, 32 requests in flight | {:.1} s ({:.2}× the floor) |",
        comps * (per + 6),
        protocol.as_secs_f64(),
        protocol.as_secs_f64() / floor.as_secs_f64()
    );
    println!(
        "| Compositions and inputs created (16 clients) | {:.1} s |",
        created.as_secs_f64()
    );
    println!(
        "| all {ready}/{comps} Ready, from the first create | {:.1} s ({:.2}× the floor, {:.2}× the protocol floor) |",
        all.as_secs_f64(),
        all.as_secs_f64() / floor.as_secs_f64(),
        all.as_secs_f64() / protocol.as_secs_f64()
    );
    println!(
        "| enoki RSS idle / after {WARM} warm-up Compositions (the fixed base) / after (peak) | {rss_idle:.0} MiB / {rss_warm:.0} MiB / {rss:.0} MiB ({peak:.0} MiB) |"
    );
    println!(
        "| enoki RSS per Composition above the fixed base; above the idle process (the {WARM} warm-up Compositions counted) | {:.1} KiB; {:.1} KiB |",
        (rss - rss_warm) * 1024.0 / comps as f64,
        (rss - rss_idle) * 1024.0 / (comps + WARM) as f64
    );
    println!(
        "| steady state, {:.0} s window, `--resync {resync}`: GETs of managed objects / writes / resource checks / all API requests | {:.0} / {:.0} / {:.0} / {:.0} |",
        window.as_secs_f64(),
        after[0] - before[0],
        after[1] - before[1],
        after[2] - before[2],
        after[3] - before[3]
    );
    println!(
        "| enoki CPU in that window; resource checks per CPU-second; RSS at its end | {cpu:.2} s; {:.0}; {rss_steady:.0} MiB |",
        (after[2] - before[2]) / cpu.max(0.01)
    );
    println!(
        "| until all were Ready: passes per Composition; mean wait in the queue | {:.2}; {:.3} s |",
        queue[2] / (comps + WARM) as f64,
        queue[0] / queue[1].max(1.0)
    );
    println!("| until all were Ready, enoki's requests per Composition | {per_composition} |");
    drop(enoki);
    // Leave none of the 100,000 objects to the namespace's background deletion: a later case
    // (its cluster-wide metadata watch, the API server's load) would see them.
    let cms: Api<ConfigMap> = env.api();
    delete_all(&cms, &created_here(), "many's ConfigMaps").await;
}

/// enoki's requests in the namespace since `since` (the audit log) per Composition, by verb
/// and resource (a refused one with its code), most first.
fn requests_per_composition(env: &TestEnv, since: &str, comps: usize) -> String {
    let mut by: std::collections::BTreeMap<String, usize> = Default::default();
    for r in harness::audited_requests(&env.namespace, since)
        .into_iter()
        .filter(harness::Request::by_enoki)
        .filter(|r| r.verb != "watch" && r.verb != "list")
    {
        let code = if r.code >= 400 {
            format!(" ({})", r.code)
        } else {
            String::new()
        };
        *by.entry(format!("{} {}{code}", r.verb, r.resource))
            .or_default() += 1;
    }
    let mut rows: Vec<(String, usize)> = by.into_iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    rows.iter()
        .map(|(k, n)| format!("{k}: {:.2}", *n as f64 / comps as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Applies `count` Compositions of one ConfigMap each and waits until they are Ready (5
/// minutes at most), then for a sweep (every 15 s) to settle the caches.
async fn warm_up(env: &TestEnv, synth: &str, count: usize) {
    futures::stream::iter(0..count)
        .for_each_concurrent(16, |i| async move {
            let cm = format!("warm-items-{i}");
            harness::set_echo_items(env, &cm, &Value::Array(items(&format!("w{i}-"), 1))).await;
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
            converge_and_steady(only.contains("steady")).await;
        }
        if only.contains("many") {
            many().await;
        }
        if only.contains("outage") {
            outage().await;
        }
        if only.contains("shards") {
            shards::shards().await;
        }
    });
}
