//! One Composition as `enoki ui` shows it: `enoki status`'s view (each resource's state, read
//! with the user's own RBAC), its DAG, its inputs and their revisions, its synthesis (when,
//! which module, results) and its recent Events. Nothing of a manifest's content is sent: the
//! view keeps kinds, names, groups, checks and states, so a Secret's data never reaches the
//! page.

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::ObjectRef;
use serde::Serialize;
use serde_json::Value;

use super::graph::{self, Graph};
use super::live::Live;
use crate::run::tree::{self, View};
use crds::names::conditions;
use crds::{Composition, Synthesis};

/// How many Events are shown (the most recent).
const EVENTS: usize = 20;

/// The page of one Composition.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Detail {
    pub view: View,
    pub graph: Graph,
    pub inputs: Vec<Input>,
    pub synthesis: Option<SynthesisView>,
    pub in_flight: Option<SynthesisView>,
    pub events: Vec<EventView>,
    /// Why the Events are not shown (e.g. 403).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_note: Option<String>,
}

/// One input: the binding, the ref's kind, the revision last read.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Input {
    pub key: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub resource_version: String,
    pub revision: Option<i64>,
}

/// A synthesis: when, which module, what it reported.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SynthesisView {
    pub uuid: String,
    pub initialized: String,
    pub synthesized: String,
    pub reconciled: String,
    pub ready: String,
    pub canceled: String,
    pub attempts: i64,
    pub module_digest: String,
    pub synthesizer_generation: Option<i64>,
    /// `severity: message` of each result.
    pub results: Vec<String>,
}

/// One Event.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    pub last_seen: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub message: String,
    pub count: i64,
}

/// The page of `namespace/name` (None when it does not exist).
///
/// # Errors
/// The Composition or its slices cannot be read (forbidden, unreachable); the message names
/// what.
pub async fn detail(
    (client, target): (&kube::Client, &kube::Client),
    live: &Live,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Option<Detail>> {
    let Some(comp) = Api::<Composition>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| crate::verbs::api_error(&format!("Composition {namespace}/{name}"), e))?
    else {
        return Ok(None);
    };
    let view = tree::gather(client, target, namespace, name).await?;
    let mut depends_on: Vec<(String, bool)> = Vec::new();
    for d in &comp.spec.depends_on {
        let ns = d.namespace.clone().unwrap_or_else(|| namespace.to_string());
        // From the cache; a namespace outside the page's scope from the API server (missing,
        // forbidden or unreadable: not ready).
        let cached = live.compositions.get(&ObjectRef::new(&d.name).within(&ns));
        let ready = match cached {
            Some(c) => is_ready(&c),
            None if live.covers(&ns) => false,
            None => Api::<Composition>::namespaced(client.clone(), &ns)
                .get_opt(&d.name)
                .await
                .ok()
                .flatten()
                .is_some_and(|c| is_ready(&c)),
        };
        depends_on.push((format!("{ns}/{}", d.name), ready));
    }
    let (events, events_note) = match events(client, namespace, name).await {
        Ok(e) => (e, None),
        Err(e) => (Vec::new(), Some(format!("{e:#}"))),
    };
    let status = comp.status.clone().unwrap_or_default();
    Ok(Some(Detail {
        graph: graph::graph(&view, &depends_on),
        view,
        inputs: inputs(&comp, live),
        synthesis: status.current_synthesis.as_ref().map(synthesis),
        in_flight: status.in_flight_synthesis.as_ref().map(synthesis),
        events,
        events_note,
    }))
}

fn is_ready(c: &Composition) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|k| k.type_ == conditions::READY && k.status == "True")
    })
}

/// The bindings with their ref's kind and the revision last read.
fn inputs(comp: &Composition, live: &Live) -> Vec<Input> {
    let synth = live
        .synthesizers
        .get(&ObjectRef::new(&comp.spec.synthesizer.name));
    let revisions = comp
        .status
        .as_ref()
        .map(|s| s.input_revisions.clone())
        .unwrap_or_default();
    let namespace = comp.metadata.namespace.clone().unwrap_or_default();
    comp.spec
        .bindings
        .iter()
        .map(|b| {
            let kind = synth
                .as_ref()
                .and_then(|s| s.spec.refs.iter().find(|r| r.key == b.key))
                .and_then(|r| r.resource.as_ref().map(|r| r.kind.clone()))
                .unwrap_or_default();
            let rev = revisions.iter().find(|r| r.key == b.key);
            Input {
                key: b.key.clone(),
                kind,
                namespace: b
                    .resource
                    .namespace
                    .clone()
                    .unwrap_or_else(|| namespace.clone()),
                name: b.resource.name.clone(),
                resource_version: rev
                    .and_then(|r| r.resource_version.clone())
                    .unwrap_or_default(),
                revision: rev.and_then(|r| r.revision),
            }
        })
        .collect()
}

fn synthesis(s: &Synthesis) -> SynthesisView {
    let time = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.as_ref().map(|t| t.0.to_string()).unwrap_or_default()
    };
    SynthesisView {
        uuid: s.uuid.clone(),
        initialized: time(&s.initialized),
        synthesized: time(&s.synthesized),
        reconciled: time(&s.reconciled),
        ready: time(&s.ready),
        canceled: time(&s.canceled),
        attempts: s.attempts,
        module_digest: s.module_digest.clone().unwrap_or_default(),
        synthesizer_generation: s.observed_synthesizer_generation,
        results: s
            .results
            .iter()
            .map(|r| format!("{}: {}", r.severity, r.message))
            .collect(),
    }
}

/// The Composition's most recent Events, newest first.
async fn events(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Vec<EventView>> {
    let selector = format!(
        "involvedObject.kind={},involvedObject.name={name}",
        crds::names::kinds::COMPOSITION
    );
    let list = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields(&selector))
        .await
        .map_err(|e| crate::verbs::api_error("listing Events", e))?;
    let mut items: Vec<Value> = list
        .items
        .iter()
        .filter_map(|e| serde_json::to_value(e).ok())
        .collect();
    items.sort_by_key(|e| std::cmp::Reverse(crate::verbs::last_seen(e)));
    items.truncate(EVENTS);
    Ok(items
        .iter()
        .map(|e| EventView {
            last_seen: crate::verbs::last_seen(e),
            type_: crate::verbs::text(e, "/type"),
            reason: crate::verbs::text(e, "/reason"),
            message: crate::verbs::text(e, "/message"),
            count: e
                .pointer("/series/count")
                .or_else(|| e.pointer("/count"))
                .and_then(Value::as_i64)
                .unwrap_or(1),
        })
        .collect())
}
