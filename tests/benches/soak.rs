//! Soak (`make soak`; not part of `make test`): 300 Compositions whose inputs change every few
//! seconds for `ENOKI_SOAK_MINUTES` (default 30) against a release build of enoki on the local
//! control plane. Reports enoki's RSS and its open watches (kinds watched, and the API
//! server's count of watch requests from enoki in its audit log per minute) at the start and at
//! the end, the error conditions seen on the way, and whether every Composition is Ready and
//! converged (the harness's invariant checker) at the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::{Enoki, TestEnv, echo_module, install_crds, install_synthesizer};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

const COMPOSITIONS: usize = 300;
const PER: usize = 5;

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn items(i: usize, round: usize) -> Value {
    Value::Array(
        (0..PER)
            .map(|k| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("c{i}-{k}")},
                    "data": {"round": round.to_string()}})
            })
            .collect(),
    )
}

/// Compositions with an error condition: `Synthesized` or `Reconciled` False (positive
/// polarity), or kstatus `Stalled` True. (`Reconciling`/`Stalled` False is the normal state;
/// `Ready` False while a change rolls out is progress, not an error.)
async fn errors(env: &TestEnv) -> Vec<String> {
    let api: Api<crds::Composition> = env.api();
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .iter()
        .flat_map(|c| {
            let name = c.metadata.name.clone().unwrap_or_default();
            c.status
                .iter()
                .flat_map(|s| s.conditions.clone())
                .filter(|x| match x.type_.as_str() {
                    "Synthesized" | "Reconciled" => x.status == "False",
                    "Stalled" => x.status == "True",
                    _ => false,
                })
                .map(move |x| format!("{name}: {} {} {}", x.type_, x.reason, x.message))
        })
        .collect()
}

/// Watch requests enoki opened in the last minute (audit log).
fn watches_last_minute(ns: &str) -> usize {
    let since =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(60);
    harness::audited_requests(ns, &since.to_string())
        .iter()
        .filter(|r| r.by_enoki() && r.verb == "watch")
        .count()
}

fn main() {
    if std::env::var("ENOKI_BIN").is_err() {
        eprintln!("ENOKI_BIN must name a release build of enoki (make soak sets it)");
        std::process::exit(1);
    }
    let minutes: u64 = std::env::var("ENOKI_SOAK_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(30);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async move {
        install_crds(&harness::client().await).await;
        let env = TestEnv::new().await;
        let synth = install_synthesizer(&env, "soak", &echo_module()).await;
        let enoki = Enoki::start_with(&env.namespace, &["--concurrency", "8"]);
        let (envr, synthr) = (&env, &synth);
        futures::stream::iter(0..COMPOSITIONS)
            .for_each_concurrent(16, |i| async move {
                harness::set_echo_items(envr, &format!("items-{i}"), &items(i, 0)).await;
                harness::apply_composition(
                    envr,
                    &format!("comp-{i}"),
                    synthr,
                    &format!("items-{i}"),
                    json!({}),
                )
                .await;
            })
            .await;
        // Settled once before the clock starts.
        for i in 0..COMPOSITIONS {
            harness::invariants::wait_converged(
                &env.client,
                &env.namespace,
                &format!("comp-{i}"),
                Duration::from_secs(600),
            )
            .await;
        }
        let start_rss = rss_mib(enoki.pid());
        let start_kinds = enoki.metric("enoki_watched_kinds").unwrap_or(0.0);
        let start_watches = watches_last_minute(&env.namespace);
        let mut seen_errors = std::collections::BTreeSet::new();
        let started = Instant::now();
        let mut round = 0;
        // RSS every five minutes of churn: warm-up versus growth.
        let mut samples = vec![start_rss];
        while started.elapsed() < Duration::from_secs(minutes * 60) {
            if started.elapsed() >= Duration::from_secs(300 * samples.len() as u64) {
                samples.push(rss_mib(enoki.pid()));
            }
            round += 1;
            // Every 3 s, a tenth of the inputs change.
            for i in (0..COMPOSITIONS).filter(|i| i % 10 == round % 10) {
                harness::set_echo_items(&env, &format!("items-{i}"), &items(i, round)).await;
            }
            if round % 20 == 0 {
                seen_errors.extend(errors(&env).await);
            }
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        let mut converged = 0;
        for i in 0..COMPOSITIONS {
            let name = format!("comp-{i}");
            let deadline = Instant::now() + Duration::from_secs(120);
            while Instant::now() < deadline {
                if harness::invariants::violations(&env.client, &env.namespace, &name)
                    .await
                    .is_empty()
                {
                    converged += 1;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        let end_rss = rss_mib(enoki.pid());
        let end_kinds = enoki.metric("enoki_watched_kinds").unwrap_or(0.0);
        let end_watches = watches_last_minute(&env.namespace);
        println!("\n## soak: {COMPOSITIONS} Compositions × {PER} ConfigMaps, inputs changing every 3 s, {minutes} min\n");
        println!("| figure | start | end |");
        println!("| --- | --- | --- |");
        println!("| enoki RSS | {start_rss:.0} MiB | {end_rss:.0} MiB |");
        let series: Vec<String> = samples.iter().map(|r| format!("{r:.0}")).collect();
        println!("| enoki RSS every 5 min of churn (MiB) | {} | {end_rss:.0} |", series.join(" → "));
        println!("| kinds watched | {start_kinds:.0} | {end_kinds:.0} |");
        println!("| watch requests by enoki in the last minute | {start_watches} | {end_watches} |");
        println!("| input changes | — | {} rounds |", round);
        println!(
            "| error conditions seen | — | {} |",
            if seen_errors.is_empty() {
                "none".to_string()
            } else {
                seen_errors.iter().cloned().collect::<Vec<_>>().join("; ")
            }
        );
        println!("| Ready and converged at the end | — | {converged}/{COMPOSITIONS} |");
        assert_eq!(converged, COMPOSITIONS, "not every Composition converged");
        assert!(seen_errors.is_empty(), "error conditions: {seen_errors:?}");
    });
}
