//! Overrides (Eno's grammar and semantics): conditional field mutations applied to the desired
//! object at plan time, evaluated against the live object.
//!
//! The annotation holds a JSON list of `{path, value | valueExpression, condition}`. Paths start
//! with `self` and use `.field`, `["key"]` / `['key']`, `[N]`, `[*]` and `[key="value"]`
//! (list-map matcher). A `null` value deletes the key and prunes maps it emptied; missing
//! intermediate maps are created for non-null values. Every failure is fail-open: the override
//! is skipped and its [`OverrideStatus`] says why. CEL sees `self` (the live object, `{}` when
//! absent), `composition` (its metadata) and `pathManagedByEnoki` (whether enoki's — or Eno's,
//! manager `eno` — managedFields entry owns the path; `pathManagedByEno` is the same).

use serde::Serialize;
use serde_json::{Map, Value};

use crate::expr::{Expr, to_cel, to_json};

mod path;
pub use path::parse_path;

/// One step of an override path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// `.name` or `["name"]`.
    Field(String),
    /// `[N]`.
    Index(usize),
    /// `[*]`.
    Wildcard,
    /// `[key="value"]`: list elements whose `key` equals `value`.
    Match {
        /// Field compared in each element.
        key: String,
        /// Value it must equal.
        value: String,
    },
}

/// A parsed override.
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    /// The path as written.
    pub path: String,
    /// The parsed path (after `self`).
    pub segments: Vec<Segment>,
    /// A literal value (`Some(Null)` deletes).
    pub value: Option<Value>,
    /// A CEL expression producing the value.
    pub value_expression: Option<Expr>,
    /// A CEL bool; the override applies only when true.
    pub condition: Option<Expr>,
}

/// What happened to one override (Eno's status strings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum OverrideStatus {
    /// Applied.
    Active,
    /// Condition false, or valueExpression skipped (object absent / null result).
    Inactive,
    /// The condition failed to evaluate or is not a bool.
    InvalidCondition,
    /// A parent on the path does not exist (or no list element matched).
    MissingParent,
    /// A list index is out of range.
    IndexOutOfRange,
    /// The path walks through a value of the wrong type.
    PathTypeMismatch,
    /// The valueExpression failed to evaluate.
    InvalidValueExpression,
    /// Not evaluated: the reconcile pass spent its CEL time first. The resource is not
    /// written in this pass (never written without its overrides) and is planned again in
    /// the next.
    Deferred,
}

/// Parses the `overrides` annotation value.
///
/// # Errors
/// A message naming the item index and field when the JSON or a path or CEL is invalid.
pub fn parse(annotation: &str) -> Result<Vec<Override>, String> {
    parse_with_warnings(annotation).map(|(o, _)| o)
}

/// Parses the `overrides` annotation value as leniently as Eno reads it
/// (`internal/resource/mutation`): an item with neither `value` nor `valueExpression` (or a
/// `null` value) removes the field; an empty `condition` or `valueExpression` is none (the
/// item always applies); unknown fields are ignored — each named in a warning.
///
/// # Errors
/// A message naming the item index and field when the JSON or a path or CEL is invalid, or
/// when an item has both a value and a `valueExpression`.
pub fn parse_with_warnings(annotation: &str) -> Result<(Vec<Override>, Vec<String>), String> {
    let items: Vec<Value> =
        serde_json::from_str(annotation).map_err(|e| format!("not a JSON list: {e}"))?;
    let mut warnings = Vec::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let Value::Object(mut obj) = item else {
            return Err(format!("item {i}: not an object"));
        };
        // Go's encoding/json matches field names case-insensitively (an exact match first).
        for canonical in ["path", "value", "valueExpression", "condition"] {
            if obj.contains_key(canonical) {
                continue;
            }
            let other = obj
                .keys()
                .find(|k| k.eq_ignore_ascii_case(canonical))
                .cloned();
            if let Some(v) = other.and_then(|k| obj.remove(&k)) {
                obj.insert(canonical.into(), v);
            }
        }
        let path = match obj.remove("path") {
            Some(Value::String(p)) => p,
            _ => return Err(format!("item {i}: path is missing or not a string")),
        };
        let segments = parse_path(&path).map_err(|e| format!("item {i}: path {path:?}: {e}"))?;
        let cel = |obj: &mut Map<String, Value>, field: &str| -> Result<Option<Expr>, String> {
            match obj.remove(field) {
                None | Some(Value::Null) => Ok(None),
                // Eno: an empty expression is no expression.
                Some(Value::String(s)) if s.is_empty() => Ok(None),
                Some(Value::String(s)) => Expr::compile(&s)
                    .map(Some)
                    .map_err(|e| format!("item {i}: {field}: CEL does not compile: {e}")),
                Some(_) => Err(format!("item {i}: {field} is not a string")),
            }
        };
        let value_expression = cel(&mut obj, "valueExpression")?;
        let condition = cel(&mut obj, "condition")?;
        let value = match obj.remove("value") {
            None | Some(Value::Null) => None,
            v => v,
        };
        if value.is_some() && value_expression.is_some() {
            return Err(format!(
                "item {i}: value and valueExpression are mutually exclusive"
            ));
        }
        // Eno: no value and no valueExpression assigns nil, which removes the field.
        let value = match (&value, &value_expression) {
            (None, None) => Some(Value::Null),
            _ => value,
        };
        warnings.extend(
            obj.keys()
                .map(|k| format!("item {i}: unknown field {k:?} ignored (as Eno ignores it)")),
        );
        out.push(Override {
            path,
            segments,
            value,
            value_expression,
            condition,
        });
    }
    Ok((out, warnings))
}

/// Applies `value` at `segments` inside `node`.
pub fn set(node: &mut Value, segments: &[Segment], value: &Value) -> OverrideStatus {
    let Some((first, rest)) = segments.split_first() else {
        return OverrideStatus::PathTypeMismatch;
    };
    match first {
        Segment::Field(name) => set_field(node, name, rest, value),
        Segment::Index(n) => {
            let Some(list) = node.as_array_mut() else {
                return OverrideStatus::PathTypeMismatch;
            };
            if *n >= list.len() {
                return OverrideStatus::IndexOutOfRange;
            }
            if rest.is_empty() {
                if value.is_null() {
                    list.remove(*n);
                } else {
                    list[*n] = value.clone();
                }
                return OverrideStatus::Active;
            }
            set(&mut list[*n], rest, value)
        }
        Segment::Wildcard | Segment::Match { .. } => set_matching(node, first, rest, value),
    }
}

/// [`set`] at a field of an object: inserted, replaced or (a null value) removed; a missing
/// parent object is made on the way unless the value is null or the next step indexes a list.
fn set_field(node: &mut Value, name: &str, rest: &[Segment], value: &Value) -> OverrideStatus {
    let Some(map) = node.as_object_mut() else {
        return OverrideStatus::PathTypeMismatch;
    };
    if rest.is_empty() {
        if value.is_null() {
            map.remove(name);
        } else {
            map.insert(name.to_string(), value.clone());
        }
        return OverrideStatus::Active;
    }
    if !map.contains_key(name) {
        if value.is_null() {
            return OverrideStatus::MissingParent;
        }
        match rest[0] {
            Segment::Field(_) => {
                map.insert(name.to_string(), Value::Object(Map::new()));
            }
            _ => return OverrideStatus::MissingParent,
        }
    }
    let child = map
        .get_mut(name)
        .expect("present: checked or inserted above");
    let status = set(child, rest, value);
    if value.is_null() && child.as_object().is_some_and(Map::is_empty) {
        map.remove(name);
    }
    status
}

/// [`set`] at every element of a list (`[*]`) or those matching `[key=value]`.
fn set_matching(
    node: &mut Value,
    first: &Segment,
    rest: &[Segment],
    value: &Value,
) -> OverrideStatus {
    let Some(list) = node.as_array_mut() else {
        return OverrideStatus::PathTypeMismatch;
    };
    let matches = |v: &Value| match first {
        Segment::Match { key, value } => v.get(key).is_some_and(|f| match f {
            Value::String(s) => s == value,
            other => *other.to_string() == **value,
        }),
        _ => true,
    };
    if rest.is_empty() {
        if value.is_null() {
            let before = list.len();
            list.retain(|v| !matches(v));
            return if list.len() < before {
                OverrideStatus::Active
            } else {
                OverrideStatus::MissingParent
            };
        }
        let mut any = false;
        for item in list.iter_mut().filter(|v| matches(v)) {
            *item = value.clone();
            any = true;
        }
        return if any {
            OverrideStatus::Active
        } else {
            OverrideStatus::MissingParent
        };
    }
    let mut result = OverrideStatus::MissingParent;
    for item in list.iter_mut().filter(|v| matches(v)) {
        let s = set(item, rest, value);
        if s == OverrideStatus::Active || result == OverrideStatus::MissingParent {
            result = s;
        }
    }
    result
}

/// Whether `manager`'s Apply entry in the live object's managedFields covers `segments`.
pub fn path_managed_by(live: Option<&Value>, manager: &str, segments: &[Segment]) -> bool {
    let Some(entries) = live
        .and_then(|l| l.pointer("/metadata/managedFields"))
        .and_then(Value::as_array)
    else {
        return false;
    };
    entries
        .iter()
        .filter(|e| e.get("manager").and_then(Value::as_str) == Some(manager))
        .filter_map(|e| e.get("fieldsV1"))
        .any(|fields| covers(fields, segments))
}

fn covers(fields: &Value, segments: &[Segment]) -> bool {
    let Some((first, rest)) = segments.split_first() else {
        return true;
    };
    let Some(map) = fields.as_object() else {
        return false;
    };
    let children: Vec<&Value> = match first {
        Segment::Field(name) => map.get(&format!("f:{name}")).into_iter().collect(),
        Segment::Match { key, value } => map
            .iter()
            .filter(|(k, _)| {
                k.strip_prefix("k:")
                    .and_then(|j| serde_json::from_str::<Value>(j).ok())
                    .and_then(|j| j.get(key).cloned())
                    .is_some_and(|v| {
                        v.as_str() == Some(value.as_str()) || *v.to_string() == **value
                    })
            })
            .map(|(_, v)| v)
            .collect(),
        // Lists are keyed by merge keys or values in fieldsV1; any element counts.
        Segment::Index(_) | Segment::Wildcard => map
            .iter()
            .filter(|(k, _)| k.starts_with("k:") || k.starts_with("v:") || k.starts_with("i:"))
            .map(|(_, v)| v)
            .collect(),
    };
    children.into_iter().any(|c| covers(c, rest))
}

/// The outcome of one override.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OverrideResult {
    /// The path as written.
    pub path: String,
    /// What happened.
    pub status: OverrideStatus,
}

/// Applies every override in order to `desired`, evaluating CEL against `live`.
pub fn apply_all(
    desired: &mut Value,
    overrides: &[Override],
    live: Option<&Value>,
    composition: &Value,
) -> Vec<OverrideResult> {
    let spent =
        || crate::expr::guard::pass_deadline().is_some_and(|d| std::time::Instant::now() > d);
    if !overrides.is_empty() && spent() {
        return overrides
            .iter()
            .map(|o| OverrideResult {
                path: o.path.clone(),
                status: OverrideStatus::Deferred,
            })
            .collect();
    }
    let this = to_cel(live.unwrap_or(&Value::Object(Map::new())));
    let comp = to_cel(composition);
    overrides
        .iter()
        .map(|o| {
            // Eno's own manager counts too: a field Eno applied before the move to enoki is
            // still "managed" (Eno's `pathManagedByEno` reads the `eno` manager).
            let managed = cel::Value::Bool(
                path_managed_by(live, crds::names::FIELD_MANAGER, &o.segments)
                    || path_managed_by(live, crds::names::ENO_FIELD_MANAGER, &o.segments),
            );
            let vars = [
                ("self", this.clone()),
                ("composition", comp.clone()),
                ("pathManagedByEnoki", managed.clone()),
                ("pathManagedByEno", managed),
            ];
            let status = (|| {
                if let Some(cond) = &o.condition {
                    match cond.eval_bool(&vars) {
                        Err(e) if e.contains(crate::expr::PASS_SPENT) => {
                            return OverrideStatus::Deferred;
                        }
                        Err(_) => return OverrideStatus::InvalidCondition,
                        Ok(false) => return OverrideStatus::Inactive,
                        Ok(true) => {}
                    }
                }
                let value = match (&o.value, &o.value_expression) {
                    (Some(v), _) => v.clone(),
                    (None, Some(expr)) => {
                        if live.is_none() {
                            return OverrideStatus::Inactive;
                        }
                        match expr.eval(&vars) {
                            Err(e) if e.contains(crate::expr::PASS_SPENT) => {
                                return OverrideStatus::Deferred;
                            }
                            Err(_) => return OverrideStatus::InvalidValueExpression,
                            Ok(cel::Value::Null) => return OverrideStatus::Inactive,
                            Ok(v) => match to_json(&v) {
                                Some(v) => v,
                                None => return OverrideStatus::InvalidValueExpression,
                            },
                        }
                    }
                    (None, None) => return OverrideStatus::Inactive,
                };
                set(desired, &o.segments, &value)
            })();
            OverrideResult {
                path: o.path.clone(),
                status,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use serde_json::json;

    #[rstest]
    #[case::fields("self.spec.replicas", vec![Segment::Field("spec".into()), Segment::Field("replicas".into())])]
    #[case::quoted(r#"self.metadata.annotations["a.b/c-d"]"#, vec![Segment::Field("metadata".into()), Segment::Field("annotations".into()), Segment::Field("a.b/c-d".into())])]
    #[case::single_quoted("self['x']", vec![Segment::Field("x".into())])]
    #[case::index("self.a[3]", vec![Segment::Field("a".into()), Segment::Index(3)])]
    #[case::wildcard("self.a[*].b", vec![Segment::Field("a".into()), Segment::Wildcard, Segment::Field("b".into())])]
    #[case::matcher(r#"self.c[name="app"].image"#, vec![Segment::Field("c".into()), Segment::Match { key: "name".into(), value: "app".into() }, Segment::Field("image".into())])]
    fn paths_parse(#[case] path: &str, #[case] want: Vec<Segment>) {
        assert_eq!(parse_path(path).unwrap(), want);
    }

    #[rstest]
    #[case::no_self("spec.x")]
    #[case::bare_self("self")]
    #[case::trailing_dot("self.")]
    #[case::unterminated("self[\"x")]
    #[case::bad_bracket("self[x]")]
    #[case::garbage("self.a b")]
    fn bad_paths_are_errors(#[case] path: &str) {
        assert!(parse_path(path).is_err(), "{path}");
    }

    #[test]
    fn null_deletes_and_prunes_emptied_maps() {
        let mut obj = json!({"spec": {"a": {"b": 1}, "c": 2}});
        assert_eq!(
            set(
                &mut obj,
                &parse_path("self.spec.a.b").unwrap(),
                &Value::Null
            ),
            OverrideStatus::Active
        );
        assert_eq!(obj, json!({"spec": {"c": 2}}));
    }

    #[test]
    fn missing_intermediate_maps_are_created() {
        let mut obj = json!({});
        set(
            &mut obj,
            &parse_path("self.metadata.labels.x").unwrap(),
            &json!("y"),
        );
        assert_eq!(obj, json!({"metadata": {"labels": {"x": "y"}}}));
    }

    #[test]
    fn fail_open_statuses() {
        let mut obj = json!({"a": [1, 2], "s": "str"});
        assert_eq!(
            set(&mut obj, &parse_path("self.a[5]").unwrap(), &json!(1)),
            OverrideStatus::IndexOutOfRange
        );
        assert_eq!(
            set(&mut obj, &parse_path("self.s.x").unwrap(), &json!(1)),
            OverrideStatus::PathTypeMismatch
        );
        assert_eq!(
            set(&mut obj, &parse_path("self.none.x").unwrap(), &Value::Null),
            OverrideStatus::MissingParent
        );
        assert_eq!(obj, json!({"a": [1, 2], "s": "str"}), "nothing changed");
    }

    #[test]
    fn matcher_and_wildcard_update_list_elements() {
        let mut obj = json!({"c": [{"name": "app", "image": "a"}, {"name": "side", "image": "b"}]});
        set(
            &mut obj,
            &parse_path(r#"self.c[name="side"].image"#).unwrap(),
            &json!("z"),
        );
        assert_eq!(obj["c"][1]["image"], "z");
        set(
            &mut obj,
            &parse_path("self.c[*].pull").unwrap(),
            &json!("Always"),
        );
        assert_eq!(obj["c"][0]["pull"], "Always");
        assert_eq!(obj["c"][1]["pull"], "Always");
    }

    #[test]
    fn the_composition_variable_is_shaped_as_enos() {
        let overrides = parse(r#"[
            {"path": "self.metadata.labels.eno", "valueExpression": "composition.metadata.name + '.' + composition.metadata.namespace"},
            {"path": "self.metadata.labels.flat", "valueExpression": "composition.name"},
            {"path": "self.metadata.labels.deleting", "value": "yes", "condition": "composition.metadata.deletionTimestamp != null"}
        ]"#).unwrap();
        let mut info = crate::CompositionInfo {
            name: "c1".into(),
            namespace: "ns".into(),
            ..crate::CompositionInfo::default()
        };
        let live = json!({"metadata": {"name": "d"}});
        let mut desired = json!({"metadata": {"name": "d"}});
        apply_all(&mut desired, &overrides, Some(&live), &info.cel_value());
        assert_eq!(desired["metadata"]["labels"]["eno"], "c1.ns");
        assert_eq!(desired["metadata"]["labels"]["flat"], "c1");
        assert!(desired["metadata"]["labels"].get("deleting").is_none());
        info.deletion_timestamp = Some("2026-11-26T00:00:00Z".into());
        let mut desired = json!({"metadata": {"name": "d"}});
        apply_all(&mut desired, &overrides, Some(&live), &info.cel_value());
        assert_eq!(desired["metadata"]["labels"]["deleting"], "yes");
    }

    #[test]
    fn conditions_and_value_expressions_see_the_live_object() {
        let overrides = parse(r#"[
            {"path": "self.spec.replicas", "valueExpression": "self.spec.replicas", "condition": "!pathManagedByEnoki"},
            {"path": "self.metadata.labels.off", "value": "x", "condition": "false"},
            {"path": "self.metadata.labels.bad", "value": "x", "condition": "self.nope.nope"},
            {"path": "self.metadata.labels.comp", "valueExpression": "composition.name"}
        ]"#).unwrap();
        let live = json!({"spec": {"replicas": 7}, "metadata": {"managedFields": [
            {"manager": "enoki", "operation": "Apply", "fieldsV1": {"f:metadata": {}}}
        ]}});
        let mut desired = json!({"spec": {"replicas": 1}, "metadata": {"name": "d"}});
        let results = apply_all(
            &mut desired,
            &overrides,
            Some(&live),
            &json!({"name": "c1"}),
        );
        let statuses: Vec<_> = results.iter().map(|r| r.status).collect();
        assert_eq!(
            statuses,
            [
                OverrideStatus::Active,
                OverrideStatus::Inactive,
                OverrideStatus::InvalidCondition,
                OverrideStatus::Active
            ]
        );
        assert_eq!(desired["spec"]["replicas"], 7);
        assert_eq!(desired["metadata"]["labels"], json!({"comp": "c1"}));
    }

    #[test]
    fn value_expressions_fail_open() {
        let overrides = parse(
            r#"[{"path": "self.a", "valueExpression": "self.nope.nope"},
                {"path": "self.b", "valueExpression": "null"},
                {"path": "self.c", "valueExpression": "1"}]"#,
        )
        .unwrap();
        let mut desired = json!({});
        let results = apply_all(&mut desired, &overrides, Some(&json!({})), &json!({}));
        let statuses: Vec<_> = results.iter().map(|r| r.status).collect();
        assert_eq!(
            statuses,
            [
                OverrideStatus::InvalidValueExpression,
                OverrideStatus::Inactive,
                OverrideStatus::Active
            ]
        );
        assert_eq!(desired, json!({"c": 1}));
        let results = apply_all(&mut json!({}), &overrides[2..], None, &json!({}));
        assert_eq!(
            results[0].status,
            OverrideStatus::Inactive,
            "skipped while the object is absent"
        );
    }

    #[test]
    fn path_managed_by_reads_field_sets() {
        let live = json!({"metadata": {"managedFields": [
            {"manager": "enoki", "fieldsV1": {"f:spec": {"f:replicas": {}, "f:containers": {"k:{\"name\":\"app\"}": {"f:image": {}}}}}},
            {"manager": "kubectl", "fieldsV1": {"f:spec": {"f:paused": {}}}}
        ]}});
        let managed = |p: &str| path_managed_by(Some(&live), "enoki", &parse_path(p).unwrap());
        assert!(managed("self.spec.replicas"));
        assert!(managed(r#"self.spec.containers[name="app"].image"#));
        assert!(!managed("self.spec.paused"));
        assert!(!managed(r#"self.spec.containers[name="other"].image"#));
        // Eno's manager counts for the CEL variable (what Eno applied before a move).
        let eno = json!({"metadata": {"managedFields": [
            {"manager": "eno", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]}});
        let o = parse(
            r#"[{"path": "self.spec.replicas", "value": null, "condition": "!pathManagedByEno"}]"#,
        )
        .unwrap();
        let mut desired = json!({"spec": {"replicas": 3}});
        let r = apply_all(&mut desired, &o, Some(&eno), &json!({}));
        assert_eq!(desired, json!({"spec": {"replicas": 3}}), "{r:?}");
    }

    #[rstest]
    #[case::not_json("nope")]
    #[case::both(r#"[{"path": "self.a", "value": 1, "valueExpression": "1"}]"#)]
    #[case::bad_cel(r#"[{"path": "self.a", "value": 1, "condition": "(("}]"#)]
    #[case::blank_cel(r#"[{"path": "self.a", "value": 1, "condition": " "}]"#)]
    fn bad_annotations_are_errors(#[case] text: &str) {
        assert!(parse(text).is_err());
    }

    /// Eno `internal/resource/mutation/mutation.go` (`jsonOp` decoded by encoding/json): no
    /// value removes the field, an empty condition always applies, `null` with a
    /// `valueExpression` is the expression, unknown fields are ignored (warned here).
    #[test]
    fn override_items_are_read_as_leniently_as_eno_reads_them() {
        let (o, w) = parse_with_warnings(
            r#"[{"path":"self.data.a"},
                {"path":"self.data.b","value":"x","condition":""},
                {"path":"self.data.c","value":"y","comment":"why"},
                {"path":"self.data.d","value":null,"valueExpression":"self.data.keep"},
                {"path":"self.data.e","Value":"z","CONDITION":"true"}]"#,
        )
        .unwrap();
        assert_eq!(o[0].value, Some(Value::Null));
        assert!(o[1].condition.is_none());
        assert!(o[3].value.is_none() && o[3].value_expression.is_some());
        // Field names match case-insensitively, as Go's encoding/json matches them.
        assert_eq!(o[4].value, Some(json!("z")));
        assert!(o[4].condition.is_some());
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("\"comment\""), "{w:?}");
        let mut desired = json!({"data": {"a": "1", "keep": "k"}});
        let r = apply_all(&mut desired, &o[..3], None, &json!({}));
        assert_eq!(desired, json!({"data": {"keep": "k", "b": "x", "c": "y"}}));
        assert!(
            r.iter().all(|r| r.status == OverrideStatus::Active),
            "{r:?}"
        );
    }
}
