//! Kubernetes `LabelSelector` objects (`matchLabels` + `matchExpressions`): parse once, then
//! match label sets (what a synthesizer needs, e.g. a quota's namespace selector) or render
//! the list-call query syntax (what the host needs to list a collection).
//!
//! ```
//! use enoki_sdk::selector::LabelSelector;
//! let sel = LabelSelector::parse(&serde_json::json!({"matchLabels": {"team": "a"},
//!     "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["test"]}]})).unwrap();
//! assert_eq!(sel.to_query(), "team=a,tier notin (test)");
//! let labels = [("team".to_string(), "a".to_string())].into();
//! assert!(sel.matches(&labels));
//! ```

use std::collections::BTreeMap;

use serde_json::Value;

/// How a requirement compares a label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operator {
    /// `matchLabels`: the label equals the one value.
    Equals,
    /// The label is one of the values.
    In,
    /// The label is absent or none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// The comparison.
    pub operator: Operator,
    /// The values (one for `Equals`, none for `Exists`/`DoesNotExist`).
    pub values: Vec<String>,
}

/// A parsed LabelSelector: every requirement must hold. Empty selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// The requirements, `matchLabels` first.
    pub requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses a LabelSelector object.
    ///
    /// # Errors
    /// A message naming the bad part (`matchLabels.<k>`, `matchExpressions[i].operator`, …).
    pub fn parse(selector: &Value) -> Result<LabelSelector, String> {
        let mut requirements = Vec::new();
        if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in labels {
                let v = v
                    .as_str()
                    .ok_or_else(|| format!("matchLabels.{k} is not a string"))?;
                requirements.push(Requirement {
                    key: k.clone(),
                    operator: Operator::Equals,
                    values: vec![v.to_string()],
                });
            }
        }
        if let Some(exprs) = selector.get("matchExpressions").and_then(Value::as_array) {
            for (i, e) in exprs.iter().enumerate() {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("matchExpressions[{i}].key is missing"))?;
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|v| {
                        v.iter()
                            .filter_map(Value::as_str)
                            .map(String::from)
                            .collect()
                    })
                    .unwrap_or_default();
                let operator = match e.get("operator").and_then(Value::as_str) {
                    Some("In") => Operator::In,
                    Some("NotIn") => Operator::NotIn,
                    Some("Exists") => Operator::Exists,
                    Some("DoesNotExist") => Operator::DoesNotExist,
                    other => {
                        return Err(format!(
                            "matchExpressions[{i}].operator {other:?} is not In, NotIn, Exists or DoesNotExist"
                        ));
                    }
                };
                // As Kubernetes' labels.NewRequirement.
                match (&operator, values.is_empty()) {
                    (Operator::In | Operator::NotIn, true) => {
                        return Err(format!(
                            "matchExpressions[{i}].values must not be empty for In and NotIn"
                        ));
                    }
                    (Operator::Exists | Operator::DoesNotExist, false) => {
                        return Err(format!(
                            "matchExpressions[{i}].values must be empty for Exists and DoesNotExist"
                        ));
                    }
                    _ => {}
                }
                requirements.push(Requirement {
                    key: key.to_string(),
                    operator,
                    values,
                });
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| {
            let have = labels.get(&r.key);
            match r.operator {
                Operator::Equals | Operator::In => have.is_some_and(|h| r.values.contains(h)),
                Operator::NotIn => have.is_none_or(|h| !r.values.contains(h)),
                Operator::Exists => have.is_some(),
                Operator::DoesNotExist => have.is_none(),
            }
        })
    }

    /// The selector in list-call query syntax (`a=b,c in (x,y),!d`); `""` selects everything.
    pub fn to_query(&self) -> String {
        self.requirements
            .iter()
            .map(|r| match r.operator {
                Operator::Equals => format!("{}={}", r.key, r.values.join(",")),
                Operator::In => format!("{} in ({})", r.key, r.values.join(",")),
                Operator::NotIn => format!("{} notin ({})", r.key, r.values.join(",")),
                Operator::Exists => r.key.clone(),
                Operator::DoesNotExist => format!("!{}", r.key),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_matches_and_renders() {
        let sel = LabelSelector::parse(&json!({"matchLabels": {"team": "a"}, "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["x", "y"]},
            {"key": "skip", "operator": "DoesNotExist"},
            {"key": "tier", "operator": "NotIn", "values": ["z"]},
            {"key": "owner", "operator": "Exists"}]}))
        .unwrap();
        assert_eq!(
            sel.to_query(),
            "team=a,env in (x,y),!skip,tier notin (z),owner"
        );
        let l = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect()
        };
        assert!(sel.matches(&l(&[("team", "a"), ("env", "x"), ("owner", "me")])));
        assert!(
            !sel.matches(&l(&[("team", "a"), ("env", "x")])),
            "owner must exist"
        );
        assert!(!sel.matches(&l(&[
            ("team", "a"),
            ("env", "x"),
            ("owner", "me"),
            ("skip", "1")
        ])));
        assert!(!sel.matches(&l(&[
            ("team", "a"),
            ("env", "x"),
            ("owner", "me"),
            ("tier", "z")
        ])));
        let all = LabelSelector::parse(&json!({})).unwrap();
        assert_eq!(all.to_query(), "");
        assert!(all.matches(&BTreeMap::new()));
        let bad =
            LabelSelector::parse(&json!({"matchExpressions": [{"key": "k", "operator": "Near"}]}));
        assert!(bad.unwrap_err().contains("matchExpressions[0].operator"));
    }
}
