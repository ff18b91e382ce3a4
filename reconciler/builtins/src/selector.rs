//! Kubernetes LabelSelector matching (`matchLabels` + `matchExpressions`, ANDed).

use std::collections::BTreeMap;

use serde_json::Value;

/// Whether `labels` satisfy `selector`. A `null` selector matches nothing (as in
/// pac-quota-controller); `{}` matches everything.
///
/// # Errors
/// A malformed selector (unknown operator, missing key, values on Exists).
pub fn matches(selector: &Value, labels: &BTreeMap<String, String>) -> Result<bool, String> {
    if selector.is_null() {
        return Ok(false);
    }
    if let Some(ml) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in ml {
            if labels.get(k).map(String::as_str) != v.as_str() {
                return Ok(false);
            }
        }
    }
    if let Some(exprs) = selector.get("matchExpressions").and_then(Value::as_array) {
        for (i, e) in exprs.iter().enumerate() {
            let key = e
                .get("key")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("matchExpressions[{i}].key is missing"))?;
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let have = labels.get(key).map(String::as_str);
            let ok = match e.get("operator").and_then(Value::as_str) {
                Some("In") => have.is_some_and(|h| values.contains(&h)),
                Some("NotIn") => have.is_none_or(|h| !values.contains(&h)),
                Some("Exists") => have.is_some(),
                Some("DoesNotExist") => have.is_none(),
                other => {
                    return Err(format!(
                        "matchExpressions[{i}].operator {other:?} is not In, NotIn, Exists or DoesNotExist"
                    ));
                }
            };
            if !ok {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// The labels of an object.
pub fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_and_semantics() {
        let l: BTreeMap<String, String> = [("team".to_string(), "a".to_string())].into();
        assert!(!matches(&Value::Null, &l).unwrap());
        assert!(matches(&json!({}), &l).unwrap());
        assert!(matches(&json!({"matchLabels": {"team": "a"}}), &l).unwrap());
        assert!(!matches(&json!({"matchLabels": {"team": "b"}}), &l).unwrap());
        let e = |op: &str, v: Value| json!({"matchExpressions": [{"key": "team", "operator": op, "values": v}]});
        assert!(matches(&e("In", json!(["a", "b"])), &l).unwrap());
        assert!(!matches(&e("NotIn", json!(["a"])), &l).unwrap());
        assert!(matches(&e("Exists", json!([])), &l).unwrap());
        assert!(!matches(&e("DoesNotExist", json!([])), &l).unwrap());
        assert!(matches(&e("Near", json!([])), &l).is_err());
    }
}
