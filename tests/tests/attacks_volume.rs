//! Attacks on volume by a tenant with only `edit` in its namespace: output that would fill
//! etcd, a synthesis loop, slices the controller would hold whole, a Symphony that fans out,
//! and a namespace that would take every worker. Each as the tenant applies it, with what the
//! cluster, the controller and another tenant see.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crds::{Composition, ResourceSlice};
use harness::{Enoki, TestEnv, echo_module, eventually, install_crds, install_synthesizer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);

/// Writes the echo items ConfigMap `name` and a Composition `name` of `synth` bound to it, as
/// `client` (the tenant or the harness).
async fn compose(
    client: &kube::Client,
    ns: &str,
    name: &str,
    synth: &str,
    items: serde_json::Value,
) {
    let pp = PatchParams::apply("tenant-a").force();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
        "data": {"items": items.to_string()}});
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(name, &pp, &Patch::Apply(&cm))
        .await
        .expect("the items ConfigMap");
    let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": name}, "spec": {"synthesizer": {"name": synth},
        "bindings": [{"key": "config", "resource": {"name": name}}]}});
    Api::<Composition>::namespaced(client.clone(), ns)
        .patch(name, &pp, &Patch::Apply(&comp))
        .await
        .expect("the Composition");
}

/// One ConfigMap output of about `bytes` bytes.
fn padded(name: &str, bytes: usize) -> serde_json::Value {
    harness::config_map(name, json!({}), json!({"pad": "x".repeat(bytes)}))
}

/// The ResourceSlices in `env`'s namespace owned by Composition `name`.
async fn slices_of(env: &TestEnv, name: &str) -> Vec<ResourceSlice> {
    let uid = env
        .api::<Composition>()
        .get(name)
        .await
        .unwrap()
        .uid()
        .unwrap();
    env.api::<ResourceSlice>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| s.owner_references().iter().any(|o| o.uid == uid))
        .collect()
}

async fn condition(env: &TestEnv, name: &str, reason: &str) -> String {
    eventually(
        &format!("{name}: Synthesized=False {reason}"),
        WAIT,
        || async {
            let (s, r, m) = harness::composition_condition(env, name, "Synthesized").await?;
            (s == "False" && r == reason).then_some(m)
        },
    )
    .await
}

#[tokio::test]
async fn output_over_the_bound_or_the_namespace_budget_is_refused_before_anything_is_written() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    harness::grant_tenant_edit(&env.namespace);
    let tenant = harness::client_as("tenant-a").await;
    let mut enoki = Enoki::start_with(
        &env.namespace,
        &[
            "--synthesis-output",
            "300Ki",
            "--namespace-slice-budget",
            "1Mi",
        ],
    );
    let ns = env.namespace.clone();
    // Over the per-synthesis bound: the module's output is cut off, nothing is stored.
    compose(
        &tenant,
        &ns,
        "huge",
        &synth,
        json!([padded("huge-out", 400 << 10)]),
    )
    .await;
    let msg = condition(&env, "huge", "OutputTooLarge").await;
    assert!(!msg.is_empty());
    assert!(slices_of(&env, "huge").await.is_empty(), "no slice written");
    // Four of 240 KiB fit in the namespace's 1 MiB; the fifth does not.
    for i in 0..4 {
        let name = format!("fits-{i}");
        compose(
            &tenant,
            &ns,
            &name,
            &synth,
            json!([padded(&format!("{name}-out"), 240 << 10)]),
        )
        .await;
        harness::wait_ready(&env, &name).await;
    }
    compose(
        &tenant,
        &ns,
        "over",
        &synth,
        json!([padded("over-out", 240 << 10)]),
    )
    .await;
    let msg = condition(&env, "over", "OutputTooLarge").await;
    assert!(msg.contains("--namespace-slice-budget"), "{msg}");
    assert!(slices_of(&env, "over").await.is_empty(), "nothing written");
    assert!(
        env.api::<ConfigMap>()
            .get_opt("over-out")
            .await
            .unwrap()
            .is_none()
    );
    // The same output again, whatever the trigger: the current slices are kept.
    let before: Vec<String> = slices_of(&env, "fits-0")
        .await
        .iter()
        .map(|s| s.name_any())
        .collect();
    let annotate = json!({"metadata": {"annotations": {"enoki.dev/force-resynthesis": "again"}}});
    Api::<Composition>::namespaced(tenant.clone(), &ns)
        .patch("fits-0", &PatchParams::default(), &Patch::Merge(&annotate))
        .await
        .unwrap();
    eventually("fits-0 synthesized again", WAIT, || async {
        let c = env.api::<Composition>().get("fits-0").await.ok()?;
        let cur = c.status?.current_synthesis?;
        (cur.force_resynthesis.as_deref() == Some("again")).then_some(())
    })
    .await;
    let after: Vec<String> = slices_of(&env, "fits-0")
        .await
        .iter()
        .map(|s| s.name_any())
        .collect();
    assert_eq!(before, after, "identical output reuses the slices");
    assert!(enoki.running(), "{}", enoki.logs());
}

#[tokio::test]
async fn a_force_resynthesis_loop_waits_for_the_rate_and_keeps_the_current_synthesis_applied() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    harness::grant_tenant_edit(&env.namespace);
    let tenant = harness::client_as("tenant-a").await;
    let mut enoki = Enoki::start_with(
        &env.namespace,
        &[
            "--composition-synthesis-rate",
            "1/h",
            "--composition-synthesis-burst",
            "3",
        ],
    );
    let ns = env.namespace.clone();
    compose(
        &tenant,
        &ns,
        "loop",
        &synth,
        json!([padded("loop-out", 10)]),
    )
    .await;
    harness::wait_ready(&env, "loop").await;
    let comps = Api::<Composition>::namespaced(tenant.clone(), &ns);
    for i in 0..20 {
        // Each run emits something new (the output names the round): new slices each time
        // unless the rate stops it.
        compose(
            &tenant,
            &ns,
            "loop",
            &synth,
            json!([padded("loop-out", 10 + i)]),
        )
        .await;
        let annotate =
            json!({"metadata": {"annotations": {"enoki.dev/force-resynthesis": i.to_string()}}});
        comps
            .patch("loop", &PatchParams::default(), &Patch::Merge(&annotate))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let msg = condition(&env, "loop", "SynthesisRateLimited").await;
    assert!(msg.contains("--composition-synthesis-rate"), "{msg}");
    // The current synthesis stays recorded and applied (read from status, not the message).
    let st = env
        .api::<Composition>()
        .get("loop")
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(st.current_synthesis.is_some(), "{st:?}");
    assert_eq!(
        st.simplified.map(|s| s.status),
        Some(crds::StatusWord::SynthesisRateLimited)
    );
    // The first synthesis and three more; the rest wait an hour.
    let cm = env.api::<ConfigMap>().get("loop-out").await.unwrap();
    let applied = cm.data.unwrap_or_default()["pad"].len();
    assert!(
        applied <= 13,
        "at most three re-syntheses were applied: {applied}"
    );
    let slices = slices_of(&env, "loop").await.len();
    assert!(slices <= 2, "two syntheses kept: {slices}");
    let c = env.api::<Composition>().get("loop").await.unwrap();
    assert!(
        harness::composition_ready(&env, "loop").await,
        "still Ready: {:?}",
        c.status
    );
    assert!(enoki.running(), "{}", enoki.logs());
}

#[tokio::test]
async fn slices_are_held_compact_so_what_a_tenant_emits_does_not_grow_the_controller() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    harness::grant_tenant_edit(&env.namespace);
    let tenant = harness::client_as("tenant-a").await;
    let flags = ["--plan-cache-resources", "200"];
    let mut enoki = Enoki::start_with(&env.namespace, &flags);
    let ns = env.namespace.clone();
    let n = 12;
    for i in 0..n {
        let name = format!("wide-{i}");
        compose(
            &tenant,
            &ns,
            &name,
            &synth,
            json!([padded(&format!("{name}-out"), 900 << 10)]),
        )
        .await;
    }
    for i in 0..n {
        harness::wait_ready(&env, &format!("wide-{i}")).await;
    }
    let emitted = f64::from(n) * f64::from(900 << 10);
    // A restart lists every slice: the crash-loop case of a controller that held them whole.
    enoki.stop();
    let enoki = Enoki::start_with(&env.namespace, &flags);
    eventually(
        "the restarted controller lists the slices",
        WAIT,
        || async { (enoki.metric("enoki_slice_cache_stored_bytes")? >= emitted).then_some(()) },
    )
    .await;
    let held = enoki.metric("enoki_slice_cache_held_bytes").unwrap();
    let stored = enoki.metric("enoki_slice_cache_stored_bytes").unwrap();
    let rss = enoki.metric("process_resident_memory_bytes").unwrap();
    println!(
        "slices stored {:.1} MiB, held by the cache {:.1} KiB, controller RSS {:.1} MiB",
        stored / 1048576.0,
        held / 1024.0,
        rss / 1048576.0
    );
    assert!(
        held * 100.0 < stored,
        "the cache holds under 1% of the bytes"
    );
    for i in 0..n {
        harness::wait_ready(&env, &format!("wide-{i}")).await;
    }
}

#[tokio::test]
async fn a_symphony_over_its_budget_is_refused_and_an_unready_one_is_not_rewritten_every_poll() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    harness::grant_tenant_edit(&env.namespace);
    let tenant = harness::client_as("tenant-a").await;
    let enoki = Enoki::start(&env.namespace);
    let syms = Api::<crds::Symphony>::namespaced(tenant.clone(), &env.namespace);
    let pp = PatchParams::apply("tenant-a");
    // 250 variations under a 60 KiB environment: each within the spec limits, 15 MiB of
    // Compositions together.
    let variations: Vec<_> = (0..250)
        .map(|i| json!({"synthesizer": {"name": format!("{synth}-{i}")}}))
        .collect();
    let env_pad = [json!({"name": "PAD", "value": "x".repeat(60 << 10)})];
    let sym = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Symphony",
        "metadata": {"name": "fanout"},
        "spec": {"variations": variations, "synthesisEnv": env_pad}});
    syms.patch("fanout", &pp, &Patch::Apply(&sym))
        .await
        .unwrap();
    let event = harness::wait_event(&env, "InvalidSpec on the fanout Symphony", |e| {
        e.reason.as_deref() == Some("InvalidSpec")
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("fanout")
    })
    .await;
    let note = event.note.unwrap_or_default();
    assert!(note.contains("--max-symphony-bytes"), "{note}");
    // Five variations of a Synthesizer that does not exist: never Ready.
    let variations: Vec<_> = (0..5)
        .map(|i| json!({"synthesizer": {"name": format!("missing-{i}")}}))
        .collect();
    let sym = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Symphony",
        "metadata": {"name": "waiting"}, "spec": {"variations": variations}});
    syms.patch("waiting", &pp, &Patch::Apply(&sym))
        .await
        .unwrap();
    eventually("five Compositions generated", WAIT, || async {
        let n = env
            .api::<Composition>()
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .len();
        (n == 5).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    harness::audit_barrier(&env).await;
    let since = harness::now_rfc3339();
    tokio::time::sleep(Duration::from_secs(15)).await;
    harness::audit_barrier(&env).await;
    let calls: Vec<_> = harness::audited_requests(&env.namespace, &since)
        .into_iter()
        .filter(|r| r.by_enoki() && r.resource == "compositions")
        .filter(|r| matches!(r.verb.as_str(), "patch" | "list" | "update"))
        .collect();
    assert!(
        calls.is_empty(),
        "nothing re-applied or re-listed while nothing changed: {calls:?}"
    );
    let generated = env
        .api::<Composition>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(
        generated
            .iter()
            .all(|c| !c.name_any().starts_with("fanout"))
    );
    drop(enoki);
}

#[tokio::test]
async fn the_onboarding_template_bounds_what_a_namespace_keeps_in_etcd() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    harness::onboard_namespace(&env.namespace);
    let quota = Api::<k8s_openapi::api::core::v1::ResourceQuota>::namespaced(
        env.client.clone(),
        &env.namespace,
    );
    let hard = quota
        .get("enoki-tenant")
        .await
        .unwrap()
        .spec
        .unwrap()
        .hard
        .unwrap();
    for kind in [
        "compositions.enoki.dev",
        "symphonies.enoki.dev",
        "resourceslices.enoki.dev",
        "trusteeconfigs.confidentialcontainers.org",
        "leptondeployments.lepton.ai",
    ] {
        assert!(
            hard.contains_key(&format!("count/{kind}")),
            "{kind}: {hard:?}"
        );
    }
    // The API server counts them (the quota controller fills `used`).
    eventually("the quota is counted", WAIT, || async {
        let used = quota.get("enoki-tenant").await.ok()?.status?.used?;
        used.contains_key("count/resourceslices.enoki.dev")
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn editing_an_applied_object_in_a_loop_does_not_make_the_controller_rewrite_its_slice() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    harness::grant_tenant_edit(&env.namespace);
    let tenant = harness::client_as("tenant-a").await;
    let _enoki = Enoki::start(&env.namespace);
    let ns = env.namespace.clone();
    let items = json!([
        padded("edit-big", 300 << 10),
        harness::config_map("edit-small", json!({}), json!({"k": "v"}))
    ]);
    compose(&tenant, &ns, "edit", &synth, items).await;
    harness::wait_ready(&env, "edit").await;
    let versions = |slices: Vec<ResourceSlice>| {
        slices
            .iter()
            .map(|s| (s.name_any(), s.resource_version()))
            .collect::<Vec<_>>()
    };
    let before = versions(slices_of(&env, "edit").await);
    // The tenant annotates an output over and over, then changes a field enoki applies.
    let cms = Api::<ConfigMap>::namespaced(tenant.clone(), &ns);
    for i in 0..10 {
        let patch = json!({"metadata": {"annotations": {"tenant/n": i.to_string()}}});
        cms.patch("edit-small", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drift = json!({"data": {"k": "changed"}});
    cms.patch("edit-small", &PatchParams::default(), &Patch::Merge(&drift))
        .await
        .unwrap();
    eventually("the drift reverted", WAIT, || async {
        let cm = cms.get("edit-small").await.ok()?;
        (cm.data?.get("k")? == "v").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = versions(slices_of(&env, "edit").await);
    println!("slices before {before:?}, after 11 edits and a revert {after:?}");
    assert_eq!(
        before, after,
        "an apply that moved only resourceVersions wrote the slice (up to 512 KiB) again"
    );
    harness::wait_ready(&env, "edit").await;
}

#[tokio::test]
async fn a_symphony_writes_its_compositions_within_the_namespace_write_rate() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    harness::grant_tenant_edit(&env.namespace);
    let tenant = harness::client_as("tenant-a").await;
    // 8 KiB at once, then 2 KiB a second; each generated Composition is about 6 KiB.
    let flags = [
        "--namespace-slice-write-burst",
        "8Ki",
        "--namespace-slice-write-rate",
        "2Ki/s",
    ];
    let _enoki = Enoki::start_with(&env.namespace, &flags);
    let variations: Vec<_> = (0..4)
        .map(|i| json!({"synthesizer": {"name": format!("s-{i}")}}))
        .collect();
    let sym = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Symphony",
        "metadata": {"name": "paced"}, "spec": {"variations": variations,
        "synthesisEnv": [{"name": "PAD", "value": "x".repeat(6 << 10)}]}});
    Api::<crds::Symphony>::namespaced(tenant, &env.namespace)
        .patch(
            "paced",
            &PatchParams::apply("tenant-a"),
            &Patch::Apply(&sym),
        )
        .await
        .unwrap();
    let count = || async {
        let list = env.api::<Composition>().list(&ListParams::default()).await;
        list.map_or(0, |l| l.items.len())
    };
    let started = std::time::Instant::now();
    eventually("the first Compositions", WAIT, || async {
        (count().await > 0).then_some(())
    })
    .await;
    let early = count().await;
    eventually("all four Compositions", WAIT, || async {
        (count().await == 4).then_some(())
    })
    .await;
    let took = started.elapsed();
    println!(
        "{early} Composition(s) at first, all 4 after {:.1} s",
        took.as_secs_f64()
    );
    assert!(
        early < 4,
        "all written at once, past the namespace's write rate"
    );
    assert!(
        took >= Duration::from_secs(4),
        "24 KiB at 2 KiB/s after 8 KiB: {took:?}"
    );
}
