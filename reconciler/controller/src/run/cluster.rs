//! One cluster enoki talks to: its client, the configuration impersonating clients are made
//! from, and its discovery cache.
//!
//! `enoki run` talks to two clusters, which are the same one unless `--remote-kubeconfig` is
//! given (Eno's flag): the **management** cluster holds Compositions, Synthesizers,
//! ResourceSlices, Symphonies, inputs, Events and Leases; the **target** cluster receives
//! every emitted object (applies, reads of live objects, drift watches, prunes, observed
//! outputs). Discovery is cached per cluster, since the two may serve different kinds; so
//! are the target's capabilities a chart is rendered for.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;

use kube::Client;
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;

use super::capabilities::CapabilitiesCache;
use super::fence::{Fence, FenceLayer};
use super::ratelimit::{Bucket, RateLimitLayer};

/// A cluster: its client and what was learned about it.
pub(crate) struct Cluster {
    /// The controller's own client.
    pub client: Client,
    /// The configuration of `client`, from which impersonating clients are made.
    config: kube::Config,
    /// Clients impersonating a user, by user name, with when each was last used.
    impersonating: Mutex<HashMap<String, (Client, u64)>>,
    /// The clock of `impersonating`'s last use.
    ticks: std::sync::atomic::AtomicU64,
    /// GVK -> (ApiResource, namespaced), for every kind resolved so far.
    discovery: Mutex<HashMap<GroupVersionKind, (ApiResource, bool)>>,
    /// With leader election: the fence every client's writes pass.
    fence: Option<Arc<Fence>>,
    /// `--qps`/`--burst` of this cluster, shared by all its clients.
    limit: Option<Arc<Bucket>>,
    /// What it serves, for charts' `.Capabilities`.
    pub capabilities: CapabilitiesCache,
    /// Tests: impersonating clients made by this instead of from `config`.
    #[cfg(test)]
    impersonate: Option<Arc<Impersonate>>,
}

/// Tests: makes an impersonating client from its configuration (instead of a connection).
#[cfg(test)]
type Impersonate = dyn Fn(&kube::Config) -> Client + Send + Sync;

/// Impersonating clients kept at once (least recently used dropped first).
const MAX_IMPERSONATING_CLIENTS: usize = 256;

/// A client for `config`, its writes behind `fence` when there is one.
///
/// # Errors
/// When the client cannot be built.
pub(crate) fn build_client(
    config: kube::Config,
    fence: Option<&Arc<Fence>>,
    limit: Option<&Arc<Bucket>>,
) -> Result<Client, kube::Error> {
    let builder = kube::client::ClientBuilder::try_from(config)?;
    // Every request counted and timed (`enoki_api_requests_total`), fenced ones included (the
    // time a request waits for its `--qps` token is part of its duration).
    let limit = RateLimitLayer {
        bucket: limit.cloned(),
        fence: fence.cloned(),
    };
    Ok(match fence {
        Some(f) => builder
            .with_layer(&FenceLayer(f.clone()))
            .with_layer(&super::api_metrics::MetricsLayer)
            .with_layer(&limit)
            .build(),
        None => builder
            .with_layer(&super::api_metrics::MetricsLayer)
            .with_layer(&limit)
            .build(),
    })
}

impl Cluster {
    pub(crate) fn new(
        client: Client,
        config: kube::Config,
        fence: Option<Arc<Fence>>,
        limit: Option<Arc<Bucket>>,
        capabilities_refresh: std::time::Duration,
    ) -> Arc<Cluster> {
        Arc::new(Cluster {
            limit,
            capabilities: CapabilitiesCache::new(capabilities_refresh),
            client,
            config,
            impersonating: Mutex::new(HashMap::new()),
            ticks: std::sync::atomic::AtomicU64::new(0),
            discovery: Mutex::new(HashMap::new()),
            fence,
            #[cfg(test)]
            impersonate: None,
        })
    }

    /// Tests: a cluster behind `client` whose impersonating clients `impersonate` makes from
    /// the configuration [`Cluster::acting_as`] builds (cached per user as usual).
    #[cfg(test)]
    pub(crate) fn faked(
        client: Client,
        impersonate: impl Fn(&kube::Config) -> Client + Send + Sync + 'static,
    ) -> Arc<Cluster> {
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URL"));
        let mut cluster = Cluster::new(
            client,
            config,
            None,
            None,
            std::time::Duration::from_secs(600),
        );
        Arc::get_mut(&mut cluster)
            .expect("not shared yet")
            .impersonate = Some(Arc::new(impersonate));
        cluster
    }

    /// A client acting as `user` (cached per user), or the controller's own for `None`.
    ///
    /// # Errors
    /// When the client cannot be built.
    pub(crate) fn acting_as(&self, user: Option<&str>) -> Result<Client, kube::Error> {
        let Some(user) = user else {
            return Ok(self.client.clone());
        };
        let tick = self
            .ticks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some((client, used)) = self.impersonating.lock().get_mut(user) {
            *used = tick;
            return Ok(client.clone());
        }
        let mut config = self.config.clone();
        // No groups: for a ServiceAccount user the API server adds its groups itself
        // (`system:serviceaccounts`, `system:serviceaccounts:<ns>`, `system:authenticated`);
        // naming them would need `impersonate` on groups, which would let the controller act
        // as any group.
        config.auth_info.impersonate = Some(user.to_string());
        config.auth_info.impersonate_groups = None;
        #[cfg(test)]
        let client = match &self.impersonate {
            Some(make) => make(&config),
            None => build_client(config, self.fence.as_ref(), self.limit.as_ref())?,
        };
        #[cfg(not(test))]
        let client = build_client(config, self.fence.as_ref(), self.limit.as_ref())?;
        {
            let mut m = self.impersonating.lock();
            // Bounded: the names come from Compositions, so a tenant cycling through names
            // must not grow the cache (each client holds a connection pool). The least
            // recently used goes first; it is rebuilt when needed.
            if m.len() >= MAX_IMPERSONATING_CLIENTS
                && let Some(oldest) = m
                    .iter()
                    .min_by_key(|(_, (_, used))| *used)
                    .map(|(k, _)| k.clone())
            {
                m.remove(&oldest);
            }
            m.insert(user.to_string(), (client.clone(), tick));
        }
        Ok(client)
    }

    /// Resolves a GVK to its ApiResource and whether it is namespaced (cached; misses are
    /// retried, so CRDs created by a synthesis are found once Established).
    pub(crate) async fn resolve(
        &self,
        gvk: &GroupVersionKind,
    ) -> Result<(ApiResource, bool), kube::Error> {
        let cached = self.discovery.lock().get(gvk).cloned();
        if let Some(hit) = cached {
            return Ok(hit);
        }
        let (ar, caps) = kube::discovery::pinned_kind(&self.client, gvk).await?;
        let entry = (ar, caps.scope == Scope::Namespaced);
        self.discovery.lock().insert(gvk.clone(), entry.clone());
        Ok(entry)
    }

    /// Forgets what discovery said of `gvk` (its CRD went away): the next [`Cluster::resolve`]
    /// asks the API server again.
    pub(crate) fn forget(&self, gvk: &GroupVersionKind) {
        let mut d = self.discovery.lock();
        if d.remove(gvk).is_some() {
            tracing::info!(group = %gvk.group, version = %gvk.version, kind = %gvk.kind,
                "kind no longer served; discovery forgets it");
        }
    }

    /// (group, kind) -> namespaced, for every kind resolved so far.
    pub(crate) fn scopes(&self) -> BTreeMap<(String, String), bool> {
        self.discovery
            .lock()
            .iter()
            .map(|(gvk, (_, ns))| ((gvk.group.clone(), gvk.kind.clone()), *ns))
            .collect()
    }
}
