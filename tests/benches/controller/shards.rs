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
    /// RSS after the warm-up Compositions (`WARM` times the replicas, spread by UID, each of
    /// the fleet's shape) were Ready: the process with the module compiled and loaded, its
    /// instance pool used, its watches started and objects applied — the fixed base the
    /// fleet's memory is counted above.
    warm: f64,
    /// The allocator's MiB in use then.
    warm_heap: f64,
    rss: f64,
    /// Anonymous RSS idle and at the end.
    idle_anon: f64,
    anon: f64,
    /// CPU seconds from the fleet's first create to all Ready.
    cpu: f64,
    /// The allocator's MiB in use and held free at the end (the last sweep's gauges).
    heap: (f64, f64),
    /// Inputs read with a GET since the process started (its warm-up too), and copies kept
    /// for a first read and names wanted for one at the end.
    input_gets: f64,
    arrived: f64,
    wanted: f64,
}

/// One fleet's result.
struct Fleet {
    namespace: String,
    /// From the first create to all Ready.
    time: Duration,
    replicas: Vec<ReplicaFigures>,
    /// CPU seconds of kube-apiserver, etcd and kube-controller-manager meanwhile.
    plane: [f64; 3],
    /// Requests in the previous fleet's namespace meanwhile (what its deletion left; 0 when
    /// the wait before the clock saw it through).
    leftover: usize,
}

/// `replicas` enoki processes (`--shards shards` when more than 1) reconcile `comps`
/// Compositions of `per` ConfigMaps, in a namespace of their own, after `previous` (the
/// previous fleet's namespace) is gone and the control plane is idle.
async fn fleet(
    (comps, per): (usize, usize),
    replicas: usize,
    shards: u32,
    previous: Option<&str>,
) -> Fleet {
    // What an earlier fleet left to the control plane (its namespace's deletion, the garbage
    // collector's pass over its slices) is done before this one starts.
    control_plane_idle().await;
    let env = TestEnv::new().await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let counter = ReadyCount::start(&env).await;
    let fleet = start_replicas(&env.namespace, replicas, shards).await;
    let idle: Vec<(f64, f64)> = fleet
        .iter()
        .map(|e| (rss_mib(e.pid()).0, anon_rss_mib(e.pid())))
        .collect();
    let (envr, synth) = (&env, &synth);
    // The warm-up: WARM Compositions of the fleet's shape per replica (spread over the shards
    // by their UIDs) make every replica compile and load the module, run its instance pool,
    // start its watches and apply objects; what that costs does not grow with the fleet.
    let warm_count = WARM * replicas;
    warm_up(envr, synth, warm_count, per).await;
    let warm: Vec<(f64, f64)> = fleet
        .iter()
        .map(|e| (rss_mib(e.pid()).0, heap_mib(e).0))
        .collect();
    let cpu0: Vec<f64> = fleet.iter().map(|e| cpu_seconds(e.pid())).collect();
    let plane0 = CONTROL_PLANE.map(|p| cpu_seconds_named(&[p]));
    let since = harness::now_rfc3339();
    // Marks the clock's start for whoever profiles the control plane meanwhile.
    eprintln!("shards: fleet of {replicas} replica(s) started");
    let start = Instant::now();
    create_fleet(envr, synth, comps, per).await;
    loop {
        let ready = counter.ready().saturating_sub(warm_count);
        if ready == comps {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(900),
            "{ready}/{comps} Ready after 15 minutes"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let time = start.elapsed();
    let cpu: Vec<f64> = fleet
        .iter()
        .zip(cpu0)
        .map(|(e, c)| cpu_seconds(e.pid()) - c)
        .collect();
    let mut plane = CONTROL_PLANE.map(|p| cpu_seconds_named(&[p]));
    for (p, p0) in plane.iter_mut().zip(plane0) {
        *p -= p0;
    }
    let leftover = previous.map_or(0, |p| harness::audited_requests(p, &since).len());
    // The sweep publishes the cache sizes every 15 s.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let replicas = figures(&fleet, shards, idle, warm, cpu);
    drop((fleet, counter));
    Fleet {
        namespace: teardown(env).await,
        time,
        replicas,
        plane,
        leftover,
    }
}

/// Starts the replicas and waits until each holds its share of the shards.
async fn start_replicas(ns: &str, replicas: usize, shards: u32) -> Vec<Enoki> {
    let count = shards.to_string();
    // The same reconciles in flight in all (8): the replicas share the API server (and here
    // its two cores) as one replica would.
    let concurrency = if replicas > 1 {
        count_from_env("BENCH_SHARDS_CONCURRENCY", 8 / replicas)
    } else {
        8
    }
    .to_string();
    let mut args = vec!["--concurrency", concurrency.as_str()];
    args.extend(UNTHROTTLED);
    if shards > 1 {
        // The default Lease duration (15 s), as installed.
        args.extend([
            "--shards",
            count.as_str(),
            "--leader-election-namespace",
            ns,
        ]);
    }
    let fleet: Vec<Enoki> = (0..replicas)
        .map(|r| {
            let host = format!("bench-{r}");
            let env = [("HOSTNAME", host.as_str())];
            Enoki::start_as(ns, &args, &harness::kubeconfig_path(), &env)
        })
        .collect();
    for e in &fleet {
        wait_readyz(e).await;
    }
    let start = Instant::now();
    while !holds_share(&fleet, shards) {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the replicas did not split the shards within 5 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    fleet
}

/// Whether every replica is up and holds its share of the shards (all of them unsharded).
fn holds_share(fleet: &[Enoki], shards: u32) -> bool {
    let share = f64::from(shards) / fleet.len() as f64;
    fleet
        .iter()
        .all(|e| e.metric("enoki_shard_held") == Some(share))
}

/// Each replica's figures at the end; panics when one is down or lost a shard meanwhile.
fn figures(
    fleet: &[Enoki],
    shards: u32,
    idle: Vec<(f64, f64)>,
    warm: Vec<(f64, f64)>,
    cpu: Vec<f64>,
) -> Vec<ReplicaFigures> {
    assert!(
        holds_share(fleet, shards),
        "a replica exited or its shards moved during the fleet"
    );
    fleet
        .iter()
        .zip(idle)
        .zip(warm)
        .zip(cpu)
        .map(
            |(((e, (idle, idle_anon)), (warm, warm_heap)), cpu)| ReplicaFigures {
                shards: e.metric("enoki_shard_held").unwrap_or(0.0),
                compositions: e.metric("enoki_shard_compositions").unwrap_or(0.0),
                objects: e.metric("enoki_shard_managed_objects").unwrap_or(0.0),
                idle,
                warm,
                warm_heap,
                rss: rss_mib(e.pid()).0,
                idle_anon,
                anon: anon_rss_mib(e.pid()),
                cpu,
                heap: heap_mib(e),
                input_gets: e.metric("enoki_input_gets_total").unwrap_or(0.0),
                arrived: e.metric_labelled("enoki_input_cache_objects", &[("kept", "arrived")]),
                wanted: e.metric("enoki_input_names_wanted").unwrap_or(0.0),
            },
        )
        .collect()
}

/// Deletes what the fleet made (its managed ConfigMaps, then its slices) and its namespace,
/// and waits until the namespace is gone (its Compositions and inputs with it), so the next
/// fleet's clock does not pay for this one's deletion (with `ENOKI_TEST_KEEP_NAMESPACES`,
/// only the ConfigMaps); returns its name.
async fn teardown(env: TestEnv) -> String {
    // Leave nothing labelled behind: the next fleet's cluster-wide metadata watch would
    // count it.
    let cms: Api<ConfigMap> = env.api();
    let managed = ListParams::default().labels("enoki.dev/managed-by");
    delete_all(&cms, &managed, "managed ConfigMaps").await;
    // The slices before their Compositions: the garbage collector then has no dependents of
    // a deleted Composition left to look up (one GET each, at its client's rate: minutes of
    // requests reaching into the next fleet's clock). The 5 s let its graph take in the
    // slices' deletions (the next clock's last column counts what is left anyway).
    if std::env::var_os("ENOKI_TEST_KEEP_NAMESPACES").is_none() {
        let slices: Api<crds::ResourceSlice> = env.api();
        delete_all(&slices, &ListParams::default(), "ResourceSlices").await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let (client, ns) = (env.client.clone(), env.namespace.clone());
    drop(env);
    namespace_gone(&client, &ns).await;
    ns
}

/// Waits until the namespace `ns` (deleted) no longer exists: not when namespaces are kept
/// (`ENOKI_TEST_KEEP_NAMESPACES`) or no kube-controller-manager runs to delete it.
async fn namespace_gone(client: &kube::Client, ns: &str) {
    if std::env::var_os("ENOKI_TEST_KEEP_NAMESPACES").is_some()
        || !any_process_named(&["kube-controller"])
    {
        eprintln!("shards: namespace {ns} left as it is");
        return;
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let start = Instant::now();
    // An error of the GET is not "gone": asked again.
    while !matches!(namespaces.get_opt(ns).await, Ok(None)) {
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

/// The control plane's processes, whose CPU the shards case reports (`/proc/*/comm` keeps
/// 15 characters of a name).
const CONTROL_PLANE: [&str; 3] = ["kube-apiserver", "etcd", "kube-controller"];

/// Waits (up to 10 minutes; then panics) until kube-apiserver, etcd and
/// kube-controller-manager together use less than 15 % of a core over 5 s. The processes are
/// found by name: one control plane on the machine.
async fn control_plane_idle() {
    const ALL: &[&str] = &CONTROL_PLANE;
    let start = Instant::now();
    loop {
        let before = cpu_seconds_named(ALL);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let used = cpu_seconds_named(ALL) - before;
        // Negative when one of them exited meanwhile: measured again.
        if (0.0..0.75).contains(&used) {
            eprintln!(
                "shards: control plane at {:.0} % of a core after {:.0} s",
                used / 5.0 * 100.0,
                start.elapsed().as_secs_f64()
            );
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "the control plane still used {:.0} % of a core after 10 minutes",
            used / 5.0 * 100.0
        );
    }
}

/// The shards case: `BENCH_SHARDS_ROUNDS` (2) rounds of the two fleets, in alternating order
/// (unsharded first, then sharded first): what drifts along a run (etcd's history, the page
/// cache) falls on both setups alike, evenly with an even number of rounds. Before them a
/// priming fleet of the same size, measured by no one, is reconciled and deleted, so every
/// measured fleet follows the deletion of one (`BENCH_SHARDS_PRIME=0` leaves it out). Ratios
/// are against the unsharded fleets' mean.
pub(super) async fn shards() {
    let (comps, per) = (count_from_env("BENCH_SHARDS", 5_000), 10);
    let rounds = count_from_env("BENCH_SHARDS_ROUNDS", 2);
    let (mut base, mut sharded): (Vec<Run>, Vec<Run>) = (Vec::new(), Vec::new());
    let mut previous: Option<String> = None;
    if std::env::var("BENCH_SHARDS_PRIME").as_deref() != Ok("0") {
        eprintln!("shards: a priming fleet (not measured)");
        previous = Some(fleet((comps, per), 1, 1, None).await.namespace);
    }
    for order in 1..=2 * rounds {
        // Rounds alternate which setup goes first: 1, 2 | 2, 1 | 1, 2 …
        let sharded_now = (order % 2 == 0) == ((order - 1) / 2 % 2 == 0);
        let run = if sharded_now {
            fleet((comps, per), 2, 4, previous.as_deref()).await
        } else {
            fleet((comps, per), 1, 1, previous.as_deref()).await
        };
        previous = Some(run.namespace.clone());
        if sharded_now {
            sharded.push((order, run));
        } else {
            base.push((order, run));
        }
    }
    println!("\n## shards: {comps} Compositions × {per} ConfigMaps, {rounds} round(s)\n");
    println!(
        "| fleet (order in the run) | all Ready | vs the unsharded mean | replica: shards held, Compositions / managed objects cached, RSS (above its idle RSS), share of the unsharded mean above idle; the same above its warm base (after {WARM} warm-up Compositions per replica); the same for anonymous RSS above idle (heap and stacks, without mapped code); the allocator's heap in use and held free; inputs read with a GET since the replica started, copies kept for a first read and names wanted for one | CPU-s from first create to all Ready: each replica; kube-apiserver + etcd + kube-controller-manager | requests in the previous fleet's namespace meanwhile |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    let unsharded = Unsharded::mean_of(&base);
    rows(&base, &sharded, &unsharded);
    let sharded_time = mean(sharded.iter().map(|(_, f)| f.time.as_secs_f64()));
    let warm_shares = shares_of(&sharded, |r| (r.rss - r.warm) / unsharded.warm);
    // Both sharded replicas hold the fleet once and a process's fixed base twice.
    let anon = mean(
        sharded
            .iter()
            .map(|(_, f)| f.replicas.iter().map(|r| r.anon).sum::<f64>() - unsharded.anon_total),
    );
    let heap_shares = shares_of(&sharded, |r| (r.heap.0 - r.warm_heap) / unsharded.heap);
    println!(
        "\nMeans: all Ready {:.1} s unsharded, {sharded_time:.1} s sharded: {:.2}x; each sharded \
         replica's memory above its warm base against the unsharded mean: {}; its allocator's \
         heap in use above the warm base's: {}; the sharded replicas' anonymous RSS together \
         above the unsharded replica's (a second process's fixed base, the second replica's \
         warm-up Compositions, each replica's stubs of the other's inputs): {anon:.0} MiB",
        unsharded.time,
        sharded_time / unsharded.time,
        warm_shares,
        heap_shares
    );
}

/// One fleet and its order in the run.
type Run = (usize, Fleet);

/// The table's rows: each fleet in the order of the run, unsharded first.
fn rows(base: &[Run], sharded: &[Run], unsharded: &Unsharded) {
    for (name, runs) in [
        ("1 replica, unsharded", base),
        ("2 replicas, `--shards 4`", sharded),
    ] {
        for (order, f) in runs {
            let per_replica: Vec<String> = f.replicas.iter().map(|r| unsharded.share(r)).collect();
            let cpu: Vec<String> = f.replicas.iter().map(|r| format!("{:.1}", r.cpu)).collect();
            println!(
                "| {name} ({order}) | {:.1} s | {:.2}x | {} | {}; {:.1} + {:.1} + {:.1} | {} |",
                f.time.as_secs_f64(),
                f.time.as_secs_f64() / unsharded.time,
                per_replica.join("; "),
                cpu.join(" + "),
                f.plane[0],
                f.plane[1],
                f.plane[2],
                f.leftover
            );
        }
    }
}

/// `share` of each replica of each sharded fleet: "(order) 0.50x, 0.51x; …".
fn shares_of(sharded: &[Run], share: impl Fn(&ReplicaFigures) -> f64) -> String {
    let fleets: Vec<String> = sharded
        .iter()
        .map(|(order, f)| {
            let shares: Vec<String> = f
                .replicas
                .iter()
                .map(|r| format!("{:.2}x", share(r)))
                .collect();
            format!("({order}) {}", shares.join(", "))
        })
        .collect();
    fleets.join("; ")
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = xs.fold((0.0, 0.0), |(s, n), x| (s + x, n + 1.0));
    if n == 0.0 { 0.0 } else { sum / n }
}

/// The allocator's MiB in use and in free chunks (the gauges of the last 15 s sweep).
fn heap_mib(e: &Enoki) -> (f64, f64) {
    const MIB: f64 = 1024.0 * 1024.0;
    (
        e.metric("enoki_heap_in_use_bytes").unwrap_or(0.0) / MIB,
        e.metric("enoki_heap_free_bytes").unwrap_or(0.0) / MIB,
    )
}

/// The unsharded fleets' means, the sharded replicas are measured against: time, and memory
/// above idle, above the warm base, and anonymous above idle.
struct Unsharded {
    time: f64,
    /// Anonymous RSS at the end.
    anon_total: f64,
    /// The allocator's heap in use above the warm base's.
    heap: f64,
    idle: f64,
    warm: f64,
    anon: f64,
}

impl Unsharded {
    fn mean_of(runs: &[Run]) -> Unsharded {
        let replicas = || runs.iter().flat_map(|(_, f)| &f.replicas);
        let means = Unsharded {
            time: mean(runs.iter().map(|(_, f)| f.time.as_secs_f64())),
            anon_total: mean(replicas().map(|f| f.anon)),
            heap: mean(replicas().map(|f| f.heap.0 - f.warm_heap)),
            idle: mean(replicas().map(|f| f.rss - f.idle)),
            warm: mean(replicas().map(|f| f.rss - f.warm)),
            anon: mean(replicas().map(|f| f.anon - f.idle_anon)),
        };
        assert!(
            means.idle >= 1.0 && means.warm >= 1.0 && means.anon >= 1.0,
            "the unsharded replica's memory did not grow with its fleet"
        );
        means
    }

    /// One replica's cell: its figures and their shares of these means.
    fn share(&self, f: &ReplicaFigures) -> String {
        format!(
            "{:.0} shard(s), {:.0} / {:.0}, {:.0} MiB (+{:.0} MiB), {:.2}x; above its warm base ({:.0} MiB) +{:.0} MiB, {:.2}x; anonymous +{:.0} MiB, {:.2}x; heap {:.1} MiB in use ({:.1} MiB at the warm base), {:.1} MiB free; {:.0} input GETs, {:.0} copies kept for a first read, {:.0} names wanted",
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
            (f.anon - f.idle_anon) / self.anon,
            f.heap.0,
            f.warm_heap,
            f.heap.1,
            f.input_gets,
            f.arrived,
            f.wanted
        )
    }
}
