//! Boundaries between Compositions on the real control plane: an object another Composition
//! owns is never taken over or deleted.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crds::Composition;
use harness::{Enoki, TestEnv, echo_module, eventually, install_crds, install_synthesizer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn two_compositions_emitting_one_object_the_first_keeps_it_the_second_reports_conflict() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let enoki = Enoki::start(&env.namespace);
    let shared = |owner: &str| harness::config_map("shared", json!({}), json!({"owner": owner}));

    harness::set_echo_items(&env, "first-items", &json!([shared("first")])).await;
    harness::apply_composition(&env, "first", &synth, "first-items", json!({})).await;
    eventually("first Ready", WAIT, || async {
        harness::composition_ready(&env, "first")
            .await
            .then_some(())
    })
    .await;
    let cms: Api<ConfigMap> = env.api();
    let first_uid = {
        let comps: Api<Composition> = env.api();
        comps.get("first").await.unwrap().uid().unwrap()
    };

    // The second emits the same ConfigMap, plus one of its own that it may create.
    let own = harness::config_map("second-own", json!({}), json!({"v": "1"}));
    harness::set_echo_items(&env, "second-items", &json!([shared("second"), own])).await;
    harness::apply_composition(&env, "second", &synth, "second-items", json!({})).await;
    let (_, _, message) = eventually("second: Reconciled=False Conflict", WAIT, || async {
        let c = harness::composition_condition(&env, "second", "Reconciled").await?;
        (c.0 == "False" && c.1 == "Conflict").then_some(c)
    })
    .await;
    assert!(
        message.contains("ConfigMap") && message.contains("shared"),
        "names the object: {message}"
    );
    assert!(
        message.contains(&format!("{}/first", env.namespace)) && message.contains(&first_uid),
        "names the other owner: {message}"
    );
    // Its own object is applied; the shared one still says the first owner.
    eventually("second-own applied", WAIT, || async {
        cms.get_opt("second-own").await.unwrap().map(|_| ())
    })
    .await;
    let cm = cms.get("shared").await.unwrap();
    assert_eq!(
        cm.data.as_ref().unwrap()["owner"],
        "first",
        "not taken over"
    );
    assert_eq!(
        cm.labels().get("enoki.dev/managed-by"),
        Some(&first_uid),
        "still labelled for the first"
    );
    assert!(!harness::composition_ready(&env, "second").await);

    // Deleting the second leaves the first's object alone (and removes its own).
    let comps: Api<Composition> = env.api();
    harness::delete_and_wait(&comps, "second").await;
    assert!(cms.get_opt("second-own").await.unwrap().is_none());
    let cm = cms.get("shared").await.unwrap();
    assert_eq!(cm.data.unwrap()["owner"], "first");
    assert!(harness::composition_ready(&env, "first").await);
    drop(enoki);
}

#[tokio::test]
async fn an_unmanaged_object_is_adopted_unless_adopt_never() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let cms: Api<ConfigMap> = env.api();
    for name in ["adoptable", "guarded"] {
        let cm: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name}, "data": {"by": "hand"}}))
        .unwrap();
        cms.create(&Default::default(), &cm).await.unwrap();
    }
    let enoki = Enoki::start(&env.namespace);
    // Violated: `adopt: never` on an object someone created by hand.
    let guarded = harness::config_map(
        "guarded",
        json!({"enoki.dev/adopt": "never"}),
        json!({"by": "enoki"}),
    );
    harness::set_echo_items(&env, "guarded-items", &json!([guarded])).await;
    harness::apply_composition(&env, "guarded", &synth, "guarded-items", json!({})).await;
    // Obeyed: the default adopts it (Eno semantics).
    let adoptable = harness::config_map("adoptable", json!({}), json!({"by": "enoki"}));
    harness::set_echo_items(&env, "adoptable-items", &json!([adoptable])).await;
    harness::apply_composition(&env, "adoptable", &synth, "adoptable-items", json!({})).await;

    let (_, _, message) = eventually("guarded: Reconciled=False Conflict", WAIT, || async {
        let c = harness::composition_condition(&env, "guarded", "Reconciled").await?;
        (c.0 == "False" && c.1 == "Conflict").then_some(c)
    })
    .await;
    assert!(message.contains("not adopted"), "{message}");
    assert_eq!(
        cms.get("guarded").await.unwrap().data.unwrap()["by"],
        "hand"
    );
    eventually("adoptable Ready", WAIT, || async {
        harness::composition_ready(&env, "adoptable")
            .await
            .then_some(())
    })
    .await;
    assert_eq!(
        cms.get("adoptable").await.unwrap().data.unwrap()["by"],
        "enoki"
    );
    drop(enoki);
}

#[tokio::test]
async fn no_cross_namespace_refs_refuses_other_namespaces_and_applies_nothing() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    // Another tenant's namespace with an items ConfigMap that would emit an object.
    let other = format!("{}-b", env.namespace);
    harness::create_namespace(&env.client, &other).await;
    let elsewhere: Api<ConfigMap> = Api::namespaced(env.client.clone(), &other);
    let items = json!([harness::config_map("stolen", json!({}), json!({"v": "1"}))]);
    let cm: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "items"}, "data": {"items": items.to_string()}}))
    .unwrap();
    elsewhere.create(&Default::default(), &cm).await.unwrap();
    let enoki = Enoki::start_with(&env.namespace, &["--no-cross-namespace-refs"]);

    // Violated: a binding into the other namespace, and a dependsOn on a Composition there.
    harness::apply_composition(
        &env,
        "reach",
        &synth,
        "items",
        json!({"bindings": [{"key": "config", "resource": {"name": "items", "namespace": other}}],
               "dependsOn": [{"name": "theirs", "namespace": other}]}),
    )
    .await;
    // Obeyed: the same synthesizer bound inside the namespace.
    let own = harness::config_map("own", json!({}), json!({"v": "1"}));
    harness::set_echo_items(&env, "items", &json!([own])).await;
    harness::apply_composition(&env, "local", &synth, "items", json!({})).await;

    let (_, _, message) = eventually(
        "reach: Synthesized=False CrossNamespaceRef",
        WAIT,
        || async {
            let c = harness::composition_condition(&env, "reach", "Synthesized").await?;
            (c.0 == "False" && c.1 == "CrossNamespaceRef").then_some(c)
        },
    )
    .await;
    assert!(
        message.contains("spec.bindings[0]") && message.contains("spec.dependsOn[0].namespace"),
        "{message}"
    );
    eventually("local Ready", WAIT, || async {
        harness::composition_ready(&env, "local")
            .await
            .then_some(())
    })
    .await;
    let cms: Api<ConfigMap> = env.api();
    assert!(
        cms.get_opt("stolen").await.unwrap().is_none(),
        "nothing applied"
    );
    let comps: Api<Composition> = env.api();
    let st = comps.get("reach").await.unwrap().status.unwrap();
    assert!(st.current_synthesis.is_none(), "never synthesized");
    drop(enoki);
}

#[tokio::test]
async fn a_resource_slice_not_owned_by_the_composition_is_never_applied() {
    use crds::ResourceSlice;
    use kube::api::{Patch, PatchParams, PostParams};
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let own = harness::config_map("own", json!({}), json!({"v": "1"}));
    harness::set_echo_items(&env, "items", &json!([own])).await;
    let enoki = Enoki::start(&env.namespace);
    harness::apply_composition(&env, "echo", &synth, "items", json!({})).await;
    eventually("Ready", WAIT, || async {
        harness::composition_ready(&env, "echo").await.then_some(())
    })
    .await;
    let comps: Api<Composition> = env.api();
    let before = comps.get("echo").await.unwrap().status.unwrap();
    let uuid = before.current_synthesis.as_ref().unwrap().uuid.clone();

    // A slice nobody wrote for this Composition (no owner reference), planting a ConfigMap,
    // and the Composition's status pointed at it.
    let planted = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "planted", "namespace": env.namespace}, "data": {"x": "1"}});
    let forged: ResourceSlice = serde_json::from_value(json!({
        "apiVersion": "enoki.dev/v1alpha1", "kind": "ResourceSlice",
        "metadata": {"name": "forged"},
        "spec": {"synthesisUUID": uuid, "resources": [{"manifest": planted.to_string()}]}}))
    .unwrap();
    let slices: Api<ResourceSlice> = env.api();
    slices
        .create(&PostParams::default(), &forged)
        .await
        .unwrap();
    let mut current = serde_json::to_value(before.current_synthesis.unwrap()).unwrap();
    current["resourceSlices"] = json!([{"name": "forged"}]);

    // Point the status at the forged slice and poke the Composition (status edits do not wake
    // the controller). enoki's own status write may race with the edit and put its slices
    // back; then the edit is repeated. Done once a new synthesis replaced the forged slice.
    let started = std::time::Instant::now();
    let mut poke = 0;
    loop {
        let st = comps.get("echo").await.unwrap().status.unwrap();
        let cur = st.current_synthesis.unwrap();
        let forged_now = cur.resource_slices.iter().any(|r| r.name == "forged");
        if cur.uuid != uuid && !forged_now && harness::composition_ready(&env, "echo").await {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "no new synthesis replaced the forged slice (forged referenced: {forged_now}):\n{}",
            enoki.logs()
        );
        if cur.uuid == uuid && !forged_now {
            comps
                .patch_status(
                    "echo",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"currentSynthesis": current}})),
                )
                .await
                .unwrap();
            poke += 1;
            comps
                .patch(
                    "echo",
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"metadata": {"annotations": {"test/poke": poke.to_string()}}}),
                    ),
                )
                .await
                .unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let cms: Api<ConfigMap> = env.api();
    assert!(
        cms.get_opt("planted").await.unwrap().is_none(),
        "the forged slice was applied"
    );
    drop(enoki);
}

/// A ServiceAccount `name` in the test namespace that may read and write ConfigMaps there.
async fn config_map_writer(env: &TestEnv, name: &str) {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let pp = kube::api::PostParams::default();
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    env.api::<ServiceAccount>().create(&pp, &sa).await.unwrap();
    let role: Role = serde_json::from_value(json!({"metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]}))
    .unwrap();
    env.api::<Role>().create(&pp, &role).await.unwrap();
    let rb: RoleBinding = serde_json::from_value(json!({"metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": env.namespace}]}))
    .unwrap();
    env.api::<RoleBinding>().create(&pp, &rb).await.unwrap();
}

#[tokio::test]
async fn a_composition_with_a_service_account_can_do_no_more_than_its_rbac() {
    use k8s_openapi::api::rbac::v1::RoleBinding;
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    let other = format!("{}-b", env.namespace);
    harness::create_namespace(&env.client, &other).await;
    config_map_writer(&env, "deployer").await;
    let enoki = Enoki::start_with(&env.namespace, &[]);

    let grab = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": format!("grab-{}", env.namespace), "namespace": "kube-system"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": env.namespace}]});
    let mut elsewhere = harness::config_map("elsewhere", json!({}), json!({"v": "1"}));
    elsewhere["metadata"]["namespace"] = json!(other);
    let allowed = harness::config_map("allowed", json!({}), json!({"v": "1"}));
    harness::set_echo_items(&env, "items", &json!([allowed, grab, elsewhere])).await;
    harness::apply_composition(
        &env,
        "tenant",
        &synth,
        "items",
        json!({"serviceAccountName": "deployer"}),
    )
    .await;

    let (_, _, message) = eventually("tenant: Reconciled=False Forbidden", WAIT, || async {
        let c = harness::composition_condition(&env, "tenant", "Reconciled").await?;
        (c.0 == "False" && c.1 == "Forbidden").then_some(c)
    })
    .await;
    assert!(
        message.contains("grab-") && message.contains("elsewhere"),
        "names the refused objects: {message}"
    );
    assert!(
        message.contains(&format!("system:serviceaccount:{}:deployer", env.namespace)),
        "names who was refused: {message}"
    );
    // What its RBAC allows is applied; nothing else.
    let cms: Api<ConfigMap> = env.api();
    eventually("allowed applied", WAIT, || async {
        cms.get_opt("allowed").await.unwrap().map(|_| ())
    })
    .await;
    let kube_system: Api<RoleBinding> = Api::namespaced(env.client.clone(), "kube-system");
    assert!(
        kube_system
            .get_opt(&format!("grab-{}", env.namespace))
            .await
            .unwrap()
            .is_none(),
        "a RoleBinding to cluster-admin in kube-system was created"
    );
    let there: Api<ConfigMap> = Api::namespaced(env.client.clone(), &other);
    assert!(there.get_opt("elsewhere").await.unwrap().is_none());
    drop(enoki);
}

#[tokio::test]
async fn the_default_service_account_applies_to_compositions_that_name_none() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    config_map_writer(&env, "deployer").await;
    let enoki = Enoki::start_with(&env.namespace, &["--default-service-account", "nobody"]);
    let cm = harness::config_map("out", json!({}), json!({"v": "1"}));
    harness::set_echo_items(&env, "items", &json!([cm])).await;
    // Violated: no serviceAccountName → `nobody`, which may not even read its input.
    harness::apply_composition(&env, "locked", &synth, "items", json!({})).await;
    let (_, _, message) = eventually("locked: not synthesized, forbidden", WAIT, || async {
        let comps: Api<Composition> = env.api();
        let st = comps.get_opt("locked").await.unwrap()?.status?;
        st.conditions
            .into_iter()
            .find(|c| c.status == "False" && c.message.contains("forbidden"))
            .map(|c| (c.status, c.reason, c.message))
    })
    .await;
    assert!(
        message.contains(&format!("system:serviceaccount:{}:nobody", env.namespace)),
        "{message}"
    );
    // Obeyed: a Composition that names an account with the rights converges.
    harness::apply_composition(
        &env,
        "named",
        &synth,
        "items",
        json!({"serviceAccountName": "deployer"}),
    )
    .await;
    eventually("named Ready", WAIT, || async {
        harness::composition_ready(&env, "named")
            .await
            .then_some(())
    })
    .await;
    let comps: Api<Composition> = env.api();
    assert!(
        comps
            .get("locked")
            .await
            .unwrap()
            .status
            .unwrap()
            .current_synthesis
            .is_none(),
        "the locked Composition never synthesized"
    );
    drop(enoki);
}

#[tokio::test]
async fn instance_mode_compositions_act_as_the_synthesizers_service_account() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
    use kube::core::GroupVersionKind;
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    // A kind of this test's own, so no other suite's instances are touched.
    let group = format!("{}.enoki.test", env.namespace);
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object",
                         "x-kubernetes-preserve-unknown-fields": true}}}]}}))
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    crds.create(&PostParams::default(), &crd).await.unwrap();
    eventually("Widget served", WAIT, || async {
        let c = crds.get(&format!("widgets.{group}")).await.unwrap();
        c.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
    // The platform's instance-mode Synthesizer: every Widget is synthesized as `deployer`.
    let synth = install_synthesizer(&env, "widgets", &echo_module()).await;
    let spec = json!({"spec": {"refs": null, "serviceAccountName": "deployer",
        "for": {"group": group, "version": "v1", "kind": "Widget"}}});
    Api::<crds::Synthesizer>::all(env.client.clone())
        .patch(&synth, &PatchParams::default(), &Patch::Merge(&spec))
        .await
        .unwrap();
    config_map_writer(&env, "deployer").await;
    // Inputs are read as the account too: it may read the Widgets (its instances).
    let role: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(json!({
        "metadata": {"name": "widget-reader"},
        "rules": [{"apiGroups": [group], "resources": ["widgets"], "verbs": ["get", "list", "watch"]}]}))
    .unwrap();
    env.api::<k8s_openapi::api::rbac::v1::Role>()
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let rb: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "widget-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "widget-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": env.namespace}]}))
    .unwrap();
    env.api::<k8s_openapi::api::rbac::v1::RoleBinding>()
        .create(&PostParams::default(), &rb)
        .await
        .unwrap();
    let other = format!("{}-b", env.namespace);
    harness::create_namespace(&env.client, &other).await;
    let mut elsewhere = harness::config_map("elsewhere", json!({}), json!({"v": "1"}));
    elsewhere["metadata"]["namespace"] = json!(other);
    let allowed = harness::config_map("allowed", json!({}), json!({"v": "1"}));
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&group, "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &env.namespace, &ar);
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w1"},
        "data": {"items": json!([allowed, elsewhere]).to_string()}}))
    .unwrap();
    widgets
        .create(&PostParams::default(), &widget)
        .await
        .unwrap();
    let enoki = Enoki::start_with(&env.namespace, &["--builtins", "none"]);

    let comps: Api<Composition> = env.api();
    let implicit = eventually("the implicit Composition", WAIT, || async {
        comps.get_opt("w1").await.unwrap()
    })
    .await;
    assert_eq!(
        implicit.spec.service_account_name.as_deref(),
        Some("deployer")
    );
    let (_, _, message) = eventually("w1: Reconciled=False Forbidden", WAIT, || async {
        let c = harness::composition_condition(&env, "w1", "Reconciled").await?;
        (c.0 == "False" && c.1 == "Forbidden").then_some(c)
    })
    .await;
    assert!(
        message.contains("elsewhere")
            && message.contains(&format!("system:serviceaccount:{}:deployer", env.namespace)),
        "{message}"
    );
    let cms: Api<ConfigMap> = env.api();
    eventually("allowed applied", WAIT, || async {
        cms.get_opt("allowed").await.unwrap().map(|_| ())
    })
    .await;
    let there: Api<ConfigMap> = Api::namespaced(env.client.clone(), &other);
    assert!(there.get_opt("elsewhere").await.unwrap().is_none());
    drop(enoki);
    let _ = crds
        .delete(&format!("widgets.{group}"), &DeleteParams::default())
        .await;
}

#[tokio::test]
async fn a_symphonys_compositions_act_as_its_service_account() {
    use kube::api::{Patch, PatchParams};
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let synth = install_synthesizer(&env, "echo", &echo_module()).await;
    config_map_writer(&env, "deployer").await;
    let other = format!("{}-b", env.namespace);
    harness::create_namespace(&env.client, &other).await;
    let mut elsewhere = harness::config_map("elsewhere", json!({}), json!({"v": "1"}));
    elsewhere["metadata"]["namespace"] = json!(other);
    let allowed = harness::config_map("allowed", json!({}), json!({"v": "1"}));
    harness::set_echo_items(&env, "items", &json!([allowed, elsewhere])).await;
    let symphony = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Symphony",
        "metadata": {"name": "stack"},
        "spec": {"serviceAccountName": "deployer",
                 "bindings": [{"key": "config", "resource": {"name": "items"}}],
                 "variations": [{"synthesizer": {"name": synth}}]}});
    let syms: Api<crds::Symphony> = env.api();
    syms.patch(
        "stack",
        &PatchParams::apply("test"),
        &Patch::Apply(&symphony),
    )
    .await
    .unwrap();
    let enoki = Enoki::start(&env.namespace);

    let comps: Api<Composition> = env.api();
    let name = format!("stack-{synth}");
    let generated = eventually("the generated Composition", WAIT, || async {
        comps.get_opt(&name).await.unwrap()
    })
    .await;
    assert_eq!(
        generated.spec.service_account_name.as_deref(),
        Some("deployer")
    );
    let (_, _, message) = eventually("Reconciled=False Forbidden", WAIT, || async {
        let c = harness::composition_condition(&env, &name, "Reconciled").await?;
        (c.0 == "False" && c.1 == "Forbidden").then_some(c)
    })
    .await;
    assert!(
        message.contains(&format!("system:serviceaccount:{}:deployer", env.namespace)),
        "{message}"
    );
    let cms: Api<ConfigMap> = env.api();
    eventually("allowed applied", WAIT, || async {
        cms.get_opt("allowed").await.unwrap().map(|_| ())
    })
    .await;
    let there: Api<ConfigMap> = Api::namespaced(env.client.clone(), &other);
    assert!(there.get_opt("elsewhere").await.unwrap().is_none());
    drop(enoki);
}
