//! The converge case (one Composition of 1,000 ConfigMaps against the floors) and the
//! steady state after it.

use super::*;

/// The floors of the converge case: the best raw concurrency and its time and CPU per
/// write, and the protocol floor at that concurrency.
struct Floors {
    best_c: usize,
    best: Duration,
    best_cpu: [f64; 3],
    protocol: Duration,
    /// The namespaces of `kubectl apply` and the protocol floor, kept until the case ends
    /// (a dropped one is deleted with its objects, load enoki's runs would share).
    _kept: [TestEnv; 2],
}

pub(crate) async fn converge_and_steady(run_steady: bool) {
    let n = 1000;
    let objects = items("cm", n);
    println!("\n## converge: one Composition of {n} ConfigMaps\n");
    println!("| what | wall time | vs best raw floor |");
    println!("| --- | --- | --- |");
    let floors = floors_of(&objects, n).await;
    for apply_concurrency in ["16", "32"] {
        enoki_converges(&objects, &floors, apply_concurrency, run_steady).await;
    }
}

/// The raw floor at 4, 8, 16 and 32 writes in flight, one `kubectl apply --server-side`,
/// and the protocol floor at the best concurrency (printed as rows).
async fn floors_of(objects: &[Value], n: usize) -> Floors {
    let mut floors = Vec::new();
    let mut floor_cpu = Vec::new();
    for c in [4, 8, 16, 32] {
        let env = TestEnv::new().await;
        let before = cpu_now(std::process::id());
        floors.push((c, raw_apply(&env, objects, c).await));
        floor_cpu.push(per_write_us(before, cpu_now(std::process::id()), n));
    }
    let (best_i, &(best_c, best)) = floors
        .iter()
        .enumerate()
        .min_by_key(|(_, (_, d))| *d)
        .unwrap();
    for (c, d) in &floors {
        println!(
            "| raw server-side apply, concurrency {c} | {:.2} s | {:.2}× |",
            d.as_secs_f64(),
            d.as_secs_f64() / best.as_secs_f64()
        );
    }
    let env = TestEnv::new().await;
    let k = kubectl_apply(&env, objects);
    println!(
        "| one `kubectl apply --server-side` | {:.2} s | {:.2}× |",
        k.as_secs_f64(),
        k.as_secs_f64() / best.as_secs_f64()
    );
    // The protocol floor of this Composition: the same writes at the best concurrency, plus
    // what Eno's API asks (input, Composition, finalizer, slice, the statuses).
    let penv = TestEnv::new().await;
    let pstart = Instant::now();
    protocol_one(&penv, 0, objects.to_vec(), best_c).await;
    let protocol = pstart.elapsed();
    protocol_cleanup(&penv).await;
    println!(
        "| protocol floor: the same writes (concurrency {best_c}) with the input, Composition, finalizer, ResourceSlice of 1,000 manifests and the two statuses, plain client | {:.2} s | {:.2}× |",
        protocol.as_secs_f64(),
        protocol.as_secs_f64() / best.as_secs_f64()
    );
    Floors {
        best_c,
        best,
        best_cpu: floor_cpu[best_i],
        protocol,
        _kept: [penv, env],
    }
}

/// enoki converging the Composition of `objects` at `--apply-concurrency apply_concurrency`
/// (printed as rows); at 32 also the CPU per write, and the steady state when `run_steady`.
async fn enoki_converges(
    objects: &[Value],
    floors: &Floors,
    apply_concurrency: &str,
    run_steady: bool,
) {
    let (n, best_c, best) = (objects.len(), floors.best_c, floors.best);
    let env = TestEnv::new().await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    harness::set_echo_items(&env, "items", &Value::Array(objects.to_vec())).await;
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
        d.as_secs_f64() / floors.protocol.as_secs_f64()
    );
    let (before, writing) = write_phase(&env, &since);
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
        cpu_per_write(n, floors, enoki_cpu);
        perf_report(perf, "the write phase");
        if run_steady {
            steady(&env, &enoki, n).await;
        }
    }
}

/// The table of CPU per write: the raw client at the best concurrency against enoki.
fn cpu_per_write(n: usize, floors: &Floors, enoki_cpu: [f64; 3]) {
    let (best_c, best_cpu) = (floors.best_c, floors.best_cpu);
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
}

pub(crate) async fn steady(env: &TestEnv, enoki: &Enoki, n: usize) {
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
