//! `deploy/base` (kustomize) installs on the real API server, and the ServiceAccount it creates
//! can do what enoki needs and nothing like cluster-admin.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use harness::kubectl;

#[tokio::test]
async fn the_kustomize_base_installs_with_least_privilege_rbac() {
    // Reach the server first (fails loudly without a control plane).
    let _client = harness::client().await;
    let base = harness::workspace_root().join("deploy/base");
    let (ok, yaml) = kubectl(&["kustomize", base.to_str().unwrap()], None);
    assert!(ok, "{yaml}");
    assert!(
        !yaml.contains("cluster-admin"),
        "deploy/ must never grant cluster-admin"
    );
    // A previous run may have left the multi-tenant overlay's grants (below) in place.
    for kind in ["clusterrolebinding", "clusterrole"] {
        let (ok, out) = kubectl(
            &["delete", kind, "enoki-multi-tenant", "--ignore-not-found"],
            None,
        );
        assert!(ok, "{out}");
    }
    let (ok, out) = kubectl(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=deploy-test",
            "-f",
            "-",
        ],
        Some(yaml.as_bytes()),
    );
    assert!(ok, "{out}");
    for expected in [
        "deployment.apps/enoki",
        "poddisruptionbudget.policy/enoki",
        "service/enoki-metrics",
        "clusterrole.rbac.authorization.k8s.io/enoki-controller",
    ] {
        assert!(out.contains(expected), "{expected} not applied:\n{out}");
    }

    let can = |verb: &str, resource: &str, ns: Option<&str>| {
        harness::can_i(harness::CONTROLLER_SA, verb, resource, ns)
    };
    // What enoki needs.
    assert!(can("patch", "compositions.enoki.dev/status", None));
    assert!(can("watch", "resourceslices.enoki.dev", None));
    assert!(can("create", "events.events.k8s.io", None));
    assert!(can(
        "update",
        "leases.coordination.k8s.io",
        Some("enoki-system")
    ));
    // Aggregated from the labelled sample ClusterRole by kube-controller-manager.
    let start = std::time::Instant::now();
    while !can("patch", "configmaps", None) {
        assert!(
            start.elapsed().as_secs() < 60,
            "the labelled ClusterRole was never aggregated"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    // The built-ins' grants, aggregated the same way.
    while !can(
        "patch",
        "clusterresourcequotas.quota.powerapp.cloud/status",
        None,
    ) || !can("create", "persistentvolumes", None)
    {
        assert!(
            start.elapsed().as_secs() < 60,
            "the built-ins' ClusterRole was never aggregated"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    assert!(can("list", "pods", None), "quota reads pods");
    // Nothing like cluster-admin.
    assert!(!can("bind", "roles.rbac.authorization.k8s.io", None));
    assert!(!can(
        "escalate",
        "clusterroles.rbac.authorization.k8s.io",
        None
    ));
    assert!(!can("impersonate", "serviceaccounts", None));
    assert!(!can("create", "clusterrolebindings", None));
    assert!(!can("create", "pods", None));
    assert!(!can("delete", "namespaces", None));
    assert!(!can(
        "update",
        "leases.coordination.k8s.io",
        Some("kube-system")
    ));

    // The Helm chart renders the same objects and installs over the kustomize ones.
    helm_chart_matches_kustomize();

    // The multi-tenant overlay on top: reads, impersonation, its own API — no writes of what
    // synthesizers emit (kustomize does not prune, so the base's aggregated grants go by hand).
    let yaml = harness::install_multi_tenant_overlay();
    assert!(yaml.contains("--default-service-account=default"));
    assert!(yaml.contains("--no-cross-namespace-refs"));
    assert!(!yaml.contains("--lepton-persistent-volumes"));
    assert!(can("impersonate", "serviceaccounts", None));
    assert!(can("list", "secrets", None), "reads for the watch caches");
    assert!(can("patch", "compositions.enoki.dev/status", None));
    for (verb, resource) in [
        ("create", "configmaps"),
        ("create", "rolebindings.rbac.authorization.k8s.io"),
        ("delete", "deployments.apps"),
        ("create", "persistentvolumes"),
        ("impersonate", "users"),
        ("impersonate", "groups"),
    ] {
        assert!(!can(verb, resource, None), "{verb} {resource}");
    }
}

/// `helm` (built by `hack/tools.sh`; `make test` exports `HELM`): (success, stdout, stderr).
fn helm(args: &[&str]) -> (bool, String, String) {
    let bin = std::env::var("HELM").expect(
        "HELM is not set: make test builds helm with hack/tools.sh and exports HELM=<dir>/helm",
    );
    let out = std::process::Command::new(&bin)
        .args(args)
        .env("KUBECONFIG", harness::kubeconfig_path())
        .current_dir(harness::workspace_root())
        .output()
        .unwrap_or_else(|e| panic!("{bin}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Objects of a multi-document YAML by (kind, name), without their namespace (kustomize sets
/// it on every namespaced object, helm on the release), the Namespace itself (helm installs
/// into an existing one) and the Deployment's image (a tag per build).
fn objects(yaml: &str) -> std::collections::BTreeMap<(String, String), serde_json::Value> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml).unwrap();
    docs.into_iter()
        .filter(|d| d.is_object() && d["kind"] != "Namespace")
        .map(|mut d| {
            if let Some(meta) = d["metadata"].as_object_mut() {
                meta.remove("namespace");
            }
            if d["kind"] == "Deployment" {
                d["spec"]["template"]["spec"]["containers"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("image");
            }
            let key = (
                d["kind"].as_str().unwrap().to_string(),
                d["metadata"]["name"].as_str().unwrap().to_string(),
            );
            (key, d)
        })
        .collect()
}

fn helm_chart_matches_kustomize() {
    let root = harness::workspace_root();
    let (ok, out, err) = helm(&["lint", "deploy/helm/enoki", "--strict"]);
    assert!(ok, "helm lint: {out}{err}");
    for (tenancy, kustomization) in [
        ("single", "deploy/base"),
        ("multi", "deploy/overlays/multi-tenant"),
    ] {
        let set = format!("tenancy={tenancy}");
        let (ok, rendered, err) = helm(&[
            "template",
            "enoki",
            "deploy/helm/enoki",
            "-n",
            "enoki-system",
            "--set",
            &set,
        ]);
        assert!(ok, "helm template ({tenancy}): {err}");
        let (ok, out) = kubectl(
            &["apply", "--dry-run=server", "-n", "enoki-system", "-f", "-"],
            Some(rendered.as_bytes()),
        );
        assert!(ok, "server dry run of the chart ({tenancy}): {out}");
        let (ok, kustomized) = kubectl(
            &["kustomize", root.join(kustomization).to_str().unwrap()],
            None,
        );
        assert!(ok, "{kustomized}");
        let (want, got) = (objects(&kustomized), objects(&rendered));
        assert_eq!(
            want.keys().collect::<Vec<_>>(),
            got.keys().collect::<Vec<_>>(),
            "the chart ({tenancy}) renders the same objects as {kustomization}"
        );
        for (key, object) in &want {
            assert_eq!(
                &got[key], object,
                "{key:?} ({tenancy}) differs from {kustomization}"
            );
        }
    }
    // The built-ins' CRDs can be left to the upstream operators.
    let (ok, rendered, err) = helm(&[
        "template",
        "enoki",
        "deploy/helm/enoki",
        "--set",
        "crds.builtins=false",
    ]);
    assert!(ok, "{err}");
    assert!(!rendered.contains("trusteeconfigs.confidentialcontainers.org"));
    assert!(rendered.contains("compositions.enoki.dev"));

    chart_renders_sharding_and_a_remote_target();

    // A real install over the objects kustomize created: same names, helm takes them over
    // (and, with server-side apply forced, the fields the kustomize apply's manager held) —
    // except a built-in's CRD installed by someone else (here the test environment, standing in
    // for the upstream operator), which the chart neither overwrites nor adopts.
    let crd_version = |name: &str| {
        let (ok, out) = kubectl(
            &[
                "get",
                "crd",
                name,
                "-o",
                "jsonpath={.metadata.resourceVersion} {.metadata.annotations.meta\\.helm\\.sh/release-name}",
            ],
            None,
        );
        assert!(ok, "{out}");
        out.trim().to_string()
    };
    let upstream_before = crd_version("leptondeployments.lepton.ai");
    let (ok, out, err) = helm(&[
        "upgrade",
        "--install",
        "enoki",
        "deploy/helm/enoki",
        "-n",
        "enoki-system",
        "--take-ownership",
        "--server-side=true",
        "--force-conflicts",
        "--set",
        "image.tag=test",
    ]);
    assert!(ok, "helm install: {out}{err}");
    let (ok, live) = kubectl(
        &[
            "get",
            "deployment",
            "enoki",
            "-n",
            "enoki-system",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image} {.metadata.annotations.meta\\.helm\\.sh/release-name}",
        ],
        None,
    );
    assert!(ok, "{live}");
    assert_eq!(
        live.trim(),
        "enoki:test enoki",
        "the release owns the Deployment"
    );
    assert_eq!(
        crd_version("leptondeployments.lepton.ai"),
        upstream_before,
        "an existing built-in CRD is left as it was (not overwritten, not adopted)"
    );
    assert!(crd_version("compositions.enoki.dev").ends_with(" enoki"));
}

/// Sharding and a remote target cluster: the flags, and the kubeconfig Secret mounted.
fn chart_renders_sharding_and_a_remote_target() {
    let (ok, rendered, err) = helm(&[
        "template",
        "enoki",
        "deploy/helm/enoki",
        "-n",
        "enoki-system",
        "--set",
        "run.shards=2",
        "--set",
        "replicas=3",
        "--set",
        "remoteKubeconfig.secretName=workload-cluster",
    ]);
    assert!(ok, "{err}");
    let deployment = objects(&rendered)
        .remove(&("Deployment".to_string(), "enoki".to_string()))
        .unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    let args: Vec<&str> = pod["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(args.contains(&"--shards=2"), "{args:?}");
    assert!(
        args.contains(&"--remote-kubeconfig=/etc/enoki/remote/kubeconfig"),
        "{args:?}"
    );
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(
        pod["volumes"][1]["secret"]["secretName"],
        "workload-cluster"
    );
    let (ok, out) = kubectl(
        &["apply", "--dry-run=server", "-n", "enoki-system", "-f", "-"],
        Some(rendered.as_bytes()),
    );
    assert!(ok, "server dry run of the sharded, remote chart: {out}");
}

/// `deploy/overlays/upstream-crds` (the `upstream-crds` component): the base without the
/// built-ins' CRDs, everything else identical.
#[test]
fn the_upstream_crds_overlay_leaves_the_builtin_crds_out() {
    let root = harness::workspace_root();
    let render = |k: &str| {
        let (ok, yaml) = kubectl(&["kustomize", root.join(k).to_str().unwrap()], None);
        assert!(ok, "{yaml}");
        objects(&yaml)
    };
    let (base, overlay) = (
        render("deploy/base"),
        render("deploy/overlays/upstream-crds"),
    );
    let builtin: Vec<_> = base
        .keys()
        .filter(|k| !overlay.contains_key(*k))
        .map(|(_, name)| name.as_str())
        .collect();
    assert_eq!(
        builtin,
        [
            "clusterresourcequotas.quota.powerapp.cloud",
            "kbsconfigs.confidentialcontainers.org",
            "leptondeployments.lepton.ai",
            "trusteeconfigs.confidentialcontainers.org",
        ]
    );
    for (key, object) in &overlay {
        assert_eq!(&base[key], object, "{key:?}");
    }
}
