//! What the target cluster serves, read as `helm install` reads it for a chart's
//! `.Capabilities`: `KubeVersion` is the API server's `gitVersion`, `APIVersions` every served
//! `group/version` and `group/version/Kind` (subresources' kinds included, as Helm's
//! `GetVersionSet` lists them).
//!
//! A Synthesizer that takes them (`spec.clusterCapabilities`, on by default with `spec.helm`)
//! gets them as `HELM_KUBE_VERSION` and `HELM_API_VERSIONS` in its synthesis environment,
//! unless its `env` or the Composition's `synthesisEnv` sets that variable; their digest is
//! an input revision (key `enoki.dev/capabilities`, deferred: rolled out under the cooldown),
//! so a change of what the cluster serves re-renders the chart. Discovery is read at most once
//! per `--capabilities-refresh` (two aggregated discovery requests and `/version`; one request
//! per group version from an API server without aggregated discovery) by one caller at a time;
//! a refresh that sees a change wakes every Composition whose synthesis took other ones.

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::Mutex;
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
    /// A hash of both (`v1:<sha256>` of their canonical JSON).
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
            plan::snapshot::hash(&serde_json::json!([kube_version.as_str(), api_versions]));
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

/// Every `group/version` and `group/version/Kind` of aggregated discovery lists (`/api` and
/// `/apis`), and whether any version was stale (an aggregated API server that did not answer).
/// A stale version is left out whole, as client-go (and so `helm install`) leaves it out.
pub fn served(lists: &[APIGroupDiscoveryList]) -> (Vec<String>, bool) {
    let (mut out, mut stale) = (Vec::new(), false);
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
            if v.freshness.as_deref() == Some("Stale") {
                stale = true;
                continue;
            }
            let gv = if name.is_empty() {
                version.to_string()
            } else {
                format!("{name}/{version}")
            };
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
            out.push(gv);
        }
    }
    (out, stale)
}

/// The Kubernetes version a chart sees: the API server's `gitVersion` when it reads as
/// `vMAJOR.MINOR.PATCH[-pre][+build]` (what Helm's semver parses), else `vMAJOR.MINOR.0` from its `major`/`minor`
/// (a provider's `30+` read as `30`).
fn kube_version(info: &k8s_openapi::apimachinery::pkg::version::Info) -> String {
    let semver = info.git_version.strip_prefix('v').is_some_and(|rest| {
        let mut parts = rest.splitn(3, '.');
        let numeric = |p: Option<&str>, whole: bool| {
            p.is_some_and(|p| {
                let digits = p.chars().take_while(char::is_ascii_digit).count();
                digits > 0 && (!whole || digits == p.len())
            })
        };
        let clean = |p: &str| {
            p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '+'))
        };
        numeric(parts.next(), true)
            && numeric(parts.next(), true)
            && parts
                .next()
                .is_some_and(|p| numeric(Some(p), false) && clean(p))
    });
    if semver {
        return info.git_version.clone();
    }
    let digits = |s: &str| {
        s.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
    };
    format!("v{}.{}.0", digits(&info.major), digits(&info.minor))
}

/// Reads what `client`'s cluster serves (three requests with aggregated discovery; one per
/// group version from an API server without it), and whether a version was stale.
///
/// # Errors
/// When discovery or `/version` cannot be read.
pub async fn discover(client: &Client) -> Result<(Capabilities, bool), kube::Error> {
    let version = kube_version(&client.apiserver_version().await?);
    let core = client.list_core_api_versions_aggregated().await?;
    if core.items.is_empty() {
        // No aggregated discovery (it answered with the plain document): Helm's older path.
        return Ok((Capabilities::new(version, legacy(client).await?), false));
    }
    let groups = client.list_api_groups_aggregated().await?;
    let (list, stale) = served(&[core, groups]);
    Ok((Capabilities::new(version, list), stale))
}

/// Every `group/version` and `group/version/Kind` from one discovery document per group
/// version (Helm's `GetVersionSet` without aggregated discovery).
async fn legacy(client: &Client) -> Result<Vec<String>, kube::Error> {
    let mut out = Vec::new();
    for v in client.list_core_api_versions().await?.versions {
        let list = client.list_core_api_resources(&v).await?;
        out.extend(list.resources.iter().map(|r| format!("{v}/{}", r.kind)));
        out.push(v);
    }
    for g in client.list_api_groups().await?.groups {
        for v in g.versions {
            let list = client.list_api_group_resources(&v.group_version).await?;
            out.extend(
                list.resources
                    .iter()
                    .map(|r| format!("{}/{}", v.group_version, r.kind)),
            );
            out.push(v.group_version);
        }
    }
    Ok(out)
}

/// How long a failed read is not tried again (the last capabilities serve meanwhile).
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(10);

/// The capabilities of one cluster, read again once older than the refresh interval, by one
/// caller at a time (the others wait for its answer).
pub struct CapabilitiesCache {
    current: Mutex<Option<(Arc<Capabilities>, Instant)>>,
    /// Held while discovery is read; the time of the last failed read.
    reading: tokio::sync::Mutex<Option<Instant>>,
    refresh: Duration,
}

impl CapabilitiesCache {
    /// A cache read again after `refresh`.
    pub fn new(refresh: Duration) -> Self {
        CapabilitiesCache {
            current: Mutex::new(None),
            reading: tokio::sync::Mutex::new(None),
            refresh,
        }
    }

    /// The last capabilities read and when, if any.
    fn last(&self) -> Option<(Arc<Capabilities>, Instant)> {
        self.current.lock().clone()
    }

    fn fresh(&self) -> Option<Arc<Capabilities>> {
        self.last()
            .filter(|(_, at)| at.elapsed() < self.refresh)
            .map(|(c, _)| c)
    }

    /// The capabilities of `client`'s cluster: the cached ones while fresh, else read anew.
    /// The last ones read serve when a read fails (and for 10 s after it, without asking
    /// again), and while an aggregated API server is unavailable (its kinds would otherwise
    /// vanish from the list and come back); only with none read yet is an error returned.
    ///
    /// # Errors
    /// When discovery cannot be read and nothing was read before.
    pub async fn get(&self, client: &Client) -> Result<Arc<Capabilities>, kube::Error> {
        if let Some(c) = self.fresh() {
            return Ok(c);
        }
        let mut failed = self.reading.lock().await;
        if let Some(c) = self.fresh() {
            return Ok(c);
        }
        let last = self.last().map(|(c, _)| c);
        if let (Some(c), Some(at)) = (&last, *failed)
            && at.elapsed() < RETRY_AFTER_FAILURE
        {
            return Ok(c.clone());
        }
        let c = match (discover(client).await, &last) {
            (Ok((_, true)), Some(last)) => {
                tracing::debug!("an aggregated API server is unavailable; the last read serves");
                last.clone()
            }
            (Ok((c, _)), _) => Arc::new(c),
            (Err(e), _) => {
                *failed = Some(Instant::now());
                tracing::debug!(error = %e, "cannot read discovery");
                return last.ok_or(e);
            }
        };
        *failed = None;
        if last.as_ref().is_some_and(|old| old.digest != c.digest) {
            tracing::info!(kube_version = %c.kube_version, api_versions = c.api_versions.len(),
                "the target cluster serves other API versions now");
        }
        *self.current.lock() = Some((c.clone(), Instant::now()));
        Ok(c)
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
        let (list, stale) = served(&[core, groups]);
        assert!(stale, "a stale version is reported");
        let caps = Capabilities::new("v1.33.1".into(), list);
        assert_eq!(
            caps.api_versions,
            [
                "policy/v1",
                "policy/v1/PodDisruptionBudget",
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

    #[test]
    fn the_kube_version_is_what_helm_parses() {
        let info =
            |git: &str, major: &str, minor: &str| k8s_openapi::apimachinery::pkg::version::Info {
                git_version: git.into(),
                major: major.into(),
                minor: minor.into(),
                ..Default::default()
            };
        assert_eq!(kube_version(&info("v1.33.1", "1", "33")), "v1.33.1");
        assert_eq!(
            kube_version(&info("v1.30.5-eks-ce1d5eb", "1", "30+")),
            "v1.30.5-eks-ce1d5eb"
        );
        assert_eq!(
            kube_version(&info("v0.0.0-master+$Format:%H$", "1", "34+")),
            "v1.34.0"
        );
        assert_eq!(kube_version(&info("dev", "1", "34+")), "v1.34.0");
    }
}
