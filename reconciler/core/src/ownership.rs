//! Ownership repair (Eno's `MergeEnoManagedFields`): fields the previous synthesis applied that
//! the current one no longer emits are removed even when another manager co-owns them — as
//! happens once someone wipes `metadata.managedFields` (the API server then hands every field
//! to a `before-first-apply` manager, and server-side apply never prunes a co-owned field).
//!
//! After the apply of a changed object that some other manager shares, the previous snapshot
//! is applied as a dry run: the field set enoki's entry has there, minus what enoki owns now,
//! and owned by another manager, becomes enoki's alone (one patch of `managedFields`, guarded
//! by the resourceVersion), and the manifest is applied again, which prunes it. Pure here.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crds::names::FIELD_MANAGER;

/// A path in a `fieldsV1` trie (`["f:data", "f:a"]`).
type Path = Vec<String>;

/// The members of a `fieldsV1` trie: its leaves, and the nodes marked `"."`.
fn members(fields: &Value) -> BTreeSet<Path> {
    fn walk(node: &Map<String, Value>, prefix: &mut Path, out: &mut BTreeSet<Path>) {
        for (k, child) in node {
            if k == "." {
                out.insert(prefix.clone());
                continue;
            }
            prefix.push(k.clone());
            match child.as_object() {
                Some(c) if !c.is_empty() => walk(c, prefix, out),
                _ => {
                    out.insert(prefix.clone());
                }
            }
            prefix.pop();
        }
    }
    let mut out = BTreeSet::new();
    if let Some(node) = fields.as_object() {
        walk(node, &mut Vec::new(), &mut out);
    }
    out
}

/// The `fieldsV1` trie of a member set (a member with children is marked `"."`).
fn from_members(set: &BTreeSet<Path>) -> Value {
    #[derive(Default)]
    struct Node {
        member: bool,
        children: BTreeMap<String, Node>,
    }
    fn render(node: &Node) -> Value {
        let mut m = Map::new();
        if node.member && !node.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, c) in &node.children {
            m.insert(k.clone(), render(c));
        }
        Value::Object(m)
    }
    let mut root = Node::default();
    for path in set {
        let mut n = &mut root;
        for k in path {
            n = n.children.entry(k.clone()).or_default();
        }
        n.member = true;
    }
    render(&root)
}

fn is_ours(e: &Value) -> bool {
    e.get("manager").and_then(Value::as_str) == Some(FIELD_MANAGER)
        && e.get("operation").and_then(Value::as_str) == Some("Apply")
}

/// An entry of the object itself (not of a subresource such as `status`).
fn is_main(e: &Value) -> bool {
    e.get("subresource")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
}

/// Whether some manager other than enoki's apply owns fields of `written`.
pub fn shared_ownership(written: &Value) -> bool {
    written
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|entries| entries.iter().any(|e| is_main(e) && !is_ours(e)))
}

/// `written`'s `managedFields` with the fields enoki's entry had in `previous_dry_run` (the
/// previous snapshot applied as a dry run), does not have now, and another manager owns, made
/// enoki's alone; `None` when there are none.
pub fn repaired_managed_fields(previous_dry_run: &Value, written: &Value) -> Option<Value> {
    let entries = written.pointer("/metadata/managedFields")?.as_array()?;
    let before = previous_dry_run
        .pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|e| is_ours(e))?;
    let before = members(before.get("fieldsV1")?);
    let now = entries
        .iter()
        .find(|e| is_ours(e))
        .map_or_else(BTreeSet::new, |e| members(&e["fieldsV1"]));
    let others: BTreeSet<Path> = entries
        .iter()
        .filter(|e| is_main(e) && !is_ours(e))
        .flat_map(|e| members(&e["fieldsV1"]))
        .collect();
    let left: BTreeSet<Path> = before
        .difference(&now)
        .filter(|p| others.contains(*p))
        .cloned()
        .collect();
    if left.is_empty() {
        return None;
    }
    let mut out: Vec<Value> = entries
        .iter()
        .filter_map(|e| {
            if !is_main(e) || is_ours(e) {
                return Some(e.clone());
            }
            let set: BTreeSet<Path> = members(&e["fieldsV1"]).difference(&left).cloned().collect();
            // An entry left with nothing is dropped (the API server refuses an empty one).
            (!set.is_empty()).then(|| {
                let mut e = e.clone();
                e["fieldsV1"] = from_members(&set);
                e
            })
        })
        .collect();
    match out.iter_mut().find(|e| is_ours(e)) {
        Some(ours) => {
            let set: BTreeSet<Path> = members(&ours["fieldsV1"]).union(&left).cloned().collect();
            ours["fieldsV1"] = from_members(&set);
        }
        None => out.push(serde_json::json!({
            "manager": FIELD_MANAGER, "operation": "Apply", "fieldsType": "FieldsV1",
            "apiVersion": written.get("apiVersion").cloned().unwrap_or(Value::Null),
            "fieldsV1": from_members(&left),
        })),
    }
    Some(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Eno `merge_test.go` (`TestRemovePropertyAndOwnership`): after a wipe every field is
    /// `before-first-apply`'s too; what the previous snapshot had and the new one lacks
    /// becomes enoki's alone, so the next apply prunes it; the rest stays shared.
    #[test]
    fn fields_left_behind_by_a_wipe_become_enokis_alone() {
        let previous = json!({"metadata": {"managedFields": [
            {"manager": "enoki", "operation": "Apply", "fieldsV1":
                {"f:data": {"f:foo": {}, "f:baz": {}}, "f:metadata": {"f:labels": {"f:baz": {}, "f:foo": {}}}}}]}});
        let written = json!({"apiVersion": "v1", "metadata": {"managedFields": [
            {"manager": "before-first-apply", "operation": "Update", "fieldsV1":
                {"f:data": {"f:foo": {}, "f:baz": {}}, "f:metadata": {"f:labels": {"f:baz": {}, "f:foo": {}}}}},
            {"manager": "enoki", "operation": "Apply", "fieldsV1":
                {"f:data": {"f:baz": {}}, "f:metadata": {"f:labels": {"f:foo": {}}}}},
            {"manager": "kubelet", "operation": "Update", "subresource": "status",
                "fieldsV1": {"f:status": {}}}]}});
        assert!(shared_ownership(&written));
        let repaired = repaired_managed_fields(&previous, &written).unwrap();
        let by = |m: &str| {
            repaired
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["manager"] == m)
                .cloned()
                .unwrap()
        };
        assert_eq!(
            by("before-first-apply")["fieldsV1"],
            json!({"f:data": {"f:baz": {}}, "f:metadata": {"f:labels": {"f:foo": {}}}})
        );
        assert_eq!(
            by("enoki")["fieldsV1"],
            json!({"f:data": {"f:baz": {}, "f:foo": {}}, "f:metadata": {"f:labels": {"f:baz": {}, "f:foo": {}}}})
        );
        assert_eq!(by("kubelet")["fieldsV1"], json!({"f:status": {}}));
        // Nothing left behind: nothing to do.
        assert!(repaired_managed_fields(&written, &written).is_none());
        let alone = json!({"metadata": {"managedFields": [
            {"manager": "enoki", "operation": "Apply", "fieldsV1": {"f:data": {}}}]}});
        assert!(!shared_ownership(&alone));
    }

    #[test]
    fn member_sets_round_trip_with_dot_markers() {
        let trie = json!({"f:spec": {".": {}, "f:a": {}, "f:list": {"k:{\"name\":\"x\"}": {".": {}, "f:v": {}}}}});
        let set = members(&trie);
        assert!(set.contains(&vec!["f:spec".to_string()]));
        assert_eq!(from_members(&set), trie);
    }
}
