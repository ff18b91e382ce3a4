//! Smoke suite: proves the harness gives us a real API server (SSA, status subresources,
//! finalizers) and a real kube-controller-manager (garbage collection, namespace deletion).

use std::time::Duration;

use crds::{Composition, CompositionSpec, CompositionStatus, SimplifiedStatus, SynthesizerRef};
use harness::{TestEnv, eventually, install_crds};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

fn composition(name: &str) -> Composition {
    Composition::new(
        name,
        CompositionSpec {
            synthesizer: SynthesizerRef {
                name: "hello".into(),
            },
            ..CompositionSpec::default()
        },
    )
}

#[tokio::test]
async fn generated_crds_install_and_become_established() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    for crd in crds::manifests::all() {
        let live = crds
            .get(crd.metadata.name.as_deref().unwrap())
            .await
            .unwrap();
        let established = live
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        assert!(
            established,
            "{} is not Established",
            live.metadata.name.unwrap()
        );
    }
}

#[tokio::test]
async fn composition_round_trips_and_status_is_written_through_the_subresource() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let comps: Api<Composition> = env.api();
    let created = comps
        .create(&PostParams::default(), &composition("demo"))
        .await
        .unwrap();
    let read = comps.get("demo").await.unwrap();
    assert_eq!(read.spec, created.spec);
    assert_eq!(read.spec.synthesizer.name, "hello");

    // Status is ignored on the main resource...
    let mut with_status = read.clone();
    with_status.status = Some(CompositionStatus {
        observed_generation: Some(1),
        ..CompositionStatus::default()
    });
    comps
        .replace("demo", &PostParams::default(), &with_status)
        .await
        .unwrap();
    assert!(comps.get("demo").await.unwrap().status.is_none());

    // ...and written through the status subresource.
    let status = json!({
        "apiVersion": "enoki.dev/v1alpha1",
        "kind": "Composition",
        "status": {
            "observedGeneration": 1,
            "simplified": {"status": "Ready"},
        }
    });
    comps
        .patch_status(
            "demo",
            &PatchParams::apply("enoki").force(),
            &Patch::Apply(&status),
        )
        .await
        .unwrap();
    let read = comps.get("demo").await.unwrap();
    let status = read.status.unwrap();
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(
        status.simplified,
        Some(SimplifiedStatus {
            status: "Ready".into(),
            error: None
        })
    );
}

#[tokio::test]
async fn server_side_apply_records_the_enoki_manager_and_removes_dropped_fields() {
    let env = TestEnv::new().await;
    let cms: Api<ConfigMap> = env.api();
    let params = PatchParams::apply(crds::names::FIELD_MANAGER).force();
    let first = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "applied"},
        "data": {"keep": "1", "drop": "2"},
    });
    cms.patch("applied", &params, &Patch::Apply(&first))
        .await
        .unwrap();
    let live = cms.get("applied").await.unwrap();
    let managers: Vec<_> = live
        .managed_fields()
        .iter()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("enoki".to_string(), "Apply".to_string())),
        "managedFields: {managers:?}"
    );

    let second = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "applied"},
        "data": {"keep": "1"},
    });
    cms.patch("applied", &params, &Patch::Apply(&second))
        .await
        .unwrap();
    let data = cms.get("applied").await.unwrap().data.unwrap();
    assert_eq!(data.get("keep").map(String::as_str), Some("1"));
    assert!(
        !data.contains_key("drop"),
        "dropped field survived: {data:?}"
    );
}

#[tokio::test]
async fn a_finalizer_blocks_deletion_until_removed() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let comps: Api<Composition> = env.api();
    let mut comp = composition("guarded");
    comp.metadata.finalizers = Some(vec![crds::names::FINALIZER.to_string()]);
    comps.create(&PostParams::default(), &comp).await.unwrap();

    comps
        .delete("guarded", &DeleteParams::default())
        .await
        .unwrap();
    let live = comps
        .get("guarded")
        .await
        .expect("still there while the finalizer is set");
    assert!(live.metadata.deletion_timestamp.is_some());

    let remove = json!({"metadata": {"finalizers": null}});
    comps
        .patch("guarded", &PatchParams::default(), &Patch::Merge(&remove))
        .await
        .unwrap();
    eventually(
        "the composition to be gone",
        Duration::from_secs(30),
        || async {
            comps
                .get_opt("guarded")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn deleting_an_owner_garbage_collects_its_configmap() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let comps: Api<Composition> = env.api();
    let owner = comps
        .create(&PostParams::default(), &composition("owner"))
        .await
        .unwrap();
    let cms: Api<ConfigMap> = env.api();
    let owned = ConfigMap {
        metadata: ObjectMeta {
            name: Some("owned".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: Composition::api_version(&()).into(),
                kind: Composition::kind(&()).into(),
                name: owner.name_any(),
                uid: owner.uid().unwrap(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    cms.create(&PostParams::default(), &owned).await.unwrap();

    comps
        .delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    // The garbage collector rediscovers resources every 30s; give it two rounds.
    eventually(
        "kube-controller-manager to collect the owned ConfigMap",
        Duration::from_secs(90),
        || async { cms.get_opt("owned").await.unwrap().is_none().then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn a_deleted_namespace_disappears() {
    let env = TestEnv::new().await;
    let cms: Api<ConfigMap> = env.api();
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("content".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    namespaces
        .delete(&env.namespace, &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the namespace to disappear",
        Duration::from_secs(90),
        || async {
            namespaces
                .get_opt(&env.namespace)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
}
