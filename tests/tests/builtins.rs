//! The built-in synthesizers end to end on the real control plane (no kubelet, no scheduler:
//! pods stay Pending and Deployment status is patched by the test): enoki installs the
//! `trustee`, `quota` and `lepton` Synthesizers at startup and runs each in instance mode.
#![allow(
    clippy::unwrap_used,
    clippy::needless_pass_by_value,
    clippy::too_many_lines
)] // test code

use std::time::Duration;

use harness::{Enoki, TestEnv, create_namespace, eventually, install_crds};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service,
};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

fn dynamic(
    env: &TestEnv,
    group: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: group.into(),
        version: "v1alpha1".into(),
        api_version: format!("{group}/v1alpha1"),
        kind: kind.into(),
        plural: plural.into(),
    };
    if namespaced {
        Api::namespaced_with(env.client.clone(), &env.namespace, &ar)
    } else {
        Api::all_with(env.client.clone(), &ar)
    }
}

fn human() -> PatchParams {
    PatchParams {
        field_manager: Some("human".into()),
        ..PatchParams::default()
    }
}

async fn status_of(api: &Api<DynamicObject>, name: &str) -> Value {
    api.get_opt(name)
        .await
        .unwrap()
        .and_then(|o| o.data.get("status").cloned())
        .unwrap_or(Value::Null)
}

// ------------------------------------------------------------------ Lepton

#[tokio::test]
async fn lepton_builds_every_resource_walks_the_state_machine_reverts_edits_and_cleans_up() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let ns = env.namespace.clone();
    let lds = dynamic(
        &env,
        "lepton.ai",
        "LeptonDeployment",
        "leptondeployments",
        true,
    );
    let ld = |mounts: Value| {
        json!({"apiVersion": "lepton.ai/v1alpha1", "kind": "LeptonDeployment",
            "metadata": {"name": "llama"},
            "spec": {"name": "llama", "photon_name": "llama", "photon_id": "p-1", "photon_image": "example.com/llama:1",
                     "bucket_name": "photons", "photon_prefix": "prod", "root_domain": "lepton.test",
                     "workspace_name": "ws", "workspace_token": "wst",
                     "api_tokens": [{"value": "t1"}, {"value_from": {"token_name_ref": "WORKSPACE_TOKEN"}}],
                     "efs_id": "fs-1", "efs_access_point_id": "ap-1",
                     "resource_requirement": {"cpu": 0.5, "memory": 512, "min_replicas": 2},
                     "mounts": mounts}})
    };
    let two = json!([{"path": "/models", "mount_path": "/mnt/models"}, {"path": "/cache", "mount_path": "/mnt/cache"}]);
    let pp = PatchParams::apply("test").force();
    lds.patch("llama", &pp, &Patch::Apply(ld(two)))
        .await
        .unwrap();
    let enoki = Enoki::start_with(&ns, &["--lepton-persistent-volumes"]);

    let l = Lepton {
        lds: lds.clone(),
        deployments: env.api(),
        services: env.api(),
        ingresses: env.api(),
        pvcs: env.api(),
        pvs: Api::all(env.client.clone()),
        ns: ns.clone(),
    };
    let Lepton {
        deployments,
        services,
        ingresses,
        pvcs,
        pvs,
        ..
    } = &l;
    eventually("every Lepton resource", WAIT, || async {
        deployments.get_opt("llama").await.unwrap()?;
        services.get_opt("llama-service").await.unwrap()?;
        ingresses.get_opt("llama-header-ingress").await.unwrap()?;
        ingresses.get_opt("llama-host-ingress").await.unwrap()?;
        for i in 0..2 {
            pvcs.get_opt(&format!("pvc-{ns}-llama-{i}"))
                .await
                .unwrap()?;
            pvs.get_opt(&format!("pv-{ns}.llama-{i}")).await.unwrap()?;
        }
        Some(())
    })
    .await;
    lepton_pod_and_ingresses(&l).await;
    lepton_state_machine(&l, &enoki).await;
    lepton_edits_and_mounts(&l, ld).await;
    lepton_deletion(&l).await;
}

/// The Lepton test's handles.
struct Lepton {
    lds: Api<DynamicObject>,
    deployments: Api<Deployment>,
    services: Api<Service>,
    ingresses: Api<Ingress>,
    pvcs: Api<PersistentVolumeClaim>,
    pvs: Api<PersistentVolume>,
    ns: String,
}

/// Upstream's pod (command, probes, env, requests), Ingress conditions, endpoint, finalizer.
async fn lepton_pod_and_ingresses(l: &Lepton) {
    let Lepton {
        deployments,
        ingresses,
        pvcs,
        ns,
        ..
    } = l;
    let d = deployments.get("llama").await.unwrap();
    let spec = d.spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(2));
    assert_eq!(
        spec.selector
            .match_labels
            .unwrap()
            .get("lepton_deployment_name")
            .map(String::as_str),
        Some("llama")
    );
    assert_eq!(
        spec.template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap()["lepton_deployment_shape"],
        "customized"
    );
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.containers[0].name, "main-container");
    // Upstream's command, probes (600 s for model loading) and runtime environment.
    let main = &pod.containers[0];
    assert_eq!(main.command.as_deref(), Some(&["sh".to_string()][..]));
    assert_eq!(
        main.args.as_ref().unwrap()[1],
        "lep photon prepare -f /photon/p-1; lep photon run -f /photon/p-1"
    );
    assert_eq!(
        main.liveness_probe.as_ref().unwrap().initial_delay_seconds,
        Some(600)
    );
    let env: Vec<(String, String)> = main
        .env
        .clone()
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect();
    for want in [
        ("LEPTON_WORKSPACE_NAME", "ws"),
        ("LEPTON_DEPLOYMENT_NAME", "llama"),
        ("OMP_NUM_THREADS", "1"),
    ] {
        assert!(
            env.contains(&(want.0.to_string(), want.1.to_string())),
            "{want:?} in {env:?}"
        );
    }
    let resources = main.resources.clone().unwrap();
    assert_eq!(
        resources.requests.unwrap()["cpu"].0,
        "450m",
        "requests are 90 % of limits"
    );
    assert_eq!(resources.limits.unwrap()["cpu"].0, "500m");
    assert_eq!(pod.init_containers.unwrap()[0].name, "env-preparation");
    assert_eq!(
        pod.containers[0].ports.as_ref().unwrap()[0].container_port,
        8080
    );
    // The Ingresses route only requests bearing one of the API tokens (the workspace token
    // included), on the deployment's header or on its `<workspace>-<name>.<root>` host.
    let host = ingresses.get("llama-host-ingress").await.unwrap();
    let annotations = host.metadata.annotations.clone().unwrap();
    assert_eq!(
        host.spec.unwrap().rules.unwrap()[0].host.as_deref(),
        Some("ws-llama.lepton.test")
    );
    assert_eq!(
        annotations["external-dns.alpha.kubernetes.io/hostname"],
        "ws-llama.lepton.test"
    );
    let conditions: Value =
        serde_json::from_str(&annotations["alb.ingress.kubernetes.io/conditions.llama-service"])
            .unwrap();
    assert_eq!(
        conditions,
        json!([{"field": "http-header", "httpHeaderConfig": {"httpHeaderName": "Authorization",
            "values": ["Bearer t1", "Bearer wst"]}}])
    );
    let header = ingresses.get("llama-header-ingress").await.unwrap();
    let conditions: Value = serde_json::from_str(
        &header.metadata.annotations.unwrap()["alb.ingress.kubernetes.io/conditions.llama-service"],
    )
    .unwrap();
    assert_eq!(
        conditions[0]["httpHeaderConfig"]["httpHeaderName"],
        "Deployment"
    );
    assert_eq!(
        conditions[1]["httpHeaderConfig"]["values"],
        json!(["Bearer t1", "Bearer wst"])
    );
    let pvc = pvcs.get(&format!("pvc-{ns}-llama-1")).await.unwrap();
    assert_eq!(
        pvc.spec.unwrap().volume_name,
        Some(format!("pv-{ns}.llama-1"))
    );
}

/// The state machine, driven by the Deployment's status (sticky Starting).
async fn lepton_state_machine(l: &Lepton, enoki: &Enoki) {
    let Lepton {
        lds,
        deployments,
        ns,
        ..
    } = l;
    // The state machine, driven by the Deployment's status.
    let state = || async {
        status_of(lds, "llama").await["state"]
            .as_str()
            .map(String::from)
    };
    eventually("Starting", WAIT, || async {
        (state().await.as_deref() == Some("Starting")).then_some(())
    })
    .await;
    let endpoint = status_of(lds, "llama").await["endpoint"].clone();
    assert_eq!(
        endpoint["internal_endpoint"],
        format!("llama-service.{ns}.svc.cluster.local:8080")
    );
    assert_eq!(
        endpoint["external_endpoint"],
        "https://ws-llama.lepton.test"
    );
    // Upstream's finalizer, not enoki's own.
    let finalizers = lds
        .get("llama")
        .await
        .unwrap()
        .metadata
        .finalizers
        .unwrap_or_default();
    assert_eq!(finalizers, ["lepton.ai/deletion"]);
    let set_status = |replicas: i32, ready: i32| {
        let deployments = deployments.clone();
        async move {
            deployments
                .patch_status(
                    "llama",
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"status": {"replicas": replicas, "readyReplicas": ready}}),
                    ),
                )
                .await
                .unwrap();
        }
    };
    set_status(2, 1).await;
    enoki
        .wait_pass_of(&l.lds.clone().into_client(), &l.ns, "llama")
        .await;
    assert_eq!(
        state().await.as_deref(),
        Some("Starting"),
        "sticky Starting"
    );
    for (replicas, ready, want) in [
        (2, 2, "Running"),
        (2, 1, "Updating"),
        (2, 0, "Not Ready"),
        (2, 2, "Running"),
    ] {
        set_status(replicas, ready).await;
        eventually(want, WAIT, || async {
            (state().await.as_deref() == Some(want)).then_some(())
        })
        .await;
    }
}

/// A hand edit is reverted; dropping a mount prunes its PVC and PV (no leak).
async fn lepton_edits_and_mounts(l: &Lepton, ld: impl Fn(Value) -> Value) {
    let Lepton {
        lds,
        deployments,
        pvcs,
        pvs,
        ns,
        ..
    } = l;
    let pp = PatchParams::apply("test").force();
    // A by-hand edit of the image is reverted within seconds.
    deployments
        .patch(
            "llama",
            &human(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "main-container", "image": "evil:1"}]}}}})),
        )
        .await
        .unwrap();
    let image = || async {
        deployments
            .get("llama")
            .await
            .unwrap()
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .containers[0]
            .image
            .clone()
            .unwrap_or_default()
    };
    eventually(
        "the image edit to be reverted",
        Duration::from_secs(15),
        || async { (image().await == "example.com/llama:1").then_some(()) },
    )
    .await;

    // Dropping a mount prunes its PVC and PV (no leak).
    lds.patch(
        "llama",
        &pp,
        &Patch::Apply(ld(
            json!([{"path": "/models", "mount_path": "/mnt/models"}]),
        )),
    )
    .await
    .unwrap();
    let mount_gone = |i: usize| {
        let (pvcs, pvs, ns) = (pvcs.clone(), pvs.clone(), ns.clone());
        async move {
            pvcs.get_opt(&format!("pvc-{ns}-llama-{i}"))
                .await
                .unwrap()
                .is_none()
                && pvs
                    .get_opt(&format!("pv-{ns}.llama-{i}"))
                    .await
                    .unwrap()
                    .is_none()
        }
    };
    eventually("mount 1's PVC and PV to go", WAIT, || async {
        mount_gone(1).await.then_some(())
    })
    .await;
    assert!(
        pvs.get_opt(&format!("pv-{ns}.llama-0"))
            .await
            .unwrap()
            .is_some()
    );
}

/// Deletion: `state: Deleting` by one last synthesis, outputs gone, then the finalizer released.
async fn lepton_deletion(l: &Lepton) {
    let Lepton {
        lds,
        deployments,
        services,
        ingresses,
        pvcs,
        pvs,
        ns,
    } = l;
    let mount_gone = |i: usize| {
        let (pvcs, pvs, ns) = (pvcs.clone(), pvs.clone(), ns.clone());
        async move {
            pvcs.get_opt(&format!("pvc-{ns}-llama-{i}"))
                .await
                .unwrap()
                .is_none()
                && pvs
                    .get_opt(&format!("pv-{ns}.llama-{i}"))
                    .await
                    .unwrap()
                    .is_none()
        }
    };
    // Deleting the LeptonDeployment: one last synthesis writes `state: Deleting` and clears the
    // external endpoint, everything goes (PVs included), then `lepton.ai/deletion` is
    // released. A finalizer of the test's own keeps the object around to look at.
    lds.patch(
        "llama",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"finalizers": ["lepton.ai/deletion", "test.enoki.dev/hold"]}}),
        ),
    )
    .await
    .unwrap();
    lds.delete("llama", &DeleteParams::default()).await.unwrap();
    eventually(
        "everything to be gone and lepton.ai/deletion released",
        WAIT,
        || async {
            let ld = lds.get_opt("llama").await.unwrap()?;
            (ld.metadata.finalizers.clone().unwrap_or_default() == ["test.enoki.dev/hold"]
                && deployments.get_opt("llama").await.unwrap().is_none()
                && services.get_opt("llama-service").await.unwrap().is_none()
                && ingresses
                    .get_opt("llama-header-ingress")
                    .await
                    .unwrap()
                    .is_none()
                && mount_gone(0).await)
                .then_some(())
        },
    )
    .await;
    let status = status_of(lds, "llama").await;
    assert_eq!(status["state"], "Deleting", "{status}");
    assert_eq!(status["endpoint"]["external_endpoint"], "", "{status}");
    lds.patch(
        "llama",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("the LeptonDeployment to be gone", WAIT, || async {
        lds.get_opt("llama").await.unwrap().is_none().then_some(())
    })
    .await;
}

// ------------------------------------------------------------------ Trustee

async fn tls_secret(env: &TestEnv, name: &str) {
    let secrets: Api<Secret> = env.api();
    let s: Secret = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name}, "type": "kubernetes.io/tls",
        "stringData": {"tls.key": format!("{name}-key"), "tls.crt": format!("{name}-crt")}}))
    .unwrap();
    secrets.create(&PostParams::default(), &s).await.unwrap();
}

/// The text of `key` in Secret `name`.
async fn secret_text(secrets: &Api<Secret>, name: &str, key: &str) -> String {
    String::from_utf8(
        secrets.get(name).await.unwrap().data.unwrap()[key]
            .0
            .clone(),
    )
    .unwrap()
}

fn trustee_config(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "confidentialcontainers.org/v1alpha1", "kind": "TrusteeConfig",
        "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn trustee_permissive_builds_the_kbs_config_keeps_user_fields_mirrors_readiness_and_cleans_up()
 {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let tcs = dynamic(
        &env,
        "confidentialcontainers.org",
        "TrusteeConfig",
        "trusteeconfigs",
        true,
    );
    let kbs = dynamic(
        &env,
        "confidentialcontainers.org",
        "KbsConfig",
        "kbsconfigs",
        true,
    );
    let pp = PatchParams::apply("test").force();
    tcs.patch(
        "tc",
        &pp,
        &Patch::Apply(trustee_config("tc", json!({"profileType": "Permissive"}))),
    )
    .await
    .unwrap();
    let enoki = Enoki::start(&env.namespace);
    let cms: Api<ConfigMap> = env.api();
    let secrets: Api<Secret> = env.api();
    let config_maps = [
        "tc-kbs-config",
        "tc-resource-policy",
        "tc-rvps-reference-values",
        "tc-attestation-policy-cpu",
        "tc-attestation-policy-gpu",
    ];
    eventually("the KbsConfig and every ConfigMap/Secret", WAIT, || async {
        kbs.get_opt("tc-kbs-config").await.unwrap()?;
        for c in config_maps {
            cms.get_opt(c).await.unwrap()?;
        }
        secrets.get_opt("tc-auth-secret").await.unwrap()?;
        secrets.get_opt("attestation-status").await.unwrap()?;
        Some(())
    })
    .await;
    let spec = |o: DynamicObject| o.data["spec"].clone();
    let k = spec(kbs.get("tc-kbs-config").await.unwrap());
    assert_eq!(k["kbsConfigMapName"], "tc-kbs-config");
    assert_eq!(k["kbsAuthSecretName"], "tc-auth-secret");
    assert_eq!(k["kbsDeploymentType"], "AllInOneDeployment");
    assert_eq!(k["KbsEnvVars"]["RUST_LOG"], "debug");
    assert_eq!(k["kbsSecretResources"], json!(["attestation-status"]));
    let toml = cms.get("tc-kbs-config").await.unwrap().data.unwrap()["kbs-config.toml"].clone();
    assert!(
        toml.contains("insecure_http = true") && !toml.contains("tls_profile"),
        "{toml}"
    );
    let public_key = || async {
        secrets.get("tc-auth-secret").await.unwrap().data.unwrap()["publicKey"]
            .0
            .clone()
    };
    let key = public_key().await;
    assert!(String::from_utf8_lossy(&key).starts_with("-----BEGIN PUBLIC KEY-----"));
    let labels = secrets
        .get("tc-auth-secret")
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap();
    assert_eq!(labels["app.kubernetes.io/component"], "auth");
    // No finalizer, as upstream: deleting a TrusteeConfig never waits for enoki.
    assert_eq!(
        tcs.get("tc")
            .await
            .unwrap()
            .metadata
            .finalizers
            .unwrap_or_default(),
        Vec::<String>::new()
    );
    trustee_hand_edits(&env, &kbs, &toml, &enoki).await;
    assert_eq!(public_key().await, key, "the auth keypair is stable");

    trustee_readiness(&tcs, &kbs).await;
    trustee_deleted_while_enoki_is_down(&env, enoki, &tcs, &kbs, &config_maps).await;
}

/// Hand edits: the KBS TOML is kept (Permissive renders no TLS lines); replicas and an extra
/// env var survive; a managed field is restored.
async fn trustee_hand_edits(env: &TestEnv, kbs: &Api<DynamicObject>, toml: &str, enoki: &Enoki) {
    let cms: Api<ConfigMap> = env.api();
    let spec = |o: DynamicObject| o.data["spec"].clone();
    // The KBS TOML edited by hand (upstream keeps everything but the TLS lines; Permissive
    // renders none, so the edit stays as it is).
    let edited = toml.replace("worker_count = 4", "worker_count = 12");
    cms.patch(
        "tc-kbs-config",
        &human(),
        &Patch::Merge(json!({"data": {"kbs-config.toml": edited}})),
    )
    .await
    .unwrap();

    // By hand: replicas and an extra env var survive; a managed field is restored.
    kbs.patch(
        "tc-kbs-config",
        &human(),
        &Patch::Merge(
            json!({"spec": {"KbsDeploymentSpec": {"replicas": 3}, "KbsEnvVars": {"EXTRA": "1"}}}),
        ),
    )
    .await
    .unwrap();
    kbs.patch(
        "tc-kbs-config",
        &human(),
        &Patch::Merge(json!({"spec": {"kbsConfigMapName": "hacked"}})),
    )
    .await
    .unwrap();
    eventually(
        "kbsConfigMapName restored",
        Duration::from_secs(20),
        || async {
            (spec(kbs.get("tc-kbs-config").await.unwrap())["kbsConfigMapName"] == "tc-kbs-config")
                .then_some(())
        },
    )
    .await;
    enoki.wait_pass(env, "tc").await;
    let k = spec(kbs.get("tc-kbs-config").await.unwrap());
    assert_eq!(
        k["KbsDeploymentSpec"]["replicas"],
        3,
        "{k}\n{}",
        enoki.logs()
    );
    assert_eq!(k["KbsEnvVars"]["EXTRA"], "1", "{k}");
    assert_eq!(k["KbsEnvVars"]["RUST_LOG"], "debug", "{k}");
    let toml_now = cms.get("tc-kbs-config").await.unwrap().data.unwrap()["kbs-config.toml"].clone();
    assert_eq!(toml_now, edited, "the hand-edited KBS TOML is kept");
}

/// `isReady` mirrors the KbsConfig's.
async fn trustee_readiness(tcs: &Api<DynamicObject>, kbs: &Api<DynamicObject>) {
    // Readiness mirrors the KbsConfig.
    let tc_status = || async { status_of(tcs, "tc").await };
    eventually("isReady false at first", WAIT, || async {
        (tc_status().await["isReady"] == false).then_some(())
    })
    .await;
    assert_eq!(tc_status().await["kbsConfigRef"]["name"], "tc-kbs-config");
    kbs.patch_status(
        "tc-kbs-config",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"isReady": true}})),
    )
    .await
    .unwrap();
    eventually("the TrusteeConfig to become ready", WAIT, || async {
        let st = tc_status().await;
        (st["isReady"] == true
            && st["statusDescription"]
                == "TrusteeConfig is ready and KbsConfig is deployed successfully")
            .then_some(())
    })
    .await;
}

/// Deleting the TrusteeConfig while enoki is down: no finalizer holds it.
async fn trustee_deleted_while_enoki_is_down(
    env: &TestEnv,
    enoki: Enoki,
    tcs: &Api<DynamicObject>,
    kbs: &Api<DynamicObject>,
    config_maps: &[&str],
) {
    let cms: Api<ConfigMap> = env.api();
    let secrets: Api<Secret> = env.api();
    // Deleting the TrusteeConfig while enoki is down: it goes at once (no finalizer), and
    // garbage collection removes what it owns (owner references, as upstream relies on).
    drop(enoki);
    tcs.delete("tc", &DeleteParams::default()).await.unwrap();
    eventually(
        "the TrusteeConfig to go without enoki",
        Duration::from_secs(10),
        || async { tcs.get_opt("tc").await.unwrap().is_none().then_some(()) },
    )
    .await;
    eventually("everything to be gone", WAIT, || async {
        if kbs.get_opt("tc-kbs-config").await.unwrap().is_some() {
            return None;
        }
        for c in config_maps.iter().copied() {
            if cms.get_opt(c).await.unwrap().is_some() {
                return None;
            }
        }
        (secrets.get_opt("tc-auth-secret").await.unwrap().is_none()
            && secrets
                .get_opt("attestation-status")
                .await
                .unwrap()
                .is_none())
        .then_some(())
    })
    .await;
    // enoki, back, finishes the implicit Composition (deleted by garbage collection too).
    let _enoki = Enoki::start(&env.namespace);
    let comps: Api<crds::Composition> = env.api();
    eventually("the implicit Composition to go", WAIT, || async {
        comps.get_opt("tc").await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn trustee_restricted_with_https_secrets_and_a_missing_tls_secret_is_a_clear_error() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    tls_secret(&env, "kbs-https").await;
    tls_secret(&env, "kbs-token").await;
    let tcs = dynamic(
        &env,
        "confidentialcontainers.org",
        "TrusteeConfig",
        "trusteeconfigs",
        true,
    );
    let kbs = dynamic(
        &env,
        "confidentialcontainers.org",
        "KbsConfig",
        "kbsconfigs",
        true,
    );
    let pp = PatchParams::apply("test").force();
    let restricted_spec = json!({"profileType": "Restricted", "kbsServiceType": "NodePort",
        "httpsSpec": {"tlsSecretName": "kbs-https"},
        "attestationTokenVerificationSpec": {"tlsSecretName": "kbs-token"},
        "tlsConfig": {"profile": "custom", "minVersion": "1.2", "maxVersion": "1.3",
                      "ciphers": ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]}});
    tcs.patch(
        "secure",
        &pp,
        &Patch::Apply(trustee_config("secure", restricted_spec.clone())),
    )
    .await
    .unwrap();
    tcs.patch(
        "broken",
        &pp,
        &Patch::Apply(trustee_config(
            "broken",
            json!({"profileType": "Restricted", "httpsSpec": {"tlsSecretName": "nope"}}),
        )),
    )
    .await
    .unwrap();
    let enoki = Enoki::start(&env.namespace);
    let secrets: Api<Secret> = env.api();
    let cms: Api<ConfigMap> = env.api();
    eventually("the KbsConfig and the copied TLS secrets", WAIT, || async {
        kbs.get_opt("secure-kbs-config").await.unwrap()?;
        for s in [
            "https-key-secret",
            "https-cert-secret",
            "attestation-key-secret",
            "attestation-cert-secret",
        ] {
            secrets.get_opt(&format!("secure-{s}")).await.unwrap()?;
        }
        Some(())
    })
    .await;
    let data = |name: &'static str, key: &'static str| secret_text(&secrets, name, key);
    assert_eq!(
        data("secure-https-key-secret", "privateKey").await,
        "kbs-https-key"
    );
    assert_eq!(
        data("secure-https-cert-secret", "certificate").await,
        "kbs-https-crt"
    );
    assert_eq!(
        data("secure-attestation-key-secret", "token.key").await,
        "kbs-token-key"
    );
    assert_eq!(
        data("secure-attestation-cert-secret", "token.crt").await,
        "kbs-token-crt"
    );
    let k = kbs.get("secure-kbs-config").await.unwrap().data["spec"].clone();
    assert_eq!(k["kbsHttpsKeySecretName"], "secure-https-key-secret");
    assert_eq!(
        k["kbsAttestationCertSecretName"],
        "secure-attestation-cert-secret"
    );
    assert_eq!(k["kbsServiceType"], "NodePort");
    assert_eq!(k["KbsEnvVars"], json!({}), "Restricted sets no RUST_LOG");
    let toml = cms.get("secure-kbs-config").await.unwrap().data.unwrap()["kbs-config.toml"].clone();
    assert!(toml.contains("insecure_http = false"), "{toml}");
    assert!(
        toml.contains("tls_profile = \"custom\"")
            && toml.contains("tls_ciphers = \"ECDHE-RSA-AES128-GCM-SHA256\""),
        "{toml}"
    );
    let policy = cms
        .get("secure-resource-policy")
        .await
        .unwrap()
        .data
        .unwrap()["resource-policy.rego"]
        .clone();
    assert!(policy.contains("default allow = false"), "{policy}");

    trustee_tls_change_keeps_hand_edits(&env, &tcs, &kbs, &toml, &restricted_spec, &enoki).await;
    trustee_missing_tls_secret(&env, &kbs).await;
}

/// A hand edit of the KBS TOML survives a TLS change; unset HTTPS keeps the copied Secrets.
async fn trustee_tls_change_keeps_hand_edits(
    env: &TestEnv,
    tcs: &Api<DynamicObject>,
    kbs: &Api<DynamicObject>,
    toml: &str,
    restricted_spec: &Value,
    enoki: &Enoki,
) {
    let cms: Api<ConfigMap> = env.api();
    let secrets: Api<Secret> = env.api();
    let pp = PatchParams::apply("test").force();
    let data = |name: &'static str, key: &'static str| secret_text(&secrets, name, key);
    // A hand edit of the KBS TOML survives a TLS change, which rewrites only the TLS lines;
    // unsetting httpsSpec keeps the copied Secrets (upstream deletes them only with the
    // TrusteeConfig).
    cms.patch(
        "secure-kbs-config",
        &human(),
        &Patch::Merge(json!({"data": {"kbs-config.toml": toml.replace("worker_count = 4", "worker_count = 9")}})),
    )
    .await
    .unwrap();
    let mut changed = restricted_spec.clone();
    changed["tlsConfig"] = json!({"profile": "modern"});
    changed.as_object_mut().unwrap().remove("httpsSpec");
    tcs.patch(
        "secure",
        &pp,
        &Patch::Apply(trustee_config("secure", changed)),
    )
    .await
    .unwrap();
    let toml = eventually("the TLS lines to follow the new profile", WAIT, || async {
        let t =
            cms.get("secure-kbs-config").await.unwrap().data.unwrap()["kbs-config.toml"].clone();
        t.contains("tls_profile = \"modern\"").then_some(t)
    })
    .await;
    assert!(toml.contains("worker_count = 9"), "{toml}");
    assert!(!toml.contains("tls_ciphers"), "{toml}");
    eventually(
        "the KbsConfig to drop the HTTPS secret names",
        WAIT,
        || async {
            let k = kbs.get("secure-kbs-config").await.unwrap().data["spec"].clone();
            k.get("kbsHttpsKeySecretName").is_none().then_some(())
        },
    )
    .await;
    enoki.wait_pass(env, "secure").await;
    assert_eq!(
        data("secure-https-key-secret", "privateKey").await,
        "kbs-https-key",
        "copied Secrets stay until the TrusteeConfig is deleted"
    );
}

/// A missing TLS Secret: an error naming the field and the Secret, nothing written.
async fn trustee_missing_tls_secret(env: &TestEnv, kbs: &Api<DynamicObject>) {
    let cms: Api<ConfigMap> = env.api();
    // The missing TLS secret: a synthesis error naming the field and the Secret; nothing written.
    let comps: Api<crds::Composition> = env.api();
    let message = eventually("the error on the implicit Composition", WAIT, || async {
        let st = comps.get_opt("broken").await.unwrap()?.status?;
        let c = st
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Synthesized" && c.status == "False")?;
        Some(c.message)
    })
    .await;
    assert!(
        message.contains("spec.httpsSpec.tlsSecretName")
            && message.contains("nope")
            && message.contains("does not exist"),
        "{message}"
    );
    // …and the same error as a Warning Event on the TrusteeConfig itself.
    harness::wait_event(env, "a Warning Event on the TrusteeConfig", |e| {
        e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("TrusteeConfig")
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("broken")
            && e.type_.as_deref() == Some("Warning")
            && e.note.as_deref().is_some_and(|n| n.contains("nope"))
    })
    .await;
    assert!(kbs.get_opt("broken-kbs-config").await.unwrap().is_none());
    assert!(
        cms.get_opt("broken-kbs-config").await.unwrap().is_none(),
        "nothing is written partially"
    );
}

// ------------------------------------------------------------------ quota

async fn namespace_with(env: &TestEnv, name: &str, labels: Value) {
    create_namespace(&env.client, name).await;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
    nss.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": labels}})),
    )
    .await
    .unwrap();
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(env.client.clone(), name);
    let _ = sas
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap(),
        )
        .await;
}

async fn pod(client: &kube::Client, ns: &str, name: &str, spec: Value) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
}

fn container(name: &str, cpu: &str, memory: &str) -> Value {
    json!({"name": name, "image": "example.com/app:1",
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}})
}

#[tokio::test]
async fn quota_aggregates_usage_over_selected_namespaces_and_follows_changes() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let t = env.namespace.clone();
    let (a, b, x) = (format!("{t}-a"), format!("{t}-b"), format!("{t}-x"));
    namespace_with(&env, &a, json!({"quota-team": t})).await;
    namespace_with(&env, &b, json!({"quota-team": t})).await;
    namespace_with(
        &env,
        &x,
        json!({"quota-team": t, "pac-quota-controller.powerapp.cloud/exclude": "true"}),
    )
    .await;
    quota_workloads(&env, &a, &b, &x).await;
    let c = &env.client;
    let rcs: Api<k8s_openapi::api::node::v1::RuntimeClass> = Api::all(c.clone());
    let crqs = dynamic(
        &env,
        "quota.powerapp.cloud",
        "ClusterResourceQuota",
        "clusterresourcequotas",
        false,
    );
    let crq = json!({"apiVersion": "quota.powerapp.cloud/v1alpha1", "kind": "ClusterResourceQuota",
        "metadata": {"name": t},
        "spec": {"namespaceSelector": {"matchLabels": {"quota-team": t}},
                 "hard": {"pods": "20", "requests.cpu": "10", "requests.memory": "10Gi", "limits.cpu": "20",
                          "services": "10", "services.nodeports": "5"}}});
    crqs.patch(&t, &PatchParams::apply("test").force(), &Patch::Apply(&crq))
        .await
        .unwrap();
    let enoki = Enoki::start_with(&t, &["--instance-namespace", &t]);

    let used = |st: &Value| st["total"]["used"].clone();
    let status = || async { status_of(&crqs, &t).await };
    // a: web 600m/320Mi + batch 1/1Gi; b: api 250m/128Mi + migrating 100m+max(250m,2)=2100m,
    // 32Mi+max(128Mi,1Gi)=1056Mi. x is excluded by its label.
    let want_total = json!({"pods": "4", "requests.cpu": "3950m", "requests.memory": "2528Mi",
        "limits.cpu": "3950m", "services": "3", "services.nodeports": "1"});
    let st = eventually("the exact totals", WAIT, || async {
        let st = status().await;
        (used(&st) == want_total).then_some(st)
    })
    .await;
    assert_eq!(st["total"]["hard"], crq["spec"]["hard"]);
    let names: Vec<&str> = st["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(names, [a.as_str(), b.as_str()]);
    assert_eq!(
        st["namespaces"][0]["status"]["used"]["requests.cpu"],
        "1600m"
    );
    assert_eq!(
        st["namespaces"][1]["status"]["used"]["requests.memory"],
        "1184Mi"
    );
    assert_eq!(
        st["namespaces"][1]["status"]["used"]["services.nodeports"],
        "0"
    );

    quota_follows_changes(&env, &enoki, &crqs, &a, &b).await;
    // Upstream's Events on the quota, and its usage gauges on enoki's /metrics.
    for (reason, ns) in [
        ("NamespaceAdded", &a),
        ("NamespaceAdded", &b),
        ("NamespaceRemoved", &b),
    ] {
        event_on(
            &env,
            "ClusterResourceQuota",
            &t,
            reason,
            &format!("Namespace {ns} "),
        )
        .await;
    }
    let port = enoki.metrics_port.unwrap();
    let gauge = format!(
        "pac_quota_controller_crq_total_usage{{crq_name=\"{t}\",resource=\"requests.cpu\"}} 0.06"
    );
    // b left the quota: the usage series of its namespace went with it.
    let of_b = usage_series_of(&t, &b);
    eventually("the usage gauge (600m of 10), none for b", WAIT, || async {
        let (code, body) = harness::http_get(port, "/metrics");
        (code == 200 && body.contains(&gauge) && !body.contains(&of_b)).then_some(())
    })
    .await;

    scoped_quota(&env, &crqs).await;

    // A deleted quota leaves no usage series.
    harness::delete_and_wait(&crqs, &t).await;
    let of_t = format!("crq_name=\"{t}\"");
    eventually("no usage series of the deleted quota", WAIT, || async {
        let (code, body) = harness::http_get(port, "/metrics");
        (code == 200 && body.contains("enoki_build_info") && !body.contains(&of_t)).then_some(())
    })
    .await;
    let _ = rcs.delete(&t, &DeleteParams::default()).await;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.clone());
    for n in [&a, &b, &x] {
        let _ = nss.delete(n, &DeleteParams::default()).await;
    }
}

/// Pods (with init containers and RuntimeClass overhead) and Services in `a`, `b` and the
/// excluded `x`.
async fn quota_workloads(env: &TestEnv, a: &str, b: &str, x: &str) {
    let t = &env.namespace;
    let c = &env.client;
    pod(c, a, "web", json!({"containers": [container("app", "500m", "256Mi"), container("sidecar", "100m", "64Mi")]})).await;
    pod(
        c,
        a,
        "batch",
        json!({"containers": [container("app", "1", "1Gi")]}),
    )
    .await;
    pod(
        c,
        b,
        "api",
        json!({"containers": [container("app", "250m", "128Mi")]}),
    )
    .await;
    pod(
        c,
        x,
        "ignored",
        json!({"containers": [container("app", "8", "8Gi")]}),
    )
    .await;
    // Init containers and overhead (from a RuntimeClass): overhead + max(sum app, max init).
    let rcs: Api<k8s_openapi::api::node::v1::RuntimeClass> = Api::all(c.clone());
    rcs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": t},
        "handler": "runc", "overhead": {"podFixed": {"cpu": "100m", "memory": "32Mi"}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    pod(
        c,
        b,
        "migrating",
        json!({"runtimeClassName": t,
        "initContainers": [container("migrate", "2", "1Gi")],
        "containers": [container("app", "250m", "128Mi")]}),
    )
    .await;
    for (ns, name, ty) in [
        (a, "s1", "ClusterIP"),
        (a, "s2", "NodePort"),
        (b, "s3", "ClusterIP"),
        (x, "s4", "NodePort"),
    ] {
        let svcs: Api<Service> = Api::namespaced(c.clone(), ns);
        svcs.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"type": ty, "ports": [{"port": 80}]}}))
            .unwrap(),
        )
        .await
        .unwrap();
    }
}

/// Irrelevant pod changes do not re-synthesize; finished and deleted pods and a relabelled
/// namespace lower the usage.
async fn quota_follows_changes(
    env: &TestEnv,
    enoki: &Enoki,
    crqs: &Api<DynamicObject>,
    a: &str,
    b: &str,
) {
    let (t, c) = (&env.namespace, &env.client);
    let used = |st: &Value| st["total"]["used"].clone();
    let status = || async { status_of(crqs, t).await };
    // A pod change that does not affect usage does not re-synthesize.
    let synthesized = || enoki.metric("enoki_synthesis_runs_total").unwrap_or(0.0);
    // Quiet first: a synthesis for an earlier change may still be counting.
    let mut before = synthesized();
    for round in 0.. {
        assert!(round < 10, "syntheses never settled: {before}");
        enoki
            .wait_pass(env, &format!("clusterresourcequota-{t}"))
            .await;
        let now = synthesized();
        if now == before {
            break;
        }
        before = now;
    }
    let pods_a: Api<Pod> = Api::namespaced(c.clone(), a);
    pods_a
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}})),
        )
        .await
        .unwrap();
    enoki
        .wait_pass(env, &format!("clusterresourcequota-{t}"))
        .await;
    assert_eq!(
        synthesized(),
        before,
        "an irrelevant pod change re-synthesized"
    );

    // Marking a pod Succeeded and deleting another lower the usage.
    pods_a
        .patch_status(
            "batch",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
    let pods_b: Api<Pod> = Api::namespaced(c.clone(), b);
    pods_b
        .delete(
            "api",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    eventually("usage to drop", WAIT, || async {
        let u = used(&status().await);
        (u["pods"] == "2" && u["requests.cpu"] == "2700m").then_some(())
    })
    .await;

    // b's usage has a series of its own (until b leaves the quota, below).
    let port = enoki.metrics_port.unwrap();
    let of_b = usage_series_of(t, b);
    eventually("a usage series for b", WAIT, || async {
        let (_, body) = harness::http_get(port, "/metrics");
        body.contains(&of_b).then_some(())
    })
    .await;

    // Relabelling a namespace moves its usage out.
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.clone());
    nss.patch(
        b,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"quota-team": null}}})),
    )
    .await
    .unwrap();
    eventually("b's usage to leave", WAIT, || async {
        let st = status().await;
        (st["namespaces"].as_array().map(Vec::len) == Some(1)
            && used(&st)["requests.cpu"] == "600m")
            .then_some(())
    })
    .await;
}

/// The start of the per-namespace usage series of quota `crq` in `namespace`.
fn usage_series_of(crq: &str, namespace: &str) -> String {
    format!("pac_quota_controller_crq_usage{{crq_name=\"{crq}\",namespace=\"{namespace}\"")
}

/// An Event on `kind/name` with `reason` whose note contains `note`.
async fn event_on(env: &TestEnv, kind: &str, name: &str, reason: &str, note: &str) {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(env.client.clone());
    eventually(
        &format!("a {reason} Event on {kind} {name} ({note})"),
        WAIT,
        || async {
            events
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .find(|e| {
                    let r = e.regarding.as_ref();
                    r.and_then(|r| r.kind.as_deref()) == Some(kind)
                        && r.and_then(|r| r.name.as_deref()) == Some(name)
                        && e.reason.as_deref() == Some(reason)
                        && e.note.as_deref().is_some_and(|n| n.contains(note))
                })
                .map(|_| ())
        },
    )
    .await;
}

/// Scopes filter pods only (NotBestEffort AND priority class in {high}); Services are counted
/// regardless; usage over a hard limit is a QuotaExceeded Event; the CRD refuses contradicting
/// scopes and malformed quantities as upstream's does.
async fn scoped_quota(env: &TestEnv, crqs: &Api<DynamicObject>) {
    let t = &env.namespace;
    let (s, name, high) = (format!("{t}-s"), format!("{t}-scoped"), format!("{t}-high"));
    namespace_with(env, &s, json!({"quota-scope": t})).await;
    let pcs: Api<k8s_openapi::api::scheduling::v1::PriorityClass> = Api::all(env.client.clone());
    pcs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": high}, "value": 1000})).unwrap(),
    )
    .await
    .unwrap();
    let c = &env.client;
    pod(
        c,
        &s,
        "best-effort",
        json!({"containers": [{"name": "app", "image": "example.com/a:1"}]}),
    )
    .await;
    pod(
        c,
        &s,
        "burstable",
        json!({"containers": [container("app", "100m", "64Mi")]}),
    )
    .await;
    pod(
        c,
        &s,
        "important",
        json!({"priorityClassName": high, "containers": [container("app", "250m", "64Mi")]}),
    )
    .await;
    let svcs: Api<Service> = Api::namespaced(c.clone(), &s);
    svcs.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let crq = |spec: Value| {
        json!({"apiVersion": "quota.powerapp.cloud/v1alpha1",
        "kind": "ClusterResourceQuota", "metadata": {"name": name}, "spec": spec})
    };
    let pp = PatchParams::apply("test").force();
    for (bad, message) in [
        (
            json!({"namespaceSelector": {}, "scopes": ["BestEffort", "NotBestEffort"]}),
            "mutually exclusive",
        ),
        (
            json!({"namespaceSelector": {}, "hard": {"pods": "ten"}}),
            "spec.hard.pods",
        ),
        (
            json!({"namespaceSelector": {}, "scopeSelector": {"matchExpressions": [
            {"scopeName": "BestEffort", "operator": "In", "values": ["x"]}]}}),
            "only the PriorityClass scope",
        ),
    ] {
        let e = crqs
            .patch(&name, &pp, &Patch::Apply(crq(bad)))
            .await
            .unwrap_err();
        assert!(e.to_string().contains(message), "{e}");
    }
    crqs.patch(&name, &pp, &Patch::Apply(crq(json!({
        "namespaceSelector": {"matchLabels": {"quota-scope": t}},
        "scopes": ["NotBestEffort"],
        "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": [high]}]},
        "hard": {"pods": "5", "requests.cpu": "100m", "services": "5"}}))))
        .await
        .unwrap();
    eventually("usage of the pods in scope only", WAIT, || async {
        let used = status_of(crqs, &name).await["total"]["used"].clone();
        (used == json!({"pods": "1", "requests.cpu": "250m", "services": "1"})).then_some(())
    })
    .await;
    event_on(
        env,
        "ClusterResourceQuota",
        &name,
        "QuotaExceeded",
        "Resource requests.cpu has exceeded quota: current 250m, limit 100m",
    )
    .await;
    crqs.delete(&name, &DeleteParams::default()).await.unwrap();
    let _ = pcs.delete(&high, &DeleteParams::default()).await;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.clone());
    let _ = nss.delete(&s, &DeleteParams::default()).await;
}

#[tokio::test]
async fn lepton_mounts_need_the_platforms_persistent_volume_switch() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let lds = dynamic(
        &env,
        "lepton.ai",
        "LeptonDeployment",
        "leptondeployments",
        true,
    );
    let ld = json!({"apiVersion": "lepton.ai/v1alpha1", "kind": "LeptonDeployment",
    "metadata": {"name": "mounted"},
    "spec": {"name": "mounted", "photon_id": "p-1", "photon_image": "example.com/m:1",
             "efs_id": "fs-1", "efs_access_point_id": "ap-1",
             "mounts": [{"path": "/models", "mount_path": "/mnt/models"}],
             // A tenant cannot switch it on through the synthesis environment.
             }});
    lds.patch("mounted", &PatchParams::apply("test"), &Patch::Apply(ld))
        .await
        .unwrap();
    let comps: Api<crds::Composition> = env.api();
    let enoki = Enoki::start(&env.namespace);
    eventually("the implicit Composition", WAIT, || async {
        comps.get_opt("mounted").await.unwrap()
    })
    .await;
    let env_override = json!({"spec": {"synthesisEnv": [
        {"name": "ENOKI_LEPTON_PERSISTENT_VOLUMES", "value": "true"}]}});
    let generation = comps
        .patch(
            "mounted",
            &PatchParams::default(),
            &Patch::Merge(&env_override),
        )
        .await
        .unwrap()
        .metadata
        .generation;
    let message = eventually("Synthesized=False naming the switch", WAIT, || async {
        let c = comps.get("mounted").await.unwrap().status?.conditions;
        let c = c.into_iter().find(|c| c.type_ == "Synthesized")?;
        (c.status == "False"
            && c.observed_generation >= generation
            && c.message.contains("--lepton-persistent-volumes"))
        .then_some(c.message)
    })
    .await;
    assert!(message.contains("spec.mounts"), "{message}");
    let deployments: Api<Deployment> = env.api();
    let pvcs: Api<PersistentVolumeClaim> = env.api();
    assert!(deployments.get_opt("mounted").await.unwrap().is_none());
    assert!(
        pvcs.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let pvs: Api<PersistentVolume> = Api::all(env.client.clone());
    assert!(
        pvs.get_opt(&format!("pv-{}.mounted-0", env.namespace))
            .await
            .unwrap()
            .is_none()
    );
    drop(enoki);
}
