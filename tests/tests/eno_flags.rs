//! Eno's per-resource `fail-open` and the controller flags Eno operators set
//! (`--fail-open`, `--resource-filter`, `--qps`/`--burst`, `--timeout`), against the real
//! control plane with Eno's `eno.azure.io/*` spellings. Each test names the Eno code it
//! restates (Eno's repository: github.com/Azure/eno; read, not copied).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use harness::{Enoki, TestEnv, echo_module, eventually, install_crds, install_synthesizer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// A resource of a kind the API server does not serve: every write of it fails.
#[allow(clippy::needless_pass_by_value)] // called with `json!` temporaries
fn unappliable(name: &str, annotations: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Nope",
        "metadata": {"name": name, "annotations": annotations}})
}

fn cm(name: &str, annotations: Value) -> Value {
    harness::config_map(name, annotations, json!({"k": "v"}))
}

/// A Composition `name` of the echo synthesizer `synth` emitting `items`.
#[allow(clippy::needless_pass_by_value)] // called with `json!` temporaries
async fn compose(env: &TestEnv, synth: &str, name: &str, items: &Value, annotations: Value) {
    harness::set_echo_items(env, &format!("{name}-items"), items).await;
    harness::apply_composition(env, name, synth, &format!("{name}-items"), json!({})).await;
    if annotations.as_object().is_some_and(|a| !a.is_empty()) {
        let patch = json!({"metadata": {"annotations": annotations}});
        env.api::<crds::Composition>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
}

/// Waits until conditions `Reconciled` and `Ready` of `name` have these statuses.
async fn wait_conditions(env: &TestEnv, name: &str, reconciled: &str, ready: &str) {
    eventually(
        &format!("{name}: Reconciled={reconciled}, Ready={ready}"),
        WAIT,
        || async {
            let r = harness::composition_condition(env, name, "Reconciled").await?;
            let s = harness::composition_condition(env, name, "Ready").await?;
            (r.0 == reconciled && s.0 == ready).then_some(())
        },
    )
    .await;
}

/// The state of resource `name` in the current synthesis of Composition `comp`.
async fn resource_state(env: &TestEnv, comp: &str, name: &str) -> Option<crds::ResourceState> {
    let c = env.api::<crds::Composition>().get(comp).await.ok()?;
    let slices: Api<crds::ResourceSlice> = env.api();
    for r in &c.status?.current_synthesis?.resource_slices {
        let slice = slices.get(&r.name).await.ok()?;
        let at = slice.spec.resources.iter().position(|m| {
            serde_json::from_str::<Value>(&m.manifest).is_ok_and(|v| v["metadata"]["name"] == name)
        });
        if let Some(i) = at {
            return slice.status?.resources.get(i).cloned();
        }
    }
    None
}

async fn setup() -> (TestEnv, String) {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    (env, synth)
}

/// Eno `internal/resource/resource.go` (`FailOpen` from the resource's own annotation,
/// `strconv.ParseBool`, not cascaded) and `reconciliation/controller.go` (a failed write of a
/// fail-open resource is reconciled; with no readiness checks it is ready, so the next
/// readiness group goes ahead; with an unmet check it is not, and holds the next group back;
/// `edgecase_test.go` `TestFailOpen_*`).
#[tokio::test]
async fn fail_open_is_per_resource_parsed_as_go_and_ready_without_checks() {
    let (env, synth) = setup().await;
    let after = |n: &str| cm(n, json!({"eno.azure.io/readiness-group": "1"}));
    let open = json!({"eno.azure.io/fail-open": "1"});
    compose(
        &env,
        &synth,
        "open",
        &json!([
            cm("open-fine", json!({})),
            unappliable("open-broken", open.clone()),
            after("open-after")
        ]),
        json!({}),
    )
    .await;
    let checked = json!({"eno.azure.io/fail-open": "T", "eno.azure.io/readiness": "true"});
    compose(
        &env,
        &synth,
        "checked",
        &json!([
            unappliable("checked-broken", checked),
            after("checked-after")
        ]),
        json!({}),
    )
    .await;
    // On the Composition only: not cascaded.
    compose(
        &env,
        &synth,
        "cascade",
        &json!([unappliable("cascade-broken", json!({}))]),
        json!({"eno.azure.io/fail-open": "true"}),
    )
    .await;
    compose(
        &env,
        &synth,
        "bad",
        &json!([unappliable(
            "bad-broken",
            json!({"eno.azure.io/fail-open": "yes"})
        )]),
        json!({}),
    )
    .await;
    let enoki = Enoki::start(&env.namespace);

    wait_conditions(&env, "open", "True", "True").await;
    assert!(
        harness::config_map_exists(&env, "open-fine").await
            && harness::config_map_exists(&env, "open-after").await
    );
    eventually(
        "checked-broken reconciled (fail-open) but not ready",
        WAIT,
        || async {
            let s = resource_state(&env, "checked", "checked-broken").await?;
            (s.reconciled && s.ready.is_none()).then_some(())
        },
    )
    .await;
    wait_conditions(&env, "cascade", "False", "False").await;
    eventually(
        "a value ParseBool refuses fails the synthesis",
        WAIT,
        || async {
            let c = harness::composition_condition(&env, "bad", "Synthesized").await?;
            (c.0 == "False" && c.2.contains("eno.azure.io/fail-open")).then_some(())
        },
    )
    .await;
    enoki.wait_pass(&env, "checked").await;
    assert!(
        !harness::config_map_exists(&env, "checked-after").await,
        "a fail-open resource whose check fails holds the next readiness group"
    );
}

/// Eno `cmd/eno-reconciler/main.go` `--fail-open` and `reconciliation/controller.go`
/// (`shouldFailOpen`): the flag is the default; a resource's own annotation wins both ways.
#[tokio::test]
async fn the_fail_open_flag_is_the_default_and_the_resources_own_value_wins() {
    let (env, synth) = setup().await;
    compose(
        &env,
        &synth,
        "default",
        &json!([unappliable("default-broken", json!({}))]),
        json!({}),
    )
    .await;
    compose(
        &env,
        &synth,
        "closed",
        &json!([unappliable(
            "closed-broken",
            json!({"eno.azure.io/fail-open": "false"})
        )]),
        json!({}),
    )
    .await;
    let _enoki = Enoki::start_with(&env.namespace, &["--fail-open"]);
    wait_conditions(&env, "default", "True", "True").await;
    wait_conditions(&env, "closed", "False", "False").await;
}

/// Eno `cmd/eno-reconciler/main.go` `--resource-filter` and `internal/resource/cache.go`
/// (`TestResourceSelector`): only resources the CEL expression is true for are reconciled;
/// the others are not applied, not deleted and not waited for (an earlier readiness group
/// that is filtered out holds nothing back); an expression that fails excludes the resource.
/// enoki leaves the filtered resources out of the Composition's roll-up (one enoki reconciles
/// everything it is given), where Eno leaves it to the reconciler that handles them.
#[tokio::test]
async fn the_resource_filter_reconciles_only_what_it_selects() {
    let (env, synth) = setup().await;
    let labelled = |name: &str, foo: &str, group: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name,
            "labels": {"foo": foo}, "annotations": {"eno.azure.io/readiness-group": group}},
            "data": {"k": "v"}})
    };
    let items = json!([
        labelled("picked", "bar", "0"),
        cm("unlabelled", json!({})),
        labelled("other", "baz", "-1")
    ]);
    compose(&env, &synth, "filtered", &items, json!({})).await;
    // `self.metadata.labels.foo` fails on the unlabelled one: left out too.
    let filter = "self.metadata.labels.foo == 'bar'";
    let enoki = Enoki::start_with(&env.namespace, &["--resource-filter", filter]);
    wait_conditions(&env, "filtered", "True", "True").await;
    assert!(harness::config_map_exists(&env, "picked").await);
    enoki.wait_pass(&env, "filtered").await;
    assert!(
        !harness::config_map_exists(&env, "unlabelled").await
            && !harness::config_map_exists(&env, "other").await
    );
    // An object the filter leaves out is never touched: not reverted, not deleted.
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "other", "labels": {"foo": "baz"}}, "data": {"k": "theirs"}});
    env.api::<ConfigMap>()
        .patch(
            "other",
            &PatchParams::apply("someone").force(),
            &Patch::Apply(&theirs),
        )
        .await
        .unwrap();
    enoki.wait_pass(&env, "filtered").await;
    let data = env
        .api::<ConfigMap>()
        .get("other")
        .await
        .unwrap()
        .data
        .unwrap();
    assert_eq!(data["k"], "theirs");
    let comps: Api<crds::Composition> = env.api();
    harness::delete_and_wait(&comps, "filtered").await;
    assert!(
        !harness::config_map_exists(&env, "picked").await,
        "a selected resource is deleted with it"
    );
    assert!(
        harness::config_map_exists(&env, "other").await,
        "a filtered one is not"
    );
}

/// A `--resource-filter` that does not compile stops `enoki run` with the flag named (Eno
/// exits at start-up too).
#[test]
fn a_resource_filter_that_does_not_compile_stops_enoki() {
    let (code, text) = harness::enoki_cli_text(&["run", "--resource-filter", "self.("]);
    assert_ne!(code, 0);
    assert!(text.contains("--resource-filter"), "{text}");
}

/// Eno `internal/manager/options.go` `--qps`/`--burst` (client-go's token bucket): with
/// `--qps 2 --burst 1`, six creates are at least 2.5 s apart from first to last.
#[tokio::test]
async fn qps_and_burst_space_enokis_requests() {
    let (env, synth) = setup().await;
    let items: Vec<Value> = (0..6)
        .map(|i| cm(&format!("paced-{i}"), json!({})))
        .collect();
    compose(&env, &synth, "paced", &Value::Array(items), json!({})).await;
    let _enoki = Enoki::start_with(&env.namespace, &["--qps", "2", "--burst", "1"]);
    harness::wait_ready(&env, "paced").await;
    let mut created: Vec<String> = Vec::new();
    for i in 0..6 {
        let c = env
            .api::<ConfigMap>()
            .get(&format!("paced-{i}"))
            .await
            .unwrap();
        created.push(c.metadata.creation_timestamp.unwrap().0.to_string());
    }
    created.sort();
    let first: k8s_openapi::jiff::Timestamp = created[0].parse().unwrap();
    let last: k8s_openapi::jiff::Timestamp = created[5].parse().unwrap();
    // Timestamps have whole seconds: 2.5 s or more apart shows as at least 2.
    assert!(
        last.duration_since(first).as_secs() >= 2,
        "creates not spaced by --qps: {created:?}"
    );
}

/// `--timeout` (Eno's flag of the same name, which Eno stores but no longer reads): a write
/// that takes longer counts as failed and is reported, and retried with backoff.
#[tokio::test]
async fn a_write_longer_than_the_timeout_fails_and_is_reported() {
    let (env, synth) = setup().await;
    // Many writes: a timer of 1 ns fires at the runtime's next tick, and on a busy machine a
    // single answer can arrive before that tick is processed; fifty cannot all.
    let items: Vec<Value> = (0..50)
        .map(|i| cm(&format!("slow-cm-{i}"), json!({})))
        .collect();
    compose(&env, &synth, "slow", &Value::Array(items), json!({})).await;
    let _enoki = Enoki::start_with(&env.namespace, &["--timeout", "1ns"]);
    eventually("Reconciled=False ApplyFailed", WAIT, || async {
        let c = harness::composition_condition(&env, "slow", "Reconciled").await?;
        (c.0 == "False" && c.1 == "ApplyFailed").then_some(())
    })
    .await;
}
