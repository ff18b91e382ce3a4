//! What the target cluster serves, read as `helm install` reads it for a chart's
//! `.Capabilities`: `KubeVersion` is the API server's `gitVersion`, `APIVersions` every served
//! `group/version` and `group/version/Kind` (subresources' kinds included, as Helm's
//! `GetVersionSet` lists them).
//!
//! A Synthesizer that takes them (`spec.clusterCapabilities`, on by default with `spec.helm`)
//! gets them as `HELM_KUBE_VERSION` and `HELM_API_VERSIONS` in its synthesis environment,
//! unless its `env` or the Composition's `synthesisEnv` sets that variable; their digest is
//! an input revision (key `enoki.dev/capabilities`), so a change of what the cluster serves
//! re-renders the chart. Discovery is read at most once per `--capabilities-refresh` (two
//! aggregated discovery requests and `/version`); a refresh that sees a change wakes every
//! Composition whose synthesis took them.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;
use kube::core::discovery::v2::APIGroupDiscoveryList;

/// The revision key of the capabilities among a synthesis's input revisions.
pub use crds::names::CAPABILITIES_REVISION_KEY;

/// The variables a chart's `.Capabilities` are read from (the Go Helm shim's names).
pub const KUBE_VERSION_ENV: &str = "HELM_KUBE_VERSION";
/// See [`KUBE_VERSION_ENV`]; comma-separated.
pub const API_VERSIONS_ENV: &str = "HELM_API_VERSIONS";

/// What one cluster serves.
#[derive(Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// The API server's `gitVersion` (e.g. `v1.33.1`).
    pub kube_version: String,
    /// Every served `group/version` and `group/version/Kind`, sorted (core: `v1`, `v1/Pod`).
    pub api_versions: Vec<String>,
    /// SHA-256 of both.
    pub digest: String,
}

impl Capabilities {
    /// Built from what discovery said (deduplicated and sorted).
    pub fn new(kube_version: String, api_versions: impl IntoIterator<Item = String>) -> Self {
        let api_versions: Vec<String> = api_versions
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let digest =
            super::inputs::digest(&serde_json::json!([kube_version.as_str(), api_versions]));
        Capabilities {
            kube_version,
            api_versions,
            digest,
        }
    }

    /// The synthesis environment they make: `(HELM_KUBE_VERSION, …)`, `(HELM_API_VERSIONS, …)`.
    pub fn env(&self) -> [(&'static str, String); 2] {
        [
            (KUBE_VERSION_ENV, self.kube_version.clone()),
            (API_VERSIONS_ENV, self.api_versions.join(",")),
        ]
    }
}

/// Whether a synthesis of `synth` for `comp` is given the capabilities: the Synthesizer takes
/// them (`spec.clusterCapabilities`, by default with `spec.helm`) and its `env` and the
/// Composition's `synthesisEnv` do not set both variables themselves.
pub fn wanted(synth: &crds::Synthesizer, comp: &crds::Composition) -> bool {
    let takes = synth
        .spec
        .cluster_capabilities
        .unwrap_or(synth.spec.helm.is_some());
    let set = |name: &str| {
        synth
            .spec
            .env
            .iter()
            .chain(&comp.spec.synthesis_env)
            .any(|e| e.name == name)
    };
    takes && !(set(KUBE_VERSION_ENV) && set(API_VERSIONS_ENV))
}

/// Every `group/version` and `group/version/Kind` of aggregated discovery lists (`/api`
/// and `/apis`). A version whose discovery is stale (an aggregated API server that did not
/// answer) names its group/version only, as Helm skips the resources of a failed group.
pub fn served(lists: &[APIGroupDiscoveryList]) -> Vec<String> {
    let mut out = Vec::new();
    for group in lists.iter().flat_map(|l| &l.items) {
        let name = group
            .metadata
            .as_ref()
            .and_then(|m| m.name.as_deref())
            .unwrap_or_default();
        for v in &group.versions {
            let Some(version) = v.version.as_deref() else {
                continue;
            };
            let gv = if name.is_empty() {
                version.to_string()
            } else {
                format!("{name}/{version}")
            };
            if v.freshness.as_deref() != Some("Stale") {
                let kinds = v.resources.iter().flat_map(|r| {
                    let sub = r
                        .subresources
                        .iter()
                        .filter_map(|s| s.response_kind.as_ref());
                    r.response_kind.iter().chain(sub)
                });
                out.extend(
                    kinds
                        .filter_map(|k| k.kind.as_deref().filter(|k| !k.is_empty()))
                        .map(|k| format!("{gv}/{k}")),
                );
            }
            out.push(gv);
        }
    }
    out
}

/// Reads what `client`'s cluster serves (three requests).
///
/// # Errors
/// When discovery or `/version` cannot be read.
pub async fn discover(client: &Client) -> Result<Capabilities, kube::Error> {
    let version = client.apiserver_version().await?;
    let core = client.list_core_api_versions_aggregated().await?;
    let groups = client.list_api_groups_aggregated().await?;
    Ok(Capabilities::new(
        version.git_version,
        served(&[core, groups]),
    ))
}

/// The capabilities of one cluster, read again once older than the refresh interval.
pub struct CapabilitiesCache {
    current: Mutex<Option<(Arc<Capabilities>, Instant)>>,
    refresh: Duration,
}

impl CapabilitiesCache {
    /// A cache read again after `refresh`.
    pub fn new(refresh: Duration) -> Self {
        CapabilitiesCache {
            current: Mutex::new(None),
            refresh,
        }
    }

    /// The last capabilities read, when there are any (however old).
    pub fn last(&self) -> Option<Arc<Capabilities>> {
        let current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        current.as_ref().map(|(c, _)| c.clone())
    }

    /// The capabilities of `client`'s cluster: the cached ones while fresh, else read anew.
    /// When a read fails, the last ones read serve (discovery rarely changes), and only with
    /// none the error is returned.
    ///
    /// # Errors
    /// When discovery cannot be read and nothing was read before.
    pub async fn get(&self, client: &Client) -> Result<Arc<Capabilities>, kube::Error> {
        let fresh = {
            let current = self
                .current
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            current
                .as_ref()
                .filter(|(_, at)| at.elapsed() < self.refresh)
                .map(|(c, _)| c.clone())
        };
        if let Some(c) = fresh {
            return Ok(c);
        }
        match discover(client).await {
            Ok(c) => {
                let c = Arc::new(c);
                let mut current = self
                    .current
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if current
                    .as_ref()
                    .is_some_and(|(old, _)| old.digest != c.digest)
                {
                    tracing::info!(kube_version = %c.kube_version,
                        api_versions = c.api_versions.len(),
                        "the target cluster serves other API versions now");
                }
                *current = Some((c.clone(), Instant::now()));
                Ok(c)
            }
            Err(e) => match self.last() {
                Some(c) => {
                    tracing::debug!(error = %e, "cannot read discovery; the last read serves");
                    Ok(c)
                }
                None => Err(e),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(json: serde_json::Value) -> APIGroupDiscoveryList {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn served_lists_group_versions_and_kinds_as_helm_does() {
        let core = list(serde_json::json!({"items": [{"metadata": {}, "versions": [
            {"version": "v1", "resources": [
                {"resource": "pods", "responseKind": {"group": "", "version": "v1", "kind": "Pod"},
                 "subresources": [{"subresource": "eviction",
                     "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"}}]}]}]}]}));
        let groups = list(
            serde_json::json!({"items": [{"metadata": {"name": "policy"}, "versions": [
            {"version": "v1", "resources": [{"resource": "poddisruptionbudgets",
                "responseKind": {"group": "policy", "version": "v1", "kind": "PodDisruptionBudget"}}]},
            {"version": "v1beta9", "freshness": "Stale", "resources": [{"resource": "x",
                "responseKind": {"kind": "X"}}]}]}]}),
        );
        let caps = Capabilities::new("v1.33.1".into(), served(&[core, groups]));
        assert_eq!(
            caps.api_versions,
            [
                "policy/v1",
                "policy/v1/PodDisruptionBudget",
                "policy/v1beta9",
                "v1",
                "v1/Eviction",
                "v1/Pod"
            ]
        );
        let again = Capabilities::new("v1.33.1".into(), caps.api_versions.clone());
        assert_eq!(caps.digest, again.digest);
        let newer = Capabilities::new("v1.34.0".into(), caps.api_versions.clone());
        assert_ne!(caps.digest, newer.digest);
        assert_eq!(caps.env()[0], (KUBE_VERSION_ENV, "v1.33.1".to_string()));
    }
}
