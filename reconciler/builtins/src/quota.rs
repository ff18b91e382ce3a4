//! `quota`: ClusterResourceQuota usage aggregation (powerhome/pac-quota-controller).
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
//! Usage follows upstream's `computeNamespaceResourceUsage` (HEAD): `requests.`/`limits.`
//! cpu, memory and ephemeral-storage from the containers' requests/limits; every other
//! `requests.<name>` (extended resources, `requests.hugepages-<size>`) from the containers'
//! requests of `<name>`; `hugepages-<size>` from requests, else limits. `spec.scopes` and
//! `spec.scopeSelector` (Terminating, NotTerminating, BestEffort, NotBestEffort, PriorityClass
//! with In/NotIn/Exists/DoesNotExist, CrossNamespacePodAffinity; ANDed) filter the pods —
//! only the pods: Services, PVCs and object counts are never filtered, as upstream.
//!
//! Events, as upstream's recorder (published by enoki from the synthesis results, on the
//! quota): `NamespaceAdded` / `NamespaceRemoved` (Normal; against the namespaces of the last
//! written status), `QuotaExceeded` (Warning; used > hard), `InvalidSelector` /
//! `InvalidScopeSelector` (Warning; the synthesis fails and the status is left as it was).
//! The usage gauges `pac_quota_controller_crq_usage` / `..._crq_total_usage` (used/hard) are
//! exported by enoki's `/metrics` from the status it writes back.
//!
//! Differences from upstream, on purpose: a namespace selected by two quotas is counted in
//! both and both get condition `NamespaceOverlap=True` naming the other quota (upstream drops
//! the events and stops updating both silently); `services.nodeports` counts NodePort Services
//! (upstream counts allocated ports); no admission webhook (enforcement).

use std::collections::{BTreeMap, BTreeSet};

use enoki_sdk::{Error, Input, Output};
use serde_json::{Map, Value, json};

use crate::quantity::Quantity;
use crate::scope::Scopes;
use crate::selector::{labels_of, matches};

mod usage;
use usage::*;

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
    "spec.resources",
    "spec.activeDeadlineSeconds",
    "spec.priorityClassName",
    "spec.affinity",
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

/// A quantity given as a string or a number.
pub(crate) fn quantity_at(v: Option<&Value>) -> Option<Quantity> {
    match v? {
        Value::String(s) => Quantity::parse(s).ok(),
        Value::Number(n) => Quantity::parse(&n.to_string()).ok(),
        _ => None,
    }
}

/// (namespace, resource, used / hard).
pub type NamespaceRatio = (String, String, f64);

/// Upstream's usage gauges from a written status (`percentOfHard`: used / hard, 0 when hard
/// is not positive): (namespace, resource, ratio) for `pac_quota_controller_crq_usage` and
/// (resource, ratio) for `pac_quota_controller_crq_total_usage`.
pub fn usage_ratios(status: &Value) -> (Vec<NamespaceRatio>, Vec<(String, f64)>) {
    let hard: BTreeMap<String, Quantity> = status
        .pointer("/total/hard")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), quantity_at(Some(v))?)))
        .collect();
    let ratio = |key: &str, used: Option<&Value>| -> Option<f64> {
        let h = hard.get(key)?;
        let u = quantity_at(used)?;
        Some(if *h > Quantity::ZERO {
            u.as_f64() / h.as_f64()
        } else {
            0.0
        })
    };
    let total = hard
        .keys()
        .filter_map(|k| {
            Some((
                k.clone(),
                ratio(
                    k,
                    status.pointer(&format!(
                        "/total/used/{}",
                        k.replace('~', "~0").replace('/', "~1")
                    )),
                )?,
            ))
        })
        .collect();
    let mut per_ns = Vec::new();
    for n in status
        .get("namespaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let ns = str_at(n, "/namespace").unwrap_or_default();
        for (k, v) in n
            .pointer("/status/used")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if let Some(r) = ratio(k, Some(v)) {
                per_ns.push((ns.to_string(), k.clone(), r));
            }
        }
    }
    (per_ns, total)
}

/// Upstream's events: namespaces that entered or left the quota since the last written
/// status, and every key whose total usage is over its (non-zero) hard limit.
fn events(
    out: &mut Output,
    me: &Value,
    selected: &[String],
    hard: &Map<String, Value>,
    used: &Map<String, Value>,
) {
    let before: BTreeSet<&str> = me
        .pointer("/status/namespaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|n| str_at(n, "/namespace"))
        .collect();
    let now: BTreeSet<&str> = selected.iter().map(String::as_str).collect();
    for ns in now.difference(&before) {
        out.event(
            false,
            "NamespaceAdded",
            format!("Namespace {ns} added to quota scope"),
        );
    }
    for ns in before.difference(&now) {
        out.event(
            false,
            "NamespaceRemoved",
            format!("Namespace {ns} removed from quota scope"),
        );
    }
    for (key, limit) in hard {
        let (Some(limit), Some(u)) = (quantity_at(Some(limit)), quantity_at(used.get(key))) else {
            continue;
        };
        if !limit.is_zero() && u > limit {
            out.event(
                true,
                "QuotaExceeded",
                format!("Resource {key} has exceeded quota: current {u}, limit {limit}"),
            );
        }
    }
}

/// Computes the quota's status.
///
/// # Errors
/// A malformed `self`. An invalid namespace selector or scope fails the synthesis with an
/// `InvalidSelector` / `InvalidScopeSelector` Event, leaving the status as it was.
pub fn synthesize(input: &Input) -> Result<Output, Error> {
    let me = input.input("self")?;
    let name = str_at(me, "/metadata/name").unwrap_or_default().to_string();
    let spec = me.get("spec").cloned().unwrap_or(Value::Null);
    let selector = spec
        .get("namespaceSelector")
        .cloned()
        .unwrap_or(Value::Null);
    let hard: Map<String, Value> = spec
        .get("hard")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut out = Output::default();
    let selected = match selected_namespaces(input, &name, &selector) {
        Ok(s) => s,
        Err(e) => {
            out.fail_event(
                "InvalidSelector",
                format!("Invalid namespace selector: {e}"),
            );
            return Ok(out);
        }
    };
    let scopes = match Scopes::of(&spec) {
        Ok(s) => s,
        Err(e) => {
            out.fail_event(
                "InvalidScopeSelector",
                format!("Invalid scope selector: ClusterResourceQuota {name}: {e}"),
            );
            return Ok(out);
        }
    };
    for key in hard.keys() {
        if usage(key, "", input, None).is_none() {
            out.warn(format!(
                "ClusterResourceQuota {name}: spec.hard key {key:?} is not supported; its usage is reported as 0"
            ));
        }
    }
    let (used, namespaces) = usage_by_namespace(input, &hard, &selected, &scopes);
    events(&mut out, me, &selected, &hard, &used);
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
        out.event(
            true,
            "NamespaceOverlap",
            format!(
                "ClusterResourceQuota {name}: namespaces also selected by another quota: {}",
                detail.join("; ")
            ),
        );
    }
    out.push(json!({
        "apiVersion": format!("{}/{}", FOR.0, FOR.1), "kind": FOR.2,
        "metadata": {"name": name},
        "status": status,
    }));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input_with(spec: &Value) -> Input {
        serde_json::from_value(json!({
            "apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList",
            "functionConfig": {"composition": {"name": "c", "namespace": "n", "generation": 1,
                "labels": {}, "annotations": {}}, "env": {}},
            "items": [
                {"apiVersion": "quota.powerapp.cloud/v1alpha1", "kind": "ClusterResourceQuota",
                 "metadata": {"name": "q", "annotations": {"enoki.dev/input-key": "self"}}, "spec": spec},
                {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": "a", "labels": {"x": "1"}, "annotations": {"enoki.dev/input-key": "namespaces"}}},
            ],
        }))
        .unwrap()
    }

    /// Upstream's InvalidSelector / InvalidScopeSelector: a Warning Event and no status write.
    #[test]
    fn invalid_selectors_fail_with_upstreams_event_reasons() {
        for (spec, reason) in [
            (
                json!({"namespaceSelector": {"matchExpressions": [{"key": "x", "operator": "In"}]}}),
                "InvalidSelector",
            ),
            (
                json!({"namespaceSelector": {}, "scopes": ["Sometimes"]}),
                "InvalidScopeSelector",
            ),
        ] {
            let out = synthesize(&input_with(&spec)).unwrap();
            assert!(out.items.is_empty(), "no status is written");
            let r = &out.results[0];
            assert_eq!(r.severity, enoki_sdk::Severity::Error);
            assert_eq!(
                r.tags
                    .get(enoki_sdk::resource_list::EVENT_REASON_TAG)
                    .map(String::as_str),
                Some(reason)
            );
        }
    }
}
