//! Boundaries between tenants that do not depend on RBAC: with `--no-cross-namespace-refs`,
//! a Composition may only reach its own namespace (bindings, `dependsOn`, the Synthesizer's
//! refs and collections) and a Synthesizer's module ConfigMap and pull Secret must live in the
//! controller's namespace. A violation is terminal (a condition naming every offending field), never a
//! retry loop. A Synthesizer's `namespaceSelector` says which namespaces may use it at all.
//! Ownership of emitted objects (`managed-by`) is enforced by the planner
//! (`plan::plan::foreign_owner`).

use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::context::Context;
use super::error::{Error, Step, api_err};
use crds::{Composition, Synthesizer};

/// Why `comp` may not use `synth`: the Synthesizer's `namespaceSelector` does not select the
/// Composition's namespace (one metadata LIST of Namespaces by that selector and the name, its
/// verdict believed for 15 s (`model::VERDICT_FOR`); a change of the namespace's labels wakes the
/// Composition). `None`: it may (no selector, or selected).
///
/// # Errors
/// The namespaces cannot be listed (retried with backoff: nothing is synthesized meanwhile).
pub(crate) async fn synthesizer_not_allowed(
    ctx: &Context,
    comp: &Composition,
    synth: &Synthesizer,
) -> Result<Option<String>, Error> {
    let Some(selector) = &synth.spec.namespace_selector else {
        return Ok(None);
    };
    let ns = comp.namespace().unwrap_or_default();
    let name = synth.name_any();
    let query = match serde_json::to_value(selector)
        .map_err(|e| e.to_string())
        .and_then(|v| super::inputs::selector_string(&v))
    {
        Ok(q) => q,
        Err(e) => {
            return Ok(Some(format!(
                "Synthesizer {name:?}: spec.namespaceSelector: {e}"
            )));
        }
    };
    let ar = kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
    let gvk = kube::core::GroupVersionKind::gvk("", "v1", "Namespace");
    ctx.caches.watches.track(&gvk, &ar, "", &ns, comp);
    if ctx.clusters.target_is_management() {
        // Its Namespace may be another shard's Composition's output: one watch of the managed
        // Namespaces serves every namespace's Compositions.
        ctx.caches.watches.foreign_holds((&gvk, &ar), "", &ns, comp);
    }
    let refused = || {
        format!(
            "Synthesizer {name:?} may not be used from namespace {ns:?}: its spec.namespaceSelector ({query}) does not select it"
        )
    };
    if let Some(selected) = ctx.state.namespace_verdicts.get(&ns, &query) {
        return Ok((!selected).then(refused));
    }
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(ctx.clusters.client().clone());
    let params = ListParams::default()
        .labels(&query)
        .fields(&format!("metadata.name={ns}"));
    match api.list_metadata(&params).await {
        Ok(l) => {
            let selected = !l.items.is_empty();
            ctx.state.namespace_verdicts.put(&ns, &query, selected);
            Ok((!selected).then(refused))
        }
        Err(kube::Error::Api(e)) if e.code == 400 => Ok(Some(format!(
            "Synthesizer {name:?}: spec.namespaceSelector ({query}): {}",
            e.message
        ))),
        Err(e) => Err(api_err(Step::NamespaceSelector)(e)),
    }
}

/// The namespace a reference points into, relative to `home` (the namespace of the object
/// that holds the reference): unset and `""` both mean `home`, never "every namespace". Every
/// namespaced read of a reference and every cross-namespace check goes through it.
pub(crate) fn ref_namespace(home: &str, given: Option<&str>) -> String {
    match given {
        Some(ns) if !ns.is_empty() => ns.to_string(),
        _ => home.to_string(),
    }
}

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
    let other = |out: &mut Vec<String>, field: String, given: Option<&str>| {
        let target = ref_namespace(&ns, given);
        if target != ns {
            out.push(format!(
                "{field}: namespace {target:?} is not the Composition's namespace {ns:?}"
            ));
        }
    };
    for (i, b) in comp.spec.bindings.iter().enumerate() {
        other(
            &mut out,
            format!("spec.bindings[{i}] ({:?}).resource.namespace", b.key),
            b.resource.namespace.as_deref(),
        );
    }
    for (i, d) in comp.spec.depends_on.iter().enumerate() {
        other(
            &mut out,
            format!("spec.dependsOn[{i}].namespace"),
            d.namespace.as_deref(),
        );
    }
    let synth_name = synth.name_any();
    for r in &synth.spec.refs {
        if let Some(res) = &r.resource {
            other(
                &mut out,
                format!(
                    "Synthesizer {synth_name:?} refs[{:?}].resource.namespace",
                    r.key
                ),
                res.namespace.as_deref(),
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
    out.extend(module_refs(synth, controller_namespace));
    out
}

/// The Synthesizer's module and chart references that leave the controller's namespace (their
/// ConfigMaps and pull Secrets), as `field: why`; checked before any module is fetched,
/// whichever controller fetches it. Pure.
pub(crate) fn module_refs(synth: &Synthesizer, controller_namespace: Option<&str>) -> Vec<String> {
    let synth_name = synth.name_any();
    let home = controller_namespace.unwrap_or("the controller's");
    let mut out = Vec::new();
    let module = &synth.spec.module;
    let chart = synth.spec.helm.as_ref().map(|h| &h.chart);
    let refs = [
        (
            "module.configMap",
            module.config_map.as_ref().map(|c| c.namespace.as_str()),
        ),
        (
            "module.pullSecret",
            module.pull_secret.as_ref().map(|s| s.namespace.as_str()),
        ),
        (
            "helm.chart.configMap",
            chart
                .and_then(|c| c.config_map.as_ref())
                .map(|c| c.namespace.as_str()),
        ),
        (
            "helm.chart.pullSecret",
            chart
                .and_then(|c| c.pull_secret.as_ref())
                .map(|s| s.namespace.as_str()),
        ),
    ];
    for (field, namespace) in refs {
        if let Some(ns) = namespace
            && (ns.is_empty() || controller_namespace.is_some_and(|h| ns != h))
        {
            out.push(format!(
                "Synthesizer {synth_name:?} spec.{field}.namespace: {ns:?} is not the \
                 controller's namespace {home:?}"
            ));
        }
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

    #[test]
    fn an_empty_namespace_is_the_holders_own_never_every_namespace() {
        assert_eq!(ref_namespace("team-a", Some("")), "team-a");
        assert_eq!(ref_namespace("team-a", None), "team-a");
        assert_eq!(ref_namespace("team-a", Some("team-b")), "team-b");
        let c = comp(json!({"synthesizer": {"name": "s"},
            "bindings": [{"key": "tls", "resource": {"name": "x", "namespace": ""}}],
            "dependsOn": [{"name": "d", "namespace": ""}]}));
        let s = synth(json!({"module": {"builtin": "trustee"}}));
        assert!(cross_namespace_refs(&c, &s, None).is_empty());
        // A module ConfigMap has no holder namespace: "" is refused, known home or not.
        let s = synth(json!({"module": {"configMap": {"namespace": "", "name": "m", "key": "k"}}}));
        let v = cross_namespace_refs(&c, &s, None);
        assert!(
            v.len() == 1 && v[0].contains("spec.module.configMap.namespace"),
            "{v:?}"
        );
    }

    #[test]
    fn a_pull_secret_must_live_in_the_controllers_namespace() {
        let s = synth(json!({"module": {"oci": "r.example/m:v1@sha256:00",
            "pullSecret": {"namespace": "team-a", "name": "regcred"}}}));
        let v = module_refs(&s, Some("enoki-system"));
        assert!(
            v.len() == 1 && v[0].contains("spec.module.pullSecret.namespace"),
            "{v:?}"
        );
        let c = comp(json!({"synthesizer": {"name": "s"}}));
        assert_eq!(cross_namespace_refs(&c, &s, Some("enoki-system")), v);
        let home = synth(json!({"module": {"oci": "r.example/m:v1@sha256:00",
            "pullSecret": {"namespace": "enoki-system", "name": "regcred"}}}));
        assert!(module_refs(&home, Some("enoki-system")).is_empty());
        // No known home: only the empty namespace is refused.
        assert!(module_refs(&s, None).is_empty());
    }
}
