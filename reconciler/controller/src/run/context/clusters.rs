//! The clusters handle: the management and target clusters, and the tenancy rule that picks
//! the account a Composition's reads and writes act as.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};

use super::super::Options;
use super::super::cluster::Cluster;
use crds::Composition;

/// Which account a Composition acts as (from `--default-service-account`,
/// `--remote-kubeconfig` and `--remote-namespace-map`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Tenancy {
    /// `--default-service-account` (`None`: the controller's own identity).
    default_service_account: Option<String>,
    /// Whether objects are applied to a remote cluster.
    remote: bool,
    /// Namespace of the management cluster → namespace of the remote one.
    remote_namespace_map: BTreeMap<String, String>,
}

impl Tenancy {
    /// The tenancy options of `opts`.
    pub(crate) fn of(opts: &Options) -> Tenancy {
        Tenancy {
            default_service_account: opts.tenancy.default_service_account.clone(),
            remote: opts.cluster.remote_kubeconfig.is_some(),
            remote_namespace_map: opts.tenancy.remote_namespace_map.clone(),
        }
    }
}

/// The management cluster (Compositions, Synthesizers, slices, inputs, Events) and the target
/// cluster (emitted objects), with the account each Composition acts as on them.
pub(crate) struct Clusters {
    management: Arc<Cluster>,
    target: Arc<Cluster>,
    tenancy: Tenancy,
}

impl Clusters {
    /// The two clusters (the same one without `--remote-kubeconfig`) under `tenancy`.
    pub(crate) fn new(management: Arc<Cluster>, target: Arc<Cluster>, tenancy: Tenancy) -> Self {
        Clusters {
            management,
            target,
            tenancy,
        }
    }

    /// The management cluster's client, with the controller's identity.
    pub(crate) fn client(&self) -> &Client {
        &self.management.client
    }

    /// Where emitted objects are applied: the management cluster, or the one of
    /// `--remote-kubeconfig`.
    pub(crate) fn target(&self) -> &Arc<Cluster> {
        &self.target
    }

    /// Whether emitted objects go to the management cluster itself.
    pub(crate) fn target_is_management(&self) -> bool {
        Arc::ptr_eq(&self.target, &self.management)
    }

    /// The ServiceAccount `comp` acts as: `spec.serviceAccountName`, else
    /// `--default-service-account`; `None`: the controller's own identity.
    pub(crate) fn service_account(&self, comp: &Composition) -> Option<String> {
        comp.spec
            .service_account_name
            .clone()
            .filter(|s| !s.is_empty())
            .or_else(|| self.tenancy.default_service_account.clone())
    }

    /// The user `comp` acts as: `system:serviceaccount:<ns>:<sa>`, or `None` for the
    /// controller's own identity.
    fn user_of(&self, comp: &Composition) -> Option<String> {
        let sa = self.service_account(comp)?;
        let ns = comp.namespace().unwrap_or_default();
        Some(format!("system:serviceaccount:{ns}:{sa}"))
    }

    /// The client every read of inputs of `comp` is made with (management cluster): one
    /// impersonating its ServiceAccount (cached per account), or the controller's.
    ///
    /// # Errors
    /// When the client cannot be built.
    pub(crate) fn client_for(&self, comp: &Composition) -> Result<Client, kube::Error> {
        self.management.acting_as(self.user_of(comp).as_deref())
    }

    /// The client every read of live objects and every write of emitted objects of `comp` is
    /// made with (target cluster), impersonating as [`Clusters::client_for`] does. On a remote
    /// target the same user name is impersonated there: its RBAC decides.
    ///
    /// # Errors
    /// When the client cannot be built.
    pub(crate) fn target_for(&self, comp: &Composition) -> Result<Client, kube::Error> {
        let user = self
            .remote_user_of(comp)
            .map_err(|message| kube::Error::Service(message.into()))?;
        self.target.acting_as(user.as_deref())
    }

    /// The user `comp` acts as on the target cluster: on the management cluster its own; on a
    /// remote one its ServiceAccount in the namespace `--remote-namespace-map` maps its
    /// namespace to. `Err`: it impersonates and its namespace is not mapped. Pure.
    pub(crate) fn remote_user_of(&self, comp: &Composition) -> Result<Option<String>, String> {
        if !self.tenancy.remote {
            return Ok(self.user_of(comp));
        }
        let Some(sa) = self.service_account(comp) else {
            return Ok(None);
        };
        let ns = comp.namespace().unwrap_or_default();
        match self.tenancy.remote_namespace_map.get(&ns) {
            Some(remote) => Ok(Some(format!("system:serviceaccount:{remote}:{sa}"))),
            None => Err(format!(
                "namespace {ns:?} is not mapped to a namespace of the remote cluster \
                 (--remote-namespace-map): its Compositions act as ServiceAccount {sa:?} and \
                 are applied nowhere"
            )),
        }
    }

    /// Resolves a GVK of the management cluster (inputs, instances) to its ApiResource and
    /// whether it is namespaced (cached; misses are retried).
    pub(crate) async fn resolve(
        &self,
        gvk: &GroupVersionKind,
    ) -> Result<(ApiResource, bool), kube::Error> {
        self.management.resolve(gvk).await
    }

    /// The same for an emitted kind, on the target cluster.
    pub(crate) async fn resolve_target(
        &self,
        gvk: &GroupVersionKind,
    ) -> Result<(ApiResource, bool), kube::Error> {
        self.target.resolve(gvk).await
    }

    /// Forgets an emitted kind that is no longer served (see [`Cluster::forget`]).
    pub(crate) fn forget_target(&self, gvk: &GroupVersionKind) {
        self.target.forget(gvk);
    }

    /// (group, kind) -> namespaced, for every emitted kind resolved so far.
    pub(crate) fn discovery_snapshot(&self) -> BTreeMap<(String, String), bool> {
        self.target.scopes()
    }
}
