//! Eno's inter-composition semantics on the real control plane: `dependsOn` (synthesis waits
//! for dependencies to be ready, deletion waits for dependents to be gone, cycles are reported)
//! and the Symphony controller (one Composition per variation, inherited bindings, variation
//! `dependsOn`, removal of a variation, orphaning on Symphony deletion).
#![allow(clippy::unwrap_used, clippy::needless_pass_by_value)] // test helpers outside #[test] fns

use std::time::Duration;

use crds::{Composition, Symphony};
use harness::{
    Enoki, TestEnv, apply_composition, composition_ready, config_map, echo_module, eventually,
    install_crds, install_synthesizer, set_echo_items,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

async fn dependency_reason(env: &TestEnv, name: &str) -> Option<String> {
    let comps: Api<Composition> = env.api();
    comps
        .get_opt(name)
        .await
        .unwrap()?
        .status?
        .dependency_status?
        .reason
}

#[tokio::test]
async fn depends_on_gates_synthesis_on_readiness_and_deletion_on_dependents() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    set_echo_items(
        &env,
        "infra-items",
        &json!([config_map(
            "gate",
            json!({"enoki.dev/readiness": "has(self.data.open) && self.data.open == 'yes'"}),
            json!({"x": "y"})
        )]),
    )
    .await;
    set_echo_items(
        &env,
        "app-items",
        &json!([config_map("app-thing", json!({}), json!({}))]),
    )
    .await;
    apply_composition(&env, "infra", &synth, "infra-items", json!({})).await;
    apply_composition(
        &env,
        "app",
        &synth,
        "app-items",
        json!({"dependsOn": [{"name": "infra"}]}),
    )
    .await;
    apply_composition(
        &env,
        "orphan-dep",
        &synth,
        "app-items",
        json!({"dependsOn": [{"name": "nope"}]}),
    )
    .await;
    apply_composition(
        &env,
        "x",
        &synth,
        "app-items",
        json!({"dependsOn": [{"name": "y"}]}),
    )
    .await;
    apply_composition(
        &env,
        "y",
        &synth,
        "app-items",
        json!({"dependsOn": [{"name": "x"}]}),
    )
    .await;
    let enoki = Enoki::start(&env.namespace);

    eventually("infra's resource", WAIT, || async {
        harness::config_map_exists(&env, "gate").await.then_some(())
    })
    .await;
    eventually("app to report its wait", WAIT, || async {
        (dependency_reason(&env, "app").await.as_deref() == Some("WaitingOnDependencies"))
            .then_some(())
    })
    .await;
    enoki.wait_pass(&env, "app").await;
    assert!(
        !harness::config_map_exists(&env, "app-thing").await,
        "app synthesized before infra was ready:\n{}",
        enoki.logs()
    );
    let comps: Api<Composition> = env.api();
    let app = comps.get("app").await.unwrap().status.unwrap();
    let blocked = app.dependency_status.unwrap();
    assert_eq!(blocked.blocked_by[0].name, "infra");
    assert_eq!(blocked.blocked_by[0].reason, "DependencyNotReady");
    eventually("a missing dependency to be named", WAIT, || async {
        let st = comps
            .get("orphan-dep")
            .await
            .unwrap()
            .status?
            .dependency_status?;
        (st.blocked_by.first()?.reason == "DependencyNotFound").then_some(())
    })
    .await;
    eventually("a cycle to be reported", WAIT, || async {
        (dependency_reason(&env, "x").await.as_deref() == Some("CircularDependency")).then_some(())
    })
    .await;

    // infra becomes ready: app synthesizes and converges.
    let cms: Api<ConfigMap> = env.api();
    let operator = PatchParams {
        field_manager: Some("operator".into()),
        ..PatchParams::default()
    };
    cms.patch(
        "gate",
        &operator,
        &Patch::Merge(&json!({"data": {"open": "yes"}})),
    )
    .await
    .unwrap();
    eventually("app Ready after infra", WAIT, || async {
        composition_ready(&env, "app").await.then_some(())
    })
    .await;
    assert!(harness::config_map_exists(&env, "app-thing").await);
    assert_eq!(dependency_reason(&env, "app").await, None);

    // Deleting infra waits for app (its dependent) to be gone; its resources stay meanwhile.
    for c in ["orphan-dep", "x", "y"] {
        comps.delete(c, &DeleteParams::default()).await.unwrap();
    }
    comps
        .delete("infra", &DeleteParams::default())
        .await
        .unwrap();
    eventually("infra to wait on its dependent", WAIT, || async {
        (dependency_reason(&env, "infra").await.as_deref() == Some("WaitingOnDependents"))
            .then_some(())
    })
    .await;
    eventually("infra's resources first", WAIT, || async {
        harness::config_map_exists(&env, "gate").await.then_some(())
    })
    .await;
    comps.delete("app", &DeleteParams::default()).await.unwrap();
    eventually("infra to be gone after app", WAIT, || async {
        comps
            .get_opt("infra")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        !harness::config_map_exists(&env, "gate").await
            && !harness::config_map_exists(&env, "app-thing").await
    );
}

#[tokio::test]
async fn a_symphony_makes_one_composition_per_variation_and_orphans_on_deletion() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let net = install_synthesizer(&env, "net", &echo_module()).await;
    let app = install_synthesizer(&env, "app", &echo_module()).await;
    set_echo_items(
        &env,
        "shared-items",
        &json!([config_map("net-thing", json!({}), json!({}))]),
    )
    .await;
    set_echo_items(
        &env,
        "app-items",
        &json!([config_map("app-thing", json!({}), json!({}))]),
    )
    .await;
    let symphony = |variations: serde_json::Value| {
        json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Symphony",
            "metadata": {"name": "stack"},
            "spec": {"bindings": [{"key": "config", "resource": {"name": "shared-items"}}],
                     "synthesisEnv": [{"name": "TIER", "value": "base"}],
                     "variations": variations}})
    };
    let both = json!([
        {"synthesizer": {"name": app}, "dependsOn": [{"synthesizer": net}],
         "bindings": [{"key": "config", "resource": {"name": "app-items"}}],
         "synthesisEnv": [{"name": "TIER", "value": "app"}],
         "labels": {"team": "web"}, "annotations": {"note": "x"}},
        {"synthesizer": {"name": net}},
    ]);
    let syms: Api<Symphony> = env.api();
    let pp = PatchParams::apply("test").force();
    syms.patch("stack", &pp, &Patch::Apply(&symphony(both)))
        .await
        .unwrap();
    let _enoki = Enoki::start(&env.namespace);

    eventually("the Symphony to be ready", WAIT, || async {
        syms.get("stack").await.unwrap().status?.ready.map(|_| ())
    })
    .await;
    assert!(
        harness::config_map_exists(&env, "net-thing").await
            && harness::config_map_exists(&env, "app-thing").await
    );
    let comps: Api<Composition> = env.api();
    let app_comp = comps.get(&format!("stack-{app}")).await.unwrap();
    assert_eq!(
        app_comp.labels().get("team").map(String::as_str),
        Some("web")
    );
    assert_eq!(
        app_comp
            .labels()
            .get("enoki.dev/symphony")
            .map(String::as_str),
        Some("stack")
    );
    assert_eq!(
        app_comp.annotations().get("note").map(String::as_str),
        Some("x")
    );
    assert_eq!(app_comp.spec.bindings[0].resource.name, "app-items");
    assert_eq!(app_comp.spec.synthesis_env[0].value, "app");
    assert_eq!(app_comp.spec.depends_on[0].name, format!("stack-{net}"));
    let owner = &app_comp.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Symphony", "stack")
    );
    let net_comp = comps.get(&format!("stack-{net}")).await.unwrap();
    assert_eq!(net_comp.spec.bindings[0].resource.name, "shared-items");
    assert_eq!(net_comp.spec.synthesis_env[0].value, "base");

    // Removing a variation deletes its Composition normally: its resources are cleaned up.
    let only_net = json!([{"synthesizer": {"name": net}}]);
    syms.patch("stack", &pp, &Patch::Apply(&symphony(only_net)))
        .await
        .unwrap();
    eventually("the removed variation's resources to go", WAIT, || async {
        (!harness::config_map_exists(&env, "app-thing").await
            && comps
                .get_opt(&format!("stack-{app}"))
                .await
                .unwrap()
                .is_none())
        .then_some(())
    })
    .await;

    // Deleting the Symphony removes its Compositions and, like Eno, orphans their resources.
    syms.delete("stack", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the Symphony and its Compositions to be gone",
        WAIT,
        || async {
            (syms.get_opt("stack").await.unwrap().is_none()
                && comps
                    .get_opt(&format!("stack-{net}"))
                    .await
                    .unwrap()
                    .is_none())
            .then_some(())
        },
    )
    .await;
    assert!(
        harness::config_map_exists(&env, "net-thing").await,
        "Symphony deletion orphans resources"
    );
}
