//! Boundaries between tenants that do not depend on RBAC: with `--no-cross-namespace-refs`,
//! a Composition may only reach its own namespace (bindings, `dependsOn`, the Synthesizer's
//! refs and collections) and a Synthesizer's module ConfigMap must live in the controller's
//! namespace. A violation is terminal (a condition naming every offending field), never a
//! retry loop. Ownership of emitted objects (`managed-by`) is enforced by the planner
//! (`plan::plan::foreign_owner`).

use kube::ResourceExt;

use crds::{Composition, Synthesizer};

/// Every reference from `comp` (and the Synthesizer it uses) that leaves the Composition's
/// namespace, as `field: why`. `controller_namespace` is where module ConfigMaps must live
/// (`None`: not checked). Pure.
pub(crate) fn cross_namespace_refs(
    comp: &Composition,
    synth: &Synthesizer,
    controller_namespace: Option<&str>,
) -> Vec<String> {
    let ns = comp.namespace().unwrap_or_default();
    let mut out = Vec::new();
    let other = |out: &mut Vec<String>, field: String, target: &str| {
        if !target.is_empty() && target != ns {
            out.push(format!(
                "{field}: namespace {target:?} is not the Composition's namespace {ns:?}"
            ));
        }
    };
    for (i, b) in comp.spec.bindings.iter().enumerate() {
        if let Some(t) = &b.resource.namespace {
            other(
                &mut out,
                format!("spec.bindings[{i}] ({:?}).resource.namespace", b.key),
                t,
            );
        }
    }
    for (i, d) in comp.spec.depends_on.iter().enumerate() {
        if let Some(t) = &d.namespace {
            other(&mut out, format!("spec.dependsOn[{i}].namespace"), t);
        }
    }
    let synth_name = synth.name_any();
    for r in &synth.spec.refs {
        if let Some(t) = r.resource.as_ref().and_then(|res| res.namespace.as_ref()) {
            other(
                &mut out,
                format!(
                    "Synthesizer {synth_name:?} refs[{:?}].resource.namespace",
                    r.key
                ),
                t,
            );
        }
        if let Some(c) = &r.collection
            && (c.namespace_selector.is_some() || c.namespace_selector_from.is_some())
        {
            out.push(format!(
                "Synthesizer {synth_name:?} refs[{:?}].collection: a namespace selector reaches \
                 other namespaces",
                r.key
            ));
        }
    }
    if let (Some(cm), Some(home)) = (&synth.spec.module.config_map, controller_namespace)
        && cm.namespace != home
    {
        out.push(format!(
            "Synthesizer {synth_name:?} spec.module.configMap.namespace: {:?} is not the \
             controller's namespace {home:?}",
            cm.namespace
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[allow(clippy::needless_pass_by_value)] // called with `json!` temporaries
    fn comp(spec: serde_json::Value) -> Composition {
        serde_json::from_value(
            json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
            "metadata": {"name": "c", "namespace": "team-a"}, "spec": spec}),
        )
        .unwrap()
    }

    #[allow(clippy::needless_pass_by_value)] // called with `json!` temporaries
    fn synth(spec: serde_json::Value) -> Synthesizer {
        serde_json::from_value(
            json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
            "metadata": {"name": "s"}, "spec": spec}),
        )
        .unwrap()
    }

    #[test]
    fn references_inside_the_namespace_pass() {
        let c = comp(json!({"synthesizer": {"name": "s"},
            "bindings": [{"key": "a", "resource": {"name": "x"}},
                         {"key": "b", "resource": {"name": "y", "namespace": "team-a"}}],
            "dependsOn": [{"name": "d"}]}));
        let s = synth(
            json!({"module": {"configMap": {"namespace": "enoki-system", "name": "m", "key": "k"}},
            "refs": [{"key": "a", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}]}),
        );
        assert!(cross_namespace_refs(&c, &s, Some("enoki-system")).is_empty());
    }

    #[test]
    fn every_reference_to_another_namespace_is_named() {
        let c = comp(json!({"synthesizer": {"name": "s"},
            "bindings": [{"key": "tls", "resource": {"name": "x", "namespace": "team-b"}}],
            "dependsOn": [{"name": "d", "namespace": "team-b"}]}));
        let s = synth(
            json!({"module": {"configMap": {"namespace": "team-a", "name": "m", "key": "k"}},
            "refs": [
                {"key": "r", "resource": {"group": "", "version": "v1", "kind": "Secret", "namespace": "kube-system"}},
                {"key": "pods", "collection": {"group": "", "version": "v1", "kind": "Pod", "namespaceSelector": "team=b"}}]}),
        );
        let v = cross_namespace_refs(&c, &s, Some("enoki-system"));
        assert_eq!(v.len(), 5, "{v:#?}");
        assert!(
            v[0].starts_with("spec.bindings[0] (\"tls\").resource.namespace"),
            "{}",
            v[0]
        );
        assert!(v[1].starts_with("spec.dependsOn[0].namespace"), "{}", v[1]);
        assert!(
            v[2].contains("refs[\"r\"]") && v[2].contains("kube-system"),
            "{}",
            v[2]
        );
        assert!(v[3].contains("namespace selector"), "{}", v[3]);
        assert!(v[4].contains("spec.module.configMap.namespace"), "{}", v[4]);
    }
}
