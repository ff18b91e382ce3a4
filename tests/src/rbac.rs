//! RBAC set-up and checks: `kubectl`, `kubectl auth can-i --as`, the shipped kustomizations and
//! tenant onboarding.

use super::*;

/// Runs `kubectl` (the Go-built one `make test` puts on PATH) against the test control plane
/// as its admin; (success, stdout + stderr).
///
/// # Panics
/// When kubectl cannot be started.
pub fn kubectl(args: &[&str], stdin: Option<&[u8]>) -> (bool, String) {
    use std::io::Write;
    let mut child = std::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl is on PATH (make test puts the Go-built one there)");
    if let Some(input) = stdin
        && let Some(mut pipe) = child.stdin.take()
    {
        pipe.write_all(input).expect("kubectl reads stdin");
    }
    let out = child.wait_with_output().expect("kubectl runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The ServiceAccount the shipped manifests run enoki as.
pub const CONTROLLER_SA: &str = "system:serviceaccount:enoki-system:enoki";

/// Whether `user` may `verb` `resource` (in `namespace`, or in all namespaces).
pub fn can_i(user: &str, verb: &str, resource: &str, namespace: Option<&str>) -> bool {
    let mut args = vec!["auth", "can-i", verb, resource, "--as", user];
    if let Some(ns) = namespace {
        args.extend(["-n", ns]);
    } else {
        args.push("--all-namespaces");
    }
    kubectl(&args, None).1.trim().starts_with("yes")
}

/// Applies a kustomization (`deploy/base`, `deploy/overlays/single-tenant`) with server-side
/// apply; returns the rendered YAML.
///
/// # Panics
/// When kustomize or the API server refuses.
pub fn apply_kustomization(dir: &str) -> String {
    let path = workspace_root().join(dir);
    let (ok, yaml) = kubectl(&["kustomize", &path.to_string_lossy()], None);
    assert!(ok, "{yaml}");
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
    yaml
}

/// Installs the default install, `deploy/base` (kustomize, server-side apply), and removes the
/// single-tenant overlay's write grants a previous test may have left (`kubectl apply` does
/// not prune); returns once the controller's ServiceAccount has lost them. Returns the
/// rendered base.
///
/// # Panics
/// When kustomize or the API server refuses, or the grants outlive a minute.
pub fn install_default_install() -> String {
    let yaml = apply_kustomization("deploy/base");
    for (kind, name) in [
        ("clusterrolebinding", "enoki-managed-resources"),
        ("clusterrole", "enoki-managed-resources"),
        ("clusterrole", "enoki-sample-kinds"),
        ("clusterrole", "enoki-builtins"),
        ("clusterrolebinding", "enoki-multi-tenant"),
        ("clusterrole", "enoki-multi-tenant"),
    ] {
        let (ok, out) = kubectl(&["delete", kind, name, "--ignore-not-found"], None);
        assert!(ok, "{out}");
    }
    let start = std::time::Instant::now();
    while can_i(CONTROLLER_SA, "patch", "configmaps", None) {
        assert!(start.elapsed().as_secs() < 60, "write grants survived");
        std::thread::sleep(Duration::from_millis(500));
    }
    yaml
}

/// Onboards namespace `ns` as `deploy/onboarding/tenant.yaml` says: its `enoki-composer`
/// ServiceAccount, bound to `edit`, and the controller's right to impersonate it there.
///
/// # Panics
/// When the template cannot be read or the API server refuses.
pub fn onboard_namespace(ns: &str) {
    let template = workspace_root().join("deploy/onboarding/tenant.yaml");
    let text = std::fs::read_to_string(&template)
        .unwrap_or_else(|e| panic!("{}: {e}", template.display()))
        .replace("TENANT", ns);
    let (ok, out) = kubectl(
        &[
            "apply",
            "--server-side",
            "--field-manager=platform",
            "-f",
            "-",
        ],
        Some(text.as_bytes()),
    );
    assert!(ok, "onboarding {ns}: {out}");
}

/// Gives the harness's `tenant-a` user Kubernetes' `edit` role in `namespace`, with enoki's
/// kinds aggregated into it as the shipped manifests aggregate them
/// (`deploy/base/rbac-tenants.yaml`): what a tenant of a real install holds.
///
/// # Panics
/// When kubectl or the API server refuses.
pub fn grant_tenant_edit(namespace: &str) {
    let roles = workspace_root().join("deploy/base/rbac-tenants.yaml");
    let (ok, out) = kubectl(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=harness",
            "-f",
            &roles.to_string_lossy(),
        ],
        None,
    );
    assert!(ok, "{out}");
    let binding = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: tenant-a-edit, namespace: {namespace}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}}\nsubjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: tenant-a}}]\n"
    );
    let (ok, out) = kubectl(
        &[
            "apply",
            "--server-side",
            "--field-manager=harness",
            "-f",
            "-",
        ],
        Some(binding.as_bytes()),
    );
    assert!(ok, "{out}");
    let start = std::time::Instant::now();
    while !can_i(
        "tenant-a",
        "create",
        "compositions.enoki.dev",
        Some(namespace),
    ) {
        assert!(
            start.elapsed().as_secs() < 60,
            "tenant-a never got edit on Compositions"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
