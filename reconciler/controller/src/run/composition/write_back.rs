//! Instance mode's write-back: the status a synthesis gives its instance, applied to the
//! instance's status subresource (server-side apply, never its spec), and the quota
//! built-in's usage gauges read from it.

use std::sync::Arc;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::super::error::Step;
use super::super::{Context, Error, api_err};
use crds::Composition;
use crds::names::{FIELD_MANAGER, reasons};

/// The quota built-in's usage gauges, from the status it writes back (upstream exports them
/// from its reconcile; here the status is the computation's result), once it is written:
/// exactly the series of this status, so a namespace or resource it no longer lists loses
/// its series.
fn record_quota_usage(report: &crate::run::context::Reporter, uid: &str, desired: &Value) {
    let (group, _, kind) = builtins::quota::FOR;
    let api_version = desired["apiVersion"].as_str().unwrap_or_default();
    if desired["kind"] != kind || !api_version.starts_with(&format!("{group}/")) {
        return;
    }
    let name = desired["metadata"]["name"].as_str().unwrap_or_default();
    let (per_ns, total) = builtins::quota::usage_ratios(&desired["status"]);
    let per_ns = per_ns.into_iter().map(|(namespace, resource, r)| {
        let labels = crate::run::metrics::CrqNamespaceLabels {
            crq_name: name.to_string(),
            namespace,
            resource,
        };
        (labels, r)
    });
    let total = total.into_iter().map(|(resource, r)| {
        let labels = crate::run::metrics::CrqLabels {
            crq_name: name.to_string(),
            resource,
        };
        (labels, r)
    });
    report
        .metrics
        .quota
        .record(uid, per_ns.collect(), total.collect());
}

/// Instance mode: applies the current synthesis's status write-back to the instance.
pub(super) async fn write_back(
    ctx: &Arc<Context>,
    comp: &Composition,
    uid: &str,
    instance: Option<&serde_json::Value>,
) {
    let pending = ctx
        .state
        .memory
        .synthesis(uid, |m| m.status_write.clone().flatten());
    let (Some(desired), Some(me)) = (pending, instance) else {
        return;
    };
    match write_back_status(&ctx.clusters, &desired, me).await {
        Ok(_) => record_quota_usage(&ctx.report, uid, &desired),
        Err(e) => {
            let chain = super::super::error::chain(&e);
            tracing::warn!(error = %chain, "status write-back failed");
            ctx.report
                .event(comp, true, reasons::APPLY_FAILED, "WriteBackStatus", chain)
                .await;
        }
    }
}

/// Applies a status write-back to the instance's status subresource with server-side apply
/// (never its spec) when it differs from the live status.
pub(crate) async fn write_back_status(
    clusters: &crate::run::context::Clusters,
    desired: &Value,
    instance: &Value,
) -> Result<bool, Error> {
    if instance.get("status") == desired.get("status") {
        return Ok(false);
    }
    let api_version = desired["apiVersion"].as_str().unwrap_or_default();
    let kind = desired["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let (ar, namespaced) = clusters
        .resolve(&kube::core::GroupVersionKind::gvk(group, version, kind))
        .await
        .map_err(api_err(Step::ResolveInstanceKind))?;
    let name = desired
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let namespace = instance
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(clusters.client().clone(), namespace, &ar)
    } else {
        Api::all_with(clusters.client().clone(), &ar)
    };
    let mut metadata = json!({"name": name});
    if namespaced {
        metadata["namespace"] = json!(namespace);
    }
    let patch = json!({"apiVersion": api_version, "kind": kind, "metadata": metadata,
        "status": desired.get("status").cloned().unwrap_or(Value::Null)});
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(api_err(Step::InstanceStatus(
        kind.to_string(),
        name.to_string(),
    )))?;
    tracing::info!(%kind, %name, "status written back");
    Ok(true)
}
