//! LabelSelector matching for the built-ins (the parsing lives in `enoki_sdk::selector`).

use std::collections::BTreeMap;

use enoki_sdk::selector::LabelSelector;
use serde_json::Value;

/// Whether `labels` satisfy `selector`. A `null` selector matches nothing (as in
/// pac-quota-controller); `{}` matches everything.
///
/// # Errors
/// A malformed selector (unknown operator, missing key).
pub fn matches(selector: &Value, labels: &BTreeMap<String, String>) -> Result<bool, String> {
    if selector.is_null() {
        return Ok(false);
    }
    Ok(LabelSelector::parse(selector)?.matches(labels))
}

/// String values of the object at `pointer` (labels, env maps, …) as a sorted map.
pub fn string_map(object: &Value, pointer: &str) -> BTreeMap<String, String> {
    object
        .pointer(pointer)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// The labels of an object.
pub fn labels_of(object: &Value) -> BTreeMap<String, String> {
    string_map(object, "/metadata/labels")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn null_selects_nothing_and_empty_everything() {
        let l: BTreeMap<String, String> = [("team".to_string(), "a".to_string())].into();
        assert!(!matches(&Value::Null, &l).unwrap());
        assert!(matches(&json!({}), &l).unwrap());
        assert!(matches(&json!({"matchLabels": {"team": "a"}}), &l).unwrap());
        assert!(!matches(&json!({"matchLabels": {"team": "b"}}), &l).unwrap());
        let e =
            |op: &str| json!({"matchExpressions": [{"key": "team", "operator": op, "values": []}]});
        assert!(matches(&e("Near"), &l).is_err());
        assert_eq!(
            labels_of(&json!({"metadata": {"labels": {"team": "a"}}})),
            l
        );
    }
}
