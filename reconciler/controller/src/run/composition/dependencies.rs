//! `dependsOn` between Compositions (Eno semantics): a new synthesis waits until every
//! dependency's current synthesis is ready; deletion waits until no Composition depends on
//! this one. Dependencies are read through the input cache (and so watched); dependents come
//! from the controller's own Composition cache.

use crate::run::tenancy::ref_namespace;
use std::collections::BTreeSet;
use std::sync::Arc;

use kube::ResourceExt;
use kube::core::{ApiResource, GroupVersionKind};

use super::super::{Context, Error};
use crds::names::reasons;
use crds::{BlockedBy, Composition, DependencyStatus};

async fn dependency(
    rd: crate::run::context::Reads<'_>,
    comp: &Composition,
    namespace: &str,
    name: &str,
) -> Result<Option<Composition>, Error> {
    let gvk = GroupVersionKind::gvk(crds::GROUP, crds::VERSION, crds::names::kinds::COMPOSITION);
    let ar = ApiResource::erase::<Composition>(&());
    let obj = super::observe::read(rd, comp, (&gvk, &ar, true), namespace, name)
        .await
        .map_err(|source| Error::ReadDependency {
            name: format!("{namespace}/{name}"),
            source,
        })?;
    Ok(obj.and_then(|o| o.try_parse::<Composition>().ok()))
}

/// Why a dependency blocks, `None` when it is ready. Pure.
pub fn blocking_reason(dep: Option<&Composition>) -> Option<&'static str> {
    match dep {
        None => Some(reasons::DEPENDENCY_NOT_FOUND),
        Some(d)
            if d.metadata.deletion_timestamp.is_some()
                || d.status
                    .as_ref()
                    .and_then(|s| s.current_synthesis.as_ref())
                    .is_none_or(|c| c.ready.is_none()) =>
        {
            Some(reasons::DEPENDENCY_NOT_READY)
        }
        Some(_) => None,
    }
}

/// Whether `dependsOn` blocks a new synthesis: a dependency is missing, not ready (its current
/// synthesis has no ready time) or being deleted, or the dependencies form a cycle.
///
/// # Errors
/// [`Error::ReadDependency`].
pub(crate) async fn block(
    rd: crate::run::context::Reads<'_>,
    comp: &Composition,
) -> Result<Option<DependencyStatus>, Error> {
    if comp.spec.depends_on.is_empty() {
        return Ok(None);
    }
    let ns = comp.namespace().unwrap_or_default();
    let mut blocked_by = Vec::new();
    for dep in &comp.spec.depends_on {
        let dep_ns = ref_namespace(&ns, dep.namespace.as_deref());
        let found = dependency(rd, comp, &dep_ns, &dep.name).await?;
        if let Some(reason) = blocking_reason(found.as_ref()) {
            blocked_by.push(BlockedBy {
                name: dep.name.clone(),
                namespace: dep_ns,
                reason: reason.into(),
            });
        }
    }
    if blocked_by.is_empty() {
        return Ok(None);
    }
    let cycle = in_cycle(rd, comp).await?;
    Ok(Some(DependencyStatus {
        blocked: true,
        reason: Some(
            if cycle {
                reasons::CIRCULAR_DEPENDENCY
            } else {
                reasons::WAITING_ON_DEPENDENCIES
            }
            .into(),
        ),
        blocked_by,
    }))
}

/// Whether following `dependsOn` from `comp` leads back to it (such a wait never resolves).
async fn in_cycle(rd: crate::run::context::Reads<'_>, comp: &Composition) -> Result<bool, Error> {
    let ns = comp.namespace().unwrap_or_default();
    let me = (ns.clone(), comp.name_any());
    let edges = |c: &Composition, from_ns: &str| -> Vec<(String, String)> {
        c.spec
            .depends_on
            .iter()
            .map(|d| {
                (
                    ref_namespace(from_ns, d.namespace.as_deref()),
                    d.name.clone(),
                )
            })
            .collect()
    };
    let mut seen = BTreeSet::new();
    let mut stack = edges(comp, &ns);
    while let Some(node) = stack.pop() {
        if node == me {
            return Ok(true);
        }
        if !seen.insert(node.clone()) || seen.len() > 200 {
            continue;
        }
        if let Some(c) = dependency(rd, comp, &node.0, &node.1).await? {
            stack.extend(edges(&c, &node.0));
        }
    }
    Ok(false)
}

/// The Compositions (still present) whose `dependsOn` names this one: from the cache, or —
/// when sharded, since a dependent may belong to another shard — from a list (only while
/// a Composition is being deleted).
pub(crate) async fn dependents(ctx: &Context, comp: &Composition) -> Result<Vec<BlockedBy>, Error> {
    let all: Vec<Arc<Composition>> = if ctx.limits.shards.borrow().count() > 1 {
        let api: kube::Api<Composition> = match &ctx.opts.scope.namespace {
            Some(ns) => kube::Api::namespaced(ctx.clusters.client().clone(), ns),
            None => kube::Api::all(ctx.clusters.client().clone()),
        };
        // Page by page, keeping only the Compositions that name this one.
        let name = comp.name_any();
        let fetch = |lp: kube::api::ListParams| {
            let api = api.clone();
            async move { api.list(&lp).await }
        };
        let names_me = |c: Composition| {
            c.spec
                .depends_on
                .iter()
                .any(|d| d.name == name)
                .then(|| (Arc::new(c), 0))
        };
        match crate::run::paging::list_bounded(&Default::default(), 0, fetch, names_me).await {
            Ok(found) => found,
            Err(crate::run::paging::Stop::Api(e)) => {
                return Err(crate::run::api_err(crate::run::error::Step::ListDependents)(e));
            }
            Err(crate::run::paging::Stop::TooLarge(_)) => Vec::new(),
        }
    } else {
        ctx.caches.compositions.state()
    };
    let ns = comp.namespace().unwrap_or_default();
    let name = comp.name_any();
    let mut out: Vec<BlockedBy> = all
        .iter()
        .filter(|c| {
            let c_ns = c.namespace().unwrap_or_default();
            // A dependsOn refused by --no-cross-namespace-refs is no dependency: it must
            // not hold this Composition (or its namespace) back from deletion.
            if ctx.opts.tenancy.no_cross_namespace_refs && c_ns != ns {
                return false;
            }
            c.spec
                .depends_on
                .iter()
                .any(|d| d.name == name && ref_namespace(&c_ns, d.namespace.as_deref()) == ns)
        })
        .map(|c| BlockedBy {
            namespace: c.namespace().unwrap_or_default(),
            name: c.name_any(),
            reason: reasons::DEPENDENT_NOT_DELETED.into(),
        })
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dependency_blocks_until_its_current_synthesis_is_ready() {
        assert_eq!(blocking_reason(None), Some(reasons::DEPENDENCY_NOT_FOUND));
        let mut d = Composition::new("d", Default::default());
        assert_eq!(
            blocking_reason(Some(&d)),
            Some(reasons::DEPENDENCY_NOT_READY)
        );
        d.status = Some(crds::CompositionStatus {
            current_synthesis: Some(crds::Synthesis {
                ready: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                )),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(blocking_reason(Some(&d)), None);
        d.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert_eq!(
            blocking_reason(Some(&d)),
            Some(reasons::DEPENDENCY_NOT_READY)
        );
    }
}
