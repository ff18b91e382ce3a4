//! The default install end to end, on the real control plane: enoki runs with `deploy/base`'s
//! RBAC as its ServiceAccount's token (not as `system:masters`) and the base's flags, tenant
//! namespaces are onboarded with `deploy/onboarding/tenant.yaml`, and a tenant is a token user (`tenant-a`,
//! `hack/testenv.sh`) holding only Kubernetes' `edit` role in its namespace. Whatever that
//! tenant's Compositions emit or reference, it can do no more than `edit` in its own namespace,
//! and it never takes over or deletes what another Composition owns.
//!
//! Own binary: it installs the default install's cluster-wide grants, which `deploy.rs` also
//! changes.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use crds::Composition;
use harness::{Enoki, TestEnv, eventually, kubectl};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);
const MANAGER: &str = "tenant";

/// A kubeconfig that authenticates as `enoki-system/enoki` with a fresh TokenRequest token.
fn controller_kubeconfig(id: &str) -> PathBuf {
    let (ok, token) = kubectl(
        &[
            "create",
            "token",
            "enoki",
            "-n",
            "enoki-system",
            "--duration=2h",
        ],
        None,
    );
    assert!(ok, "TokenRequest for enoki-system/enoki: {token}");
    let admin = kube::config::Kubeconfig::read_from(harness::kubeconfig_path()).unwrap();
    let cluster = admin.clusters[0].cluster.clone().unwrap();
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {
            "server": cluster.server,
            "certificate-authority-data": cluster.certificate_authority_data}}],
        "users": [{"name": "enoki", "user": {"token": token.trim()}}],
        "contexts": [{"name": "enoki", "context": {"cluster": "c", "user": "enoki"}}],
        "current-context": "enoki",
    });
    let path = std::env::temp_dir().join(format!("enoki-sa-{id}.kubeconfig"));
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// A RoleBinding of ClusterRole `edit` in `ns` for `subject` (a User or a ServiceAccount of
/// `ns`), made by the platform (admin).
async fn grant_edit(admin: &kube::Client, ns: &str, name: &str, subject: Value) {
    let rb: RoleBinding = serde_json::from_value(json!({"metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [subject]}))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &rb)
        .await
        .unwrap();
}

/// A tenant namespace: the token user `user` gets `edit` there, and the namespace is onboarded
/// (its `enoki-composer` ServiceAccount, what its Compositions act as).
async fn tenant_namespace(admin: &kube::Client, ns: &str, user: &str) -> TestEnv {
    harness::create_namespace(admin, ns).await;
    grant_edit(
        admin,
        ns,
        "tenant-edit",
        json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}),
    )
    .await;
    harness::onboard_namespace(ns);
    TestEnv {
        client: harness::client_as(user).await,
        namespace: ns.to_string(),
    }
}

/// As the tenant: the items ConfigMap `name` and a Composition `name` of `synth` bound to it,
/// labelled for this run's enoki.
async fn compose(tenant: &TestEnv, id: &str, name: &str, synth: &str, items: Value, extra: Value) {
    let pp = PatchParams::apply(MANAGER);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
        "data": {"items": items.to_string()}});
    tenant
        .api::<ConfigMap>()
        .patch(name, &pp, &Patch::Apply(&cm))
        .await
        .unwrap_or_else(|e| panic!("the tenant writes ConfigMap {name}: {e}"));
    let mut spec = json!({"synthesizer": {"name": synth},
        "bindings": [{"key": "config", "resource": {"name": name}}]});
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(extra.clone());
    }
    let comp = json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": name, "labels": {"e2e": id}}, "spec": spec});
    tenant
        .api::<Composition>()
        .patch(name, &pp, &Patch::Apply(&comp))
        .await
        .unwrap_or_else(|e| panic!("the tenant creates Composition {name}: {e}"));
}

/// Waits for condition `type_` of `name` to be False with `reason`; its message.
async fn refused(tenant: &TestEnv, name: &str, type_: &str, reason: &str) -> String {
    eventually(&format!("{name}: {type_}=False {reason}"), WAIT, || async {
        let c = harness::composition_condition(tenant, name, type_).await?;
        (c.0 == "False" && c.1 == reason).then_some(c.2)
    })
    .await
}

fn config_map_in(name: &str, ns: &str, data: &Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns}, "data": data})
}

#[tokio::test]
#[allow(clippy::too_many_lines)] // one scenario, told in order
async fn a_tenant_with_namespace_edit_can_do_no_more_through_enoki() {
    let admin = harness::client().await;
    harness::install_crds(&admin).await;
    let _ = harness::install_default_install();
    let id = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
    let (a, b) = (format!("team-a-{id}"), format!("team-b-{id}"));

    // The platform: a Synthesizer whose module lives in the controller's namespace.
    let platform = TestEnv {
        client: admin.clone(),
        namespace: "enoki-system".into(),
    };
    let synth =
        harness::install_synthesizer(&platform, &format!("echo-{id}"), &harness::echo_module())
            .await;
    // It may also take a Secret (optional), e.g. a TLS key pair.
    let refs = json!({"spec": {"refs": [
        {"key": "config", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}},
        {"key": "tls", "optional": true, "resource": {"group": "", "version": "v1", "kind": "Secret"}}]}});
    Api::<crds::Synthesizer>::all(admin.clone())
        .patch(&synth, &PatchParams::default(), &Patch::Merge(&refs))
        .await
        .unwrap();
    let team_a = tenant_namespace(&admin, &a, "tenant-a").await;
    let team_b = tenant_namespace(&admin, &b, "tenant-b").await;
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "tls"}, "stringData": {"tls.key": "team-b's private key"}}))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(admin.clone(), &b)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    // The tenant itself has no cluster rights and cannot forge what enoki trusts.
    for (verb, resource, ns) in [
        ("create", "resourceslices.enoki.dev", Some(a.as_str())),
        ("create", "synthesizers.enoki.dev", None),
        (
            "create",
            "rolebindings.rbac.authorization.k8s.io",
            Some(a.as_str()),
        ),
        ("create", "configmaps", Some(b.as_str())),
        ("create", "configmaps", Some("kube-system")),
    ] {
        assert!(
            !harness::can_i("tenant-a", verb, resource, ns),
            "tenant-a may {verb} {resource} in {ns:?}"
        );
    }

    let kubeconfig = controller_kubeconfig(&id);
    let selector = format!("e2e={id}");
    let enoki = Enoki::start_as(
        "",
        &[
            "--label-selector",
            &selector,
            "--builtins",
            "none",
            "--default-service-account=enoki-composer",
            "--no-cross-namespace-refs",
        ],
        &kubeconfig,
        &[("POD_NAMESPACE", "enoki-system")],
    );

    // team-b owns a ConfigMap through its own Composition.
    eventually("aggregated edit covers Compositions", WAIT, || async {
        harness::can_i("tenant-b", "create", "compositions.enoki.dev", Some(&b)).then_some(())
    })
    .await;
    let theirs = config_map_in("theirs", &b, &json!({"owner": "team-b"}));
    compose(&team_b, &id, "app", &synth, json!([theirs]), json!({})).await;
    eventually("team-b's app Ready", WAIT, || async {
        harness::composition_ready(&team_b, "app")
            .await
            .then_some(())
    })
    .await;

    // A legitimate Composition in team-a converges.
    let good = config_map_in("good", &a, &json!({"v": "1"}));
    compose(&team_a, &id, "good", &synth, json!([good]), json!({})).await;

    // Each of these is refused with a condition naming why, and applies nothing.
    let grab = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": format!("grab-{id}"), "namespace": "kube-system"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "User", "name": "tenant-a", "apiGroup": "rbac.authorization.k8s.io"}]});
    compose(&team_a, &id, "grab", &synth, json!([grab]), json!({})).await;
    let mut cluster_grab = grab.clone();
    cluster_grab["kind"] = json!("ClusterRoleBinding");
    cluster_grab["metadata"] = json!({"name": format!("grab-{id}")});
    compose(
        &team_a,
        &id,
        "cluster-grab",
        &synth,
        json!([cluster_grab]),
        json!({}),
    )
    .await;
    let into_b = config_map_in("planted", &b, &json!({"v": "1"}));
    compose(&team_a, &id, "plant", &synth, json!([into_b]), json!({})).await;
    let takeover = config_map_in("theirs", &b, &json!({"owner": "team-a"}));
    compose(
        &team_a,
        &id,
        "takeover",
        &synth,
        json!([takeover]),
        json!({}),
    )
    .await;
    compose(
        &team_a,
        &id,
        "bind-secret",
        &synth,
        json!([]),
        json!({"bindings": [{"key": "config", "resource": {"name": "bind-secret"}},
                            {"key": "tls", "resource": {"name": "tls", "namespace": b}}]}),
    )
    .await;
    compose(
        &team_a,
        &id,
        "wait-on-b",
        &synth,
        json!([]),
        json!({"dependsOn": [{"name": "app", "namespace": b}]}),
    )
    .await;

    // Emitting team-b's Secret is refused, and its content never reaches the module as an
    // observed output (observed outputs are read as the Composition's account).
    let steal = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "tls", "namespace": b}, "stringData": {"x": "y"}});
    let own = config_map_in("peek-own", &a, &json!({"v": "1"}));
    compose(&team_a, &id, "peek", &synth, json!([steal, own]), json!({})).await;

    eventually("team-a's good Ready", WAIT, || async {
        harness::composition_ready(&team_a, "good")
            .await
            .then_some(())
    })
    .await;
    let sa = format!("system:serviceaccount:{a}:enoki-composer");
    for (name, object) in [
        ("grab", format!("grab-{id}")),
        ("cluster-grab", format!("grab-{id}")),
        ("plant", "planted".to_string()),
        ("takeover", "theirs".to_string()),
    ] {
        let message = refused(&team_a, name, "Reconciled", "Forbidden").await;
        assert!(
            message.contains(&object) && message.contains(&sa),
            "{name}: names the object and who was refused: {message}"
        );
    }
    for (name, field) in [
        ("bind-secret", "spec.bindings[1]"),
        ("wait-on-b", "spec.dependsOn[0].namespace"),
    ] {
        let message = refused(&team_a, name, "Synthesized", "CrossNamespaceRef").await;
        assert!(message.contains(field), "{name}: {message}");
    }

    // Nothing of it was applied; team-b's object is untouched and still team-b's.
    let kube_system: Api<RoleBinding> = Api::namespaced(admin.clone(), "kube-system");
    assert!(
        kube_system
            .get_opt(&format!("grab-{id}"))
            .await
            .unwrap()
            .is_none()
    );
    let crbs: Api<ClusterRoleBinding> = Api::all(admin.clone());
    assert!(crbs.get_opt(&format!("grab-{id}")).await.unwrap().is_none());
    let in_b: Api<ConfigMap> = Api::namespaced(admin.clone(), &b);
    assert!(in_b.get_opt("planted").await.unwrap().is_none());
    let theirs = in_b.get("theirs").await.unwrap();
    assert_eq!(theirs.data.as_ref().unwrap()["owner"], "team-b");
    let app_uid = team_b
        .api::<Composition>()
        .get("app")
        .await
        .unwrap()
        .uid()
        .unwrap();
    assert_eq!(theirs.labels().get("enoki.dev/managed-by"), Some(&app_uid));
    let message = refused(&team_a, "peek", "Reconciled", "Forbidden").await;
    assert!(message.contains("tls"), "{message}");
    let cms = team_a.api::<ConfigMap>();
    eventually("peek-own applied", WAIT, || async {
        cms.get_opt("peek-own").await.unwrap().map(|_| ())
    })
    .await;
    let mirror = json!({"data": {"mirror": "peek-mirror"}});
    cms.patch("peek", &PatchParams::default(), &Patch::Merge(&mirror))
        .await
        .unwrap();
    let seen = eventually("the module's view of its outputs", WAIT, || async {
        cms.get_opt("peek-mirror").await.unwrap()?.data
    })
    .await;
    assert!(seen.contains_key("ConfigMap.peek-own"), "{seen:?}");
    assert!(
        !seen.contains_key("Secret.tls") && !seen.values().any(|v| v.contains("private key")),
        "team-b's Secret reached team-a's module: {seen:?}"
    );
    for name in ["bind-secret", "wait-on-b"] {
        let c = team_a.api::<Composition>().get(name).await.unwrap();
        assert!(
            c.status.unwrap().current_synthesis.is_none(),
            "{name} synthesized"
        );
    }

    // Two of team-a's Compositions emit one object: the first keeps it, the second reports
    // the conflict, and deleting the second leaves the object.
    let shared = |owner: &str| config_map_in("shared", &a, &json!({"owner": owner}));
    compose(
        &team_a,
        &id,
        "first",
        &synth,
        json!([shared("first")]),
        json!({}),
    )
    .await;
    eventually("first Ready", WAIT, || async {
        harness::composition_ready(&team_a, "first")
            .await
            .then_some(())
    })
    .await;
    compose(
        &team_a,
        &id,
        "second",
        &synth,
        json!([shared("second")]),
        json!({}),
    )
    .await;
    let message = refused(&team_a, "second", "Reconciled", "Conflict").await;
    assert!(message.contains(&format!("{a}/first")), "{message}");
    let comps = team_a.api::<Composition>();
    harness::delete_and_wait(&comps, "second").await;
    assert_eq!(
        cms.get("shared").await.unwrap().data.unwrap()["owner"],
        "first"
    );
    assert!(harness::composition_ready(&team_a, "first").await);

    // Deleting team-a's Compositions never deletes team-b's object.
    for name in ["takeover", "plant", "good"] {
        comps.delete(name, &DeleteParams::default()).await.unwrap();
    }
    eventually("team-a's Compositions gone", WAIT, || async {
        let mut left = 0;
        for name in ["takeover", "plant", "good"] {
            left += usize::from(comps.get_opt(name).await.unwrap().is_some());
        }
        (left == 0).then_some(())
    })
    .await;
    assert!(cms.get_opt("good").await.unwrap().is_none(), "good pruned");
    assert_eq!(
        in_b.get("theirs").await.unwrap().data.unwrap()["owner"],
        "team-b"
    );
    // enoki acts only as enoki-composer, only in onboarded namespaces: a Composition naming
    // the namespace's `default` account, and one in a namespace never onboarded, apply nothing.
    let via_default = config_map_in("via-default-out", &a, &json!({"v": "1"}));
    compose(
        &team_a,
        &id,
        "via-default",
        &synth,
        json!([via_default]),
        json!({"serviceAccountName": "default"}),
    )
    .await;
    let c = format!("team-c-{id}");
    harness::create_namespace(&admin, &c).await;
    let not_onboarded = TestEnv {
        client: admin.clone(),
        namespace: c.clone(),
    };
    let stray = config_map_in("stray-out", &c, &json!({"v": "1"}));
    compose(
        &not_onboarded,
        &id,
        "stray",
        &synth,
        json!([stray]),
        json!({}),
    )
    .await;
    for (env, name) in [(&team_a, "via-default"), (&not_onboarded, "stray")] {
        let message = eventually(&format!("{name}: refused impersonation"), WAIT, || async {
            let c = env.api::<Composition>().get(name).await.ok()?;
            c.status?
                .conditions
                .into_iter()
                .find(|c| c.status == "False" && c.message.contains("impersonate"))
                .map(|c| c.message)
        })
        .await;
        assert!(message.contains("impersonate"), "{name}: {message}");
        assert!(!harness::composition_ready(env, name).await, "{name} Ready");
    }
    assert!(cms.get_opt("via-default-out").await.unwrap().is_none());
    let in_c: Api<ConfigMap> = Api::namespaced(admin.clone(), &c);
    assert!(in_c.get_opt("stray-out").await.unwrap().is_none());

    // team-a's refused dependsOn on team-b's app is no dependency: team-b deletes it freely.
    let theirs_comps = team_b.api::<Composition>();
    harness::delete_and_wait(&theirs_comps, "app").await;

    // The controller is still serving (it survived every refusal).
    let port = enoki.metrics_port.unwrap();
    assert_eq!(harness::http_get(port, "/healthz").0, 200);
    let _ = std::fs::remove_file(kubeconfig);
}
