//! `enoki status`: why a Composition is (not) Ready — the readiness-group DAG of its current
//! synthesis with each resource's state, the readiness expression that is not yet true, and
//! what blocks the next synthesis (the references are `flux tree` and `crossplane beta
//! trace`). [`gather`] reads the Composition, its ResourceSlices and each live object;
//! [`view`] is pure and decides the states; `tree/render.rs` prints text, JSON or Graphviz.

use std::collections::BTreeMap;

use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use serde_json::Value;

use crds::ConditionStatus;
use crds::names::conditions;
use crds::{Composition, ResourceSlice};
use plan::readiness::{self, ReadinessCheck, ReadinessState};
use plan::{ResourceKey, settings};

mod model;
mod next;
mod render;
pub use model::*;
pub use render::*;

/// A live object as [`view`] takes it: the object, or why it could not be read.
pub type Live = Result<Option<Value>, String>;

/// One manifest of the current synthesis as [`view`] takes it.
pub struct Entry {
    /// The manifest (JSON).
    pub manifest: Value,
    /// The slice's status for it.
    pub status: crds::ResourceState,
    /// The manifest is a tombstone (no longer emitted).
    pub deleted: bool,
}

/// The states of `entries` (`live` gives each live object, `None` when absent). Pure.
pub fn view(
    comp: &Composition,
    entries: &[Entry],
    live: &dyn Fn(&ResourceKey, &str) -> Live,
) -> View {
    let composition_annotations: BTreeMap<String, String> = comp
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let mut resources: Vec<(Resource, bool)> = entries
        .iter()
        .filter_map(|e| resource_view(e, &composition_annotations, live))
        .collect();
    resources.sort_by_key(|(r, _)| r.group);
    defer_behind_unready_groups(&mut resources);
    let st = comp.status.clone().unwrap_or_default();
    let condition_views: Vec<ConditionView> = st
        .conditions
        .iter()
        .map(|c| ConditionView {
            type_: c.type_.clone(),
            status: reconciler_core::condition::status_of(c),
            reason: c.reason.clone(),
            message: c.message.clone(),
        })
        .collect();
    let ready = condition_views
        .iter()
        .any(|c| c.type_ == conditions::READY && c.status == ConditionStatus::True);
    View {
        namespace: comp.metadata.namespace.clone().unwrap_or_default(),
        name: comp.metadata.name.clone().unwrap_or_default(),
        synthesizer: comp.spec.synthesizer.name.clone(),
        ready,
        next: next::next(comp.spec.suspend, &st, &condition_views),
        synthesis: st.current_synthesis.as_ref().map(|s| s.uuid.clone()),
        synthesized: st
            .current_synthesis
            .as_ref()
            .and_then(|s| s.synthesized.as_ref())
            .map(|t| t.0.to_string()),
        conditions: condition_views,
        resources: resources.into_iter().map(|(r, _)| r).collect(),
        note: None,
        revision: None,
    }
}

/// One entry of the synthesis as the tree shows it, and whether it was applied for it.
fn resource_view(
    e: &Entry,
    composition_annotations: &BTreeMap<String, String>,
    live: &dyn Fn(&ResourceKey, &str) -> Live,
) -> Option<(Resource, bool)> {
    let key = ResourceKey::of(&e.manifest).ok()?;
    let annotations = plan::plan::annotations_of(&e.manifest);
    let patch = plan::plan::patch_target(&e.manifest).ok().flatten();
    let kind = patch
        .as_ref()
        .map_or(key.kind.as_str(), |(_, k)| k.as_str());
    let settings =
        settings::parse_as(&key, kind, &annotations, composition_annotations).unwrap_or_default();
    let named = settings::readiness_annotations(&annotations);
    let checks: Vec<ReadinessCheck> = named
        .iter()
        .filter_map(|(name, k, cel)| {
            plan::expr::Expr::compile(cel)
                .ok()
                .map(|expr| ReadinessCheck {
                    name: name.clone(),
                    expr,
                    eno: k.starts_with(crds::names::ENO_PREFIX),
                })
        })
        .collect();
    let api_version = e
        .manifest
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let state = state_of(
        e,
        &key,
        &api_version,
        (&checks, settings.health),
        &named,
        live,
    );
    Some((
        Resource {
            api_version,
            kind: key.kind.clone(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
            group: settings.readiness_group,
            checks: named
                .iter()
                .map(|(n, _, cel)| format!("{n}: {cel}"))
                .collect(),
            defines: defined_kind(&e.manifest),
            state,
        },
        e.status.reconciled,
    ))
}

/// The `group/Kind` a CustomResourceDefinition manifest defines.
fn defined_kind(manifest: &Value) -> Option<String> {
    if manifest.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
        return None;
    }
    let spec = manifest.get("spec")?;
    let group = spec.get("group").and_then(Value::as_str)?;
    let kind = spec.pointer("/names/kind").and_then(Value::as_str)?;
    Some(format!("{group}/{kind}"))
}

/// The state of an entry: deleting, failed, ready or pending as recorded; else its live
/// object's readiness (`checks` and the health rule), unsatisfied checks with their
/// expressions.
fn state_of(
    e: &Entry,
    key: &ResourceKey,
    api_version: &str,
    (checks, health): (&[ReadinessCheck], settings::Health),
    named: &[(String, String, String)],
    live: &dyn Fn(&ResourceKey, &str) -> Live,
) -> State {
    if e.deleted || e.status.deleted {
        State::Deleting
    } else if let Some(reason) = e.status.error.clone() {
        State::Failed { reason }
    } else if e.status.ready.is_some() {
        State::Ready
    } else if !e.status.reconciled {
        // Not applied for this synthesis yet: a live object is an older synthesis's.
        State::Pending
    } else {
        match live(key, api_version) {
            Err(reason) => State::Unreadable { reason },
            Ok(object) => match readiness::evaluate(checks, health, object.as_ref()) {
                ReadinessState::Ready { .. } => State::Ready,
                ReadinessState::NotReady { unsatisfied } => State::Waiting {
                    unsatisfied: unsatisfied
                        .iter()
                        .map(|u| with_expression(u, named))
                        .collect(),
                },
                ReadinessState::Absent => State::Pending,
            },
        }
    }
}

/// A resource not applied yet whose group comes after a group that is not all ready waits on
/// that group (the first such group).
fn defer_behind_unready_groups(resources: &mut [(Resource, bool)]) {
    let mut blocking: Option<i64> = None;
    let mut i = 0;
    while i < resources.len() {
        let group = resources[i].0.group;
        let end = resources[i..]
            .iter()
            .position(|(r, _)| r.group != group)
            .map_or(resources.len(), |p| i + p);
        if let Some(b) = blocking {
            for (r, reconciled) in &mut resources[i..end] {
                if !*reconciled && r.state == State::Pending {
                    r.state = State::Deferred { waits_on: b };
                }
            }
        }
        let all_ready = resources[i..end]
            .iter()
            .all(|(r, _)| matches!(r.state, State::Ready | State::Deleting));
        if blocking.is_none() && !all_ready {
            blocking = Some(group);
        }
        i = end;
    }
}

/// `name: expression` for an unsatisfied check (its reason kept).
fn with_expression(unsatisfied: &str, named: &[(String, String, String)]) -> String {
    let name = unsatisfied.split(" (").next().unwrap_or(unsatisfied);
    match named.iter().find(|(n, _, _)| n == name) {
        Some((_, _, cel)) => format!("{unsatisfied}: {cel}"),
        None => unsatisfied.to_string(),
    }
}

/// Reads Composition `namespace/name` and the ResourceSlices of its current synthesis from
/// `client`, and the live object of each resource still waiting from `target` (the cluster
/// emitted objects go to: the same, or `--remote-kubeconfig`'s), and returns its [`view`].
/// Discovery is cached per kind; ready, failed and unapplied resources need no read.
///
/// # Errors
/// The Composition cannot be read (it does not exist, or access is denied), or a slice read
/// fails for another reason than absence.
pub async fn gather(
    client: &kube::Client,
    target: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<View> {
    let comps: Api<Composition> = Api::namespaced(client.clone(), namespace);
    let comp = comps
        .get_opt(name)
        .await
        .map_err(|e| anyhow::anyhow!("reading Composition {namespace}/{name}: {e}"))?
        .ok_or_else(|| anyhow::anyhow!("Composition {namespace}/{name} does not exist"))?;
    let slices: Api<ResourceSlice> = Api::namespaced(client.clone(), namespace);
    let refs = comp
        .status
        .as_ref()
        .and_then(|s| s.current_synthesis.as_ref())
        .map(|s| s.resource_slices.clone())
        .unwrap_or_default();
    let mut entries = Vec::new();
    for r in refs {
        let slice = match slices.get_opt(&r.name).await {
            Ok(Some(slice)) => slice,
            Ok(None) => continue,
            // `view` may read Compositions but not slices (they hold rendered Secrets): the
            // conditions and the next synthesis are still worth showing.
            Err(kube::Error::Api(e)) if e.code == 403 => {
                let mut v = view(&comp, &[], &|_, _| Ok(None));
                v.note = Some(format!(
                    "the resources are not shown: reading ResourceSlices is forbidden for this \
                     account ({}); `edit` in the namespace may read them",
                    e.message
                ));
                return Ok(v);
            }
            Err(e) => anyhow::bail!("reading ResourceSlice {namespace}/{}: {e}", r.name),
        };
        let states = slice.status.map(|s| s.resources).unwrap_or_default();
        for (i, m) in slice.spec.resources.iter().enumerate() {
            let Ok(manifest) = serde_json::from_str::<Value>(&m.manifest) else {
                continue;
            };
            entries.push(Entry {
                manifest,
                status: states.get(i).cloned().unwrap_or_default(),
                deleted: m.deleted,
            });
        }
    }
    let mut discovery = BTreeMap::new();
    let mut live = BTreeMap::new();
    for e in &entries {
        let waiting = !e.deleted
            && !e.status.deleted
            && e.status.reconciled
            && e.status.ready.is_none()
            && e.status.error.is_none();
        let Ok(key) = ResourceKey::of(&e.manifest) else {
            continue;
        };
        if waiting {
            let object = live_object(target, &mut discovery, &key, &e.manifest).await;
            live.insert(key.to_string(), object);
        }
    }
    let lookup =
        |key: &ResourceKey, _: &str| live.get(&key.to_string()).cloned().unwrap_or(Ok(None));
    let mut v = view(&comp, &entries, &lookup);
    // A Synthesizer this account may not read (a tenant): the revision the status records.
    let synths: Api<crds::Synthesizer> = Api::all(client.clone());
    v.revision = match synths.get_opt(&comp.spec.synthesizer.name).await {
        Ok(Some(synth)) => super::rollout::describe(&comp, &synth),
        _ => comp
            .status
            .as_ref()
            .and_then(|s| s.current_synthesis.as_ref()?.synthesizer_revision)
            .map(|n| format!("revision {n} of Synthesizer {}", comp.spec.synthesizer.name)),
    };
    Ok(v)
}

/// The live object of `key` (a Patch's target for a Patch): `Ok(None)` when absent or its kind
/// is not served, `Err` when the read is refused.
async fn live_object(
    client: &kube::Client,
    discovery: &mut BTreeMap<String, Option<(kube::api::ApiResource, kube::discovery::Scope)>>,
    key: &ResourceKey,
    manifest: &Value,
) -> Live {
    let (api_version, kind) = match plan::plan::patch_target(manifest) {
        Ok(Some(target)) => target,
        _ => (
            manifest["apiVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            key.kind.clone(),
        ),
    };
    let (group, version) = api_version
        .split_once('/')
        .unwrap_or(("", api_version.as_str()));
    let gvk = GroupVersionKind::gvk(group, version, &kind);
    let cache_key = format!("{api_version}/{kind}");
    if !discovery.contains_key(&cache_key) {
        let found = match kube::discovery::pinned_kind(client, &gvk).await {
            Ok((resource, caps)) => Some((resource, caps.scope)),
            // The kind is not served: the object cannot exist.
            Err(kube::Error::Discovery(_)) => None,
            // Discovery itself failed (403, an aggregated API down): say so.
            Err(e) => return Err(format!("discovering {api_version} {kind}: {e}")),
        };
        discovery.insert(cache_key.clone(), found);
    }
    let Some(Some((resource, scope))) = discovery.get(&cache_key) else {
        return Ok(None);
    };
    let api: Api<DynamicObject> = match scope {
        kube::discovery::Scope::Namespaced => {
            Api::namespaced_with(client.clone(), &key.namespace, resource)
        }
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), resource),
    };
    match api.get_opt(&key.name).await {
        Ok(object) => Ok(object.and_then(|o| serde_json::to_value(o).ok())),
        Err(kube::Error::Api(e)) => Err(format!("reading it: {} ({})", e.message, e.code)),
        Err(e) => Err(format!("reading it: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[allow(clippy::needless_pass_by_value)] // called with `json!` temporaries
    fn comp(status: Value) -> Composition {
        serde_json::from_value(
            json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
            "metadata": {"name": "web", "namespace": "team-a"},
            "spec": {"synthesizer": {"name": "web-synth"}}, "status": status}),
        )
        .unwrap()
    }

    fn cm(name: &str, group: i64, readiness: Option<&str>) -> Value {
        let mut annotations = json!({"enoki.dev/readiness-group": group.to_string()});
        if let Some(r) = readiness {
            annotations["enoki.dev/readiness"] = json!(r);
        }
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "team-a", "annotations": annotations}})
    }

    fn entry(manifest: Value, reconciled: bool, ready: bool) -> Entry {
        Entry {
            manifest,
            status: crds::ResourceState {
                reconciled,
                ready: ready.then(|| {
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        "2026-01-01T00:00:00Z".parse().unwrap(),
                    )
                }),
                ..Default::default()
            },
            deleted: false,
        }
    }

    #[test]
    fn a_failing_check_in_group_one_holds_group_two_and_is_named_with_its_expression() {
        let c = comp(json!({"conditions": [
            {"type": "Ready", "status": "False", "reason": "NotReady", "message": "waiting",
             "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Synthesized", "status": "True", "reason": "Synthesized", "message": "ok",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}));
        let entries = vec![
            entry(cm("zero", 0, None), true, true),
            entry(cm("one", 1, Some("has(self.data.ok)")), true, false),
            entry(cm("two", 2, None), false, false),
        ];
        let live = |k: &ResourceKey, _: &str| {
            Ok((k.name != "two").then(|| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": k.name, "namespace": "team-a"}, "data": {}})
            }))
        };
        let v = view(&c, &entries, &live);
        let states: Vec<&State> = v.resources.iter().map(|r| &r.state).collect();
        assert_eq!(states[0], &State::Ready);
        assert_eq!(
            states[1],
            &State::Waiting {
                unsatisfied: vec!["default: has(self.data.ok)".into()]
            }
        );
        assert_eq!(states[2], &State::Deferred { waits_on: 1 });
        assert!(!v.ready);
        assert_eq!(v.next.state, "up-to-date");
    }

    #[test]
    fn an_unapplied_resource_is_pending_whatever_an_older_object_says_and_a_refused_read_is_named()
    {
        let c = comp(json!({}));
        let entries = vec![
            entry(cm("old", 0, Some("true")), false, false),
            entry(cm("hidden", 0, Some("true")), true, false),
        ];
        let live = |k: &ResourceKey, _: &str| {
            if k.name == "hidden" {
                Err("reading it: forbidden (403)".to_string())
            } else {
                Ok(Some(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": k.name, "namespace": "team-a"}})))
            }
        };
        let v = view(&c, &entries, &live);
        assert_eq!(v.resources[0].state, State::Pending);
        assert_eq!(
            v.resources[1].state,
            State::Unreadable {
                reason: "reading it: forbidden (403)".into()
            }
        );
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["resources"][1]["state"], "unreadable");
    }

    #[test]
    fn a_blocked_next_synthesis_names_its_reason() {
        let c = comp(json!({"conditions": [
            {"type": "Synthesized", "status": "False", "reason": "ModuleUnavailable",
             "message": "spec.module.oci: unauthorized", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}));
        let v = view(&c, &[], &|_, _| Ok(None));
        assert_eq!(v.next.state, "blocked");
        assert_eq!(v.next.reason.as_deref(), Some("ModuleUnavailable"));
        let c = comp(json!({"dependencyStatus": {"blocked": true,
            "blockedBy": [{"name": "db", "namespace": "team-a", "reason": "NotReady"}]}}));
        let v = view(&c, &[], &|_, _| Ok(None));
        assert_eq!(v.next.state, "blocked");
        assert!(v.next.message.unwrap().contains("team-a/db"));
    }
}
