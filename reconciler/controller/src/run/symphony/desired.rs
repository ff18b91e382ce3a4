//! The Compositions a Symphony asks for: variations in dependency order, their merged
//! bindings and env, the Composition each one makes, and which metadata keys it applied.

use super::*;

/// Variations in dependency order; the second list are those caught in a cycle (or depending
/// on one), which are not created.
pub(super) fn topo_order(variations: &[Variation]) -> (Vec<&Variation>, Vec<&Variation>) {
    let names: BTreeSet<&str> = variations
        .iter()
        .map(|v| v.synthesizer.name.as_str())
        .collect();
    let mut placed: BTreeSet<&str> = BTreeSet::new();
    let mut order = Vec::new();
    loop {
        let before = order.len();
        for v in variations {
            let n = v.synthesizer.name.as_str();
            if placed.contains(n) {
                continue;
            }
            let deps_placed = v
                .depends_on
                .iter()
                .filter(|d| names.contains(d.synthesizer.as_str()))
                .all(|d| placed.contains(d.synthesizer.as_str()));
            if deps_placed {
                placed.insert(n);
                order.push(v);
            }
        }
        if order.len() == before {
            break;
        }
    }
    let stuck = variations
        .iter()
        .filter(|v| !placed.contains(v.synthesizer.name.as_str()))
        .collect();
    (order, stuck)
}

pub(super) fn merged_bindings(base: &[Binding], over: &[Binding]) -> Vec<Binding> {
    let mut by_key: BTreeMap<&str, &Binding> = base.iter().map(|b| (b.key.as_str(), b)).collect();
    for b in over {
        by_key.insert(b.key.as_str(), b);
    }
    by_key.into_values().cloned().collect()
}

pub(super) fn merged_env(base: &[EnvVar], over: &[EnvVar]) -> Vec<EnvVar> {
    let mut by_name: BTreeMap<&str, &EnvVar> = base.iter().map(|e| (e.name.as_str(), e)).collect();
    for e in over {
        by_name.insert(e.name.as_str(), e);
    }
    by_name.into_values().cloned().collect()
}

/// The Composition a variation asks for (applied with server-side apply once
/// [`prune_metadata`] found nothing to remove).
pub(super) fn desired_composition(sym: &Symphony, v: &Variation) -> serde_json::Value {
    let sym_name = sym.name_any();
    let siblings: BTreeSet<&str> = sym
        .spec
        .variations
        .iter()
        .map(|v| v.synthesizer.name.as_str())
        .collect();
    let mut labels_out: BTreeMap<String, String> = v
        .labels
        .iter()
        .filter(|(_, val)| !val.is_empty())
        .map(|(k, val)| (k.clone(), val.clone()))
        .collect();
    labels_out.insert(labels::SYMPHONY.into(), super::symphony_label(&sym_name));
    let annotations: BTreeMap<String, String> = v
        .annotations
        .iter()
        .filter(|(_, val)| !val.is_empty())
        .map(|(k, val)| (k.clone(), val.clone()))
        .collect();
    let spec = CompositionSpec {
        synthesizer: v.synthesizer.clone(),
        bindings: merged_bindings(&sym.spec.bindings, &v.bindings),
        synthesis_env: merged_env(&sym.spec.synthesis_env, &v.synthesis_env),
        depends_on: v
            .depends_on
            .iter()
            .filter(|d| siblings.contains(d.synthesizer.as_str()))
            .map(|d| CompositionRef {
                name: composition_name(&sym_name, &d.synthesizer),
                namespace: None,
            })
            .collect(),
        allow_empty: false,
        service_account_name: sym.spec.service_account_name.clone(),
        suspend: false,
    };
    let owner = OwnerReference {
        api_version: Symphony::api_version(&()).into(),
        kind: Symphony::kind(&()).into(),
        name: sym_name.clone(),
        uid: sym.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let mut desired = json!({
        "apiVersion": Composition::api_version(&()),
        "kind": Composition::kind(&()),
        "metadata": {
            "name": composition_name(&sym_name, &v.synthesizer.name),
            "labels": labels_out,
            "ownerReferences": [owner],
        },
        "spec": spec,
    });
    // An empty map would make the map itself this manager's, and another manager's
    // annotation a conflict.
    if !annotations.is_empty() {
        desired["metadata"]["annotations"] = json!(annotations);
    }
    desired
}
/// Whether applying `desired` would change nothing on `live`: the same spec (but `suspend`,
/// which the Symphony leaves to its members' users), every label and
/// annotation asked for there with its value and applied by this controller (so a later
/// removal is pruned), and the Symphony its controlling owner. Pure.
pub(super) fn up_to_date(live: &Composition, desired: &serde_json::Value) -> bool {
    let Ok(mut spec) = serde_json::from_value::<CompositionSpec>(desired["spec"].clone()) else {
        return false;
    };
    // A member suspended by hand (`enoki suspend`) stays so: the Symphony does not own it.
    spec.suspend = live.spec.suspend;
    let (mine_annotations, mine_labels) = applied_keys(live);
    let holds =
        |have: &BTreeMap<String, String>, want: &serde_json::Value, mine: &BTreeSet<String>| {
            want.as_object()
                .into_iter()
                .flatten()
                .all(|(k, v)| have.get(k).map(String::as_str) == v.as_str() && mine.contains(k))
        };
    let owner = desired["metadata"]["ownerReferences"][0]["uid"].as_str();
    live.metadata.deletion_timestamp.is_none()
        && live.spec == spec
        && holds(live.labels(), &desired["metadata"]["labels"], &mine_labels)
        && holds(
            live.annotations(),
            &desired["metadata"]["annotations"],
            &mine_annotations,
        )
        && live
            .owner_references()
            .iter()
            .any(|o| Some(o.uid.as_str()) == owner && o.controller == Some(true))
}
/// The keys of `live` to remove (each mapped to `null` for a merge patch): those the variation
/// asks to be `""`, and those this controller applied (`mine`) but `want` no longer has. Pure.
pub(super) fn stale_keys(
    live: &BTreeMap<String, String>,
    asked: &BTreeMap<String, String>,
    want: &serde_json::Value,
    mine: &BTreeSet<String>,
) -> serde_json::Map<String, serde_json::Value> {
    live.keys()
        // What the Composition is to carry (the `enoki.dev/symphony` label among it) stays.
        .filter(|k| want.get(k.as_str()).is_none())
        .filter(|k| asked.get(*k).is_some_and(String::is_empty) || mine.contains(*k))
        .map(|k| (k.clone(), serde_json::Value::Null))
        .collect()
}

/// The annotation and label keys the Symphony controller owns on `c` through its applies.
pub(super) fn applied_keys(c: &Composition) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut out = (BTreeSet::new(), BTreeSet::new());
    let ours = c.metadata.managed_fields.iter().flatten().filter(|e| {
        e.manager.as_deref() == Some(SYMPHONY_FIELD_MANAGER)
            && e.operation.as_deref() == Some("Apply")
    });
    for e in ours {
        let Some(f) = e.fields_v1.as_ref() else {
            continue;
        };
        for (slot, set) in [("f:annotations", &mut out.0), ("f:labels", &mut out.1)] {
            if let Some(m) = f.0["f:metadata"][slot].as_object() {
                set.extend(
                    m.keys()
                        .filter_map(|k| k.strip_prefix("f:"))
                        .map(String::from),
                );
            }
        }
    }
    out
}
