//! The many case: a fleet of small Compositions from the first create to all Ready, against
//! the raw and protocol floors, then a steady window.

use super::*;

/// What the many case measured.
struct Many {
    comps: usize,
    per: usize,
    floor: Duration,
    protocol: Duration,
    created: Duration,
    ready: usize,
    all: Duration,
    /// enoki's RSS idle, after the warm-up, at the end and its peak, after the steady window.
    rss: [f64; 5],
    resync: String,
    window: Duration,
    /// [`steady_counters`] before and after the steady window.
    counters: [[f64; 4]; 2],
    cpu: f64,
    /// Queue wait sum and count, reconciles.
    queue: [f64; 3],
    per_composition: String,
}

pub(crate) async fn many() {
    let comps = count_from_env("BENCH_MANY", 10_000);
    let per = 10;
    // The floors' namespaces are kept until the case ends, as the fleet's is.
    let (floor, protocol, _floor_envs) = fleet_floors(comps, per).await;
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
    // The fixed base: WARM Compositions of one ConfigMap make enoki compile and load the
    // module, run its instance pool and start its watches before the clock starts.
    warm_up(&env, &synth, WARM, 1).await;
    let (rss_warm, _) = rss_mib(enoki.pid());
    let since = harness::now_rfc3339();
    let start = Instant::now();
    create_fleet(&env, &synth, comps, per).await;
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
    report(&Many {
        comps,
        per,
        floor,
        protocol,
        created,
        ready,
        all,
        rss: [rss_idle, rss_warm, rss, peak, rss_steady],
        resync,
        window,
        counters: [before, after],
        cpu,
        queue,
        per_composition,
    });
    drop(enoki);
    // Leave none of the 100,000 objects to the namespace's background deletion: a later case
    // (its cluster-wide metadata watch, the API server's load) would see them.
    let cms: Api<ConfigMap> = env.api();
    delete_all(&cms, &created_here(), "many's ConfigMaps").await;
}

/// The raw floor (the fleet's objects server-side applied by a plain client at 32 in flight,
/// the best of the converge case, in a namespace of their own) and the protocol floor, with
/// the two namespaces.
async fn fleet_floors(comps: usize, per: usize) -> (Duration, Duration, [TestEnv; 2]) {
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
    (floor, protocol, [protocol_env, floor_env])
}

/// Prints the many case's table.
fn report(m: &Many) {
    let (comps, per) = (m.comps, m.per);
    let [rss_idle, rss_warm, rss, peak, rss_steady] = m.rss;
    let [before, after] = m.counters;
    let (floor, protocol, all) = (m.floor, m.protocol, m.all);
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
        m.created.as_secs_f64()
    );
    println!(
        "| all {}/{comps} Ready, from the first create | {:.1} s ({:.2}× the floor, {:.2}× the protocol floor) |",
        m.ready,
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
        "| steady state, {:.0} s window, `--resync {}`: GETs of managed objects / writes / resource checks / all API requests | {:.0} / {:.0} / {:.0} / {:.0} |",
        m.window.as_secs_f64(),
        m.resync,
        after[0] - before[0],
        after[1] - before[1],
        after[2] - before[2],
        after[3] - before[3]
    );
    println!(
        "| enoki CPU in that window; resource checks per CPU-second; RSS at its end | {:.2} s; {:.0}; {rss_steady:.0} MiB |",
        m.cpu,
        (after[2] - before[2]) / m.cpu.max(0.01)
    );
    println!(
        "| until all were Ready: passes per Composition; mean wait in the queue | {:.2}; {:.3} s |",
        m.queue[2] / (comps + WARM) as f64,
        m.queue[0] / m.queue[1].max(1.0)
    );
    println!(
        "| until all were Ready, enoki's requests per Composition | {} |",
        m.per_composition
    );
}

/// enoki's requests in the namespace since `since` (the audit log) per Composition, by verb
/// and resource (a refused one with its code), most first.
pub(crate) fn requests_per_composition(env: &TestEnv, since: &str, comps: usize) -> String {
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
