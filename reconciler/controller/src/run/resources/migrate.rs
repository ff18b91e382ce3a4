//! `--migrating-field-managers` (Eno's flag of the same name): moving a cluster from another
//! tool (Eno's manager is `eno`) to enoki without field conflicts or orphaned fields.
//!
//! Server-side apply gives every field an owner. After enoki's first apply of an object that
//! another tool applied, the fields enoki's manifest no longer contains stay owned by the old
//! manager, so enoki would never remove them. When an applied object still carries
//! `managedFields` entries of a migrating manager, their field sets are merged into enoki's
//! `Apply` entry and the entries dropped (one patch of `metadata.managedFields`), then the
//! manifest is applied again, which prunes what enoki no longer emits. Objects without such
//! entries cost nothing extra.

use serde_json::{Value, json};

use crds::names::FIELD_MANAGER;

/// The `managedFields` of `object` with every entry of a `migrating` manager merged into
/// enoki's `Apply` entry (created if missing); `None` when there is no such entry. Pure.
pub(crate) fn merged_managed_fields(object: &Value, migrating: &[String]) -> Option<Value> {
    let entries = object.pointer("/metadata/managedFields")?.as_array()?;
    let is_migrating = |e: &Value| {
        e.get("manager")
            .and_then(Value::as_str)
            .is_some_and(|m| migrating.iter().any(|x| x == m))
    };
    if !entries.iter().any(is_migrating) {
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
    for e in entries.iter().filter(|e| is_migrating(e)) {
        if let Some(theirs) = e.get("fieldsV1") {
            merge(&mut fields, theirs);
        }
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
    let mut out: Vec<Value> = entries
        .iter()
        .filter(|e| !is_migrating(e) && !is_ours(e))
        .cloned()
        .collect();
    out.push(ours);
    Some(Value::Array(out))
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

    #[test]
    fn a_migrating_managers_fields_become_enokis() {
        let object = json!({"apiVersion": "v1", "metadata": {"managedFields": [
            {"manager": "eno", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}}}},
            {"manager": "enoki", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:x": {}}}}},
            {"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:c": {}}}}
        ]}});
        let merged = merged_managed_fields(&object, &["eno".into()]).unwrap();
        let merged = merged.as_array().unwrap();
        assert_eq!(
            merged.len(),
            2,
            "eno's entry is gone, kubectl's stays: {merged:?}"
        );
        assert_eq!(merged[0]["manager"], "kubectl");
        assert_eq!(
            merged[1]["fieldsV1"],
            json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:x": {}}}})
        );
        assert!(merged_managed_fields(&object, &["helm".into()]).is_none());
        // No enoki entry yet: one is made.
        let only_eno = json!({"apiVersion": "v1", "metadata": {"managedFields": [
            {"manager": "eno", "operation": "Apply", "fieldsV1": {"f:data": {}}}]}});
        let merged = merged_managed_fields(&only_eno, &["eno".into()]).unwrap();
        assert_eq!(merged[0]["manager"], "enoki");
        assert_eq!(merged[0]["operation"], "Apply");
    }
}
