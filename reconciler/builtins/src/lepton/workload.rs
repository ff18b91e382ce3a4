//! The Deployment: replicas and resource shapes, mounts (PVCs, and PVs when enabled),
//! environment, the init and main containers.

use super::*;

/// The replica's resources after `resource_shape` (upstream `ShapeToReplicaResourceRequirement`).
#[derive(Debug)]
pub(super) struct Replica {
    pub(crate) cpu: f64,
    pub(crate) memory_mib: i64,
    pub(crate) storage_gib: i64,
    pub(crate) accelerator_type: String,
    pub(crate) accelerator_num: i64,
    pub(crate) shape: String,
}

pub(super) fn replica(rr: &Value, invalid: &dyn Fn(String) -> Error) -> Result<Replica, Error> {
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
    pub(super) fn gpu(&self) -> bool {
        !self.accelerator_type.is_empty() && self.accelerator_num > 0
    }

    /// Requests at 90 % of the limits, truncated as upstream's `LeptonResourceToKubeResource`
    /// (`go-pkg/deploymentutil`) does; a GPU count and ephemeral storage in both.
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)] // as upstream
    pub(super) fn resources(&self) -> Value {
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
    pub(super) fn threads(&self) -> String {
        let millis = (self.cpu * 1000.0) as i64;
        ((millis as f64 / 1000.0).ceil() as i64).to_string()
    }
}

/// Upstream's pod volume name of mount `i` (`getPVName` in `controller/util.go`).
pub(super) fn mount_volume(ns: &str, name: &str, i: usize) -> String {
    format!("pv-{ns}-{name}-{i}")
}

/// A PV and a PVC per mount; returns the pod's PVC volumes and the main container's mounts.
pub(super) fn mounts(n: &Names<'_>, out: &mut Output) -> (Vec<Value>, Vec<Value>) {
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
pub(super) fn env_vars(n: &Names<'_>) -> Vec<Value> {
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
pub(super) fn join_path(parts: &[&str]) -> String {
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
pub(super) fn init_container(n: &Names<'_>) -> Value {
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
pub(super) fn main_container(n: &Names<'_>, mounts_main: &[Value]) -> Value {
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
pub(super) fn deployment(n: &Names<'_>, volumes: &[Value], mounts_main: &[Value]) -> Resource {
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
