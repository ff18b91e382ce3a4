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
