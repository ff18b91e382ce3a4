//! `enoki run --remote-kubeconfig` (Eno's flag) with two real control planes: Compositions,
//! Synthesizers, ResourceSlices and inputs live in the management cluster (the harness's
//! main control plane); every emitted object is applied to, drift-corrected in, pruned from
//! and finally deleted from the remote one (`make test` starts it).
#![allow(clippy::unwrap_used)] // test code

use std::time::Duration;

use harness::{
    Enoki, TestEnv, apply_composition, composition_condition, composition_ready, create_namespace,
    echo_module, eventually, install_crds, install_synthesizer, remote_client,
    remote_kubeconfig_path, set_echo_items,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

/// Runs the enoki CLI against the management cluster: (exit code, stdout + stderr).
fn enoki(args: &[&str]) -> (i32, String) {
    harness::enoki_cli_text(args)
}

fn cm(name: &str, x: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"x": x}})
}

async fn data_x(api: &Api<ConfigMap>, name: &str) -> Option<String> {
    api.get_opt(name)
        .await
        .unwrap()
        .and_then(|c| c.data?.get("x").cloned())
}

#[tokio::test]
async fn emitted_objects_go_to_the_remote_cluster_and_state_stays_in_management() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let ns = env.namespace.clone();
    let remote = remote_client().await;
    create_namespace(&remote, &ns).await;
    let remote_cms: Api<ConfigMap> = Api::namespaced(remote.clone(), &ns);
    let local_cms: Api<ConfigMap> = env.api();

    let synth = install_synthesizer(&env, "remote", &echo_module()).await;
    set_echo_items(&env, "items", &json!([cm("a", "1"), cm("b", "1")])).await;
    apply_composition(&env, "app", &synth, "items", json!({})).await;
    let path = remote_kubeconfig_path();
    let _enoki = Enoki::start_with(&ns, &["--remote-kubeconfig", path.to_str().unwrap()]);

    eventually(
        "the Composition is Ready",
        Duration::from_secs(90),
        || async { composition_ready(&env, "app").await.then_some(()) },
    )
    .await;
    // Applied to the remote cluster, labelled for the Composition; nothing in management.
    for name in ["a", "b"] {
        let obj = remote_cms.get(name).await.unwrap();
        assert!(
            obj.metadata
                .labels
                .unwrap_or_default()
                .contains_key("enoki.dev/managed-by"),
            "{name} is not labelled as managed"
        );
        assert!(
            local_cms.get_opt(name).await.unwrap().is_none(),
            "{name} was written to the management cluster"
        );
    }
    let slices: Api<crds::ResourceSlice> = env.api();
    assert!(
        !slices
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "the ResourceSlices live in the management cluster"
    );

    // Drift in the remote cluster is seen (its watch) and reverted.
    remote_cms
        .patch(
            "a",
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a"}, "data": {"x": "drifted"}})),
        )
        .await
        .unwrap();
    eventually(
        "the remote drift is reverted",
        Duration::from_secs(60),
        || async { (data_x(&remote_cms, "a").await.as_deref() == Some("1")).then_some(()) },
    )
    .await;

    diff_compares_with_the_remote(&ns, &path);

    // An input change in management re-synthesizes: a changes, b is pruned from the remote.
    set_echo_items(&env, "items", &json!([cm("a", "2")])).await;
    eventually(
        "a is updated and b pruned in the remote cluster",
        Duration::from_secs(60),
        || async {
            let a = data_x(&remote_cms, "a").await;
            let b = remote_cms.get_opt("b").await.unwrap();
            (a.as_deref() == Some("2") && b.is_none()).then_some(())
        },
    )
    .await;

    a_refused_object_is_named(&env).await;

    // Deleting the Composition deletes what it applied in the remote cluster.
    let comps: Api<crds::Composition> = env.api();
    comps.delete("app", &DeleteParams::default()).await.unwrap();
    eventually(
        "the Composition is gone and a deleted from the remote cluster",
        Duration::from_secs(60),
        || async {
            let gone = comps.get_opt("app").await.unwrap().is_none();
            let a = remote_cms.get_opt("a").await.unwrap();
            (gone && a.is_none()).then_some(())
        },
    )
    .await;
}

/// `enoki diff --remote-kubeconfig` compares with the remote cluster: in sync there; the
/// management cluster has none of the objects.
fn diff_compares_with_the_remote(ns: &str, path: &std::path::Path) {
    let path_str = path.to_str().unwrap();
    let (code, out) = enoki(&[
        "diff",
        "app",
        "-n",
        ns,
        "--remote-kubeconfig",
        path_str,
        "--as-caller",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("# 0 changed, 2 unchanged, 0 pruned"), "{out}");
    let (code, out) = enoki(&["diff", "app", "-n", ns, "--as-caller"]);
    assert_eq!(code, 1, "{out}");
}

/// An object the remote cluster refuses (its namespace does not exist there) surfaces as a
/// condition naming it; the Composition recovers once it is no longer emitted.
async fn a_refused_object_is_named(env: &TestEnv) {
    set_echo_items(
        env,
        "items",
        &json!([cm("a", "2"), {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "missing-in-remote"}, "data": {"x": "1"}}]),
    )
    .await;
    let message = eventually(
        "the refused object is named in a condition",
        Duration::from_secs(60),
        || async {
            let (status, _, message) = composition_condition(env, "app", "Reconciled").await?;
            (status == "False" && message.contains("missing-in-remote")).then_some(message)
        },
    )
    .await;
    assert!(message.contains("ConfigMap"), "{message}");
    set_echo_items(env, "items", &json!([cm("a", "2")])).await;
    eventually("Ready again", Duration::from_secs(60), || async {
        composition_ready(env, "app").await.then_some(())
    })
    .await;
}
