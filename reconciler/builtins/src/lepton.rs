//! `lepton`: LeptonDeployment → Deployment, Service, Ingresses, and a PVC + PV per mount
//! (leptonai/lepton's deployment-operator).
//!
//! Every object is what upstream's operator builds (leptonai/lepton `deployment-operator`,
//! the version whose spec has `workspace_name`/`workspace_token`; the file each part follows is
//! cited at the function that builds it): the photon runs as `sh -c "lep photon prepare -f
//! /photon/<id>; lep photon run -f /photon/<id>"` after an `aws s3 cp` init container; requests
//! are 90 % of the limits; `LEPTON_*`, `OMP_NUM_THREADS` and `MKL_NUM_THREADS` are set; the
//! probes allow 600 s of model loading; the header and host Ingresses carry upstream's ALB
//! annotations with the `Authorization: Bearer` conditions of the API tokens. Readiness groups:
//! PV (0) → PVC and Service (1) → Deployment and Ingresses (2). PVs and PVCs are create-only
//! (`disable-updates`), as upstream never updates them. Everything else is re-applied at once
//! when edited by hand (drift: watch).
//!
//! Deletion: the Synthesizer holds upstream's finalizer `lepton.ai/deletion` on each
//! LeptonDeployment (`enoki.dev/instance-finalizer`), so deleting one synthesizes once more —
//! `state: Deleting`, `external_endpoint` cleared — before its outputs are removed and the
//! finalizer released.
//!
//! Status (`state`, `endpoint`) is written back from the observed Deployment by the upstream
//! state machine: Deployment missing → `Starting`; all replicas ready → `Running`; a fresh
//! deployment stays `Starting` until it first gets there (the sticky Starting); afterwards
//! `Updating` (some ready) or `Not Ready` (none). Upstream's later "0 replicas, 0 ready → Not
//! Ready" rule applies only after the first `Running`, so a new deployment does not flash
//! `Not Ready` before its controller reports.
//!
//! Deliberate differences: PVs are composition-managed, so a PV goes with its mount or with
//! the LeptonDeployment (upstream leaks the PVs of mounts removed earlier); `internal_endpoint`
//! names the Service (upstream names the Deployment, which no DNS name resolves); `spec.name`
//! must equal `metadata.name` (upstream loops when they differ); an unknown `resource_shape`
//! and a fractional `accelerator_num` are refused (upstream falls back to `gp1.small`, and
//! truncates the count); the `lepton-deployment-spec-hash` annotation is not stamped (enoki
//! compares what it applied itself); Gloo routing objects and the SDK `pip install` prefix of
//! later versions are not produced; `auto_scaler` is accepted and, as in upstream's operator,
//! not acted on (upstream's autoscaler is a separate component).
//!
//! PersistentVolumes are cluster-scoped and name storage by `volumeHandle`, so a tenant who may
//! create LeptonDeployments must not get them by default: they are emitted only when the
//! platform runs enoki with `--lepton-persistent-volumes` (which reaches this synthesizer as
//! [`PERSISTENT_VOLUMES_ENV`], set by the controller after every user-supplied variable);
//! otherwise a LeptonDeployment with `mounts` is refused with a clear error. Each PV is named
//! `pv-<ns>.<name>-<i>` — a namespace has no dot, so two LeptonDeployments can never collide
//! (upstream's `pv-<ns>-<name>-<i>` does: `a`/`b-c` and `a-b`/`c`) — and carries a `claimRef`
//! to its own PVC, so no other claim can bind it.

use enoki_sdk::{Error, Input, Output, Resource};
use serde_json::{Value, json};

use crate::quantity::Quantity;

mod workload;
use workload::*;

/// Set to `true` by the controller (`enoki run --lepton-persistent-volumes`) when this
/// built-in may emit PersistentVolumes; tenants cannot set it (the controller's value wins).
pub const PERSISTENT_VOLUMES_ENV: &str = "ENOKI_LEPTON_PERSISTENT_VOLUMES";

/// The instance kind.
pub const FOR: (&str, &str, &str) = ("lepton.ai", "v1alpha1", "LeptonDeployment");

/// The Synthesizer spec enoki installs for this built-in.
pub fn synthesizer_spec() -> Value {
    json!({
        "module": {"builtin": "lepton"},
        "for": {"group": FOR.0, "version": FOR.1, "kind": FOR.2},
        "watchOutputs": true,
    })
}

/// Upstream's finalizer, held on every LeptonDeployment.
pub const FINALIZER: &str = "lepton.ai/deletion";
/// Key of the Secret holding `envs[].value_from.secret_name_ref` values (upstream
/// `go-pkg/k8s/secret.SecretObjectName`).
pub const ENV_SECRET: &str = "lepton-deployment-secret";
/// Prefix of the image pull Secrets named by `pull_image_secrets` (upstream
/// `secret.ImagePullSecretPrefix`).
pub const IMAGE_PULL_SECRET_PREFIX: &str = "lepton-image-pull-secret-";
/// `api_tokens[].value_from.token_name_ref` naming `spec.workspace_token`.
pub const WORKSPACE_TOKEN_REF: &str = "WORKSPACE_TOKEN";

/// Upstream's resource shapes (`api/v1alpha1` `SupportedShapesAWS`): name → (cores, MiB of
/// memory, GiB of ephemeral storage, accelerator type, accelerator count).
const SHAPES: &[(&str, f64, i64, i64, &str, f64)] = &[
    ("gp1.hidden_test", 0.3, 128, 16, "", 0.0),
    ("gp1.small", 1.0, 4 * 1024, 16, "", 0.0),
    ("gp1.medium", 2.0, 8 * 1024, 32, "", 0.0),
    ("gp1.large", 4.0, 16 * 1024, 64, "", 0.0),
    ("ac1.t4", 4.0, 16 * 1024, 100, "Tesla-T4", 1.0),
    ("ac1.a10", 8.0, 32 * 1024, 400, "NVIDIA-A10G", 1.0),
];
/// Upstream's display names of shapes (`displayNameToShapeName`).
const SHAPE_DISPLAY_NAMES: &[(&str, &str)] = &[
    ("cpu.small", "gp1.small"),
    ("cpu.medium", "gp1.medium"),
    ("cpu.large", "gp1.large"),
    ("gpu.t4", "ac1.t4"),
    ("gpu.a10", "ac1.a10"),
];

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `status.state` from the previous state and the observed Deployment (`None`: missing).
pub fn next_state(previous: &str, deployment: Option<&Value>, deleting: bool) -> &'static str {
    if deleting {
        return "Deleting";
    }
    let Some(d) = deployment else {
        return "Starting";
    };
    let n = |p: &str| d.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let (replicas, ready) = (n("/status/replicas"), n("/status/readyReplicas"));
    if replicas > 0 && replicas == ready {
        "Running"
    } else if previous.is_empty() || previous == "Starting" {
        "Starting"
    } else if ready == 0 {
        "Not Ready"
    } else {
        "Updating"
    }
}

fn owner(me: &Value) -> Value {
    json!([{"apiVersion": format!("{}/{}", FOR.0, FOR.1), "kind": FOR.2,
        "name": s(me, "/metadata/name"), "uid": s(me, "/metadata/uid"),
        "controller": true, "blockOwnerDeletion": true}])
}

/// The deployment's domain, `<workspace>-<name>.<root>` (upstream `go-pkg/domain-name`), or
/// empty unless both the workspace and a root domain are set. The root is `root_domain`, or
/// `shared_alb_main_domain` when only that is set (upstream picks by the operator's LB type).
fn domain(spec: &Value, name: &str) -> String {
    let ws = s(spec, "/workspace_name");
    let root = match s(spec, "/root_domain") {
        "" => s(spec, "/shared_alb_main_domain"),
        r => r,
    };
    if ws.is_empty() || root.is_empty() {
        return String::new();
    }
    format!("{ws}-{name}.{root}")
}

/// What every part of one LeptonDeployment's output is named after.
struct Names<'a> {
    ns: String,
    meta_name: String,
    name: String,
    spec: Value,
    owners: Value,
    service_name: String,
    replica: Replica,
    input: &'a Input,
}

/// Reads and validates the instance.
fn names<'a>(input: &'a Input, me: &Value) -> Result<Names<'a>, Error> {
    let ns = s(me, "/metadata/namespace").to_string();
    let meta_name = s(me, "/metadata/name").to_string();
    let spec = me.get("spec").cloned().unwrap_or(Value::Null);
    let name = s(&spec, "/name").to_string();
    let invalid = |message: String| Error::InvalidInput {
        key: "self".into(),
        message: format!("LeptonDeployment {ns}/{meta_name}: {message}"),
    };
    if name != meta_name {
        return Err(invalid(format!(
            "spec.name {name:?} must equal metadata.name {meta_name:?}"
        )));
    }
    if s(&spec, "/photon_image").is_empty() {
        return Err(invalid("spec.photon_image is required".into()));
    }
    let has_mounts = spec
        .get("mounts")
        .and_then(Value::as_array)
        .is_some_and(|m| !m.is_empty());
    if has_mounts && s(&spec, "/efs_id").is_empty() {
        return Err(invalid(
            "spec.efs_id is required when spec.mounts is set".into(),
        ));
    }
    if has_mounts && input.env(PERSISTENT_VOLUMES_ENV).as_deref() != Some("true") {
        return Err(invalid(format!(
            "spec.mounts needs PersistentVolumes, which the platform has not enabled for the \
             lepton built-in (enoki run --lepton-persistent-volumes; {PERSISTENT_VOLUMES_ENV})"
        )));
    }
    let rr = spec
        .get("resource_requirement")
        .cloned()
        .unwrap_or(Value::Null);
    let replica = replica(&rr, &invalid)?;
    Ok(Names {
        owners: owner(me),
        service_name: format!("{name}-service"),
        ns,
        meta_name,
        name,
        spec,
        replica,
        input,
    })
}

/// The API tokens (upstream `GetTokens`): each `value`, or `spec.workspace_token` for
/// `value_from.token_name_ref: WORKSPACE_TOKEN`; duplicates dropped, order kept.
fn tokens(spec: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in spec
        .get("api_tokens")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let v = match s(t, "/value") {
            "" if s(t, "/value_from/token_name_ref") == WORKSPACE_TOKEN_REF => {
                s(spec, "/workspace_token")
            }
            v => v,
        };
        if !v.is_empty() && !out.iter().any(|x| x == v) {
            out.push(v.to_string());
        }
    }
    out
}

/// Upstream's ALB annotations (`go-pkg/k8s/ingress` `NewAnnotation`, `SetGroup`,
/// `SetConditions`; idle timeout 300 s from the operator's `albTimeoutSec`): `domain` and the
/// certificate turn on HTTPS; `conditions` are (header, values) pairs routed to the Service.
fn alb_annotations(n: &Names<'_>, domain: &str, conditions: &[(&str, Vec<String>)]) -> Value {
    let arn = s(&n.spec, "/certificate_arn");
    let mut a = json!({
        "alb.ingress.kubernetes.io/scheme": "internet-facing",
        "alb.ingress.kubernetes.io/target-type": "ip",
        "alb.ingress.kubernetes.io/healthcheck-path": "/healthz",
        "alb.ingress.kubernetes.io/load-balancer-attributes": "idle_timeout.timeout_seconds=300",
        "alb.ingress.kubernetes.io/group.name": format!("lepton-{}-control-plane", n.ns),
        "alb.ingress.kubernetes.io/group.order": "100",
    });
    if !domain.is_empty() && !arn.is_empty() {
        a["alb.ingress.kubernetes.io/listen-ports"] = json!(r#"[{"HTTPS":443}]"#);
    }
    if !conditions.is_empty() {
        let c: Vec<Value> = conditions
            .iter()
            .map(|(h, v)| {
                json!({"field": "http-header",
                "httpHeaderConfig": {"httpHeaderName": h, "values": v}})
            })
            .collect();
        a[format!("alb.ingress.kubernetes.io/conditions.{}", n.service_name)] =
            json!(Value::Array(c).to_string());
    }
    a
}

fn ingress(n: &Names<'_>, name: &str, host: &str, annotations: &Value) -> Resource {
    let backend = json!({"service": {"name": n.service_name, "port": {"number": 8080}}});
    let mut rule =
        json!({"http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}});
    if !host.is_empty() {
        rule["host"] = json!(host);
    }
    Resource::from_value(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": n.ns, "ownerReferences": n.owners,
                     "annotations": annotations},
        "spec": {"ingressClassName": "alb", "rules": [rule]},
    }))
    .readiness_group(2)
}

/// The header Ingress (routes on the `Deployment` header, and on `Authorization: Bearer
/// <token>` when the deployment has tokens) and, when `root_domain` is set, the host Ingress
/// (routes the deployment's domain, with the token condition, external-dns hostname and
/// certificate) — upstream `controller/ingress.go`.
fn ingresses(n: &Names<'_>, out: &mut Output) {
    let bearer: Vec<String> = tokens(&n.spec)
        .iter()
        .map(|t| format!("Bearer {t}"))
        .collect();
    let mut header_conditions = vec![("Deployment", vec![n.name.clone()])];
    if !bearer.is_empty() {
        header_conditions.push(("Authorization", bearer.clone()));
    }
    let root = s(&n.spec, "/root_domain");
    let header = alb_annotations(n, root, &header_conditions);
    out.push(ingress(
        n,
        &format!("{}-header-ingress", n.name),
        "",
        &header,
    ));
    if root.is_empty() {
        return;
    }
    let domain = domain(&n.spec, &n.name);
    let token_conditions = if bearer.is_empty() {
        vec![]
    } else {
        vec![("Authorization", bearer)]
    };
    let mut host = alb_annotations(n, &domain, &token_conditions);
    if !domain.is_empty() {
        let arn = s(&n.spec, "/certificate_arn");
        if !arn.is_empty() {
            host["alb.ingress.kubernetes.io/certificate-arn"] = json!(arn);
        }
        host["external-dns.alpha.kubernetes.io/hostname"] = json!(domain);
    }
    out.push(ingress(
        n,
        &format!("{}-host-ingress", n.name),
        &domain,
        &host,
    ));
}

/// The status write-back: the state machine and the endpoints.
fn status(n: &Names<'_>, me: &Value) -> Value {
    let deleting = me
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    let state = next_state(
        s(me, "/status/state"),
        n.input.observed_named("Deployment", &n.name),
        deleting,
    );
    let domain = domain(&n.spec, &n.name);
    let external = if deleting || domain.is_empty() {
        String::new()
    } else {
        format!("https://{domain}")
    };
    json!({
        "apiVersion": format!("{}/{}", FOR.0, FOR.1), "kind": FOR.2,
        "metadata": {"name": n.meta_name, "namespace": n.ns},
        "status": {"state": state, "endpoint": {
            "internal_endpoint": format!("{}.{}.svc.cluster.local:8080", n.service_name, n.ns),
            "external_endpoint": external}},
    })
}

/// Builds everything for one LeptonDeployment.
///
/// # Errors
/// `spec.name` differs from `metadata.name`, mounts without `efs_id` (or without
/// PersistentVolumes enabled), a missing image, an unknown resource shape, a fractional
/// accelerator count.
pub fn synthesize(input: &Input) -> Result<Output, Error> {
    let me = input.input("self")?;
    let n = names(input, me)?;
    let mut out = Output::default();
    let (volumes, mounts_main) = mounts(&n, &mut out);
    out.push(
        Resource::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": n.service_name, "namespace": n.ns, "ownerReferences": n.owners},
            "spec": {"selector": {"lepton_deployment_name": n.name},
                     "ports": [{"port": 8080, "protocol": "TCP"}]},
        }))
        .readiness_group(1),
    );
    out.push(deployment(&n, &volumes, &mounts_main));
    ingresses(&n, &mut out);
    out.push(status(&n, me));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_machine_matches_upstream_with_the_sticky_starting() {
        let d = |r: i64, ready: i64| json!({"status": {"replicas": r, "readyReplicas": ready}});
        assert_eq!(next_state("", None, false), "Starting");
        assert_eq!(next_state("", Some(&d(2, 1)), false), "Starting");
        assert_eq!(next_state("Starting", Some(&d(0, 0)), false), "Starting");
        assert_eq!(next_state("Starting", Some(&d(2, 2)), false), "Running");
        assert_eq!(next_state("Running", Some(&d(2, 1)), false), "Updating");
        assert_eq!(next_state("Running", Some(&d(2, 0)), false), "Not Ready");
        assert_eq!(next_state("Updating", Some(&d(0, 0)), false), "Not Ready");
        assert_eq!(next_state("Not Ready", Some(&d(1, 1)), false), "Running");
        assert_eq!(next_state("Running", Some(&d(1, 1)), true), "Deleting");
    }

    #[test]
    fn shapes_are_upstreams_and_unknown_shapes_or_fractional_gpus_are_refused() {
        let invalid = |m: String| Error::Other(m);
        let r = replica(&json!({"resource_shape": "cpu.small"}), &invalid).unwrap();
        assert_eq!(
            (r.cpu, r.memory_mib, r.storage_gib, r.shape.as_str()),
            (1.0, 4096, 16, "cpu.small")
        );
        let r = replica(&json!({"resource_shape": "ac1.a10"}), &invalid).unwrap();
        assert_eq!(
            (r.accelerator_type.as_str(), r.accelerator_num),
            ("NVIDIA-A10G", 1)
        );
        let e = replica(&json!({"resource_shape": "gp9.huge"}), &invalid).unwrap_err();
        assert!(e.to_string().contains("resource_shape \"gp9.huge\""), "{e}");
        let e = replica(
            &json!({"accelerator_num": 0.5, "accelerator_type": "T4"}),
            &invalid,
        )
        .unwrap_err();
        assert!(e.to_string().contains("accelerator_num 0.5"), "{e}");
        let r = replica(&json!({"cpu": 2.5, "memory": 1000}), &invalid).unwrap();
        assert_eq!(r.threads(), "3");
        assert_eq!(
            r.resources(),
            json!({"requests": {"cpu": "2250m", "memory": "900Mi"}, "limits": {"cpu": "2500m", "memory": "1000Mi"}})
        );
    }
}
