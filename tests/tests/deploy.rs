//! `deploy/base` (kustomize) installs on the real API server, and the ServiceAccount it creates
//! can do what enoki needs and nothing like cluster-admin.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::process::Command;

fn kubectl(args: &[&str], stdin: Option<&[u8]>) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", harness::kubeconfig_path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl is on PATH (make test puts the Go-built one there)");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

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

    let sa = "system:serviceaccount:enoki-system:enoki";
    let can = |verb: &str, resource: &str, ns: Option<&str>| {
        let mut args = vec!["auth", "can-i", verb, resource, "--as", sa];
        if let Some(ns) = ns {
            args.extend(["-n", ns]);
        } else {
            args.push("--all-namespaces");
        }
        kubectl(&args, None).1.trim().starts_with("yes")
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
    let overlay = harness::workspace_root().join("deploy/overlays/multi-tenant");
    let (ok, yaml) = kubectl(&["kustomize", overlay.to_str().unwrap()], None);
    assert!(ok, "{yaml}");
    assert!(yaml.contains("--default-service-account=default"));
    assert!(yaml.contains("--no-cross-namespace-refs"));
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
    for (kind, name) in [
        ("clusterrolebinding", "enoki-managed-resources"),
        ("clusterrole", "enoki-managed-resources"),
        ("clusterrole", "enoki-sample-kinds"),
        ("clusterrole", "enoki-builtins"),
    ] {
        let (ok, out) = kubectl(&["delete", kind, name, "--ignore-not-found"], None);
        assert!(ok, "{out}");
    }
    let start = std::time::Instant::now();
    while can("patch", "configmaps", None) {
        assert!(start.elapsed().as_secs() < 60, "write grants survived");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
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
