//! `--migrating-field-managers` with `--migrating-fields` (Eno's flags of the same names):
//! moving a cluster from another tool (Eno's manager is `eno`) to enoki without field
//! conflicts or orphaned fields.
//!
//! Server-side apply gives every field an owner. After enoki's first apply of an object that
//! another tool applied, the fields enoki's manifest no longer contains stay owned by the old
//! manager, so enoki would never remove them. When an applied object carries `managedFields`
//! entries of a migrating manager that own fields under a migrating path (`spec`, `data`,
//! `metadata.labels`: the path and everything under it), those fields are merged into enoki's
//! `Apply` entry and the manager keeps the rest (its entry is dropped when nothing is left) —
//! one patch of `metadata.managedFields`, guarded by the object's resourceVersion — and the
//! manifest is applied again, which prunes what enoki no longer emits. As in Eno, nothing
//! migrates unless both flags are set. Objects without such fields cost nothing extra.

use serde_json::{Map, Value, json};

use crds::names::FIELD_MANAGER;

/// A `fieldsV1` trie (`{"f:data": {"f:a": {}}}`).
type Fields = Map<String, Value>;

/// Who and what migrates.
#[derive(Clone, Copy, Debug, Default)]
pub struct Migration<'a> {
    /// `--migrating-field-managers`.
    pub managers: &'a [String],
    /// `--migrating-fields`, as path segments.
    pub fields: &'a [Vec<String>],
}

impl Migration<'_> {
    /// Both flags are set.
    pub fn is_on(&self) -> bool {
        !self.managers.is_empty() && !self.fields.is_empty()
    }
}

/// The `managedFields` of `object` with the fields a migrating manager owns under a migrating
/// path merged into enoki's `Apply` entry (created if missing); `None` when there are none.
/// Pure.
pub fn merged_managed_fields(object: &Value, m: Migration<'_>) -> Option<Value> {
    if !m.is_on() {
        return None;
    }
    let entries = object.pointer("/metadata/managedFields")?.as_array()?;
    let is_migrating = |e: &Value| {
        e.get("manager")
            .and_then(Value::as_str)
            .is_some_and(|x| m.managers.iter().any(|y| y == x))
    };
    let prefixes: Vec<&[String]> = m.fields.iter().map(Vec::as_slice).collect();
    let empty = Map::new();
    // Each migrating entry split into (what moves to enoki, what its manager keeps).
    let split: Vec<(usize, Fields, Fields)> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| is_migrating(e))
        .map(|(i, e)| {
            let fields = e
                .get("fieldsV1")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            let (moving, kept) = split_by_prefix(fields, &prefixes);
            (i, moving, kept)
        })
        .collect();
    if split.iter().all(|(_, moving, _)| moving.is_empty()) {
        return None;
    }
    let is_ours = |e: &Value| {
        e.get("manager").and_then(Value::as_str) == Some(FIELD_MANAGER)
            && e.get("operation").and_then(Value::as_str) == Some("Apply")
    };
    let mut fields = entries
        .iter()
        .find(|e| is_ours(e))
        .and_then(|e| e.get("fieldsV1").cloned())
        .unwrap_or_else(|| json!({}));
    for (_, moving, _) in &split {
        merge(&mut fields, &Value::Object(moving.clone()));
    }
    let template = entries
        .iter()
        .find(|e| is_ours(e))
        .cloned()
        .unwrap_or_else(|| {
            json!({"manager": FIELD_MANAGER, "operation": "Apply",
               "apiVersion": object.get("apiVersion").cloned().unwrap_or(Value::Null),
               "fieldsType": "FieldsV1"})
        });
    let mut ours = template;
    ours["fieldsV1"] = fields;
    let mut out: Vec<Value> = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        if is_ours(e) {
            continue;
        }
        match split.iter().find(|(j, _, _)| *j == i) {
            None => out.push(e.clone()),
            Some((_, _, kept)) if kept.is_empty() => {}
            Some((_, _, kept)) => {
                let mut trimmed = e.clone();
                trimmed["fieldsV1"] = Value::Object(kept.clone());
                out.push(trimmed);
            }
        }
    }
    out.push(ours);
    Some(Value::Array(out))
}

/// A `fieldsV1` trie split into (under one of `prefixes`, the rest). A prefix names the field
/// and everything below it; a shorter path (an ancestor, or the `.` of an ancestor) is the
/// rest, as in Eno.
fn split_by_prefix(node: &Fields, prefixes: &[&[String]]) -> (Fields, Fields) {
    let (mut under, mut rest) = (Map::new(), Map::new());
    let empty = Map::new();
    for (k, child) in node {
        let name = k.strip_prefix("f:");
        let tails: Vec<&[String]> = prefixes
            .iter()
            .filter(|p| !p.is_empty() && name == Some(p[0].as_str()))
            .map(|p| &p[1..])
            .collect();
        if tails.iter().any(|t| t.is_empty()) {
            under.insert(k.clone(), child.clone());
        } else if tails.is_empty() {
            rest.insert(k.clone(), child.clone());
        } else {
            let (u, r) = split_by_prefix(child.as_object().unwrap_or(&empty), &tails);
            if !u.is_empty() {
                under.insert(k.clone(), Value::Object(u));
            }
            if !r.is_empty() {
                rest.insert(k.clone(), Value::Object(r));
            }
        }
    }
    (under, rest)
}

/// Union of two `fieldsV1` tries (`{"f:data": {"f:a": {}}}`).
fn merge(into: &mut Value, from: &Value) {
    let (Some(into), Some(from)) = (into.as_object_mut(), from.as_object()) else {
        return;
    };
    for (k, v) in from {
        match into.get_mut(k) {
            Some(existing) => merge(existing, v),
            None => {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(p: &[&str]) -> Vec<Vec<String>> {
        p.iter()
            .map(|s| s.split('.').map(str::to_string).collect())
            .collect()
    }

    /// Eno's `--migrating-fields`: only the listed paths move; the manager keeps the rest.
    #[test]
    fn a_migrating_managers_fields_under_the_paths_become_enokis() {
        let object = json!({"apiVersion": "v1", "metadata": {"managedFields": [
            {"manager": "eno", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:x": {}}}}},
            {"manager": "enoki", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:a": {}}}},
            {"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:c": {}}}}
        ]}});
        let managers = ["eno".to_string()];
        let fields = paths(&["data"]);
        let m = Migration {
            managers: &managers,
            fields: &fields,
        };
        let merged = merged_managed_fields(&object, m).unwrap();
        let merged = merged.as_array().unwrap();
        assert_eq!(merged.len(), 3, "{merged:?}");
        assert_eq!(merged[0]["manager"], "eno");
        assert_eq!(
            merged[0]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {"f:x": {}}}})
        );
        assert_eq!(merged[1]["manager"], "kubectl");
        assert_eq!(
            merged[2]["fieldsV1"],
            json!({"f:data": {"f:a": {}, "f:b": {}}})
        );
        // Both paths: eno's entry is gone.
        let fields = paths(&["data", "metadata.labels"]);
        let m = Migration {
            managers: &managers,
            fields: &fields,
        };
        let merged = merged_managed_fields(&object, m).unwrap();
        assert!(
            merged
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["manager"] != "eno")
        );
        // An ancestor is not under the path; nothing under it: nothing to do.
        let fields = paths(&["metadata.labels.y", "spec"]);
        let m = Migration {
            managers: &managers,
            fields: &fields,
        };
        assert!(merged_managed_fields(&object, m).is_none());
        // Managers without fields (or the reverse) migrate nothing, as in Eno.
        let m = Migration {
            managers: &managers,
            fields: &[],
        };
        assert!(merged_managed_fields(&object, m).is_none());
        let other = ["helm".to_string()];
        let fields = paths(&["data"]);
        let m = Migration {
            managers: &other,
            fields: &fields,
        };
        assert!(merged_managed_fields(&object, m).is_none());
        // No enoki entry yet: one is made.
        let only_eno = json!({"apiVersion": "v1", "metadata": {"managedFields": [
            {"manager": "eno", "operation": "Apply", "fieldsV1": {"f:data": {"f:z": {}}}}]}});
        let m = Migration {
            managers: &managers,
            fields: &fields,
        };
        let merged = merged_managed_fields(&only_eno, m).unwrap();
        assert_eq!(merged[0]["manager"], "enoki");
        assert_eq!(merged[0]["operation"], "Apply");
    }
}
