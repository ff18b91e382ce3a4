//! Controller memory against what tenants emit (`make bench`; not part of `make test`): RSS
//! above the warm base of an idle controller, at rest, with
//!
//! 1. `BENCH_VOLUME_COMPS` (200) Compositions of `BENCH_VOLUME_OBJECTS` (10) small
//!    ConfigMaps each (the baseline);
//! 2. as many Compositions of `BENCH_VOLUME_MIB` (8) MiB of output each, in as many
//!    ConfigMaps, the slice cache holding whole slices (`--slice-cache whole`);
//! 3. the same with the compact cache (the default).
//!
//! Both outputs have the same number of objects, so the ratio of (3) to (1) is what the
//! bytes of an output cost the controller (its memory follows the number of objects).
//!
//! The outputs are stored in ResourceSlices but not applied (`--resource-filter false`), so
//! etcd holds the slices alone (200 × 8 MiB = 1.6 GiB per case). With `BENCH_VOLUME_APPLY=1`
//! they are applied too and each case is measured once every Composition is Ready, so the
//! plan cache (which keeps no 8 MiB synthesis by default) and the watches of the applied
//! objects are in the figure; the local API server
//! holds 50 such Compositions (`make bench` runs that too), not 200 (its watch cache of
//! 3.2 GiB of objects took it past 8 GiB of memory). The target: (3) within 2× of (1).
//! Needs the control plane, the echo guest and `ENOKI_BIN`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::{
    Enoki, TestEnv, anon_rss_mib, echo_module, install_crds, install_synthesizer, status_mib,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Creates `n` Compositions of `synth`, each bound to its own ConfigMap with `data`.
async fn compose(env: &TestEnv, synth: &str, n: usize, data: serde_json::Value) {
    futures::stream::iter((0..n).map(|i| {
        let (client, ns, synth, data) = (
            env.client.clone(),
            env.namespace.clone(),
            synth.to_string(),
            data.clone(),
        );
        async move {
            let pp = PatchParams::apply("bench").force();
            let name = format!("v{i}");
            // The outputs are named for their Composition (`@C@`), as applied objects must be.
            let mut data = data;
            if let Some(items) = data["items"].as_str() {
                data["items"] = items.replace("@C@", &name).into();
            }
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name}, "data": data});
            Api::<ConfigMap>::namespaced(client.clone(), &ns)
                .patch(&name, &pp, &Patch::Apply(&cm))
                .await
                .unwrap();
            let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
                "metadata": {"name": name}, "spec": {"synthesizer": {"name": synth},
                "bindings": [{"key": "config", "resource": {"name": name}}]}});
            Api::<crds::Composition>::namespaced(client, &ns)
                .patch(&name, &pp, &Patch::Apply(&comp))
                .await
                .unwrap();
        }
    }))
    .buffer_unordered(8)
    .collect::<Vec<()>>()
    .await;
}

/// Waits until every Composition of the namespace has a current synthesis, Ready too when
/// outputs are applied.
async fn all_synthesized(env: &TestEnv, n: usize, ready: bool) -> Duration {
    let started = Instant::now();
    let comps: Api<crds::Composition> = env.api();
    loop {
        let done = comps
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|c| {
                        c.status
                            .as_ref()
                            .and_then(|s| s.current_synthesis.as_ref())
                            .is_some_and(|s| !ready || s.ready.is_some())
                    })
                    .count()
            })
            .unwrap_or(0);
        if done >= n {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "{done}/{n} synthesized"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Whether outputs are applied (`BENCH_VOLUME_APPLY=1`).
fn applied() -> bool {
    std::env::var("BENCH_VOLUME_APPLY").is_ok_and(|v| v == "1")
}

/// The flags of every controller here: no volume bound; outputs stored, not applied, unless
/// [`applied`].
fn flags() -> Vec<&'static str> {
    let mut flags = FLAGS.to_vec();
    if !applied() {
        flags.extend(["--resource-filter", "false"]);
    }
    flags
}

/// The flags of every controller here but the resource filter.
const FLAGS: &[&str] = &[
    "--synthesis-output",
    "64Mi",
    "--namespace-slice-budget",
    "0",
    "--composition-synthesis-rate",
    "0",
    "--namespace-synthesis-rate",
    "0",
    "--namespace-slice-write-rate",
    "0",
    "--concurrency",
    "8",
];

/// A controller with the slice cache `cache`, at rest: its anonymous RSS `settle` after its
/// slice cache is loaded.
async fn at_rest(env: &TestEnv, cache: &str, expect_slices: bool, settle: Duration) -> f64 {
    let mut flags = flags();
    flags.extend(["--slice-cache", cache]);
    let enoki = Enoki::start_with(&env.namespace, &flags);
    let m = |name: &str| enoki.metric(name).unwrap_or(0.0);
    // The slice cache's first list done: its gauge (published every 15 s) nonzero and the
    // same twice in a row, when there are slices to list.
    let started = Instant::now();
    let mut last = -1.0;
    while expect_slices && started.elapsed() < Duration::from_secs(1800) {
        tokio::time::sleep(Duration::from_secs(16)).await;
        let stored = m("enoki_slice_cache_stored_bytes");
        if stored > 0.0 && stored == last {
            break;
        }
        last = stored;
    }
    let loaded = started.elapsed();
    assert!(
        !expect_slices || m("enoki_slice_cache_stored_bytes") > 0.0,
        "the slice cache's first list did not finish: nothing to measure"
    );
    // Then quiet: at most 4 API requests in 16 s (the readiness probe of the API server
    // makes one every 5 s), once the passes that follow the list are done.
    let (mut last, mut quiet) = (None, !expect_slices);
    while !quiet && started.elapsed() < Duration::from_secs(2400) {
        // A /metrics that does not answer says nothing: asked again.
        let now = enoki.metric("enoki_api_requests_total");
        quiet = matches!((last, now), (Some(l), Some(n)) if n - l <= 4.0);
        last = now.or(last);
        if !quiet {
            tokio::time::sleep(Duration::from_secs(16)).await;
        }
    }
    assert!(
        quiet,
        "the controller was not quiet within 40 min: nothing at rest to measure"
    );
    let quiet = started.elapsed() - loaded;
    let before = requests_by_verb(&enoki);
    tokio::time::sleep(settle).await;
    let during = requests_by_verb(&enoki)
        .into_iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(&k).copied().unwrap_or(0.0);
            (d > 0.0).then(|| format!("{k} {d}"))
        })
        .collect::<Vec<_>>();
    eprintln!(
        "  ({cache}: quiet {:.0} s after the list; requests while at rest: {during:?})",
        quiet.as_secs_f64()
    );
    eprintln!(
        "  ({cache}: cache loaded in {:.0} s; syntheses {}, slices held {:.0} KiB of {:.0} KiB \
         stored, reconciles {})",
        loaded.as_secs_f64(),
        m("enoki_synthesis_runs_total"),
        m("enoki_slice_cache_held_bytes") / 1024.0,
        m("enoki_slice_cache_stored_bytes") / 1024.0,
        m("enoki_composition_reconciles_total")
    );
    eprintln!(
        "  ({cache}: peak resident memory {:.1} MiB)",
        status_mib(enoki.pid(), "VmHWM:")
    );
    anon_rss_mib(enoki.pid())
}

/// Requests the controller made, per verb and HTTP code.
fn requests_by_verb(enoki: &Enoki) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for line in enoki.metrics_text().lines() {
        let Some(rest) = line.strip_prefix("enoki_api_requests_total{") else {
            continue;
        };
        let (labels, value) = rest.rsplit_once(' ').unwrap_or_default();
        let label = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                .map(|v| v.trim_end_matches(['"', '}']).to_string())
                .unwrap_or_default()
        };
        *out.entry(format!("{} {}", label("verb"), label("code")))
            .or_default() += value.parse::<f64>().unwrap_or(0.0);
    }
    out
}

#[tokio::main]
async fn main() {
    let comps = env_or("BENCH_VOLUME_COMPS", 200);
    let mib = env_or("BENCH_VOLUME_MIB", 8);
    // No object over 1 MiB (a slice of one stays within etcd's object limit).
    let objects = env_or("BENCH_VOLUME_OBJECTS", 10).max(mib).max(1);
    let big = json!({"items": json!([{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "big-@C@"}}]).to_string(),
        "pad": (mib * 1024 * 1024 / objects).saturating_sub(200).to_string(),
        "copies": objects.to_string()});
    let small_items: Vec<_> = (0..objects)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("small-@C@-{i}")}, "data": {"k": "v"}})
        })
        .collect();
    let small = json!({"items": json!(small_items).to_string()});
    let mut rows = Vec::new();
    // `BENCH_VOLUME_WHOLE=0` leaves out the whole-slice case (the slowest).
    let whole = std::env::var("BENCH_VOLUME_WHOLE").map_or(true, |v| v != "0");
    for (what, data, cache) in [
        ("small objects", &small, "compact"),
        ("output whole in the cache", &big, "whole"),
        ("output compact in the cache", &big, "compact"),
    ]
    .into_iter()
    .filter(|c| whole || c.2 != "whole" || c.0 == "small objects")
    {
        let env = TestEnv::new().await;
        install_crds(&env.client).await;
        let synth = install_synthesizer(&env, "echo", &echo_module()).await;
        // The idle base: the controller with nothing to do.
        let base = at_rest(&env, cache, false, Duration::from_secs(5)).await;
        // Syntheses under a controller of their own; the figure is taken from a fresh one
        // (the list of every slice into its cache, then at rest).
        let started = Instant::now();
        {
            let _writer = Enoki::start_with(&env.namespace, &flags());
            compose(&env, &synth, comps, data.clone()).await;
            all_synthesized(&env, comps, applied()).await;
        }
        let synthesize = started.elapsed();
        let first = at_rest(&env, cache, true, Duration::from_secs(30)).await;
        println!(
            "{what}: {comps} Compositions synthesized in {:.0} s; RSS at rest {first:.1} MiB, \
             {:.1} MiB above the idle base",
            synthesize.as_secs_f64(),
            first - base
        );
        rows.push((what, first, first - base));
        let comps_api: Api<crds::Composition> = env.api();
        let _ = comps_api
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
    }
    println!(
        "\n| {comps} Compositions | RSS at rest | × the small baseline | above the idle base | \
         × the small baseline's |"
    );
    println!("| --- | --- | --- | --- | --- |");
    let (baseline, base_above) = (rows[0].1.max(1.0), rows[0].2.max(0.1));
    for (what, rss, above) in &rows {
        println!(
            "| {what} | {rss:.1} MiB | {:.2}× | {above:.1} MiB | {:.2}× |",
            rss / baseline,
            above / base_above
        );
    }
    println!(
        "\n({objects} objects per Composition, {mib} MiB of output in the large cases, outputs \
         {}; `BENCH_VOLUME_COMPS`, `BENCH_VOLUME_OBJECTS`, `BENCH_VOLUME_MIB`, \
         `BENCH_VOLUME_APPLY`)",
        if applied() {
            "applied"
        } else {
            "stored, not applied"
        }
    );
}
