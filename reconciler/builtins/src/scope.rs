//! Quota scopes on pods (`spec.scopes` and `spec.scopeSelector` of a ClusterResourceQuota), as
//! pac-quota-controller's `pkg/kubernetes/pod/scope.go` (ported there from Kubernetes'
//! `pkg/quota/v1/evaluator/core/pods.go`): plain scopes are `Exists` requirements, ANDed with
//! the selector's match expressions.

use serde_json::Value;

/// The scope names a requirement may use.
pub const SCOPES: &[&str] = &[
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
];

/// One requirement: a scope, an operator and (PriorityClass only) values.
#[derive(Clone, Debug, PartialEq)]
pub struct Requirement {
    scope: String,
    operator: String,
    values: Vec<String>,
}

/// Every requirement of a quota; no requirement matches every pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scopes(Vec<Requirement>);

impl Scopes {
    /// From the quota's `spec` (`scopes`, `scopeSelector.matchExpressions`).
    ///
    /// # Errors
    /// An unknown scope or operator, an operator other than `Exists` on a scope other than
    /// PriorityClass, or values that do not fit the operator — naming the field.
    pub fn of(spec: &Value) -> Result<Scopes, String> {
        let mut reqs = Vec::new();
        for (i, s) in spec
            .get("scopes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let scope = s.as_str().unwrap_or_default();
            if !SCOPES.contains(&scope) {
                return Err(format!("spec.scopes[{i}]: invalid quota scope {scope:?}"));
            }
            reqs.push(Requirement {
                scope: scope.into(),
                operator: "Exists".into(),
                values: Vec::new(),
            });
        }
        let exprs = spec
            .pointer("/scopeSelector/matchExpressions")
            .and_then(Value::as_array);
        for (i, m) in exprs.into_iter().flatten().enumerate() {
            let at = format!("spec.scopeSelector.matchExpressions[{i}]");
            let text = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or_default();
            let (scope, operator) = (text("scopeName"), text("operator"));
            let values: Vec<String> = m
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(String::from))
                .collect();
            if !SCOPES.contains(&scope) {
                return Err(format!("{at}.scopeName: invalid quota scope {scope:?}"));
            }
            if !["In", "NotIn", "Exists", "DoesNotExist"].contains(&operator) {
                return Err(format!(
                    "{at}.operator: invalid scope selector operator {operator:?}"
                ));
            }
            if scope != "PriorityClass" && operator != "Exists" {
                return Err(format!(
                    "{at}: only the PriorityClass scope supports operators other than Exists"
                ));
            }
            if matches!(operator, "In" | "NotIn") == values.is_empty() {
                return Err(format!(
                    "{at}.values: must be non-empty for In/NotIn and empty for Exists/DoesNotExist"
                ));
            }
            reqs.push(Requirement {
                scope: scope.into(),
                operator: operator.into(),
                values,
            });
        }
        let has = |s: &str| reqs.iter().any(|r| r.scope == s);
        for (a, b) in [
            ("BestEffort", "NotBestEffort"),
            ("Terminating", "NotTerminating"),
        ] {
            if has(a) && has(b) {
                return Err(format!(
                    "spec.scopes/scopeSelector: {a} and {b} scopes are mutually exclusive"
                ));
            }
        }
        Ok(Scopes(reqs))
    }

    /// Whether the quota has any requirement.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `pod` meets every requirement.
    pub fn matches(&self, pod: &Value) -> bool {
        self.0.iter().all(|r| r.matches(pod))
    }
}

impl Requirement {
    fn matches(&self, pod: &Value) -> bool {
        match self.scope.as_str() {
            "Terminating" => terminating(pod),
            "NotTerminating" => !terminating(pod),
            "BestEffort" => best_effort(pod),
            "NotBestEffort" => !best_effort(pod),
            "PriorityClass" => {
                let pc = pod
                    .pointer("/spec/priorityClassName")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                // priorityClassName as a label set: NotIn / DoesNotExist match pods without one.
                match self.operator.as_str() {
                    "Exists" => !pc.is_empty(),
                    "DoesNotExist" => pc.is_empty(),
                    "In" => !pc.is_empty() && self.values.iter().any(|v| v == pc),
                    _ => pc.is_empty() || !self.values.iter().any(|v| v == pc),
                }
            }
            "CrossNamespacePodAffinity" => cross_namespace_affinity(pod),
            _ => false,
        }
    }
}

fn terminating(pod: &Value) -> bool {
    pod.pointer("/spec/activeDeadlineSeconds")
        .and_then(Value::as_i64)
        .is_some_and(|d| d >= 0)
}

/// QoS BestEffort: no positive cpu or memory request or limit (the pod-level `resources` when
/// set, otherwise every container and init container).
pub fn best_effort(pod: &Value) -> bool {
    let positive = |r: &Value| {
        ["requests", "limits"].iter().any(|section| {
            ["cpu", "memory"].iter().any(|k| {
                crate::quota::quantity_at(r.pointer(&format!("/{section}/{k}")))
                    .is_some_and(|q| q > crate::quantity::Quantity::ZERO)
            })
        })
    };
    if let Some(r) = pod.pointer("/spec/resources").filter(|r| {
        ["requests", "limits"].iter().any(|s| {
            r.get(s)
                .and_then(Value::as_object)
                .is_some_and(|m| !m.is_empty())
        })
    }) {
        return !positive(r);
    }
    let containers = ["containers", "initContainers"].into_iter().flat_map(|f| {
        pod.pointer(&format!("/spec/{f}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    });
    !containers
        .filter_map(|c| c.get("resources").cloned())
        .any(|r| positive(&r))
}

fn cross_namespace_affinity(pod: &Value) -> bool {
    let cross = |t: &Value| {
        t.get("namespaces")
            .and_then(Value::as_array)
            .is_some_and(|n| !n.is_empty())
            || t.get("namespaceSelector").is_some_and(|s| !s.is_null())
    };
    ["podAffinity", "podAntiAffinity"].iter().any(|a| {
        let Some(aff) = pod.pointer(&format!("/spec/affinity/{a}")) else {
            return false;
        };
        let required = aff
            .get("requiredDuringSchedulingIgnoredDuringExecution")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(cross);
        let preferred = aff
            .get("preferredDuringSchedulingIgnoredDuringExecution")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|w| w.get("podAffinityTerm"))
            .any(cross);
        required || preferred
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scopes_match_pods_as_upstream() {
        let be = json!({"spec": {"containers": [{"name": "a"}]}});
        let burst = json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "100m"}}}],
            "activeDeadlineSeconds": 30, "priorityClassName": "high"}});
        let all = Scopes::of(&json!({})).unwrap();
        assert!(all.is_empty() && all.matches(&be));
        let s = Scopes::of(&json!({"scopes": ["BestEffort"]})).unwrap();
        assert!(s.matches(&be) && !s.matches(&burst));
        let s = Scopes::of(&json!({"scopes": ["Terminating", "NotBestEffort"]})).unwrap();
        assert!(!s.matches(&be) && s.matches(&burst));
        let sel = |op: &str, values: Value| {
            Scopes::of(&json!({"scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": op, "values": values}]}}))
            .unwrap()
        };
        assert!(sel("In", json!(["high"])).matches(&burst));
        assert!(!sel("In", json!(["high"])).matches(&be));
        assert!(
            sel("NotIn", json!(["high"])).matches(&be),
            "no class: NotIn matches"
        );
        assert!(sel("DoesNotExist", json!([])).matches(&be));
        assert!(sel("Exists", json!([])).matches(&burst));
        let cross = json!({"spec": {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": {"topologyKey": "k", "namespaces": ["x"]}}]}}}});
        assert!(
            Scopes::of(&json!({"scopes": ["CrossNamespacePodAffinity"]}))
                .unwrap()
                .matches(&cross)
        );
    }

    #[test]
    fn invalid_scopes_name_the_field() {
        for (spec, field) in [
            (json!({"scopes": ["Sometimes"]}), "spec.scopes[0]"),
            (
                json!({"scopes": ["BestEffort", "NotBestEffort"]}),
                "mutually exclusive",
            ),
            (
                json!({"scopeSelector": {"matchExpressions": [{"scopeName": "BestEffort", "operator": "In", "values": ["x"]}]}}),
                "only the PriorityClass",
            ),
            (
                json!({"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In"}]}}),
                "matchExpressions[0].values",
            ),
        ] {
            let e = Scopes::of(&spec).unwrap_err();
            assert!(e.contains(field), "{e}");
        }
    }
}
