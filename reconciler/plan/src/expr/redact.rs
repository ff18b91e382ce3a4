//! An evaluation error as enoki reports it: the evaluator's message without the values it
//! quotes. The CEL evaluator writes operands into its messages (`"aGVsbG8=" can not be
//! compared to 1`), and a readiness check or override runs on the live object — a Secret's
//! data would reach the Composition's status, Events and `enoki status`. Types stay; values go.

use cel::ExecutionError as E;

use super::type_name;

/// Messages of enoki's own functions and limits that quote no value (kept whole).
const SAFE_MESSAGES: [&str; 7] = [
    super::guard::PASS_SPENT,
    super::guard::OVER_BUDGET,
    "the regular expression is",
    "the string is",
    "separator is not a string",
    "receiver is not a list",
    "list holds a non-string",
];

/// Whether `key` is a field name or a string literal of the expression `source` (not a value
/// that happens to be part of one).
fn spelled(source: &str, key: &str) -> bool {
    let names = source.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
    let literals = ['\'', '"']
        .into_iter()
        .flat_map(|q| source.split(q).skip(1).step_by(2));
    names.chain(literals).any(|word| word == key)
}

/// Messages of enoki's functions whose tail (after the colon) quotes a value.
const QUOTING_PREFIXES: [&str; 2] = ["parsing left quantity", "parsing right quantity"];

/// `e` without the values it carries; `source` is the expression (a missing key it names
/// literally is kept).
pub fn redacted(e: &E, source: &str) -> String {
    match e {
        // The key, when the expression spells it (`self.data.ready`); not one read from data
        // (`self.data[self.spec.key]`).
        E::NoSuchKey(key) if spelled(source, key) => e.to_string(),
        E::NoSuchKey(_) => "No such key (a key read from the object)".into(),
        // Type names only.
        E::UnexpectedType { got, want } => {
            let name = |t: &str| {
                if t.len() <= 24 && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    t.to_string()
                } else {
                    "a value".to_string()
                }
            };
            format!(
                "Unexpected type: got '{}', want '{}'",
                name(got),
                name(want)
            )
        }
        E::InvalidArgumentCount { .. }
        | E::NoSuchOverload(_)
        | E::UndeclaredReference(_)
        | E::MissingArgumentOrTarget => e.to_string(),
        E::UnsupportedTargetType { target } => {
            format!("Invalid argument type: {}", type_name(target))
        }
        E::NotSupportedAsMethod { method, target } => format!(
            "Method '{method}' not supported on type '{}'",
            type_name(target)
        ),
        E::UnsupportedKeyType(v) => format!("Unable to use a {} as a key", type_name(v)),
        E::ValuesNotComparable(a, b) => format!(
            "a {} can not be compared to a {}",
            type_name(a),
            type_name(b)
        ),
        E::UnsupportedBinaryOperator(op, a, b) => format!(
            "Unsupported binary operator '{op}': {}, {}",
            type_name(a),
            type_name(b)
        ),
        E::UnsupportedIndex(i, v) => {
            format!("Cannot use a {} to index a {}", type_name(i), type_name(v))
        }
        E::FunctionError { function, message }
            if SAFE_MESSAGES.iter().any(|p| message.starts_with(p)) =>
        {
            format!("Error executing function '{function}': {message}")
        }
        E::FunctionError { function, message } => match message.split_once(':') {
            // `parsing left quantity: <the parser's words about the value>`
            Some((what, _)) if QUOTING_PREFIXES.contains(&what) => {
                format!("Error executing function '{function}': {what} failed")
            }
            _ => format!("Error executing function '{function}' (its message may quote data)"),
        },
        E::DivisionByZero(_) => "Division by zero".into(),
        E::RemainderByZero(_) => "Remainder by zero".into(),
        E::Overflow(op, a, b) => format!(
            "Overflow from binary operator '{op}': {}, {}",
            type_name(a),
            type_name(b)
        ),
        E::IndexOutOfBounds(_) => "Index out of bounds".into(),
        E::DuplicateKey(v) => format!("Failed with a repeated {} key", type_name(v)),
        _ => "the expression cannot be evaluated on this object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cel::Value;

    #[test]
    fn no_value_is_quoted() {
        let secret = || Value::String(std::sync::Arc::new("aHVudGVyMg==".into()));
        for e in [
            E::ValuesNotComparable(secret(), Value::Int(1)),
            E::UnsupportedBinaryOperator("+", secret(), Value::Int(1)),
            E::UnsupportedIndex(secret(), Value::Null),
            E::UnsupportedTargetType { target: secret() },
            E::FunctionError {
                function: "int".into(),
                message: "cannot parse aHVudGVyMg==".into(),
            },
            E::DivisionByZero(secret()),
            E::IndexOutOfBounds(secret()),
        ] {
            let text = redacted(&e, "s > 1");
            assert!(!text.contains("aHVudGVy"), "{text}");
            assert!(!text.is_empty());
        }
        let limit = E::FunctionError {
            function: "matches".into(),
            message: format!(
                "{} of steps for one expression",
                super::super::guard::OVER_BUDGET
            ),
        };
        assert!(redacted(&limit, "").contains(super::super::guard::OVER_BUDGET));
        let key = || E::NoSuchKey(std::sync::Arc::new("aHVudGVyMg==".into()));
        assert_eq!(
            redacted(&key(), "self.data[self.spec.k]"),
            "No such key (a key read from the object)"
        );
        assert!(redacted(&key(), "self.data['aHVudGVyMg==']").contains("aHVudGVy"));
        let ready = E::NoSuchKey(std::sync::Arc::new("ready".into()));
        assert!(redacted(&ready, "self.status.ready == true").contains("ready"));
        // A key read from data that is only part of a name of the expression is not echoed.
        let part = E::NoSuchKey(std::sync::Arc::new("spe".into()));
        assert!(!redacted(&part, "self.data[self.spec.k]").contains("spe"));
        // Through the evaluator: what a readiness check on a Secret's data reports.
        for source in [
            "int(s) > 0",
            "s.size() > 0 && s[0] == 'a'",
            "timestamp(s) > now",
        ] {
            let err = super::super::Expr::compile(source)
                .unwrap()
                .eval(&[("s", secret()), ("now", Value::Int(0))])
                .unwrap_err();
            assert!(!err.contains("aHVudGVy"), "{source}: {err}");
        }
        assert_eq!(
            redacted(&E::ValuesNotComparable(secret(), Value::Int(1)), ""),
            "a string can not be compared to a int"
        );
    }
}
