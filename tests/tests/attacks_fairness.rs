//! Fair workers: one namespace's Compositions in a synthesis loop do not hold up another's
//! change (its own binary: the controller here runs cluster-wide, selected by a label).
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use crds::Composition;
use harness::{Enoki, TestEnv, echo_module, eventually, install_crds, install_synthesizer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn a_namespace_of_500_compositions_in_a_resynthesis_loop_does_not_hold_up_another() {
    use futures::StreamExt;
    let busy = TestEnv::new().await;
    let quiet = TestEnv::new().await;
    install_crds(&busy.client).await;
    let synth = install_synthesizer(&busy, "echo", &echo_module()).await;
    // Rates off: the fair gate alone shares the two workers.
    let mut enoki = Enoki::start_with(
        "",
        &[
            "--label-selector",
            "fairness=on",
            "--concurrency",
            "2",
            "--composition-synthesis-rate",
            "0",
            "--namespace-synthesis-rate",
            "0",
            "--namespace-slice-write-rate",
            "0",
        ],
    );
    let labelled = |client: &kube::Client, ns: &str, name: String| {
        let (client, ns, synth) = (client.clone(), ns.to_string(), synth.clone());
        async move {
            let pp = PatchParams::apply("tenant").force();
            let out = harness::config_map(&format!("{name}-out"), json!({}), json!({"v": "0"}));
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                "data": {"items": json!([out]).to_string()}});
            Api::<ConfigMap>::namespaced(client.clone(), &ns)
                .patch(&name, &pp, &Patch::Apply(&cm))
                .await
                .unwrap();
            let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
                "metadata": {"name": name, "labels": {"fairness": "on"}},
                "spec": {"synthesizer": {"name": synth},
                    "bindings": [{"key": "config", "resource": {"name": name}}]}});
            Api::<Composition>::namespaced(client, &ns)
                .patch(&name, &pp, &Patch::Apply(&comp))
                .await
                .unwrap();
        }
    };
    labelled(&quiet.client, &quiet.namespace, "single".into()).await;
    harness::wait_ready(&quiet, "single").await;
    let change = |v: u32| {
        let (client, ns) = (quiet.client.clone(), quiet.namespace.clone());
        async move {
            let out = harness::config_map("single-out", json!({}), json!({"v": v.to_string()}));
            let started = Instant::now();
            let cms = Api::<ConfigMap>::namespaced(client, &ns);
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "single"},
                "data": {"items": json!([out]).to_string()}});
            cms.patch(
                "single",
                &PatchParams::apply("tenant").force(),
                &Patch::Apply(&cm),
            )
            .await
            .unwrap();
            eventually("the quiet namespace's change applied", WAIT, || async {
                let cm = cms.get("single-out").await.ok()?;
                (cm.data?.get("v")? == &v.to_string()).then_some(())
            })
            .await;
            started.elapsed()
        }
    };
    let alone = change(1).await;
    futures::stream::iter(
        (0..500).map(|i| labelled(&busy.client, &busy.namespace, format!("b{i}"))),
    )
    .buffer_unordered(16)
    .collect::<Vec<()>>()
    .await;
    // The busy namespace loops on force-resynthesis while the quiet one changes thrice.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let looping = {
        let (client, ns, stop) = (busy.client.clone(), busy.namespace.clone(), stop.clone());
        tokio::spawn(async move {
            let comps = Api::<Composition>::namespaced(client, &ns);
            let mut round = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                futures::stream::iter((0..500).map(|i| {
                    let comps = comps.clone();
                    let patch = json!({"metadata": {"annotations":
                        {"enoki.dev/force-resynthesis": round.to_string()}}});
                    async move {
                        let _ = comps
                            .patch(
                                &format!("b{i}"),
                                &PatchParams::default(),
                                &Patch::Merge(&patch),
                            )
                            .await;
                    }
                }))
                .buffer_unordered(16)
                .collect::<Vec<()>>()
                .await;
            }
            round
        })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut loaded = Vec::new();
    for v in 2..5 {
        loaded.push(change(v).await);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = looping.await.unwrap();
    let queued = enoki.metric("enoki_queue_depth").unwrap_or(0.0);
    let worst = loaded.iter().max().copied().unwrap();
    println!(
        "quiet namespace change applied: alone {alone:?}; during {rounds} loop rounds over 500 \
         Compositions (queue depth {queued}): {loaded:?}"
    );
    // The bound: a change elsewhere waits for at most the reconciles already running, not
    // for the busy namespace's queue.
    assert!(
        worst < alone + Duration::from_secs(5),
        "{loaded:?} vs {alone:?} alone"
    );
    assert!(enoki.running(), "{}", enoki.logs());
}
