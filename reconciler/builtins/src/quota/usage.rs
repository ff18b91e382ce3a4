//! Usage: what each counted resource uses in a namespace (pods that are not terminal, their
//! containers' requests and limits, PVCs by storage class), which namespaces a quota selects,
//! and which other quotas overlap it.

use super::*;

/// Names of the containers of `kind` (`containerStatuses` / `initContainerStatuses`) that
/// have terminated.
pub(super) fn terminated(pod: &Value, statuses: &str) -> BTreeSet<String> {
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

pub(super) fn is_terminal(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), Some("Succeeded" | "Failed"))
}

/// One pod's usage of a compute key: overhead + max(sum of running app containers, max of
/// running init containers). `get` reads a container's value.
pub(super) fn pod_usage(
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

pub(super) fn resource(c: &Value, section: &str, key: &str) -> Option<Quantity> {
    quantity_at(
        c.get("resources")
            .and_then(|r| r.get(section))
            .and_then(|r| r.get(key)),
    )
}

pub(super) fn pvc_class(pvc: &Value) -> Option<&str> {
    str_at(pvc, "/spec/storageClassName").or_else(|| {
        pvc.pointer("/metadata/annotations")
            .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
            .and_then(Value::as_str)
    })
}

/// The usage of `key` in one namespace, or `None` for an unsupported key (reported as 0).
pub(super) fn usage(
    key: &str,
    ns: &str,
    input: &Input,
    scopes: Option<&Scopes>,
) -> Option<Quantity> {
    let in_ns = |input_key: &'static str| {
        input
            .inputs(input_key)
            .filter(move |o| str_at(o, "/metadata/namespace") == Some(ns))
    };
    let pods = || {
        in_ns("pods")
            .filter(|p| !is_terminal(p))
            .filter(|p| scopes.is_none_or(|s| s.matches(p)))
    };
    let compute = |section: &'static str, name: &str| -> Quantity {
        let overhead = [key, name];
        pods()
            .map(|p| pod_usage(p, &overhead, &|c| resource(c, section, name)))
            .sum()
    };
    // Upstream's `getContainerResourceUsage` default branch: `requests.<name>` reads the
    // requests of `<name>`; otherwise the key itself in requests, then in limits.
    let compute_generic = |k: &str| -> Quantity {
        let base = k.strip_prefix("requests.").unwrap_or(k);
        pods()
            .map(|p| {
                pod_usage(p, &[k, base], &|c| {
                    k.strip_prefix("requests.")
                        .and_then(|n| resource(c, "requests", n))
                        .or_else(|| resource(c, "requests", k))
                        .or_else(|| resource(c, "limits", k))
                })
            })
            .sum()
    };
    if let Some(entry) = COUNTED.iter().find(|c| c.0 == key) {
        return Some(Quantity::count(in_ns(entry.1).count()));
    }
    if let Some(q) = services_and_claims(key, ns, input) {
        return Some(q);
    }
    Some(match key {
        "pods" => Quantity::count(pods().count()),
        "requests.cpu" | "requests.memory" | "requests.ephemeral-storage" => {
            compute("requests", &key["requests.".len()..])
        }
        "limits.cpu" | "limits.memory" | "limits.ephemeral-storage" => {
            compute("limits", &key["limits.".len()..])
        }
        k if k.starts_with("hugepages-") => compute_generic(k),
        k if k.starts_with("requests.") => compute_generic(k),
        _ => return None,
    })
}

/// The usage of Services (all, load balancers, node ports) and PersistentVolumeClaims (count
/// and requested storage, all or of a storage class) in namespace `ns`; `None` for other keys.
fn services_and_claims(key: &str, ns: &str, input: &Input) -> Option<Quantity> {
    let in_ns = |input_key: &'static str| {
        input
            .inputs(input_key)
            .filter(move |o| str_at(o, "/metadata/namespace") == Some(ns))
    };
    Some(match key {
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
        _ => return None,
    })
}

/// The namespaces the quota selects (eligible: not excluded by name or label), sorted.
pub(super) fn selected_namespaces(
    input: &Input,
    name: &str,
    selector: &Value,
) -> Result<Vec<String>, String> {
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
    let invalid = |e: String| format!("ClusterResourceQuota {name}: spec.namespaceSelector: {e}");
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
pub(super) fn usage_by_namespace(
    input: &Input,
    hard: &Map<String, Value>,
    selected: &[String],
    scopes: &Scopes,
) -> (Map<String, Value>, Vec<Value>) {
    let mut total: BTreeMap<&str, Quantity> =
        hard.keys().map(|k| (k.as_str(), Quantity::ZERO)).collect();
    let mut namespaces = Vec::new();
    for ns in selected {
        let mut used = Map::new();
        for key in hard.keys() {
            let q = usage(key, ns, input, Some(scopes)).unwrap_or(Quantity::ZERO);
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
pub(super) fn overlaps(
    input: &Input,
    name: &str,
    selected: &[String],
) -> BTreeMap<String, BTreeSet<String>> {
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
