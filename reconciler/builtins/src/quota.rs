//! `quota`: ClusterResourceQuota usage aggregation (seeds/001; powerhome/pac-quota-controller).
//!
//! For each `quota.powerapp.cloud/v1alpha1` ClusterResourceQuota (instance mode, bound as
//! `self`) it computes, for every key of `spec.hard`, the usage summed over the selected
//! namespaces, and writes it back as the quota's `status` (`total.hard = spec.hard`,
//! `total.used`, `namespaces[]` sorted by name, zero explicit). No child objects.
//!
//! Inputs (collections, field-projected so changes that do not affect usage do not
//! re-synthesize): `namespaces` (those the quota's selector matches), `quotas` (every quota's
//! selector, for overlap), `pods`,
//! `services`, `pvcs`, and one collection per counted kind. Namespaces are selected by
//! `spec.namespaceSelector` (`null` selects none, `{}` all), minus those carrying the exclusion
//! label (env `EXCLUDE_NAMESPACE_LABEL_KEY`, default
//! `pac-quota-controller.powerapp.cloud/exclude`) and those named in `EXCLUDED_NAMESPACES`
//! (comma list; enoki sets `kube-system` plus its own namespace).
//!
//! Differences from upstream, on purpose: a namespace selected by two quotas is counted in
//! both and both get condition `NamespaceOverlap=True` naming the other quota (upstream drops
//! the events and stops updating both silently); `services.nodeports` counts NodePort Services
//! (upstream counts allocated ports); `scopes` / `scopeSelector` are not supported.

use std::collections::{BTreeMap, BTreeSet};

use enoki_sdk::{Error, Input, Output};
use serde_json::{Map, Value, json};

use crate::quantity::Quantity;
use crate::selector::{labels_of, matches};

/// The instance kind.
pub const FOR: (&str, &str, &str) = ("quota.powerapp.cloud", "v1alpha1", "ClusterResourceQuota");
/// Default label that excludes a namespace.
pub const EXCLUDE_LABEL: &str = "pac-quota-controller.powerapp.cloud/exclude";

/// Plain object counts: quota key → (input key, group, version, kind).
pub const COUNTED: &[(&str, &str, &str, &str, &str)] = &[
    ("configmaps", "configmaps", "", "v1", "ConfigMap"),
    ("secrets", "secrets", "", "v1", "Secret"),
    (
        "replicationcontrollers",
        "replicationcontrollers",
        "",
        "v1",
        "ReplicationController",
    ),
    (
        "deployments.apps",
        "deployments",
        "apps",
        "v1",
        "Deployment",
    ),
    (
        "statefulsets.apps",
        "statefulsets",
        "apps",
        "v1",
        "StatefulSet",
    ),
    ("daemonsets.apps", "daemonsets", "apps", "v1", "DaemonSet"),
    ("jobs.batch", "jobs", "batch", "v1", "Job"),
    ("cronjobs.batch", "cronjobs", "batch", "v1", "CronJob"),
    (
        "horizontalpodautoscalers.autoscaling",
        "horizontalpodautoscalers",
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
    ),
    (
        "ingresses.networking.k8s.io",
        "ingresses",
        "networking.k8s.io",
        "v1",
        "Ingress",
    ),
];

const POD_FIELDS: &[&str] = &[
    "spec.containers[*].name",
    "spec.containers[*].resources",
    "spec.initContainers[*].name",
    "spec.initContainers[*].resources",
    "spec.overhead",
    "status.phase",
    "status.containerStatuses[*].name",
    "status.containerStatuses[*].state.terminated",
    "status.initContainerStatuses[*].name",
    "status.initContainerStatuses[*].state.terminated",
];

/// The Synthesizer spec enoki installs for this built-in.
pub fn synthesizer_spec() -> Value {
    let selected = |key: &str, group: &str, version: &str, kind: &str, fields: &[&str]| {
        json!({"key": key, "collection": {"group": group, "version": version, "kind": kind,
            "namespaceSelectorFrom": "spec.namespaceSelector", "fields": fields}})
    };
    let mut refs = vec![
        json!({"key": "namespaces", "collection": {"group": "", "version": "v1", "kind": "Namespace",
            "labelSelectorFrom": "spec.namespaceSelector", "fields": ["metadata.name"]}}),
        json!({"key": "quotas", "collection": {"group": FOR.0, "version": FOR.1, "kind": FOR.2, "fields": ["spec.namespaceSelector"]}}),
        selected("pods", "", "v1", "Pod", POD_FIELDS),
        selected("services", "", "v1", "Service", &["spec.type"]),
        selected(
            "pvcs",
            "",
            "v1",
            "PersistentVolumeClaim",
            &["spec.storageClassName", "spec.resources.requests.storage"],
        ),
    ];
    for (_, key, group, version, kind) in COUNTED {
        refs.push(selected(key, group, version, kind, &["metadata.name"]));
    }
    json!({
        "module": {"builtin": "quota"},
        "for": {"group": FOR.0, "version": FOR.1, "kind": FOR.2},
        "refs": refs,
    })
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn quantity_at(v: Option<&Value>) -> Option<Quantity> {
    match v? {
        Value::String(s) => Quantity::parse(s).ok(),
        Value::Number(n) => Quantity::parse(&n.to_string()).ok(),
        _ => None,
    }
}

/// Names of the containers of `kind` (`containerStatuses` / `initContainerStatuses`) that
/// have terminated.
fn terminated(pod: &Value, statuses: &str) -> BTreeSet<String> {
    pod.pointer(&format!("/status/{statuses}"))
        .and_then(Value::as_array)
        .map(|s| {
            s.iter()
                .filter(|c| c.pointer("/state/terminated").is_some_and(|t| !t.is_null()))
                .filter_map(|c| str_at(c, "/name").map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn is_terminal(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), Some("Succeeded" | "Failed"))
}

/// One pod's usage of a compute key: overhead + max(sum of running app containers, max of
/// running init containers). `get` reads a container's value.
fn pod_usage(
    pod: &Value,
    overhead_keys: &[&str],
    get: &dyn Fn(&Value) -> Option<Quantity>,
) -> Quantity {
    let containers = |field: &str, statuses: &str| -> Vec<Quantity> {
        let done = terminated(pod, statuses);
        pod.pointer(&format!("/spec/{field}"))
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .filter(|c| str_at(c, "/name").is_none_or(|n| !done.contains(n)))
                    .filter_map(get)
                    .collect()
            })
            .unwrap_or_default()
    };
    let app: Quantity = containers("containers", "containerStatuses")
        .into_iter()
        .sum();
    let init = containers("initContainers", "initContainerStatuses")
        .into_iter()
        .fold(Quantity::ZERO, Quantity::max);
    let overhead = overhead_keys
        .iter()
        .find_map(|k| quantity_at(pod.pointer(&format!("/spec/overhead/{}", k.replace('/', "~1")))))
        .unwrap_or(Quantity::ZERO);
    overhead + app.max(init)
}

fn resource(c: &Value, section: &str, key: &str) -> Option<Quantity> {
    quantity_at(
        c.get("resources")
            .and_then(|r| r.get(section))
            .and_then(|r| r.get(key)),
    )
}

fn pvc_class(pvc: &Value) -> Option<&str> {
    str_at(pvc, "/spec/storageClassName").or_else(|| {
        pvc.pointer("/metadata/annotations")
            .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
            .and_then(Value::as_str)
    })
}

/// The usage of `key` in one namespace, or `None` for an unsupported key (reported as 0).
fn usage(key: &str, ns: &str, input: &Input) -> Option<Quantity> {
    let in_ns = |input_key: &'static str| {
        input
            .inputs(input_key)
            .filter(move |o| str_at(o, "/metadata/namespace") == Some(ns))
    };
    let pods = || in_ns("pods").filter(|p| !is_terminal(p));
    let compute = |section: &'static str, name: &str| -> Quantity {
        let overhead = [key, name];
        pods()
            .map(|p| pod_usage(p, &overhead, &|c| resource(c, section, name)))
            .sum()
    };
    if let Some(entry) = COUNTED.iter().find(|c| c.0 == key) {
        return Some(Quantity::count(in_ns(entry.1).count()));
    }
    Some(match key {
        "pods" => Quantity::count(pods().count()),
        "requests.cpu" | "requests.memory" | "requests.ephemeral-storage" => {
            compute("requests", &key["requests.".len()..])
        }
        "limits.cpu" | "limits.memory" | "limits.ephemeral-storage" => {
            compute("limits", &key["limits.".len()..])
        }
        k if k.starts_with("hugepages-") => pods()
            .map(|p| {
                pod_usage(p, &[k], &|c| {
                    resource(c, "requests", k).or_else(|| resource(c, "limits", k))
                })
            })
            .sum(),
        "services" => Quantity::count(in_ns("services").count()),
        "services.loadbalancers" => Quantity::count(
            in_ns("services")
                .filter(|s| str_at(s, "/spec/type") == Some("LoadBalancer"))
                .count(),
        ),
        "services.nodeports" => Quantity::count(
            in_ns("services")
                .filter(|s| str_at(s, "/spec/type") == Some("NodePort"))
                .count(),
        ),
        "persistentvolumeclaims" => Quantity::count(in_ns("pvcs").count()),
        "requests.storage" => in_ns("pvcs")
            .filter_map(|p| quantity_at(p.pointer("/spec/resources/requests/storage")))
            .sum(),
        k if k.ends_with(".storageclass.storage.k8s.io/requests.storage") => {
            let class = &k[..k.len() - ".storageclass.storage.k8s.io/requests.storage".len()];
            in_ns("pvcs")
                .filter(|p| pvc_class(p) == Some(class))
                .filter_map(|p| quantity_at(p.pointer("/spec/resources/requests/storage")))
                .sum()
        }
        k if k.ends_with(".storageclass.storage.k8s.io/persistentvolumeclaims") => {
            let class = &k[..k.len() - ".storageclass.storage.k8s.io/persistentvolumeclaims".len()];
            Quantity::count(
                in_ns("pvcs")
                    .filter(|p| pvc_class(p) == Some(class))
                    .count(),
            )
        }
        k if k.starts_with("requests.")
            && k.contains('/')
            && !k.starts_with("requests.storage") =>
        {
            let name = &k["requests.".len()..];
            pods()
                .map(|p| pod_usage(p, &[k, name], &|c| resource(c, "requests", name)))
                .sum()
        }
        _ => return None,
    })
}

/// The namespaces the quota selects (eligible: not excluded by name or label), sorted.
fn selected_namespaces(input: &Input, name: &str, selector: &Value) -> Result<Vec<String>, Error> {
    let exclude_label = input
        .env("EXCLUDE_NAMESPACE_LABEL_KEY")
        .unwrap_or_else(|| EXCLUDE_LABEL.to_string());
    let excluded: BTreeSet<String> = input
        .env("EXCLUDED_NAMESPACES")
        .unwrap_or_else(|| "kube-system".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let invalid = |e: String| Error::InvalidInput {
        key: "self".into(),
        message: format!("ClusterResourceQuota {name}: spec.namespaceSelector: {e}"),
    };
    let eligible = |ns: &Value| {
        let labels = labels_of(ns);
        let n = str_at(ns, "/metadata/name").unwrap_or_default();
        !excluded.contains(n) && !labels.contains_key(&exclude_label)
    };
    let mut selected: Vec<String> = Vec::new();
    for ns in input.inputs("namespaces").filter(|n| eligible(n)) {
        if matches(selector, &labels_of(ns)).map_err(invalid)? {
            selected.push(str_at(ns, "/metadata/name").unwrap_or_default().to_string());
        }
    }
    selected.sort();
    Ok(selected)
}

/// Usage per selected namespace and in total, for every `spec.hard` key.
fn usage_by_namespace(
    input: &Input,
    hard: &Map<String, Value>,
    selected: &[String],
) -> (Map<String, Value>, Vec<Value>) {
    let mut total: BTreeMap<&str, Quantity> =
        hard.keys().map(|k| (k.as_str(), Quantity::ZERO)).collect();
    let mut namespaces = Vec::new();
    for ns in selected {
        let mut used = Map::new();
        for key in hard.keys() {
            let q = usage(key, ns, input).unwrap_or(Quantity::ZERO);
            if let Some(t) = total.get_mut(key.as_str()) {
                *t = *t + q;
            }
            used.insert(key.clone(), json!(q.to_string()));
        }
        namespaces.push(json!({"namespace": ns, "status": {"used": used}}));
    }
    let used = total
        .into_iter()
        .map(|(k, q)| (k.to_string(), json!(q.to_string())))
        .collect();
    (used, namespaces)
}

/// Selected namespaces that another quota selects too, with those quotas' names.
fn overlaps(input: &Input, name: &str, selected: &[String]) -> BTreeMap<String, BTreeSet<String>> {
    let mut overlaps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let all_ns: BTreeMap<&str, &Value> = input
        .inputs("namespaces")
        .filter_map(|n| Some((str_at(n, "/metadata/name")?, n)))
        .collect();
    for other in input.inputs("quotas") {
        let other_name = str_at(other, "/metadata/name").unwrap_or_default();
        if other_name == name {
            continue;
        }
        let other_sel = other
            .pointer("/spec/namespaceSelector")
            .cloned()
            .unwrap_or(Value::Null);
        for ns in selected {
            if let Some(n) = all_ns.get(ns.as_str())
                && matches(&other_sel, &labels_of(n)).unwrap_or(false)
            {
                overlaps
                    .entry(ns.clone())
                    .or_default()
                    .insert(other_name.to_string());
            }
        }
    }
    overlaps
}

/// Computes the quota's status.
///
/// # Errors
/// A malformed `self` or selector.
pub fn synthesize(input: &Input) -> Result<Output, Error> {
    let me = input.input("self")?;
    let name = str_at(me, "/metadata/name").unwrap_or_default().to_string();
    let selector = me
        .pointer("/spec/namespaceSelector")
        .cloned()
        .unwrap_or(Value::Null);
    let hard: Map<String, Value> = me
        .pointer("/spec/hard")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let selected = selected_namespaces(input, &name, &selector)?;
    let mut out = Output::default();
    for key in hard.keys() {
        if usage(key, "", input).is_none() {
            out.warn(format!(
                "ClusterResourceQuota {name}: spec.hard key {key:?} is not supported; its usage is reported as 0"
            ));
        }
    }
    let (used, namespaces) = usage_by_namespace(input, &hard, &selected);
    let overlaps = overlaps(input, &name, &selected);
    let mut status = json!({
        "total": {"hard": hard, "used": used},
        "namespaces": namespaces,
    });
    if !overlaps.is_empty() {
        let detail: Vec<String> = overlaps
            .iter()
            .map(|(ns, qs)| {
                format!(
                    "{ns} (also {})",
                    qs.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            })
            .collect();
        status["conditions"] = json!([{
            "type": "NamespaceOverlap", "status": "True", "reason": "SelectedByAnotherQuota",
            "message": format!("namespaces selected by more than one ClusterResourceQuota are counted in each: {}", detail.join("; ")),
        }]);
        out.warn(format!(
            "ClusterResourceQuota {name}: namespaces also selected by another quota: {}",
            detail.join("; ")
        ));
    }
    out.push(json!({
        "apiVersion": format!("{}/{}", FOR.0, FOR.1), "kind": FOR.2,
        "metadata": {"name": name},
        "status": status,
    }));
    Ok(out)
}
