//! The reconciler end to end, against the real control plane: `enoki run` (a child process
//! scoped to the test's namespace) synthesizes sample 01 from a ConfigMap-stored module,
//! applies it, reports status, follows input changes, prunes, survives failures, cleans up.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::collections::BTreeMap;
use std::time::Duration;

use crds::{Composition, ResourceSlice, Synthesizer};
use harness::invariants::{assert_converged, wait_converged};
use harness::{Enoki, TestEnv, eventually, install_crds, install_synthesizer, sample_module};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

async fn setup(greeting: &str, extra: u32) -> (TestEnv, String) {
    setup_with_module(&sample_module(), greeting, extra).await
}

async fn setup_with_module(module: &[u8], greeting: &str, extra: u32) -> (TestEnv, String) {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "hello", module).await;
    set_input(&env, greeting, extra).await;
    harness::apply_composition(&env, "hello", &synth, "hello-config", json!({})).await;
    (env, synth)
}

async fn set_input(env: &TestEnv, greeting: &str, extra: u32) {
    let cms: Api<ConfigMap> = env.api();
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hello-config"},
        "data": {"greeting": greeting, "extra": extra.to_string()},
    });
    cms.patch(
        "hello-config",
        &PatchParams::apply("test").force(),
        &Patch::Apply(&cm),
    )
    .await
    .unwrap();
}

async fn wait_ready(env: &TestEnv, enoki: &Enoki) -> Composition {
    let comps: Api<Composition> = env.api();
    let what = "the composition to become Ready";
    let result = tokio::time::timeout(WAIT, async {
        loop {
            let c = comps.get("hello").await.unwrap();
            let ready = c.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
                    && s.observed_generation == c.metadata.generation
            });
            if ready {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await;
    result.unwrap_or_else(|_| {
        panic!(
            "timed out waiting for {what}; enoki logs:\n{}",
            enoki.logs()
        )
    })
}

async fn message(env: &TestEnv) -> Option<String> {
    let cms: Api<ConfigMap> = env.api();
    cms.get_opt("hello-message")
        .await
        .unwrap()
        .and_then(|c| c.data)
        .and_then(|d| d.get("message").cloned())
}

#[tokio::test]
async fn a_composition_is_synthesized_applied_and_becomes_ready() {
    let (env, synth) = setup("hello", 0).await;
    let enoki = Enoki::start(&env.namespace);
    let comp = wait_ready(&env, &enoki).await;

    let cms: Api<ConfigMap> = env.api();
    let settings = cms.get("hello-settings").await.unwrap();
    assert_eq!(
        settings.labels().get("enoki.dev/managed-by"),
        comp.uid().as_ref()
    );
    assert!(
        settings
            .annotations()
            .keys()
            .all(|k| !k.starts_with("enoki.dev/")),
        "enoki keys are stripped"
    );
    let managers: Vec<_> = settings
        .managed_fields()
        .iter()
        .map(|m| (m.manager.clone(), m.operation.clone()))
        .collect();
    assert!(
        managers.contains(&(Some("enoki".into()), Some("Apply".into()))),
        "{managers:?}"
    );
    assert_eq!(message(&env).await.as_deref(), Some("hello, world"));
    let sas: Api<ServiceAccount> = env.api();
    assert!(sas.get_opt("hello").await.unwrap().is_some());

    let st = comp.status.unwrap();
    let current = st.current_synthesis.unwrap();
    assert!(current.module_digest.unwrap().starts_with("sha256:"));
    assert!(current.input_digest.unwrap().starts_with("sha256:"));
    assert!(current.ready.is_some() && current.reconciled.is_some());
    assert_eq!(st.simplified.unwrap().status, "Ready");
    for ty in ["Synthesized", "Reconciled", "Ready"] {
        assert!(
            st.conditions
                .iter()
                .any(|c| c.type_ == ty && c.status == "True"),
            "{ty}"
        );
    }

    // The output is stored in a ResourceSlice owned by the Composition, with per-resource status.
    let slices: Api<ResourceSlice> = env.api();
    let slice = slices.get(&current.resource_slices[0].name).await.unwrap();
    assert_eq!(slice.spec.synthesis_uuid, current.uuid);
    assert_eq!(slice.owner_references()[0].uid, comp.metadata.uid.unwrap());
    let states = slice.status.unwrap().resources;
    assert_eq!(states.len(), 3);
    assert!(states.iter().all(|s| {
        s.reconciled
            && s.ready.is_some()
            && s.applied_hash
                .as_deref()
                .is_some_and(|h| h.starts_with("v1:"))
    }));

    // The Synthesizer reports its module digest.
    let synths: Api<Synthesizer> = Api::all(env.client.clone());
    let s = synths.get(&synth).await.unwrap().status.unwrap();
    assert!(s.module_digest.unwrap().starts_with("sha256:"));
    assert!(
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );
}

#[tokio::test]
async fn changing_the_bound_input_resynthesizes_and_updates_resources() {
    let (env, _) = setup("hello", 0).await;
    let enoki = Enoki::start(&env.namespace);
    let first = wait_ready(&env, &enoki)
        .await
        .status
        .unwrap()
        .current_synthesis
        .unwrap()
        .uuid;
    set_input(&env, "bonjour", 0).await;
    eventually("the message to follow the input", WAIT, || async {
        (message(&env).await.as_deref() == Some("bonjour, world")).then_some(())
    })
    .await;
    let comps: Api<Composition> = env.api();
    let st = comps.get("hello").await.unwrap().status.unwrap();
    assert_ne!(st.current_synthesis.unwrap().uuid, first);
    assert_eq!(st.previous_synthesis.unwrap().uuid, first);
    wait_converged(&env.client, &env.namespace, "hello", WAIT).await;
}

#[tokio::test]
async fn a_resource_dropped_from_the_output_is_pruned() {
    let (env, _) = setup("hello", 2).await;
    let enoki = Enoki::start(&env.namespace);
    wait_ready(&env, &enoki).await;
    let cms: Api<ConfigMap> = env.api();
    assert!(cms.get_opt("hello-extra-1").await.unwrap().is_some());
    set_input(&env, "hello", 1).await;
    eventually("hello-extra-1 to be pruned", WAIT, || async {
        cms.get_opt("hello-extra-1")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        cms.get_opt("hello-extra-0").await.unwrap().is_some(),
        "still emitted, still there"
    );
    wait_converged(&env.client, &env.namespace, "hello", WAIT).await;
}

#[tokio::test]
async fn a_failing_synthesizer_shows_its_typed_error_and_leaves_previous_resources() {
    let (env, synth) = setup("hello", 0).await;
    let enoki = Enoki::start(&env.namespace);
    wait_ready(&env, &enoki).await;
    let cms: Api<ConfigMap> = env.api();
    let before = cms.get("hello-message").await.unwrap().resource_version();

    // Swap in a module that exits 3 (a hostile guest, stored the same way).
    let guest = std::fs::read(harness::workspace_root().join("tests/guests/exit3.wat")).unwrap();
    let _ = install_synthesizer(&env, "hello", &guest).await;
    let synths: Api<Synthesizer> = Api::all(env.client.clone());
    synths
        .patch(&synth, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"test/bump": "1"}}, "spec": {"env": [{"name": "BUMP", "value": "1"}]}})))
        .await
        .unwrap();
    let comps: Api<Composition> = env.api();
    let cond = eventually("Synthesized=False with reason ExitCode", WAIT, || async {
        let c = comps.get("hello").await.unwrap();
        c.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Synthesized" && c.status == "False" && c.reason == "ExitCode")
    })
    .await;
    assert!(cond.message.contains("bad input"), "{}", cond.message);
    let st = comps.get("hello").await.unwrap().status.unwrap();
    assert_eq!(
        st.simplified.unwrap().status,
        "SynthesisBackoff",
        "Eno's word"
    );
    // Eno's `canceled`: the failed in-flight synthesis is given up.
    assert!(
        st.in_flight_synthesis
            .as_ref()
            .is_some_and(|s| s.canceled.is_some()),
        "{:?}",
        st.in_flight_synthesis
    );
    assert_eq!(
        cms.get("hello-message").await.unwrap().resource_version(),
        before,
        "previous output untouched"
    );
}

#[tokio::test]
async fn deleting_the_composition_removes_its_resources_then_the_composition() {
    let (env, _) = setup("hello", 0).await;
    let enoki = Enoki::start(&env.namespace);
    let comp = wait_ready(&env, &enoki).await;
    assert!(comp.finalizers().iter().any(|f| f == "enoki.dev/cleanup"));
    let comps: Api<Composition> = env.api();
    harness::delete_and_wait(&comps, "hello").await;
    let cms: Api<ConfigMap> = env.api();
    for name in ["hello-settings", "hello-message"] {
        assert!(
            cms.get_opt(name).await.unwrap().is_none(),
            "{name} survived"
        );
    }
    let sas: Api<ServiceAccount> = env.api();
    assert!(sas.get_opt("hello").await.unwrap().is_none());
    // The ResourceSlices are owned by the Composition and go with it.
    let slices: Api<ResourceSlice> = env.api();
    eventually(
        "the ResourceSlices to be garbage-collected",
        Duration::from_secs(90),
        || async {
            slices
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_restart_makes_no_writes_to_in_sync_resources() {
    let (env, _) = setup("hello", 3).await;
    let mut enoki = Enoki::start(&env.namespace);
    wait_ready(&env, &enoki).await;
    let cms: Api<ConfigMap> = env.api();
    let lp = ListParams::default().labels("enoki.dev/managed-by");
    let versions = |list: Vec<ConfigMap>| -> BTreeMap<String, String> {
        list.into_iter()
            .map(|c| (c.name_any(), c.resource_version().unwrap()))
            .collect()
    };
    // Stopped first: no write of the first process can land after the record.
    enoki.stop();
    let before = versions(cms.list(&lp).await.unwrap().items);
    assert_eq!(before.len(), 5);
    let since = harness::now_rfc3339();
    let restarted = Enoki::start(&env.namespace);
    // The new process reconciles everything once (watch start) and finds it in sync.
    eventually(
        "the restarted controller to check its resources",
        WAIT,
        || async {
            (restarted
                .metric("enoki_resource_checks_total")
                .unwrap_or(0.0)
                >= 5.0)
                .then_some(())
        },
    )
    .await;
    restarted.wait_passes_since_start(1).await;
    harness::audit_barrier(&env).await;
    let after = versions(cms.list(&lp).await.unwrap().items);
    assert_eq!(
        before,
        after,
        "a restart rewrote in-sync resources; logs:\n{}",
        restarted.logs()
    );
    let writes: Vec<_> = harness::audited_requests(&env.namespace, &since)
        .into_iter()
        .filter(|r| r.by_enoki() && r.is_write())
        .collect();
    assert!(
        writes.is_empty(),
        "the restarted controller wrote: {writes:?}"
    );
    assert_converged(&env.client, &env.namespace, "hello").await;
}

#[tokio::test]
async fn kubectl_get_comp_prints_the_documented_columns() {
    let (env, _) = setup("hello", 0).await;
    let enoki = Enoki::start(&env.namespace);
    wait_ready(&env, &enoki).await;
    let out = std::process::Command::new("kubectl")
        .args(["get", "comp", "-n", &env.namespace])
        .env("KUBECONFIG", harness::kubeconfig_path())
        .output()
        .expect("kubectl is on PATH (make test puts the Go-built one there)");
    let text = String::from_utf8_lossy(&out.stdout);
    let header: Vec<&str> = text
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "SYNTHESIZER",
            "STATUS",
            "READY",
            "ERROR",
            "SYNTHESIZED",
            "AGE"
        ],
        "{text}"
    );
    assert!(text.contains("Ready") && text.contains("True"), "{text}");
}

#[tokio::test]
async fn a_gzipped_module_in_a_configmap_is_accepted() {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&sample_module()).unwrap();
    let compressed = gz.finish().unwrap();
    assert!(compressed.len() < sample_module().len());
    let (env, _) = setup_with_module(&compressed, "gz", 0).await;
    let enoki = Enoki::start(&env.namespace);
    wait_ready(&env, &enoki).await;
    assert_eq!(message(&env).await.as_deref(), Some("gz, world"));
}

#[tokio::test]
async fn a_missing_required_input_is_reported_by_name_then_synthesized_once_it_exists() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "hello", &sample_module()).await;
    harness::apply_composition(&env, "hello", &synth, "hello-config", json!({})).await;
    let comps: Api<Composition> = env.api();
    let enoki = Enoki::start(&env.namespace);
    let cond = eventually(
        "Synthesized=False with reason MissingInput",
        WAIT,
        || async {
            let c = comps.get("hello").await.unwrap();
            c.status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Synthesized" && c.reason == "MissingInput")
        },
    )
    .await;
    assert!(
        cond.message.contains("\"config\"") && cond.message.contains("hello-config"),
        "{}",
        cond.message
    );
    // The input is watched: creating it triggers the synthesis.
    set_input(&env, "finally", 0).await;
    wait_ready(&env, &enoki).await;
    assert_eq!(message(&env).await.as_deref(), Some("finally, world"));
}

#[tokio::test]
async fn the_force_resynthesis_annotation_forces_a_new_synthesis() {
    let (env, _) = setup("hello", 0).await;
    let enoki = Enoki::start(&env.namespace);
    let first = wait_ready(&env, &enoki)
        .await
        .status
        .unwrap()
        .current_synthesis
        .unwrap()
        .uuid;
    let comps: Api<Composition> = env.api();
    comps
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"enoki.dev/force-resynthesis": "1"}}}),
            ),
        )
        .await
        .unwrap();
    let second = eventually("a new synthesis", WAIT, || async {
        let uuid = comps
            .get("hello")
            .await
            .unwrap()
            .status?
            .current_synthesis?
            .uuid;
        (uuid != first).then_some(uuid)
    })
    .await;
    let st = comps.get("hello").await.unwrap().status.unwrap();
    assert_eq!(st.previous_synthesis.unwrap().uuid, first);
    assert_eq!(
        st.current_synthesis.unwrap().force_resynthesis.as_deref(),
        Some("1")
    );
    // Same inputs, same module: the output is byte-identical, so nothing is rewritten.
    enoki.wait_pass(&env, "hello").await;
    assert_eq!(
        comps
            .get("hello")
            .await
            .unwrap()
            .status
            .unwrap()
            .current_synthesis
            .unwrap()
            .uuid,
        second,
        "exactly one forced synthesis"
    );
}

#[tokio::test]
async fn a_synthesizer_nobody_uses_still_reports_its_module() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let good = install_synthesizer(&env, "unused", &sample_module()).await;
    let bad = install_synthesizer(&env, "broken", b"\x00asm not really").await;
    // A cluster-wide instance (Synthesizers are cluster-scoped) that matches no Composition.
    let _enoki = Enoki::start_with("", &["--label-selector", "enoki.dev/none-of-these=1"]);
    let synths: Api<Synthesizer> = Api::all(env.client.clone());
    let digest = eventually("the unused Synthesizer's digest", WAIT, || async {
        synths.get(&good).await.unwrap().status?.module_digest
    })
    .await;
    assert!(digest.starts_with("sha256:"));
    let cond = eventually("Ready=False on the broken Synthesizer", WAIT, || async {
        synths
            .get(&bad)
            .await
            .unwrap()
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.status == "False")
    })
    .await;
    assert_eq!(cond.reason, "ModuleUnavailable");
    assert!(
        cond.message.contains("bad header") || cond.message.contains("compile"),
        "{}",
        cond.message
    );
}

/// The echo guest's output: one ConfigMap `name` with `x`.
fn echo_items(name: &str, x: &str) -> serde_json::Value {
    json!([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
        "data": {"x": x}}])
}

async fn data_x(env: &TestEnv, name: &str) -> Option<String> {
    let cms: Api<ConfigMap> = env.api();
    cms.get_opt(name).await.unwrap()?.data?.get("x").cloned()
}

/// Objects in enoki's input caches kept whole (`kept="whole"`) or as metadata.
fn input_cache(enoki: &Enoki, kept: &str) -> f64 {
    enoki.metric_labelled("enoki_input_cache_objects", &[("kept", kept)])
}

/// Sharded, a replica keeps whole only the inputs its Compositions read (here one replica
/// holds both shards: every Composition, but not every ConfigMap of the namespace). An input
/// that arrives a moment before its Composition, or is listed after it, is served from the
/// copy the watch brought; one that arrived long before is read once with a GET.
#[tokio::test]
async fn an_input_is_served_from_its_arrival_or_read_once_then_served_and_followed() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &harness::echo_module()).await;
    harness::set_echo_items(&env, "first-config", &echo_items("out-a", "1")).await;
    harness::apply_composition(&env, "first", &synth, "first-config", json!({})).await;
    let ns = env.namespace.clone();
    let enoki = Enoki::start_with(&ns, &["--shards", "2", "--leader-election-namespace", &ns]);
    let ready = |name: &'static str| {
        let env = &env;
        async move { harness::composition_ready(env, name).await.then_some(()) }
    };
    let gets = || enoki.metric("enoki_input_gets_total").unwrap();
    eventually("first is Ready", WAIT, || ready("first")).await;
    assert_eq!(gets(), 0.0, "first-config was read with a GET");
    // The namespace's ConfigMaps are watched now. This input is created a moment before the
    // Composition that reads it, and another ConfigMap nobody reads.
    harness::set_echo_items(&env, "unread", &echo_items("out-c", "1")).await;
    let unread_at = std::time::Instant::now();
    harness::set_echo_items(&env, "second-config", &echo_items("out-b", "1")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    harness::apply_composition(&env, "second", &synth, "second-config", json!({})).await;
    eventually("second is Ready", WAIT, || ready("second")).await;
    assert_eq!(data_x(&env, "out-b").await.as_deref(), Some("1"));
    let arrived = "second-config, created before second, was read with a GET";
    assert_eq!(gets(), 0.0, "{arrived}");
    forced_resynthesis_reads_no_input(&env, &enoki, "second").await;
    // A change reaches it through the watch, whole from now on.
    harness::set_echo_items(&env, "second-config", &echo_items("out-b", "2")).await;
    eventually("out-b follows its input", WAIT, || async {
        (data_x(&env, "out-b").await.as_deref() == Some("2")).then_some(())
    })
    .await;
    // Whole: the two inputs and the Synthesizer; metadata only: `unread`, the module's
    // ConfigMap and other tests' Synthesizers. The sweep publishes every 15 s.
    eventually("the input cache counts", WAIT, || async {
        (input_cache(&enoki, "whole") == 3.0 && input_cache(&enoki, "metadata") >= 2.0)
            .then_some(())
    })
    .await;
    // `unread`'s copy goes at the first sweep 10 s after it came (sweeps are 15 s apart; a
    // few seconds to spare): a Composition binding it after that reads it with one GET.
    tokio::time::sleep_until((unread_at + Duration::from_secs(32)).into()).await;
    harness::apply_composition(&env, "third", &synth, "unread", json!({})).await;
    eventually("third is Ready", WAIT, || ready("third")).await;
    assert_eq!(data_x(&env, "out-c").await.as_deref(), Some("1"));
    let late = "unread, created long before third, is read with one GET";
    assert_eq!(gets(), 1.0, "{late}");
    eventually("unread is kept whole too", WAIT, || async {
        (input_cache(&enoki, "whole") == 4.0).then_some(())
    })
    .await;
    wait_converged(&env.client, &env.namespace, "second", WAIT).await;
    // Deleted: what only it read is dropped by the next sweep.
    let comps: Api<Composition> = env.api();
    comps.delete("second", &Default::default()).await.unwrap();
    eventually("second-config is kept as metadata only", WAIT, || async {
        (comps.get_opt("second").await.unwrap().is_none() && input_cache(&enoki, "whole") == 3.0)
            .then_some(())
    })
    .await;
    wait_converged(&env.client, &env.namespace, "first", WAIT).await;
}

/// A forced synthesis of `name` with unchanged inputs is served from the cache: no GET.
async fn forced_resynthesis_reads_no_input(env: &TestEnv, enoki: &Enoki, name: &str) {
    let gets = enoki.metric("enoki_input_gets_total").unwrap();
    let comps: Api<Composition> = env.api();
    let uuid = |c: Composition| c.status?.current_synthesis.map(|s| s.uuid);
    let before = uuid(comps.get(name).await.unwrap());
    comps
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"enoki.dev/force-resynthesis": "1"}}}),
            ),
        )
        .await
        .unwrap();
    eventually("synthesized again", WAIT, || async {
        let now = uuid(comps.get(name).await.ok()?);
        (now != before).then_some(())
    })
    .await;
    assert_eq!(
        enoki.metric("enoki_input_gets_total").unwrap(),
        gets,
        "an unchanged input was read again with a GET"
    );
}
