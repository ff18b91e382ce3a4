//! The quota built-in's usage gauges (upstream's names): `pac_quota_controller_crq_usage` per
//! quota, namespace and resource, `pac_quota_controller_crq_total_usage` per quota and
//! resource. Each Composition's series are remembered, so a namespace or resource that
//! leaves a quota's status loses its series at the next write-back, and a deleted quota (its
//! implicit Composition forgotten) loses all of them: none keeps reporting a stale ratio.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::{CrqLabels, CrqNamespaceLabels, FloatGauge};

/// The series one Composition set.
#[derive(Default, PartialEq)]
struct Series {
    per_namespace: HashSet<CrqNamespaceLabels>,
    total: HashSet<CrqLabels>,
}

/// Who set which series: a series is removed only by the Composition that set it last (two
/// Compositions can name the same quota: an explicit one bound to it, or a quota recreated
/// under its name while the old one's Composition is still forgotten).
#[derive(Default)]
struct Owners {
    by_composition: HashMap<String, Series>,
    per_namespace: HashMap<CrqNamespaceLabels, String>,
    total: HashMap<CrqLabels, String>,
}

/// The two gauge families and who set which series (clones share both).
#[derive(Clone, Default)]
pub struct QuotaGauges {
    per_namespace: Family<CrqNamespaceLabels, FloatGauge>,
    total: Family<CrqLabels, FloatGauge>,
    owners: Arc<parking_lot::Mutex<Owners>>,
}

impl QuotaGauges {
    /// Registers both families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let q = Self::default();
        registry.register(
            "pac_quota_controller_crq_usage",
            "Current usage of a resource for a ClusterResourceQuota in a namespace (used/hard)",
            q.per_namespace.clone(),
        );
        registry.register(
            "pac_quota_controller_crq_total_usage",
            "Aggregated usage of a resource across all namespaces for a ClusterResourceQuota (used/hard)",
            q.total.clone(),
        );
        q
    }

    /// Sets the series of the Composition of `uid` to exactly these: the ones it set before
    /// and does not set now are removed (unless another Composition set them since).
    pub fn record(
        &self,
        uid: &str,
        per_namespace: Vec<(CrqNamespaceLabels, f64)>,
        total: Vec<(CrqLabels, f64)>,
    ) {
        let mut owners = self.owners.lock();
        let mut now = Series::default();
        for (labels, ratio) in per_namespace {
            self.per_namespace.get_or_create(&labels).set(ratio);
            owners.per_namespace.insert(labels.clone(), uid.to_string());
            now.per_namespace.insert(labels);
        }
        for (labels, ratio) in total {
            self.total.get_or_create(&labels).set(ratio);
            owners.total.insert(labels.clone(), uid.to_string());
            now.total.insert(labels);
        }
        let before = owners.by_composition.remove(uid).unwrap_or_default();
        let gone = Series {
            per_namespace: &before.per_namespace - &now.per_namespace,
            total: &before.total - &now.total,
        };
        self.remove(&mut owners, uid, gone);
        if now != Series::default() {
            owners.by_composition.insert(uid.to_string(), now);
        }
    }

    /// Removes every series the Composition of `uid` set (it is deleted or gone).
    pub fn forget(&self, uid: &str) {
        let mut owners = self.owners.lock();
        if let Some(gone) = owners.by_composition.remove(uid) {
            self.remove(&mut owners, uid, gone);
        }
    }

    /// Removes the series of `gone` that `uid` set last.
    fn remove(&self, owners: &mut Owners, uid: &str, gone: Series) {
        for labels in gone.per_namespace {
            if owners.per_namespace.get(&labels).is_some_and(|o| o == uid) {
                owners.per_namespace.remove(&labels);
                self.per_namespace.remove(&labels);
            }
        }
        for labels in gone.total {
            if owners.total.get(&labels).is_some_and(|o| o == uid) {
                owners.total.remove(&labels);
                self.total.remove(&labels);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(quota: &str, namespace: &str) -> CrqNamespaceLabels {
        CrqNamespaceLabels {
            crq_name: quota.into(),
            namespace: namespace.into(),
            resource: "pods".into(),
        }
    }

    fn total(quota: &str, resource: &str) -> CrqLabels {
        CrqLabels {
            crq_name: quota.into(),
            resource: resource.into(),
        }
    }

    fn served(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn a_namespace_or_resource_left_out_and_a_forgotten_quota_leave_no_series() {
        let mut registry = Registry::default();
        let q = QuotaGauges::register(&mut registry);
        q.record(
            "u1",
            vec![(ns("q", "a"), 0.5), (ns("q", "b"), 0.25)],
            vec![(total("q", "pods"), 0.75), (total("q", "services"), 0.1)],
        );
        q.record("u2", vec![(ns("r", "a"), 1.0)], vec![]);
        let text = served(&registry);
        assert!(text.contains(r#"crq_usage{crq_name="q",namespace="b",resource="pods"} 0.25"#));
        assert!(text.contains(r#"crq_total_usage{crq_name="q",resource="services"} 0.1"#));

        // b left the quota and services are no longer limited: their series go.
        q.record(
            "u1",
            vec![(ns("q", "a"), 0.6)],
            vec![(total("q", "pods"), 0.6)],
        );
        let text = served(&registry);
        assert!(text.contains(r#"crq_usage{crq_name="q",namespace="a",resource="pods"} 0.6"#));
        assert!(!text.contains(r#"namespace="b""#), "{text}");
        assert!(!text.contains(r#"resource="services""#), "{text}");

        // The quota is deleted: none of its series stays; the other quota's do.
        q.forget("u1");
        let text = served(&registry);
        assert!(!text.contains(r#"crq_name="q""#), "{text}");
        assert!(text.contains(r#"crq_usage{crq_name="r",namespace="a",resource="pods"} 1.0"#));
        q.forget("u2");
        q.forget("never-recorded");
        assert!(!served(&registry).contains("crq_name"));
    }

    #[test]
    fn a_series_another_composition_set_since_is_left_to_it() {
        let mut registry = Registry::default();
        let q = QuotaGauges::register(&mut registry);
        q.record(
            "old",
            vec![(ns("q", "a"), 0.5)],
            vec![(total("q", "pods"), 0.5)],
        );
        // The quota recreated under its name: its new Composition sets the same series.
        q.record(
            "new",
            vec![(ns("q", "a"), 0.7)],
            vec![(total("q", "pods"), 0.7)],
        );
        q.forget("old");
        let text = served(&registry);
        assert!(text.contains(r#"crq_usage{crq_name="q",namespace="a",resource="pods"} 0.7"#));
        assert!(text.contains(r#"crq_total_usage{crq_name="q",resource="pods"} 0.7"#));
        // The new one's own changes still remove what it set.
        q.record("new", vec![], vec![(total("q", "pods"), 0.7)]);
        assert!(!served(&registry).contains(r#"namespace="a""#));
        q.forget("new");
        assert!(!served(&registry).contains("crq_name"));
    }
}
