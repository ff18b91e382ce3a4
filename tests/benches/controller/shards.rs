//! The shards case of the controller benchmarks: the same fleet reconciled by one unsharded
//! replica and by two replicas with `--shards 4`; time until all are Ready, and per replica
//! its memory above its idle process and above its warm base.

use super::*;

/// One replica's figures after a fleet converged.
struct ReplicaFigures {
    shards: f64,
    compositions: f64,
    objects: f64,
    /// RSS once its shards were held, before any Composition existed.
    idle: f64,
    /// RSS after the warm-up Compositions (`WARM`) were Ready: the process with the module
    /// compiled and loaded, its instance pool used and its watches started — the fixed base
    /// the fleet's memory is counted above.
    warm: f64,
    rss: f64,
    /// Anonymous RSS idle and at the end.
    idle_anon: f64,
    anon: f64,
    /// CPU seconds from the fleet's first create to all Ready.
    cpu: f64,
}

/// `replicas` enoki processes (`--shards shards` when more than 1) reconcile `comps`
/// Compositions of `per` ConfigMaps: (time until all are Ready, figures per replica, CPU
/// seconds of the API server and etcd meanwhile).
async fn fleet(
    comps: usize,
    per: usize,
    replicas: usize,
    shards: u32,
) -> (Duration, Vec<ReplicaFigures>, f64) {
    // What an earlier fleet left to the control plane (its namespace's deletion, the garbage
    // collector's pass over its slices) is done before this one starts.
    control_plane_idle().await;
    let env = TestEnv::new().await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let counter = ReadyCount::start(&env).await;
    let ns = env.namespace.clone();
    let count = shards.to_string();
    let mut args = vec!["--concurrency", "8"];
    args.extend(UNTHROTTLED);
    if shards > 1 {
        args.extend([
            "--shards",
            count.as_str(),
            "--leader-election-namespace",
            ns.as_str(),
        ]);
    }
    let fleet: Vec<Enoki> = (0..replicas)
        .map(|r| {
            let host = format!("bench-{r}");
            Enoki::start_as(
                &ns,
                &args,
                &harness::kubeconfig_path(),
                &[("HOSTNAME", host.as_str())],
            )
        })
        .collect();
    for e in &fleet {
        wait_readyz(e).await;
    }
    // Every shard held before the clock starts.
    let held = || {
        fleet
            .iter()
            .filter_map(|e| e.metric("enoki_shard_held"))
            .sum::<f64>()
    };
    while held() < f64::from(shards) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let idle: Vec<(f64, f64)> = fleet
        .iter()
        .map(|e| (rss_mib(e.pid()).0, anon_rss_mib(e.pid())))
        .collect();
    let (envr, synth) = (&env, &synth);
    // The warm-up: WARM Compositions (spread over the shards by their UIDs) make every
    // replica compile and load the module, run its instance pool and start its watches; what
    // that costs does not grow with the fleet.
    warm_up(envr, synth).await;
    let warm: Vec<f64> = fleet.iter().map(|e| rss_mib(e.pid()).0).collect();
    let cpu0: Vec<f64> = fleet.iter().map(|e| cpu_seconds(e.pid())).collect();
    let plane0 = cpu_seconds_named(CONTROL_PLANE);
    // Marks the clock's start for whoever profiles the control plane meanwhile.
    eprintln!("shards: fleet of {replicas} replica(s) started");
    let start = Instant::now();
    futures::stream::iter(0..comps)
        .for_each_concurrent(16, |i| async move {
            let cm = format!("items-{i}");
            let objects = items(&format!("c{i}-"), per);
            harness::set_echo_items(envr, &cm, &Value::Array(objects)).await;
            harness::apply_composition(envr, &format!("comp-{i}"), synth, &cm, json!({})).await;
        })
        .await;
    loop {
        let ready = counter.ready().saturating_sub(WARM);
        if ready == comps {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "{ready}/{comps} Ready after 15 minutes"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let all = start.elapsed();
    let cpu: Vec<f64> = fleet
        .iter()
        .zip(cpu0)
        .map(|(e, c)| cpu_seconds(e.pid()) - c)
        .collect();
    let plane = cpu_seconds_named(CONTROL_PLANE) - plane0;
    // The sweep publishes the cache sizes every 15 s.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let figures = fleet
        .iter()
        .zip(idle)
        .zip(warm)
        .zip(cpu)
        .map(|(((e, (idle, idle_anon)), warm), cpu)| ReplicaFigures {
            shards: e.metric("enoki_shard_held").unwrap_or(0.0),
            compositions: e.metric("enoki_shard_compositions").unwrap_or(0.0),
            objects: e.metric("enoki_shard_managed_objects").unwrap_or(0.0),
            idle,
            warm,
            rss: rss_mib(e.pid()).0,
            idle_anon,
            anon: anon_rss_mib(e.pid()),
            cpu,
        })
        .collect();
    drop(fleet);
    // Leave nothing labelled behind: the next fleet's cluster-wide metadata watch would
    // count it.
    let cms: Api<ConfigMap> = env.api();
    let managed = ListParams::default().labels("enoki.dev/managed-by");
    delete_all(&cms, &managed, "managed ConfigMaps").await;
    // The namespace goes with its Compositions, inputs and slices: gone before the next
    // fleet starts, so that fleet's clock does not pay for this one's deletion.
    let (client, ns) = (env.client.clone(), env.namespace.clone());
    drop(env);
    namespace_gone(&client, &ns).await;
    (all, figures, plane)
}

/// Waits until the namespace `ns` (deleted) no longer exists.
async fn namespace_gone(client: &kube::Client, ns: &str) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let start = Instant::now();
    while namespaces.get_opt(ns).await.ok().flatten().is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "namespace {ns} still there 15 minutes after its deletion"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "shards: namespace {ns} gone after {:.0} s",
        start.elapsed().as_secs_f64()
    );
}

/// The control plane's processes, whose CPU the shards case reports.
const CONTROL_PLANE: &[&str] = &["kube-apiserver", "etcd"];

/// Waits (up to 10 minutes) until kube-apiserver, etcd and kube-controller-manager together
/// use less than 15 % of a core over 5 s.
async fn control_plane_idle() {
    // `/proc/*/comm` keeps 15 characters of a name.
    const ALL: &[&str] = &["kube-apiserver", "etcd", "kube-controller"];
    let start = Instant::now();
    loop {
        let before = cpu_seconds_named(ALL);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let used = cpu_seconds_named(ALL) - before;
        if used < 0.75 || start.elapsed() > Duration::from_secs(600) {
            eprintln!(
                "shards: control plane at {:.0} % of a core after {:.0} s",
                used / 5.0 * 100.0,
                start.elapsed().as_secs_f64()
            );
            return;
        }
    }
}

/// The shards case: `BENCH_SHARDS_ROUNDS` (2) rounds of the two fleets, in alternating order
/// (unsharded first, then sharded first): what drifts along a run (etcd's history, the page
/// cache) falls on both setups alike. Ratios are against the unsharded fleets' mean.
pub(super) async fn shards() {
    let (comps, per) = (count_from_env("BENCH_SHARDS", 5_000), 10);
    let rounds = count_from_env("BENCH_SHARDS_ROUNDS", 2);
    let (mut base, mut sharded) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        if round % 2 == 0 {
            base.push((2 * round + 1, fleet(comps, per, 1, 1).await));
            sharded.push((2 * round + 2, fleet(comps, per, 2, 4).await));
        } else {
            sharded.push((2 * round + 1, fleet(comps, per, 2, 4).await));
            base.push((2 * round + 2, fleet(comps, per, 1, 1).await));
        }
    }
    println!("\n## shards: {comps} Compositions × {per} ConfigMaps, {rounds} round(s)\n");
    println!(
        "| fleet (order in the run) | all Ready | vs the unsharded mean | replica: shards held, Compositions / managed objects cached, RSS (above its idle RSS), share of the unsharded mean above idle; the same above its warm base (after {WARM} warm-up Compositions); the same for anonymous RSS above idle (heap and stacks, without mapped code) | CPU-s from first create to all Ready: each replica; kube-apiserver + etcd |"
    );
    println!("| --- | --- | --- | --- | --- |");
    let unsharded = Unsharded::mean_of(&base);
    for (name, runs) in [
        ("1 replica, unsharded", &base),
        ("2 replicas, `--shards 4`", &sharded),
    ] {
        for (order, (t, figures, plane)) in runs {
            let per_replica: Vec<String> = figures.iter().map(|f| unsharded.share(f)).collect();
            let cpu: Vec<String> = figures.iter().map(|f| format!("{:.1}", f.cpu)).collect();
            println!(
                "| {name} ({order}) | {:.1} s | {:.2}x | {} | {}; {plane:.1} |",
                t.as_secs_f64(),
                t.as_secs_f64() / unsharded.time,
                per_replica.join("; "),
                cpu.join(" + ")
            );
        }
    }
    let sharded_time = mean(sharded.iter().map(|(_, (t, _, _))| t.as_secs_f64()));
    let warm_shares: Vec<String> = sharded
        .iter()
        .flat_map(|(_, (_, figures, _))| figures)
        .map(|f| format!("{:.2}x", (f.rss - f.warm) / unsharded.warm))
        .collect();
    println!(
        "\nMeans: all Ready {:.1} s unsharded, {sharded_time:.1} s sharded: {:.2}x; each sharded \
         replica's memory above its warm base against the unsharded mean: {}",
        unsharded.time,
        sharded_time / unsharded.time,
        warm_shares.join(", ")
    );
}

/// One fleet: its order in the run; its time until all Ready, its replicas' figures and the
/// control plane's CPU seconds.
type Run = (usize, (Duration, Vec<ReplicaFigures>, f64));

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = xs.fold((0.0, 0.0), |(s, n), x| (s + x, n + 1.0));
    if n == 0.0 { 0.0 } else { sum / n }
}

/// The unsharded fleets' means, the sharded replicas are measured against: time, and memory
/// above idle, above the warm base, and anonymous above idle (each at least 1 MiB).
struct Unsharded {
    time: f64,
    idle: f64,
    warm: f64,
    anon: f64,
}

impl Unsharded {
    fn mean_of(runs: &[Run]) -> Unsharded {
        let replicas = || runs.iter().flat_map(|(_, (_, figures, _))| figures);
        Unsharded {
            time: mean(runs.iter().map(|(_, (t, _, _))| t.as_secs_f64())),
            idle: mean(replicas().map(|f| f.rss - f.idle)).max(1.0),
            warm: mean(replicas().map(|f| f.rss - f.warm)).max(1.0),
            anon: mean(replicas().map(|f| f.anon - f.idle_anon)).max(1.0),
        }
    }

    /// One replica's cell: its figures and their shares of these means.
    fn share(&self, f: &ReplicaFigures) -> String {
        format!(
            "{:.0} shard(s), {:.0} / {:.0}, {:.0} MiB (+{:.0} MiB), {:.2}x; above its warm base ({:.0} MiB) +{:.0} MiB, {:.2}x; anonymous +{:.0} MiB, {:.2}x",
            f.shards,
            f.compositions,
            f.objects,
            f.rss,
            f.rss - f.idle,
            (f.rss - f.idle) / self.idle,
            f.warm,
            f.rss - f.warm,
            (f.rss - f.warm) / self.warm,
            f.anon - f.idle_anon,
            (f.anon - f.idle_anon) / self.anon
        )
    }
}
