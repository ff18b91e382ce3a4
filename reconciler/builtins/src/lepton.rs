//! `lepton`: LeptonDeployment → Deployment, Service, Ingresses, and a PVC + PV per mount
//! (seeds/003; leptonai/lepton's deployment-operator).
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

/// The replica's resources after `resource_shape` (upstream `ShapeToReplicaResourceRequirement`).
#[derive(Debug)]
struct Replica {
    cpu: f64,
    memory_mib: i64,
    storage_gib: i64,
    accelerator_type: String,
    accelerator_num: i64,
    shape: String,
}

fn replica(rr: &Value, invalid: &dyn Fn(String) -> Error) -> Result<Replica, Error> {
    let shape = s(rr, "/resource_shape");
    if !shape.is_empty() {
        let canonical = SHAPE_DISPLAY_NAMES
            .iter()
            .find(|(d, _)| *d == shape)
            .map_or(shape, |(_, c)| *c);
        let Some(&(_, cpu, mem, storage, acc, num)) = SHAPES.iter().find(|(n, ..)| *n == canonical)
        else {
            let known: Vec<&str> = SHAPES.iter().map(|s| s.0).collect();
            return Err(invalid(format!(
                "spec.resource_requirement.resource_shape {shape:?} is not a shape upstream \
                 supports ({})",
                known.join(", ")
            )));
        };
        #[allow(clippy::cast_possible_truncation)] // the table's counts are 0 or 1
        return Ok(Replica {
            cpu,
            memory_mib: mem,
            storage_gib: storage,
            accelerator_type: acc.into(),
            accelerator_num: num as i64,
            shape: shape.into(),
        });
    }
    let num = rr
        .get("accelerator_num")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    if num < 0.0 || num.fract() != 0.0 {
        return Err(invalid(format!(
            "spec.resource_requirement.accelerator_num {num} must be a whole number of \
             accelerators (upstream truncates it; a fraction of a GPU cannot be requested)"
        )));
    }
    #[allow(clippy::cast_possible_truncation)] // whole and non-negative, checked above
    Ok(Replica {
        cpu: rr.get("cpu").and_then(Value::as_f64).unwrap_or(0.0),
        memory_mib: rr.get("memory").and_then(Value::as_i64).unwrap_or(0),
        storage_gib: rr
            .get("ephemeral_storage_in_gb")
            .and_then(Value::as_i64)
            .unwrap_or(0),
        accelerator_type: s(rr, "/accelerator_type").into(),
        accelerator_num: num as i64,
        shape: "customized".into(),
    })
}

impl Replica {
    fn gpu(&self) -> bool {
        !self.accelerator_type.is_empty() && self.accelerator_num > 0
    }

    /// Requests at 90 % of the limits, truncated as upstream's `LeptonResourceToKubeResource`
    /// (`go-pkg/deploymentutil`) does; a GPU count and ephemeral storage in both.
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)] // as upstream
    fn resources(&self) -> Value {
        let factor = 0.9;
        let mut requests = json!({
            "cpu": Quantity::from_millis((self.cpu * factor * 1000.0) as i64).to_string(),
            "memory": Quantity::from_binary((self.memory_mib as f64 * factor) as i64, 2).to_string(),
        });
        let mut limits = json!({
            "cpu": Quantity::from_millis((self.cpu * 1000.0) as i64).to_string(),
            "memory": Quantity::from_binary(self.memory_mib, 2).to_string(),
        });
        if self.storage_gib != 0 {
            let q = Quantity::from_binary(self.storage_gib, 3).to_string();
            requests["ephemeral-storage"] = json!(q);
            limits["ephemeral-storage"] = json!(q);
        }
        if self.gpu() {
            requests["nvidia.com/gpu"] = json!(self.accelerator_num.to_string());
            limits["nvidia.com/gpu"] = json!(self.accelerator_num.to_string());
        }
        json!({"requests": requests, "limits": limits})
    }

    /// `OMP_NUM_THREADS`/`MKL_NUM_THREADS`: the CPU limit rounded up.
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)] // as upstream
    fn threads(&self) -> String {
        let millis = (self.cpu * 1000.0) as i64;
        ((millis as f64 / 1000.0).ceil() as i64).to_string()
    }
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

/// Upstream's pod volume name of mount `i` (`getPVName` in `controller/util.go`).
fn mount_volume(ns: &str, name: &str, i: usize) -> String {
    format!("pv-{ns}-{name}-{i}")
}

/// A PV and a PVC per mount; returns the pod's PVC volumes and the main container's mounts.
fn mounts(n: &Names<'_>, out: &mut Output) -> (Vec<Value>, Vec<Value>) {
    let (ns, name, spec, owners) = (&n.ns, &n.name, &n.spec, &n.owners);
    let mut volumes = Vec::new();
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
                "metadata": {"name": pv},
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
                "metadata": {"name": pvc, "namespace": ns, "ownerReferences": owners},
                "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "efs-sc",
                         "volumeName": pv, "resources": {"requests": {"storage": "5Gi"}}},
            }))
            .readiness_group(1)
            .disable_updates(),
        );
        let volume = mount_volume(ns, name, i);
        volumes.push(json!({"name": volume, "persistentVolumeClaim": {"claimName": pvc}}));
        mounts_main.push(json!({"name": volume, "mountPath": s(m, "/mount_path")}));
    }
    (volumes, mounts_main)
}

/// The main container's environment (upstream `createDeploymentPodSpec`): `spec.envs` (plain
/// values, or a key of the `lepton-deployment-secret` Secret; entries with neither are
/// skipped, as `util.ToContainerEnv` does), the `LEPTON_*` runtime variables, then
/// `OMP_NUM_THREADS`/`MKL_NUM_THREADS` unless the user set them.
fn env_vars(n: &Names<'_>) -> Vec<Value> {
    let spec = &n.spec;
    let mut env: Vec<Value> = spec
        .get("envs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| {
            let secret = s(v, "/value_from/secret_name_ref");
            match (secret, s(v, "/value")) {
                ("", "") => None,
                ("", value) => Some(json!({"name": s(v, "/name"), "value": value})),
                (key, _) => Some(json!({"name": s(v, "/name"),
                    "valueFrom": {"secretKeyRef": {"name": ENV_SECRET, "key": key}}})),
            }
        })
        .collect();
    let accelerator = if n.replica.gpu() {
        n.replica.accelerator_type.as_str()
    } else {
        ""
    };
    for (k, v) in [
        ("LEPTON_WORKSPACE_NAME", s(spec, "/workspace_name")),
        ("LEPTON_PHOTON_NAME", s(spec, "/photon_name")),
        ("LEPTON_PHOTON_ID", s(spec, "/photon_id")),
        ("LEPTON_DEPLOYMENT_NAME", n.name.as_str()),
        ("LEPTON_RESOURCE_ACCELERATOR_TYPE", accelerator),
    ] {
        env.push(json!({"name": k, "value": v}));
    }
    let threads = n.replica.threads();
    for k in ["OMP_NUM_THREADS", "MKL_NUM_THREADS"] {
        if !env.iter().any(|e| e["name"] == k) {
            env.push(json!({"name": k, "value": threads}));
        }
    }
    env
}

/// `path.Join` of the non-empty parts.
fn join_path(parts: &[&str]) -> String {
    parts
        .iter()
        .flat_map(|p| p.split('/'))
        .filter(|p| !p.is_empty() && *p != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// The `env-preparation` init container: copies the photon from S3 (upstream
/// `newInitContainer`), with the read-only S3 keys of `s3_read_only_access_k8s_secret_name`
/// (default `s3-ro-key`).
fn init_container(n: &Names<'_>) -> Value {
    let spec = &n.spec;
    let photon_id = s(spec, "/photon_id");
    let secret = match s(spec, "/s3_read_only_access_k8s_secret_name") {
        "" => "s3-ro-key",
        x => x,
    };
    let key =
        |k: &str| json!({"name": k, "valueFrom": {"secretKeyRef": {"name": secret, "key": k}}});
    json!({
        "name": "env-preparation", "image": "amazon/aws-cli",
        "env": [{"name": "HOME", "value": "/"}, key("AWS_ACCESS_KEY_ID"), key("AWS_SECRET_ACCESS_KEY")],
        "resources": n.replica.resources(),
        "command": ["aws", "s3", "cp",
            format!("s3://{}", join_path(&[s(spec, "/bucket_name"), s(spec, "/photon_prefix"), photon_id])),
            format!("/photon/{photon_id}")],
        "volumeMounts": [{"name": "photon", "mountPath": "/photon"}, {"name": "aws", "mountPath": "/.aws"}],
    })
}

/// The `main-container` running the photon (upstream `createDeploymentPodSpec`).
fn main_container(n: &Names<'_>, mounts_main: &[Value]) -> Value {
    let path = format!("/photon/{}", s(&n.spec, "/photon_id"));
    let probe = |delay: i64| {
        json!({"tcpSocket": {"port": 8080}, "initialDelaySeconds": delay,
        "periodSeconds": 5, "failureThreshold": 12, "successThreshold": 1})
    };
    json!({
        "name": "main-container", "image": s(&n.spec, "/photon_image"),
        "imagePullPolicy": "Always",
        "command": ["sh"],
        "args": ["-c", format!("lep photon prepare -f {path}; lep photon run -f {path}")],
        "resources": n.replica.resources(),
        "env": env_vars(n),
        "ports": [{"name": "http", "containerPort": 8080}],
        "volumeMounts": mounts_main,
        "readinessProbe": probe(5),
        "livenessProbe": probe(600),
    })
}

/// The Deployment running the photon.
fn deployment(n: &Names<'_>, volumes: &[Value], mounts_main: &[Value]) -> Resource {
    let (ns, name, spec) = (&n.ns, &n.name, &n.spec);
    let (photon_name, photon_id) = (s(spec, "/photon_name"), s(spec, "/photon_id"));
    let mut all_volumes = volumes.to_vec();
    all_volumes.push(json!({"name": "photon", "emptyDir": {}}));
    all_volumes.push(json!({"name": "aws", "emptyDir": {}}));
    let mut pod_spec = json!({
        "enableServiceLinks": false,
        "automountServiceAccountToken": false,
        "initContainers": [init_container(n)],
        "containers": [main_container(n, mounts_main)],
        "volumes": all_volumes,
    });
    if n.replica.gpu() {
        pod_spec["nodeSelector"] = json!({"nvidia.com/gpu.product": n.replica.accelerator_type});
    }
    let sa = s(spec, "/service_account_name");
    if !sa.is_empty() {
        pod_spec["serviceAccountName"] = json!(sa);
    }
    let pull: Vec<Value> = spec
        .get("pull_image_secrets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|p| json!({"name": format!("{IMAGE_PULL_SECRET_PREFIX}{p}")}))
        .collect();
    if !pull.is_empty() {
        pod_spec["imagePullSecrets"] = json!(pull);
    }
    let rr = spec
        .get("resource_requirement")
        .cloned()
        .unwrap_or(Value::Null);
    let replicas = rr.get("min_replicas").and_then(Value::as_i64).unwrap_or(1);
    Resource::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "ownerReferences": n.owners,
            "labels": {"photon_name": photon_name, "photon_id": photon_id, "lepton_deployment_name": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"lepton_deployment_name": name}},
            "template": {
                "metadata": {"labels": {"photon_id": photon_id, "lepton_deployment_name": name,
                    "lepton_deployment_shape": n.replica.shape}},
                "spec": pod_spec,
            },
        },
    }))
    .readiness_group(2)
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
