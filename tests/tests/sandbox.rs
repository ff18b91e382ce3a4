//! The sandbox against a running controller on the real control plane: each attack next to
//! its obeyed twin, and a normal Composition converging in the same test, with `/healthz`
//! ok throughout. (The wasm host's own paired tests are in `reconciler/wasm-host/tests`.)
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::time::{Duration, Instant};

use crds::{Composition, Synthesizer};
use harness::{Enoki, TestEnv, echo_module, eventually, install_crds, install_synthesizer};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

fn guest(name: &str) -> Vec<u8> {
    std::fs::read(harness::workspace_root().join("tests/guests").join(name)).unwrap()
}

async fn wait_condition(
    env: &TestEnv,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> String {
    eventually(
        &format!("{name}: {type_}={status} reason {reason}"),
        WAIT,
        || async {
            let (s, r, m) = harness::composition_condition(env, name, type_).await?;
            (s == status && r == reason).then_some(m)
        },
    )
    .await
}

async fn set_limits(env: &TestEnv, synth: &str, limits: serde_json::Value) {
    let synths: Api<Synthesizer> = Api::all(env.client.clone());
    synths
        .patch(
            synth,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"limits": limits}})),
        )
        .await
        .unwrap();
}

fn assert_healthy(enoki: &Enoki) {
    let (code, body) = harness::http_get(enoki.metrics_port.unwrap(), "/healthz");
    assert_eq!(code, 200, "/healthz: {body}");
}

/// A normal echo Composition that must converge while hostile ones fail next to it.
async fn normal_composition(env: &TestEnv) {
    let synth = install_synthesizer(env, "normal", &echo_module()).await;
    let cm = harness::config_map("normal-out", json!({}), json!({"v": "1"}));
    harness::set_echo_items(env, "normal-items", &json!([cm])).await;
    harness::apply_composition(env, "normal", &synth, "normal-items", json!({})).await;
}

#[tokio::test]
async fn a_module_sleeping_past_its_timeout_fails_and_the_controller_stays_healthy() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    harness::set_echo_items(&env, "none", &json!([])).await;
    // One slot: a sleeping module that held it would stall every other synthesis.
    let enoki = Enoki::start_with(&env.namespace, &["--max-concurrent-syntheses", "1"]);

    let sleeper = install_synthesizer(&env, "sleeper", &guest("sleep_long.wat")).await;
    set_limits(&env, &sleeper, json!({"timeout": "2s"})).await;
    let napper = install_synthesizer(&env, "napper", &guest("sleep_short.wat")).await;
    set_limits(&env, &napper, json!({"timeout": "2s"})).await;
    let started = Instant::now();
    harness::apply_composition(
        &env,
        "sleeper",
        &sleeper,
        "none",
        json!({"allowEmpty": true}),
    )
    .await;
    harness::apply_composition(&env, "napper", &napper, "none", json!({"allowEmpty": true})).await;
    normal_composition(&env).await;

    // Violated: the one-hour sleep ends at the deadline with a Timeout condition.
    let msg = wait_condition(&env, "sleeper", "Synthesized", "False", "Timeout").await;
    assert!(msg.contains("2s"), "{msg}");
    // Obeyed: a 50 ms sleep within the limit synthesizes.
    eventually("napper synthesized", WAIT, || async {
        let (s, _, _) = harness::composition_condition(&env, "napper", "Synthesized").await?;
        (s == "True").then_some(())
    })
    .await;
    // And the normal Composition converges through the same single slot.
    eventually("normal Ready", WAIT, || async {
        harness::composition_ready(&env, "normal")
            .await
            .then_some(())
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "the sleeping module held the slot: {:?}",
        started.elapsed()
    );
    assert_healthy(&enoki);
}

#[tokio::test]
async fn limits_above_the_controllers_ceilings_are_refused() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    harness::set_echo_items(&env, "items", &json!([])).await;
    let enoki = Enoki::start_with(
        &env.namespace,
        &[
            "--max-synthesis-memory",
            "128Mi",
            "--max-synthesis-timeout",
            "10s",
        ],
    );
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    // Violated: 1Gi of memory over a 128Mi ceiling.
    set_limits(&env, &synth, json!({"memory": "1Gi"})).await;
    harness::apply_composition(&env, "greedy", &synth, "items", json!({"allowEmpty": true})).await;
    let msg = wait_condition(&env, "greedy", "Synthesized", "False", "LimitsRefused").await;
    assert!(
        msg.contains("spec.limits.memory") && msg.contains("--max-synthesis-memory"),
        "{msg}"
    );
    // Obeyed: within the ceiling, the same Composition synthesizes.
    set_limits(&env, &synth, json!({"memory": "64Mi", "timeout": "5s"})).await;
    eventually("synthesized within the ceilings", WAIT, || async {
        let (s, _, _) = harness::composition_condition(&env, "greedy", "Synthesized").await?;
        (s == "True").then_some(())
    })
    .await;
    assert_healthy(&enoki);
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

async fn module_config_map(env: &TestEnv, name: &str, bytes: Vec<u8>) {
    let cms: Api<ConfigMap> = env.api();
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        binary_data: Some([("module.wasm.gz".to_string(), ByteString(bytes))].into()),
        ..ConfigMap::default()
    };
    cms.patch(
        name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&cm),
    )
    .await
    .unwrap();
}

async fn gz_synthesizer(env: &TestEnv, name: &str, config_map: &str) {
    let synths: Api<Synthesizer> = Api::all(env.client.clone());
    let synth = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
        "metadata": {"name": name},
        "spec": {"module": {"configMap": {"namespace": env.namespace, "name": config_map, "key": "module.wasm.gz"}},
                 "refs": [{"key": "config", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}]}});
    synths
        .patch(
            name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&synth),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_gzip_bomb_is_refused_once_and_not_refetched_on_every_reconcile() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let enoki = Enoki::start_with(&env.namespace, &["--max-module-size", "16Mi"]);
    harness::set_echo_items(&env, "items", &json!([])).await;
    normal_composition(&env).await;

    // Obeyed: the echo module, gzipped, loads.
    module_config_map(&env, "echo-gz", gzip(&echo_module())).await;
    let ok = format!("{}-gz-ok", env.namespace);
    gz_synthesizer(&env, &ok, "echo-gz").await;
    // Violated: 1 GiB of zeros gzipped to about 1 MiB (the most a ConfigMap holds).
    let bomb = std::process::Command::new("bash")
        .args(["-c", "head -c 1073741824 /dev/zero | gzip -9 -c"])
        .output()
        .unwrap()
        .stdout;
    assert!(bomb.len() < 1_100_000, "{}", bomb.len());
    module_config_map(&env, "bomb-gz", bomb).await;
    let bad = format!("{}-gz-bomb", env.namespace);
    gz_synthesizer(&env, &bad, "bomb-gz").await;

    harness::apply_composition(&env, "gz-ok", &ok, "items", json!({"allowEmpty": true})).await;
    harness::apply_composition(&env, "gz-bomb", &bad, "items", json!({"allowEmpty": true})).await;
    eventually("gz-ok synthesized", WAIT, || async {
        let (s, _, _) = harness::composition_condition(&env, "gz-ok", "Synthesized").await?;
        (s == "True").then_some(())
    })
    .await;
    let msg = wait_condition(&env, "gz-bomb", "Synthesized", "False", "ModuleUnavailable").await;
    assert!(
        msg.contains("over the module size limit of 16777216 bytes"),
        "{msg}"
    );
    // The Synthesizer says so too.
    let synths: Api<Synthesizer> = Api::all(env.client.clone());
    let ready = synths.get(&bad).await.unwrap().status.unwrap().conditions;
    assert!(
        ready
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "False"),
        "{ready:?}"
    );
    eventually("normal Ready", WAIT, || async {
        harness::composition_ready(&env, "normal")
            .await
            .then_some(())
    })
    .await;

    // Negative cache: reconciles within the backoff reuse the failure instead of fetching
    // and inflating the bomb again.
    let fetches = || enoki.metric("enoki_module_fetches").unwrap_or(0.0);
    let before = fetches();
    let comps: Api<Composition> = env.api();
    for i in 0..5 {
        comps
            .patch(
                "gz-bomb",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"test/poke": i.to_string()}}})),
            )
            .await
            .unwrap();
        enoki.wait_pass(&env, "gz-bomb").await;
    }
    assert_eq!(fetches(), before, "the bad module was fetched again");
    assert_healthy(&enoki);
}

#[tokio::test]
async fn a_cel_cost_bomb_is_a_per_resource_condition_not_a_stalled_controller() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let enoki = Enoki::start(&env.namespace);
    let data: serde_json::Map<String, serde_json::Value> =
        (0..2000).map(|i| (format!("k{i}"), json!("v"))).collect();
    // Violated: three nested macros over 2,000 keys (8e9 steps if it ran).
    let bomb = "self.data.all(a, self.data.all(b, self.data.all(c, a != b || b != c)))";
    let cm = harness::config_map("bomb", json!({"enoki.dev/readiness": bomb}), json!(data));
    harness::set_echo_items(&env, "bomb-items", &json!([cm])).await;
    harness::apply_composition(&env, "bomb", &synth, "bomb-items", json!({})).await;
    // Obeyed: the same shape over three keys is evaluated.
    let small = "self.data.all(a, self.data.all(b, self.data.exists(c, size(a) > 0)))";
    let cm = harness::config_map(
        "small",
        json!({"enoki.dev/readiness": small}),
        json!({"a": "1", "b": "2", "c": "3"}),
    );
    harness::set_echo_items(&env, "small-items", &json!([cm])).await;
    harness::apply_composition(&env, "small", &synth, "small-items", json!({})).await;
    normal_composition(&env).await;

    let msg = eventually("bomb: Ready=False naming the budget", WAIT, || async {
        let (s, _, m) = harness::composition_condition(&env, "bomb", "Ready").await?;
        (s == "False" && m.contains("exceeds its budget")).then_some(m)
    })
    .await;
    assert!(
        msg.contains("ConfigMap") && msg.contains("bomb") && msg.contains("default"),
        "the object and its check are named: {msg}"
    );
    for name in ["small", "normal"] {
        eventually(&format!("{name} Ready"), WAIT, || async {
            harness::composition_ready(&env, name).await.then_some(())
        })
        .await;
    }
    // The bomb's object was still applied (readiness is per resource, not an apply error).
    let cms: Api<ConfigMap> = env.api();
    assert!(cms.get_opt("bomb").await.unwrap().is_some());
    assert_healthy(&enoki);
}

#[tokio::test]
async fn typoed_and_empty_outputs_never_delete_what_was_applied() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let enoki = Enoki::start(&env.namespace);
    let cm = harness::config_map("kept", json!({}), json!({"v": "1"}));
    harness::set_echo_items(&env, "items", &json!([cm])).await;
    harness::apply_composition(&env, "echo", &synth, "items", json!({})).await;
    eventually("Ready", WAIT, || async {
        harness::composition_ready(&env, "echo").await.then_some(())
    })
    .await;
    let cms: Api<ConfigMap> = env.api();
    let raw = |text: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "items"},
               "data": {"raw": text}})
    };

    // Violated: `itmes` instead of `items`.
    cms.patch(
        "items",
        &PatchParams::apply("test-raw").force(),
        &Patch::Apply(raw(
            r#"{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","itmes":[]}"#,
        )),
    )
    .await
    .unwrap();
    let msg = wait_condition(&env, "echo", "Synthesized", "False", "MalformedOutput").await;
    assert!(msg.contains("itmes"), "{msg}");
    assert!(
        cms.get_opt("kept").await.unwrap().is_some(),
        "nothing deleted"
    );

    // Violated: a well-formed but empty list would delete everything: refused.
    cms.patch(
        "items",
        &PatchParams::apply("test-raw").force(),
        &Patch::Apply(raw(
            r#"{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[]}"#,
        )),
    )
    .await
    .unwrap();
    let msg = wait_condition(&env, "echo", "Synthesized", "False", "EmptyOutput").await;
    assert!(msg.contains("allowEmpty"), "{msg}");
    enoki.wait_pass(&env, "echo").await;
    assert!(
        cms.get_opt("kept").await.unwrap().is_some(),
        "nothing deleted"
    );

    // Obeyed: the Composition opts in, and the empty output prunes.
    harness::apply_composition(&env, "echo", &synth, "items", json!({"allowEmpty": true})).await;
    eventually("kept pruned after allowEmpty", WAIT, || async {
        cms.get_opt("kept").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_healthy(&enoki);
}
