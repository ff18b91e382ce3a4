//! CEL with the `cel` crate: compile once, evaluate many times, never panic.
//!
//! JSON is converted to CEL values by hand so that integers stay `int` (serde's route turns
//! positive JSON integers into `uint`, and `self.spec.replicas + 1` then fails). Any panic from
//! the parser or evaluator is contained and reported as an error.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cel::objects::{Key, Map};
use cel::{Context, Program, Value as Cel};
use serde_json::Value;

/// A compiled CEL expression and its source.
#[derive(Clone)]
pub struct Expr {
    source: String,
    program: Arc<Program>,
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Expr").field(&self.source).finish()
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Expr {
    /// Compiles `source`.
    ///
    /// # Errors
    /// The parser's message when `source` is not valid CEL (including a contained panic).
    pub fn compile(source: &str) -> Result<Expr, String> {
        if source.trim().is_empty() {
            return Err("expression is empty".into());
        }
        match catch_unwind(|| Program::compile(source)) {
            Ok(Ok(program)) => Ok(Expr {
                source: source.to_string(),
                program: Arc::new(program),
            }),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("the CEL parser panicked on this expression".into()),
        }
    }

    /// The source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates with the given variables (JSON values).
    ///
    /// # Errors
    /// The evaluator's message (including a contained panic).
    pub fn eval(&self, vars: &[(&str, Cel)]) -> Result<Cel, String> {
        let run = || {
            let mut ctx = Context::default();
            for (name, value) in vars {
                ctx.add_variable_from_value(*name, value.clone());
            }
            self.program.execute(&ctx)
        };
        match catch_unwind(AssertUnwindSafe(run)) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("the CEL evaluator panicked".into()),
        }
    }

    /// Evaluates and requires a bool.
    ///
    /// # Errors
    /// Evaluation errors, or a result that is not a bool.
    pub fn eval_bool(&self, vars: &[(&str, Cel)]) -> Result<bool, String> {
        match self.eval(vars)? {
            Cel::Bool(b) => Ok(b),
            other => Err(format!("expected a bool, got {}", type_name(&other))),
        }
    }
}

/// A short name for a CEL value's type, for messages.
pub fn type_name(v: &Cel) -> &'static str {
    match v {
        Cel::List(_) => "list",
        Cel::Map(_) => "map",
        Cel::Function(..) => "function",
        Cel::Int(_) => "int",
        Cel::UInt(_) => "uint",
        Cel::Float(_) => "double",
        Cel::String(_) => "string",
        Cel::Bytes(_) => "bytes",
        Cel::Bool(_) => "bool",
        Cel::Null => "null",
        _ => "value",
    }
}

/// Converts JSON to CEL, keeping integers as `int` (only integers above `i64::MAX` become
/// `uint`).
pub fn to_cel(v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Cel::Int(i)
            } else if let Some(u) = n.as_u64() {
                Cel::UInt(u)
            } else {
                Cel::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => {
            let entries: HashMap<Key, Cel> = map
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            Cel::Map(Map {
                map: Arc::new(entries),
            })
        }
    }
}

/// Converts a CEL result back to JSON; `None` for values JSON cannot hold (functions, bytes).
pub fn to_json(v: &Cel) -> Option<Value> {
    Some(match v {
        Cel::Null => Value::Null,
        Cel::Bool(b) => Value::Bool(*b),
        Cel::Int(i) => Value::from(*i),
        Cel::UInt(u) => Value::from(*u),
        Cel::Float(f) => serde_json::Number::from_f64(*f).map(Value::Number)?,
        Cel::String(s) => Value::String(s.as_ref().clone()),
        Cel::List(items) => Value::Array(items.iter().map(to_json).collect::<Option<_>>()?),
        Cel::Map(map) => {
            let mut out = serde_json::Map::new();
            for (k, v) in map.map.iter() {
                let key = match k {
                    Key::String(s) => s.as_ref().clone(),
                    Key::Int(i) => i.to_string(),
                    Key::Uint(u) => u.to_string(),
                    Key::Bool(b) => b.to_string(),
                };
                out.insert(key, to_json(v)?);
            }
            Value::Object(out)
        }
        Cel::Timestamp(t) => Value::String(t.to_rfc3339()),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_integers_stay_int_so_arithmetic_works() {
        let e = Expr::compile("self.spec.replicas + 1 == 4").unwrap();
        let obj = to_cel(&json!({"spec": {"replicas": 3}}));
        assert_eq!(e.eval_bool(&[("self", obj)]), Ok(true));
    }

    #[test]
    fn malformed_cel_is_an_error_not_a_panic() {
        for src in ["self.", "((", "", "self.a ?", "}{", "'unterminated"] {
            assert!(Expr::compile(src).is_err(), "{src:?} compiled");
        }
    }

    #[test]
    fn evaluation_errors_are_reported() {
        let e = Expr::compile("self.missing.field == 1").unwrap();
        assert!(e.eval_bool(&[("self", to_cel(&json!({})))]).is_err());
        let e = Expr::compile("'a'").unwrap();
        assert!(e.eval_bool(&[]).unwrap_err().contains("expected a bool"));
    }

    #[test]
    fn round_trip_through_cel() {
        let v = json!({"a": [1, "x", true, null, 1.5], "b": {"c": -2}});
        assert_eq!(to_json(&to_cel(&v)), Some(v));
    }
}
