//! `lepton`: LeptonDeployment → Deployment, Service, Ingresses, and a PVC + PV per mount
//! (seeds/003; leptonai/lepton's deployment-operator).
//!
//! Names, labels, ports, probes and volume wiring follow upstream (notes/builtins.md §3.4).
//! Readiness groups: PV (0) → PVC and Service (1) → Deployment and Ingresses (2). PVs and PVCs
//! are create-only (`disable-updates`), as upstream never updates them. Everything else is
//! re-applied at once when edited by hand (drift: watch).
//!
//! Status (`state`, `endpoint`) is written back from the observed Deployment by the upstream
//! state machine: Deployment missing → `Starting`; all replicas ready → `Running`; a fresh
//! deployment stays `Starting` until it first gets there (the sticky Starting); afterwards
//! `Updating` (some ready) or `Not Ready` (none). Upstream's later "0 replicas, 0 ready → Not
//! Ready" rule applies only after the first `Running`, so a new deployment does not flash
//! `Not Ready` before its controller reports.
//!
//! Deliberate improvements: PVs are composition-managed, so a PV goes with its mount or with
//! the LeptonDeployment (upstream leaks the PVs of mounts removed earlier and needs the
//! `lepton.ai/deletion` finalizer); `internal_endpoint` names the Service (upstream names the
//! Deployment, which no DNS name resolves); `spec.name` must equal `metadata.name` (upstream
//! loops when they differ).
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

/// The host of the host-based Ingress (and the external endpoint), when `root_domain` is set.
fn host(spec: &Value, name: &str) -> Option<String> {
    let root = s(spec, "/root_domain");
    if root.is_empty() {
        return None;
    }
    let ws = s(spec, "/workspace_name");
    Some(if ws.is_empty() {
        format!("{name}.{root}")
    } else {
        format!("{ws}-{name}.{root}")
    })
}

fn cpu(cores: f64) -> String {
    #[allow(clippy::cast_possible_truncation)] // cores are small
    let millis = (cores * 1000.0).round() as i64;
    Quantity::from_millis(millis).to_string()
}

/// What every part of one LeptonDeployment's output is named after.
struct Names<'a> {
    ns: String,
    meta_name: String,
    name: String,
    spec: Value,
    owners: Value,
    service_name: String,
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
    Ok(Names {
        owners: owner(me),
        service_name: format!("{name}-service"),
        ns,
        meta_name,
        name,
        spec,
        input,
    })
}

/// A PV and a PVC per mount; returns the pod's volumes and the main container's mounts.
fn mounts(n: &Names<'_>, out: &mut Output) -> (Vec<Value>, Vec<Value>) {
    let (ns, name, spec, owners) = (&n.ns, &n.name, &n.spec, &n.owners);
    let mut volumes = vec![
        json!({"name": "photon", "emptyDir": {}}),
        json!({"name": "aws", "emptyDir": {}}),
    ];
    let mut mounts_main = vec![json!({"name": "photon", "mountPath": "/photon"})];
    let mounts = spec
        .get("mounts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, m) in mounts.iter().enumerate() {
        let pv = format!("pv-{ns}.{name}-{i}");
        let pvc = format!("pvc-{ns}-{name}-{i}");
        out.push(
            Resource::from_value(json!({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": pv, "labels": {"lepton_deployment_name": name}},
                "spec": {
                    "capacity": {"storage": "5Gi"}, "volumeMode": "Filesystem",
                    "accessModes": ["ReadWriteMany"], "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "efs-sc", "mountOptions": ["tls"],
                    "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                 "namespace": ns, "name": pvc},
                    "csi": {"driver": "efs.csi.aws.com", "volumeHandle": format!("{}:{}:{}",
                        s(spec, "/efs_id"), s(m, "/path"), s(spec, "/efs_access_point_id"))},
                },
            }))
            .readiness_group(0)
            .disable_updates(),
        );
        out.push(
            Resource::from_value(json!({
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": pvc, "namespace": ns, "ownerReferences": owners,
                             "labels": {"lepton_deployment_name": name}},
                "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "efs-sc",
                         "volumeName": pv, "resources": {"requests": {"storage": "5Gi"}}},
            }))
            .readiness_group(1)
            .disable_updates(),
        );
        volumes.push(
            json!({"name": format!("mount-{i}"), "persistentVolumeClaim": {"claimName": pvc}}),
        );
        mounts_main.push(json!({"name": format!("mount-{i}"), "mountPath": s(m, "/mount_path")}));
    }
    (volumes, mounts_main)
}

/// The container resources from `resource_requirement`, and the GPU count.
fn container_resources(rr: &Value) -> (serde_json::Map<String, Value>, f64) {
    let mut resources = serde_json::Map::new();
    if let Some(c) = rr.get("cpu").and_then(Value::as_f64) {
        resources.insert("cpu".into(), json!(cpu(c)));
    }
    if let Some(m) = rr.get("memory").and_then(Value::as_i64) {
        resources.insert(
            "memory".into(),
            json!(Quantity::from_binary(m, 2).to_string()),
        );
    }
    if let Some(g) = rr
        .get("ephemeral_storage_in_gb")
        .and_then(Value::as_i64)
        .filter(|g| *g > 0)
    {
        resources.insert(
            "ephemeral-storage".into(),
            json!(Quantity::from_binary(g, 3).to_string()),
        );
    }
    let gpus = rr
        .get("accelerator_num")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    if gpus > 0.0 {
        resources.insert("nvidia.com/gpu".into(), json!(cpu(gpus)));
    }
    (resources, gpus)
}

/// `spec.envs`: plain values, or a Secret key (`value_from.secret_name_ref`).
fn env_vars(spec: &Value) -> Vec<Value> {
    spec.get("envs")
        .and_then(Value::as_array)
        .map(|e| {
            e.iter()
                .map(|v| {
                    match v
                        .pointer("/value_from/secret_name_ref")
                        .and_then(Value::as_str)
                    {
                        Some(secret) => json!({"name": s(v, "/name"),
                        "valueFrom": {"secretKeyRef": {"name": secret, "key": secret}}}),
                        None => json!({"name": s(v, "/name"), "value": s(v, "/value")}),
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The Deployment running the photon.
fn deployment(n: &Names<'_>, volumes: &[Value], mounts_main: &[Value]) -> Resource {
    let (ns, name, spec) = (&n.ns, &n.name, &n.spec);
    let (photon_name, photon_id) = (s(spec, "/photon_name"), s(spec, "/photon_id"));
    let rr = spec
        .get("resource_requirement")
        .cloned()
        .unwrap_or(Value::Null);
    let (resources, gpus) = container_resources(&rr);
    let accelerator = s(&rr, "/accelerator_type");
    let photon_file = format!("{photon_name}-{photon_id}");
    let probe = json!({"tcpSocket": {"port": 8080}, "initialDelaySeconds": 5, "periodSeconds": 5});
    let mut pod_spec = json!({
        "enableServiceLinks": false,
        "automountServiceAccountToken": false,
        "initContainers": [{
            "name": "env-preparation", "image": "amazon/aws-cli",
            "command": ["aws", "s3", "cp",
                format!("s3://{}/{}/{photon_file}", s(spec, "/bucket_name"), s(spec, "/photon_prefix")),
                format!("/photon/{photon_file}")],
            "envFrom": [{"secretRef": {"name": "s3-ro-key"}}],
            "volumeMounts": [{"name": "photon", "mountPath": "/photon"}, {"name": "aws", "mountPath": "/root/.aws"}],
        }],
        "containers": [{
            "name": "main-container", "image": s(spec, "/photon_image"),
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
            "env": env_vars(spec),
            "resources": {"requests": resources, "limits": resources},
            "readinessProbe": probe, "livenessProbe": probe,
            "volumeMounts": mounts_main,
        }],
        "volumes": volumes,
    });
    if gpus > 0.0 && !accelerator.is_empty() {
        pod_spec["nodeSelector"] = json!({"nvidia.com/gpu.product": accelerator});
    }
    let replicas = rr.get("min_replicas").and_then(Value::as_i64).unwrap_or(1);
    Resource::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "ownerReferences": n.owners,
            "labels": {"photon_name": photon_name, "photon_id": photon_id, "lepton_deployment_name": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"lepton_deployment_name": name}},
            "template": {
                "metadata": {"labels": {"photon_id": photon_id, "lepton_deployment_name": name}},
                "spec": pod_spec,
            },
        },
    }))
    .readiness_group(2)
}

/// The header Ingress (ALB conditions on the deployment header and the API tokens) and, when
/// a host is configured, the host Ingress; returns the host.
fn ingresses(n: &Names<'_>, out: &mut Output) -> Option<String> {
    let (ns, name, spec, owners, service_name) =
        (&n.ns, &n.name, &n.spec, &n.owners, &n.service_name);
    let backend = json!({"service": {"name": service_name, "port": {"number": 8080}}});
    let mut conditions = vec![json!({"field": "http-header",
        "httpHeaderConfig": {"httpHeaderName": "X-Lepton-Deployment", "values": [name]}})];
    let tokens: Vec<&str> = spec
        .get("api_tokens")
        .and_then(Value::as_array)
        .map(|t| {
            t.iter()
                .filter_map(|v| v.get("value").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if !tokens.is_empty() {
        let values: Vec<String> = tokens.iter().map(|t| format!("Bearer {t}")).collect();
        conditions.push(json!({"field": "http-header",
            "httpHeaderConfig": {"httpHeaderName": "Authorization", "values": values}}));
    }
    let mut alb = json!({
        "alb.ingress.kubernetes.io/group.name": format!("lepton-{ns}-control-plane"),
        "alb.ingress.kubernetes.io/group.order": "100",
        "alb.ingress.kubernetes.io/load-balancer-attributes": "idle_timeout.timeout_seconds=300",
        "alb.ingress.kubernetes.io/scheme": "internet-facing",
        "alb.ingress.kubernetes.io/target-type": "ip",
        format!("alb.ingress.kubernetes.io/conditions.{service_name}"): Value::String(Value::Array(conditions).to_string()),
    });
    let arn = s(spec, "/certificate_arn");
    if !arn.is_empty() {
        alb["alb.ingress.kubernetes.io/certificate-arn"] = json!(arn);
    }
    out.push(
        Resource::from_value(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": format!("{name}-header-ingress"), "namespace": ns,
                         "ownerReferences": owners, "annotations": alb,
                         "labels": {"lepton_deployment_name": name}},
            "spec": {"ingressClassName": "alb", "rules": [{"http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": backend}]}}]},
        }))
        .readiness_group(2),
    );
    let host = host(spec, name);
    if let Some(h) = &host {
        out.push(
            Resource::from_value(json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": format!("{name}-host-ingress"), "namespace": ns,
                             "ownerReferences": owners,
                             "labels": {"lepton_deployment_name": name}},
                "spec": {"ingressClassName": "alb", "rules": [{"host": h, "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": backend}]}}]},
            }))
            .readiness_group(2),
        );
    }
    host
}

/// The status write-back: the state machine and the endpoints.
fn status(n: &Names<'_>, me: &Value, host: Option<&str>) -> Value {
    let deleting = me
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    let state = next_state(
        s(me, "/status/state"),
        n.input.observed_named("Deployment", &n.name),
        deleting,
    );
    let external = match (host, deleting) {
        (Some(h), false) => format!("https://{h}"),
        _ => String::new(),
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
/// `spec.name` differs from `metadata.name`, mounts without `efs_id`, a missing image.
pub fn synthesize(input: &Input) -> Result<Output, Error> {
    let me = input.input("self")?;
    let n = names(input, me)?;
    let mut out = Output::default();
    let (volumes, mounts_main) = mounts(&n, &mut out);
    out.push(
        Resource::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": n.service_name, "namespace": n.ns, "ownerReferences": n.owners,
                         "labels": {"lepton_deployment_name": n.name}},
            "spec": {"selector": {"lepton_deployment_name": n.name},
                     "ports": [{"name": "http", "port": 8080, "targetPort": 8080, "protocol": "TCP"}]},
        }))
        .readiness_group(1),
    );
    out.push(deployment(&n, &volumes, &mounts_main));
    let host = ingresses(&n, &mut out);
    out.push(status(&n, me, host.as_deref()));
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
        assert_eq!(cpu(0.5), "500m");
        assert_eq!(cpu(2.0), "2");
    }
}
