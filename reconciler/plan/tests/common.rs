//! Builders shared by the plan test suites.
#![allow(dead_code, clippy::unwrap_used, clippy::needless_pass_by_value)]

use plan::{
    CompositionInfo, Desired, Observed, Plan, PlanInput, PlanOptions, Prepared, Recorded,
    ResourceKey,
};
use serde_json::{Value, json};

pub fn comp() -> CompositionInfo {
    CompositionInfo {
        name: "comp".into(),
        namespace: "ns".into(),
        uid: "uid-1".into(),
        ..CompositionInfo::default()
    }
}

pub fn cm(name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
        "data": {"k": name},
    })
}

pub fn deploy(name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
        "spec": {"replicas": 1},
    })
}

pub fn key(v: &Value) -> ResourceKey {
    ResourceKey::of(v).unwrap()
}

/// A live copy of a manifest with a resourceVersion (and optional status).
pub fn live(v: &Value, rv: &str, status: Value) -> Value {
    let mut l = v.clone();
    l["metadata"]["resourceVersion"] = json!(rv);
    if !status.is_null() {
        l["status"] = status;
    }
    l
}

/// A live copy enoki applied for the Composition of [`comp`] (labelled `managed-by: uid-1`).
pub fn ours(v: &Value, rv: &str) -> Value {
    let mut l = live(v, rv, Value::Null);
    l["metadata"]["labels"]["enoki.dev/managed-by"] = json!("uid-1");
    l
}

pub fn desired(manifests: &[Value]) -> Vec<Desired> {
    manifests
        .iter()
        .map(|m| Desired {
            manifest: m.clone(),
            tombstone: false,
        })
        .collect()
}

pub struct World {
    pub comp: CompositionInfo,
    pub prepared: Prepared,
    pub observed: Observed,
    pub recorded: std::collections::HashMap<ResourceKey, Recorded>,
    pub previous: std::collections::HashMap<ResourceKey, Value>,
    pub options: PlanOptions,
}

impl World {
    pub fn new(items: Vec<Desired>) -> World {
        let comp = comp();
        let prepared = plan::prepare(&items, &comp).unwrap();
        World {
            comp,
            prepared,
            observed: Observed::new(),
            recorded: std::collections::HashMap::new(),
            previous: std::collections::HashMap::new(),
            options: PlanOptions::default(),
        }
    }

    pub fn with_comp(mut self, comp: CompositionInfo, items: &[Desired]) -> World {
        self.prepared = plan::prepare(items, &comp).unwrap();
        self.comp = comp;
        self
    }

    pub fn observe(mut self, obj: Value) -> World {
        self.observed.insert(key(&obj), obj);
        self
    }

    pub fn plan(&self) -> Plan {
        plan::plan(PlanInput {
            prepared: &self.prepared,
            composition: &self.comp,
            observed: &self.observed,
            recorded: &self.recorded,
            previous: &self.previous,
            options: self.options,
        })
    }

    /// Records every step's hash with the live resourceVersion, as if all were just applied
    /// (an unlabelled live object gets the Composition's `managed-by` label, as an apply
    /// stamps it).
    pub fn record_applied(mut self) -> World {
        let p = self.plan();
        for s in p.steps {
            if let Some(l) = self.observed.get_mut(&s.key)
                && l.pointer("/metadata/labels/enoki.dev~1managed-by")
                    .is_none()
            {
                l["metadata"]["labels"]["enoki.dev/managed-by"] = json!(self.comp.uid);
            }
            let rv = self
                .observed
                .get(&s.key)
                .and_then(|l| l.pointer("/metadata/resourceVersion"))
                .and_then(Value::as_str)
                .map(String::from);
            self.recorded.insert(
                s.key.clone(),
                Recorded {
                    applied_hash: s.hash,
                    applied_resource_version: rv,
                    ready: None,
                    interval_due: false,
                },
            );
        }
        self
    }

    pub fn op_of(&self, v: &Value) -> plan::Op {
        let k = key(v);
        self.plan()
            .steps
            .into_iter()
            .find(|s| s.key == k)
            .unwrap()
            .op
    }
}
