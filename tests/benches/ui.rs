//! `enoki ui` on a fleet of 500 Compositions (`BENCH_UI_N`), in headless Chromium against
//! the real control plane (`make bench-ui`; not part of `make test`): the bytes the page
//! loads (its embedded assets and the fleet's JSON) and the time from opening the address to
//! the whole fleet on screen — right after `enoki ui` starts (its watch lists first) and on a
//! reload — next to two baselines measured in the same run: one list of the Compositions from
//! a plain client (the API's floor) and `enoki get compositions` (the terminal's way); and the
//! time from a Composition's status change to the open page showing it, next to the time a
//! plain client's watch sees the change.
//!
//! Needs the control plane (`hack/testenv.sh up`), `chromium` and `chromedriver`
//! (`hack/setup.sh`) and the enoki binary (`ENOKI_BIN`, else the debug build).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use harness::browser::{browser, js, start_ui};
use harness::{TestEnv, install_crds, kubeconfig_path};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

/// The status of the i-th Composition: most Ready, some waiting, a few failed.
fn status(i: usize) -> serde_json::Value {
    let (word, ready) = match i % 50 {
        0 => ("SynthesisBackoff", "False"),
        1..=3 => ("NotReady", "False"),
        _ => ("Ready", "True"),
    };
    json!({"status": {"simplified": {"status": word},
        "conditions": [{"type": "Ready", "status": ready, "reason": word, "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
}

async fn create_fleet(env: &TestEnv, n: usize) {
    let comps: Api<crds::Composition> = env.api();
    let pp = PatchParams::apply("bench-ui").force();
    futures::stream::iter(0..n)
        .map(|i| {
            let comps = comps.clone();
            let pp = pp.clone();
            async move {
                let name = format!("app-{i:04}");
                let c = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
                    "metadata": {"name": name}, "spec": {"synthesizer": {"name": format!("synth-{}", i % 7)}}});
                comps.patch(&name, &pp, &Patch::Apply(&c)).await.unwrap();
                comps
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status(i)))
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds from a status change of one Composition until (a) a plain client's watch sees it
/// (the baseline) and (b) the open page shows its new state; medians of `rounds`.
async fn live_latency(env: &TestEnv, c: &fantoccini::Client, rounds: usize) -> (f64, f64) {
    use kube::runtime::{WatchStreamExt as _, watcher};
    let comps: Api<crds::Composition> = env.api();
    let (mut seen, mut shown) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // app-0005 is Ready; flip it to waiting and back.
        let (word, state, ready) = if round % 2 == 0 {
            ("NotReady", "waiting", "False")
        } else {
            ("Ready", "ready", "True")
        };
        let status = json!({"status": {"simplified": {"status": word}, "conditions": [{"type": "Ready",
            "status": ready, "reason": word, "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        let wc = watcher::Config::default().fields("metadata.name=app-0005");
        let mut events = std::pin::pin!(watcher(comps.clone(), wc).applied_objects());
        // The watch's first event is the object as it is; then the change.
        events.next().await.unwrap().unwrap();
        let start = Instant::now();
        comps
            .patch_status("app-0005", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        events.next().await.unwrap().unwrap();
        seen.push(start.elapsed().as_secs_f64());
        let css = format!("tr[data-composition$='/app-0005'][data-state='{state}']");
        let script = format!("return document.querySelector({}) !== null", json!(css));
        while js(c, &script).await.as_bool() != Some(true) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the page never showed it"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        shown.push(start.elapsed().as_secs_f64());
    }
    (median(seen), median(shown))
}

/// Opens `url` and returns the seconds until `n` Compositions are on screen.
async fn open(c: &fantoccini::Client, url: &str, n: usize) -> f64 {
    let start = Instant::now();
    c.goto(url).await.unwrap();
    let script = "return document.querySelectorAll('tr[data-composition]').length";
    loop {
        if js(c, script).await.as_u64() == Some(n as u64) {
            return start.elapsed().as_secs_f64();
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the fleet never showed {n}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("BENCH_UI_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let ns = env.namespace.clone();
    create_fleet(&env, n).await;

    // Baselines: one list from a plain client; `enoki get compositions` as a process.
    let comps: Api<crds::Composition> = env.api();
    let mut list = Vec::new();
    let mut get = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(
            comps
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len(),
            n
        );
        list.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let out = std::process::Command::new(harness::enoki_bin())
            .args(["get", "compositions", "-n", &ns])
            .env("KUBECONFIG", kubeconfig_path())
            .output()
            .unwrap();
        assert!(out.status.success());
        get.push(t.elapsed().as_secs_f64());
    }

    let (_driver, c) = browser().await;
    let mut first = Vec::new();
    let mut reload = Vec::new();
    let mut live = (0.0, 0.0);
    for round in 0..3 {
        let (ui, url) = start_ui(&["-n", &ns]);
        first.push(open(&c, &url, n).await);
        for _ in 0..3 {
            reload.push(open(&c, &url, n).await);
        }
        if round == 0 {
            live = live_latency(&env, &c, 6).await;
        }
        drop(ui);
    }
    let sizes = js(
        &c,
        "return performance.getEntries().map(e => [e.name, e.encodedBodySize || 0])",
    )
    .await;
    let bytes = |part: &str| -> u64 {
        sizes
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e[0].as_str().unwrap_or("").contains(part))
            .map(|e| e[1].as_u64().unwrap_or(0))
            .max()
            .unwrap_or(0)
    };
    let page = bytes("/?token=") + bytes("/app.js") + bytes("/app.css");
    c.close().await.unwrap();

    let (list, get) = (median(list), median(get));
    let (first, reload) = (median(first), median(reload));
    println!("## enoki ui: {n} Compositions (medians)\n");
    println!("| what | seconds | ÷ list | ÷ `enoki get` |\n|---|---|---|---|");
    println!("| one list, plain client (baseline) | {list:.3} | 1.00 | |");
    println!(
        "| `enoki get compositions` (baseline) | {get:.3} | {:.2} | 1.00 |",
        get / list
    );
    for (what, t) in [
        ("page, first open after `enoki ui` starts", first),
        ("page, reload", reload),
    ] {
        println!("| {what} | {t:.3} | {:.2} | {:.2} |", t / list, t / get);
    }
    println!(
        "| a status change, seen by a plain client's watch (baseline) | {:.3} | | |",
        live.0
    );
    println!(
        "| a status change, shown on the open page | {:.3} | {:.2} × the watch | |",
        live.1,
        live.1 / live.0
    );
    println!(
        "\npage assets: {page} bytes (index.html + app.js + app.css, uncompressed); \
              /api/fleet for {n}: {} bytes",
        bytes("/api/fleet")
    );
}
