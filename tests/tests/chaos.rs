//! Crash-anywhere: a rollout of one Composition of many ConfigMaps, then a second synthesis that
//! changes 30 % of them, drops 20 % and adds 10 %, while enoki is killed with SIGKILL at
//! random points (seeded delays; the seed is printed) and restarted each time. After the final
//! start the Composition must satisfy every invariant of [`harness::invariants`] with the
//! second synthesis's content, and the writes enoki made must stay within a stated bound of a
//! run without crashes (measured in the same test, from the API server's audit log).
//!
//! `make test` runs the short form (200 objects, 4 kills). `make chaos` runs the long form:
//! `ENOKI_CHAOS=long` (1,000 objects, 20 kills per run) for `ENOKI_CHAOS_RUNS` seeds
//! (default 5), and prints `passed/run` with the failed seeds; `ENOKI_CHAOS_SEED` replays one.
#![allow(clippy::unwrap_used)] // test code

use std::time::{Duration, Instant};

use harness::invariants::violations;
use harness::{
    Enoki, TestEnv, apply_composition, audited_requests, echo_module, eventually, install_crds,
    install_synthesizer, now_rfc3339, set_echo_items,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

struct Scale {
    objects: usize,
    kills: usize,
    runs: usize,
}

fn scale() -> Scale {
    let long = std::env::var("ENOKI_CHAOS").as_deref() == Ok("long");
    let runs = std::env::var("ENOKI_CHAOS_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(if long { 5 } else { 1 });
    if long {
        Scale {
            objects: 1000,
            kills: 20,
            runs,
        }
    } else {
        Scale {
            objects: 200,
            kills: 4,
            runs,
        }
    }
}

fn cm(i: usize, v: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}")},
        "data": {"v": v, "i": i.to_string()}})
}

/// The first synthesis: `n` ConfigMaps.
fn first(n: usize) -> Vec<Value> {
    (0..n).map(|i| cm(i, "1")).collect()
}

/// The second: the first 30 % changed, the next 20 % dropped, the rest kept, 10 % added.
fn second(n: usize) -> Vec<Value> {
    let (changed, dropped) = (n * 3 / 10, n * 5 / 10);
    (0..changed)
        .map(|i| cm(i, "2"))
        .chain((dropped..n).map(|i| cm(i, "1")))
        .chain((n..n + n / 10).map(|i| cm(i, "new")))
        .collect()
}

/// enoki's writes to the `cm-*` ConfigMaps of `ns` since `since`.
fn writes(ns: &str, since: &str) -> usize {
    audited_requests(ns, since)
        .iter()
        .filter(|r| {
            r.by_enoki() && r.is_write() && r.resource == "configmaps" && r.name.starts_with("cm-")
        })
        .count()
}

/// Checks the second synthesis's content directly (the invariants check it against the
/// slices; this checks the slices hold the second synthesis).
async fn content_is_second(env: &TestEnv, n: usize) -> Result<(), String> {
    let cms: Api<ConfigMap> = env.api();
    let live: std::collections::BTreeMap<String, String> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| {
            let name = c.metadata.name.clone()?;
            let v = c.data?.get("v").cloned()?;
            name.starts_with("cm-").then_some((name, v))
        })
        .collect();
    let want: std::collections::BTreeMap<String, String> = second(n)
        .iter()
        .map(|m| {
            (
                m["metadata"]["name"].as_str().unwrap().to_string(),
                m["data"]["v"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    if live == want {
        Ok(())
    } else {
        let missing = want.keys().filter(|k| !live.contains_key(*k)).count();
        let extra = live.keys().filter(|k| !want.contains_key(*k)).count();
        let wrong = want
            .iter()
            .filter(|(k, v)| live.get(*k).is_some_and(|l| l != *v))
            .count();
        Err(format!(
            "{missing} missing, {extra} not dropped, {wrong} with old content"
        ))
    }
}

fn start(ns: &str, cache: &std::path::Path) -> Enoki {
    Enoki::start_with(ns, &["--module-cache-dir", cache.to_str().unwrap()])
}

/// One run: the rollout with `kills` SIGKILLs at seeded random points (0: the baseline, the
/// second synthesis applied once the first converged). Returns enoki's writes.
async fn run(n: usize, kills: usize, seed: u64) -> Result<usize, String> {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let ns = env.namespace.clone();
    let cache = std::env::temp_dir().join(format!("enoki-chaos-{ns}"));
    let synth = install_synthesizer(&env, "chaos", &echo_module()).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let since = now_rfc3339();
    set_echo_items(&env, "items", &Value::Array(first(n))).await;
    apply_composition(&env, "app", &synth, "items", json!({})).await;
    let mut enoki = start(&ns, &cache);
    if kills == 0 {
        eventually(
            "the first synthesis converges",
            Duration::from_secs(180),
            || async {
                violations(&env.client, &ns, "app")
                    .await
                    .is_empty()
                    .then_some(())
            },
        )
        .await;
        set_echo_items(&env, "items", &Value::Array(second(n))).await;
    }
    for k in 0..kills {
        if k == kills / 2 {
            set_echo_items(&env, "items", &Value::Array(second(n))).await;
        }
        let delay = Duration::from_millis(rng.random_range(100..3000));
        tokio::time::sleep(delay).await;
        enoki.stop();
        enoki = start(&ns, &cache);
    }
    let deadline = Instant::now() + Duration::from_secs(240);
    let verdict = loop {
        let v = violations(&env.client, &ns, "app").await;
        let content = content_is_second(&env, n).await;
        match (v.is_empty(), content) {
            (true, Ok(())) => break Ok(()),
            (_, content) if Instant::now() > deadline => {
                break Err(format!(
                    "seed {seed}: not converged after the last restart: {v:?}; content: {content:?}\n{}",
                    enoki
                        .logs()
                        .lines()
                        .rev()
                        .take(30)
                        .collect::<Vec<_>>()
                        .join("\n")
                ));
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    };
    enoki.stop();
    let _ = std::fs::remove_dir_all(&cache);
    verdict.map(|()| writes(&ns, &since))
}

#[tokio::test]
async fn converges_with_nothing_lost_after_sigkills_at_random_points() {
    let Scale {
        objects,
        kills,
        runs,
    } = scale();
    let baseline = run(objects, 0, 0).await.unwrap();
    // Each kill can cost at most one pass's unrecorded writes again (every desired object
    // once more), so the bound is the baseline plus one full pass per kill.
    let bound = baseline + kills * objects;
    let seeds: Vec<u64> = match std::env::var("ENOKI_CHAOS_SEED") {
        Ok(s) => vec![s.parse().unwrap()],
        Err(_) => (0..runs).map(|_| rand::random::<u32>().into()).collect(),
    };
    let mut failed = Vec::new();
    for seed in &seeds {
        eprintln!("chaos: seed {seed}, {objects} objects, {kills} SIGKILLs");
        match run(objects, kills, *seed).await {
            Ok(w) if w <= bound => eprintln!(
                "chaos: seed {seed} converged; {w} writes (no-crash run: {baseline}, {:.2}x; bound {bound})",
                w as f64 / baseline as f64
            ),
            Ok(w) => failed.push(format!("seed {seed}: {w} writes > bound {bound}")),
            Err(e) => failed.push(e),
        }
    }
    eprintln!(
        "chaos: {}/{} runs passed ({kills} SIGKILLs each)",
        seeds.len() - failed.len(),
        seeds.len()
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
