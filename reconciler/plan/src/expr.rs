//! CEL with the `cel` crate: compile once, evaluate many times, never panic, never run long.
//!
//! Limits (the `cel` crate has no cost tracking of its own, so they are enforced here):
//! - at compile time: at most [`MAX_SOURCE_BYTES`] of source, [`MAX_NESTING`] levels of
//!   expression nesting and [`MAX_COMPREHENSIONS`] macros (`all`, `exists`, `exists_one`,
//!   `map`, `filter`);
//! - before each evaluation: a size-aware upper bound of its cost ([`cost`]: the bytes every
//!   node can touch and produce, following paths into the real variables, with `replace`,
//!   `split`, `join`, `format`, the encoders and comprehensions bounded by the sizes of their
//!   operands) must stay within [`EVAL_BUDGET`];
//! - during each evaluation, whatever the estimate said: a runtime guard ([`guard`]) counts
//!   every call and comprehension iteration and the bytes every call produces, stops the
//!   evaluation past [`guard::MAX_EVAL_STEPS`] steps or [`guard::MAX_EVAL_BYTES`] bytes, and
//!   charges the size-multiplying functions before they allocate.
//!
//! An expression over either budget is an evaluation error (a per-resource condition naming
//! the resource and annotation), never an aborted or stalled controller.
//!
//! JSON is converted to CEL values by hand so that integers stay `int` (serde's route turns
//! positive JSON integers into `uint`, and `self.spec.replicas + 1` then fails). Any panic from
//! the parser or evaluator is contained and reported as an error.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, LazyLock};

use cel::common::ast::IdedExpr;
use cel::common::types::{CelInt, CelString};
use cel::objects::{Key, Map};
use cel::{Context, Env, ExecutionError, Program, Value as Cel};
use enoki_sdk::quantity::Quantity;
use serde_json::Value;

pub mod cost;
pub mod guard;
mod redact;

pub use guard::{
    MAX_EVAL_BYTES, MAX_EVAL_STEPS, MAX_PASS_TIME, OVER_BUDGET, PASS_SPENT, with_pass_budget,
    with_pass_deadline,
};

/// Longest expression accepted, in bytes.
pub const MAX_SOURCE_BYTES: usize = 4096;
/// Deepest expression nesting accepted.
pub const MAX_NESTING: usize = 32;
/// Most comprehension macros in one expression.
pub const MAX_COMPREHENSIONS: u32 = 3;
/// Largest estimated evaluation cost allowed (bytes touched or produced, plus steps).
pub const EVAL_BUDGET: u64 = 64_000_000;

/// A compiled CEL expression and its source.
#[derive(Clone)]
pub struct Expr {
    source: String,
    program: Arc<Program>,
    /// The program rewritten with the runtime guard ([`guard::rewrite`]).
    guarded: Arc<IdedExpr>,
    /// Deep enough that the interpreter's recursion needs a larger stack than a worker's.
    deep: bool,
}

/// Functions and operators of CEL's optional values, which enoki does not offer.
const OPTIONAL_FUNCTIONS: &[&str] = &[
    "optional.of",
    "of",
    "ofNonZeroValue",
    "none",
    "optional.ofNonZeroValue",
    "optional.none",
    "value",
    "hasValue",
    "orValue",
    "or",
    "_?._",
    "_[?_]",
];

/// Guarded expressions deeper than this are evaluated on a thread with [`PARSER_STACK`].
const SHALLOW_DEPTH: usize = 16;

/// Size and shape of an expression's AST.
#[derive(Default)]
struct Shape {
    nodes: u64,
    depth: usize,
    comprehensions: u32,
}

fn measure(e: &cel::common::ast::IdedExpr, depth: usize, shape: &mut Shape) {
    use cel::common::ast::{EntryExpr, Expr as Ast};
    shape.nodes += 1;
    shape.depth = shape.depth.max(depth);
    if depth > MAX_NESTING {
        return;
    }
    let d = depth + 1;
    match &e.expr {
        Ast::Call(c) => {
            if let Some(t) = &c.target {
                measure(t, d, shape);
            }
            c.args.iter().for_each(|a| measure(a, d, shape));
        }
        Ast::Comprehension(c) => {
            shape.comprehensions += 1;
            for part in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                measure(part, d, shape);
            }
        }
        Ast::List(l) => l.elements.iter().for_each(|x| measure(x, d, shape)),
        Ast::Map(m) => m.entries.iter().for_each(|x| match &x.expr {
            EntryExpr::MapEntry(me) => {
                measure(&me.key, d, shape);
                measure(&me.value, d, shape);
            }
            EntryExpr::StructField(f) => measure(&f.value, d, shape),
        }),
        Ast::Struct(st) => st.entries.iter().for_each(|x| match &x.expr {
            EntryExpr::MapEntry(me) => {
                measure(&me.key, d, shape);
                measure(&me.value, d, shape);
            }
            EntryExpr::StructField(f) => measure(&f.value, d, shape),
        }),
        Ast::Select(s) => measure(&s.operand, d, shape),
        Ast::Ident(_) | Ast::Literal(_) | Ast::Unspecified => {}
    }
}

/// Deepest nesting of `(`, `[` and `{` outside string literals.
fn bracket_depth(source: &str) -> usize {
    let (mut depth, mut max, mut quote, mut escaped) = (0usize, 0usize, None, false);
    for c in source.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '(' | '[' | '{' => {
                depth += 1;
                max = max.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Stack of the parsing thread: the recursive-descent parser uses several frames per
/// nesting level, more than an async worker's stack holds for hostile input.
const PARSER_STACK: usize = 32 << 20;

/// The environment every expression runs in: CEL's standard library plus what Eno's CEL
/// environment adds — cel-go's string (`split`, `lowerAscii`, `upperAscii`, `join`, …) and
/// encoder (`base64.encode`/`decode`) extensions, and `compareResourceQuantities`. Eno also
/// enables cel-go's list extension; it is left out here because `lists.range(n)` allocates
/// without bound, outside the cost estimate above. Built once.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    let added = env
        .add_extension(cel::extensions::strings)
        .and_then(|()| env.add_extension(cel::extensions::encoders))
        .and_then(|()| guard::install(&mut env))
        .and_then(|()| {
            cel::add_overload!(env,
                fn compare_resource_quantities: (CelString<'_>, CelString<'_>) -> Result<CelInt>,
                name = "compareResourceQuantities")
        });
    debug_assert!(added.is_ok(), "CEL extensions: {added:?}");
    Arc::new(env)
});

/// `compareResourceQuantities(a, b)`: -1, 0 or 1 as Kubernetes quantity `a` is less than,
/// equal to or greater than `b` (`'1Gi'` vs `'1024Mi'` is 0); an error names the bad side.
fn compare_resource_quantities(
    a: &CelString<'_>,
    b: &CelString<'_>,
) -> Result<CelInt, ExecutionError> {
    let parse = |s: &CelString<'_>, side: &str| {
        Quantity::parse(s.inner()).map_err(|e| {
            ExecutionError::function_error(
                "compareResourceQuantities",
                format!("parsing {side} quantity: {e}"),
            )
        })
    };
    let (l, r) = (parse(a, "left")?, parse(b, "right")?);
    Ok(CelInt::from(match l.partial_cmp(&r) {
        Some(std::cmp::Ordering::Less) => -1,
        Some(std::cmp::Ordering::Greater) => 1,
        _ => 0,
    }))
}

/// Parses on a thread with a large stack (a deep expression cannot overflow the caller's),
/// containing any panic.
fn parse(source: &str) -> Result<Program, String> {
    let owned = source.to_string();
    let parsed = std::thread::Builder::new()
        .name("cel-parse".into())
        .stack_size(PARSER_STACK)
        .spawn(move || catch_unwind(|| ENV.compile(&owned).map_err(|e| e.to_string())))
        .map_err(|e| format!("cannot start the CEL parser: {e}"))?
        .join();
    match parsed {
        Ok(Ok(result)) => result,
        _ => Err("the CEL parser panicked on this expression".into()),
    }
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
        if source.len() > MAX_SOURCE_BYTES {
            return Err(format!(
                "expression is {} bytes, over the limit of {MAX_SOURCE_BYTES}",
                source.len()
            ));
        }
        if bracket_depth(source) > MAX_NESTING {
            return Err(format!(
                "expression nests more than {MAX_NESTING} levels deep"
            ));
        }
        let program = parse(source)?;
        let mut shape = Shape::default();
        measure(program.expression(), 0, &mut shape);
        if shape.depth > MAX_NESTING {
            return Err(format!(
                "expression nests more than {MAX_NESTING} levels deep"
            ));
        }
        if shape.comprehensions > MAX_COMPREHENSIONS {
            return Err(format!(
                "expression uses {} comprehension macros (all, exists, exists_one, map, \
                 filter), over the limit of {MAX_COMPREHENSIONS}",
                shape.comprehensions
            ));
        }
        // No optional values (`optional.of`, `.?f`, `orValue`, …): they hand on values of any
        // size, which the cost estimate cannot follow.
        let refs = program.references();
        if let Some(f) = OPTIONAL_FUNCTIONS.iter().find(|f| refs.has_function(f)) {
            return Err(format!("{f:?}: optional values are not supported"));
        }
        let guarded = guard::rewrite(program.expression());
        let mut guarded_shape = Shape::default();
        measure(&guarded, 0, &mut guarded_shape);
        Ok(Expr {
            source: source.to_string(),
            program: Arc::new(program),
            guarded: Arc::new(guarded),
            deep: guarded_shape.depth > SHALLOW_DEPTH,
        })
    }

    /// Upper bound of the cost of evaluating this expression over `vars`: the bytes it can
    /// touch and produce plus its steps (see [`cost`]).
    pub fn estimated_cost(&self, vars: &[(&str, Cel)]) -> u64 {
        cost::Estimator::new(vars).cost(self.program.expression())
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
        let pass = guard::pass_deadline();
        if pass.is_some_and(|d| std::time::Instant::now() > d) {
            return Err(format!(
                "{} ({:?} per pass); evaluated again on the next pass",
                guard::PASS_SPENT,
                guard::MAX_PASS_TIME
            ));
        }
        let cost = self.estimated_cost(vars);
        if cost > EVAL_BUDGET {
            return Err(format!(
                "{OVER_BUDGET}: estimated cost {cost} is over the limit of {EVAL_BUDGET} \
                 (string growth, nested macros or a large object); simplify the expression"
            ));
        }
        let run = || {
            let mut ctx = Context::with_env(ENV.clone());
            for (name, value) in vars {
                ctx.add_variable_from_value(*name, value.clone());
            }
            let out = guard::with_pass_deadline(pass, || {
                guard::metered(|| cel::Value::resolve(&self.guarded, &ctx)).0
            });
            out.map_err(|e| redact::redacted(&e, &self.source))
        };
        let contained = || match catch_unwind(AssertUnwindSafe(run)) {
            Ok(result) => result,
            Err(_) => Err("the CEL evaluator panicked".into()),
        };
        if !self.deep {
            return contained();
        }
        // The interpreter recurses once per level (twice where the guard wraps a call): a deep
        // expression runs on a thread with a large stack, never on the caller's.
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("cel-eval".into())
                .stack_size(PARSER_STACK)
                .spawn_scoped(s, contained)
                .map_err(|e| format!("cannot start the CEL evaluator: {e}"))?
                .join()
                .unwrap_or_else(|_| Err("the CEL evaluator panicked".into()))
        })
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
    fn enos_extension_functions_are_there() {
        let t = |src: &str| Expr::compile(src).unwrap().eval_bool(&[]).unwrap();
        assert!(t("'a,b'.split(',') == ['a', 'b']"));
        assert!(t(
            "'AbC'.lowerAscii() == 'abc' && 'abc'.upperAscii() == 'ABC'"
        ));
        assert!(t("['a', 'b'].join('-') == 'a-b'"));
        assert!(t(
            "base64.encode(b'hi') == 'aGk=' && base64.decode('aGk=') == b'hi'"
        ));
        assert!(t("compareResourceQuantities('1Gi', '1024Mi') == 0"));
        assert!(t("compareResourceQuantities('500m', '1') == -1"));
        assert!(t("compareResourceQuantities('2', '1500m') == 1"));
        let err = Expr::compile("compareResourceQuantities('x', '1') == 0")
            .unwrap()
            .eval(&[])
            .unwrap_err();
        assert!(err.contains("left quantity"), "{err}");
        assert!(
            Expr::compile("lists.range(1000000000).size() > 0")
                .unwrap()
                .eval(&[])
                .is_err()
        );
    }

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
    fn oversized_and_deeply_nested_expressions_are_refused_at_compile_time() {
        let long = format!("self.a == '{}'", "x".repeat(MAX_SOURCE_BYTES));
        assert!(Expr::compile(&long).unwrap_err().contains("over the limit"));
        let deep = format!("{}1{}", "(1 + ".repeat(40), ")".repeat(40));
        assert!(
            Expr::compile(&deep)
                .unwrap_err()
                .contains("nests more than")
        );
        let shallow = format!("{}1{} > 0", "(1 + ".repeat(10), ")".repeat(10));
        assert!(Expr::compile(&shallow).is_ok());
        // At the limit, and deep without brackets: an answer, never a stack overflow.
        let limit = format!(
            "{}1{} > 0",
            "(1 + ".repeat(MAX_NESTING),
            ")".repeat(MAX_NESTING)
        );
        let _ = Expr::compile(&limit);
        let unary = format!("{}true", "!".repeat(4000));
        let _ = Expr::compile(&unary);
        let minus = format!("{}1 > 0", "-".repeat(4000));
        let _ = Expr::compile(&minus);
    }

    #[test]
    fn a_nested_macro_bomb_is_refused_at_compile_time() {
        let bomb = "self.l.all(a, self.l.all(b, self.l.all(c, self.l.all(d, a + b + c + d >= 0))))";
        let e = Expr::compile(bomb).unwrap_err();
        assert!(e.contains("comprehension macros"), "{e}");
    }

    #[test]
    fn a_macro_bomb_over_a_large_object_exceeds_the_budget_but_small_ones_run() {
        let e =
            Expr::compile("self.l.map(a, self.l.map(b, self.l.all(c, a + b + c >= 0)))").unwrap();
        // Obeyed: 10 elements, 1,000 iterations.
        let small = to_cel(&json!({"l": (0..10).collect::<Vec<_>>()}));
        assert!(e.eval(&[("self", small)]).is_ok());
        // Violated: 2,000 elements would be 8e9 iterations; refused before it starts.
        let big = to_cel(&json!({"l": (0..2000).collect::<Vec<_>>()}));
        let started = std::time::Instant::now();
        let err = e.eval(&[("self", big)]).unwrap_err();
        assert!(err.contains(OVER_BUDGET), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        // A plain condition lookup on a large object is cheap: within the estimate's budget at
        // 5,000 conditions, and it runs at 1,000 (far more than any real object; well inside
        // the 250 ms wall-clock budget even in a debug build sharing two cores with the rest
        // of the suite).
        let ready = Expr::compile("self.status.conditions.exists(c, c.type == 'Ready')").unwrap();
        let conditions = |n: usize| {
            let conds: Vec<_> = (0..n).map(|i| json!({"type": format!("T{i}")})).collect();
            to_cel(&json!({"status": {"conditions": conds}}))
        };
        assert!(ready.estimated_cost(&[("self", conditions(5000))]) <= EVAL_BUDGET);
        assert_eq!(ready.eval_bool(&[("self", conditions(1000))]), Ok(false));
    }

    /// The replace chain from the security review: ~10^13 bytes if it ran.
    fn replace_bomb(n: usize) -> String {
        let mut e = "'aaaaaaaaaa'".to_string();
        for _ in 0..n {
            e.push_str(".replace('a','aaaaaaaaaa')");
        }
        format!("size({e}) > 0")
    }

    #[test]
    fn a_replace_chain_is_refused_by_the_estimate_before_it_allocates() {
        let e = Expr::compile(&replace_bomb(13)).unwrap();
        assert!(e.estimated_cost(&[]) > EVAL_BUDGET);
        let err = e.eval(&[]).unwrap_err();
        assert!(err.contains(OVER_BUDGET), "{err}");
        // Two replaces (1,000 bytes) are fine.
        assert_eq!(
            Expr::compile(&replace_bomb(2)).unwrap().eval_bool(&[]),
            Ok(true)
        );
    }

    #[test]
    fn the_runtime_guard_stops_growth_the_estimate_let_through() {
        // Run the guarded program directly, skipping the estimate: the guard alone must stop it.
        let e = Expr::compile(&replace_bomb(13)).unwrap();
        let ctx = Context::with_env(ENV.clone());
        let (out, used) = guard::metered(|| cel::Value::resolve(&e.guarded, &ctx));
        let err = out.unwrap_err().to_string();
        assert!(err.contains(OVER_BUDGET), "{err}");
        assert!(used.bytes <= MAX_EVAL_BYTES * 11, "{used:?}");
        // join with a large separator, charged before it allocates.
        let e = Expr::compile("size(self.s.split('').join(self.s)) > 0").unwrap();
        let mut ctx = Context::with_env(ENV.clone());
        ctx.add_variable_from_value("self", to_cel(&json!({"s": "x".repeat(100_000)})));
        let (out, _) = guard::metered(|| cel::Value::resolve(&e.guarded, &ctx));
        assert!(out.unwrap_err().to_string().contains(OVER_BUDGET));
    }

    /// Once a pass's CEL time is spent, further evaluations in it fail at once, whatever
    /// each would cost; outside a pass (or in a new one) they run.
    #[test]
    fn a_spent_pass_budget_refuses_further_evaluations() {
        let e = Expr::compile("self.n == 1").unwrap();
        let vars = [("self", to_cel(&json!({"n": 1})))];
        assert_eq!(e.eval_bool(&vars), Ok(true));
        let in_spent_pass = with_pass_budget(std::time::Duration::ZERO, || {
            std::thread::sleep(std::time::Duration::from_millis(2));
            e.eval_bool(&vars)
        });
        let err = in_spent_pass.unwrap_err();
        assert!(err.contains(guard::PASS_SPENT), "{err}");
        let fresh = with_pass_budget(MAX_PASS_TIME, || e.eval_bool(&vars));
        assert_eq!(fresh, Ok(true));
        assert_eq!(
            guard::pass_deadline(),
            None,
            "the budget ends with its pass"
        );
    }

    #[test]
    fn split_into_macros_is_a_budget_error_not_a_hang() {
        let big = to_cel(&json!({"s": "x".repeat(200_000)}));
        for src in [
            "self.s.split('').all(a, self.s.split('').all(b, a == b))",
            "self.s.split('').map(a, self.s.split('').exists(b, a != b)).size() > 0",
            "self.s.split('').filter(a, a == 'x').size() > 0",
        ] {
            let e = Expr::compile(src).unwrap();
            let started = std::time::Instant::now();
            let err = e.eval(&[("self", big.clone())]).unwrap_err();
            assert!(err.contains(OVER_BUDGET), "{src}: {err}");
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "{src}"
            );
            // Guard alone (no estimate): also stops.
            let mut ctx = Context::with_env(ENV.clone());
            ctx.add_variable_from_value("self", big.clone());
            let (out, used) = guard::metered(|| cel::Value::resolve(&e.guarded, &ctx));
            assert!(out.is_err(), "{src}");
            assert!(
                used.steps <= MAX_EVAL_STEPS + 1 && used.bytes <= MAX_EVAL_BYTES * 2,
                "{used:?}"
            );
        }
    }

    #[test]
    fn guarded_functions_keep_cel_go_semantics() {
        let t = |src: &str| Expr::compile(src).unwrap().eval_bool(&[]).unwrap();
        assert!(t("'hello hello'.replace('he', 'we') == 'wello wello'"));
        assert!(t("'hello hello'.replace('he', 'we', 1) == 'wello hello'"));
        assert!(t("'hello'.replace('', '_') == '_h_e_l_l_o_'"));
        assert!(t("'a,b,c'.split(',', 2) == ['a', 'b,c']"));
        assert!(t("'abc'.split('') == ['a', 'b', 'c']"));
        assert!(t("'abc'.split('', 2) == ['a', 'bc']"));
        assert!(t("'a,b'.split(',', 0) == []"));
        assert!(t("['a', 'b'].join() == 'ab' && [].join('-') == ''"));
        assert!(t("[1, 2, 3].map(x, x * 2) == [2, 4, 6]"));
        assert!(t("[1, 2, 3].filter(x, x > 1) == [2, 3]"));
        assert!(t("[1, 2, 3].exists_one(x, x == 2)"));
        assert!(t("!([1, 2, 3].all(x, x > 1))"));
        assert!(t("{'a': 1, 'b': 2}.all(k, k.size() == 1)"));
        // cel-go: an error in all() is absorbed by a false element.
        assert!(!t("[0, 1].all(x, 1 / x > 5)"));
    }

    #[test]
    fn literals_and_loop_variables_are_charged_by_what_they_hold() {
        // Each iteration copies a 900 KB string into a map literal: 45 GB if it ran.
        let e = Expr::compile("self.s.split('').map(c, {'k': self.big}).size() > 0").unwrap();
        let vars = [(
            "self",
            to_cel(&json!({"s": "x".repeat(50_000), "big": "y".repeat(900_000)})),
        )];
        let err = e.eval(&vars).unwrap_err();
        assert!(err.contains(OVER_BUDGET), "{err}");
        // Guard alone: stopped by the bytes it charged, not by the clock.
        let mut ctx = Context::with_env(ENV.clone());
        ctx.add_variable_from_value("self", vars[0].1.clone());
        let (out, used) = guard::metered(|| cel::Value::resolve(&e.guarded, &ctx));
        let err = out.unwrap_err().to_string();
        assert!(err.contains("bytes"), "{err}");
        assert!(
            used.bytes > MAX_EVAL_BYTES && used.bytes <= MAX_EVAL_BYTES + 2_000_000,
            "{used:?}"
        );
        // A list literal is charged by what it holds.
        let e = Expr::compile("[self.big, self.big].size() == 2").unwrap();
        let (out, used) = guard::metered(|| cel::Value::resolve(&e.guarded, &ctx));
        assert!(out.is_ok());
        assert!(used.bytes >= 1_800_000, "{used:?}");
        // Optional values are not part of the environment.
        for src in [
            "optional.of(self.s).value() == 'x'",
            "self.?s.orValue('') == ''",
        ] {
            let err = Expr::compile(src).unwrap_err();
            assert!(err.contains("optional values"), "{src}: {err}");
        }
    }

    #[test]
    fn searches_are_linear_and_keep_cel_go_semantics() {
        let t = |src: &str| Expr::compile(src).unwrap().eval_bool(&[]).unwrap();
        assert!(t("'hello mellow'.indexOf('ello') == 1"));
        assert!(t("'hello mellow'.indexOf('ello', 2) == 7"));
        assert!(t(
            "'hello mellow'.indexOf('') == 0 && 'hello'.indexOf('', 2) == 2"
        ));
        assert!(t("'hello mellow'.indexOf('jello') == -1"));
        assert!(t("'hello mellow'.lastIndexOf('ello') == 7"));
        assert!(t("'hello mellow'.lastIndexOf('ello', 6) == 1"));
        assert!(t(
            "'hello'.lastIndexOf('') == 5 && 'hello'.lastIndexOf('', 2) == 2"
        ));
        assert!(t("'ab'.lastIndexOf('abc') == -1"));
        assert!(t(
            "'ä☃b☃'.indexOf('☃') == 1 && 'ä☃b☃'.lastIndexOf('☃') == 3"
        ));
        assert!(
            Expr::compile("'a'.indexOf('a', 5) == 0")
                .unwrap()
                .eval(&[])
                .is_err()
        );
        assert!(t("'abc'.matches('^a.c$') && matches('abc', 'b')"));
        let long = format!("'a'.matches('{}')", "a".repeat(2000));
        let err = Expr::compile(&long).unwrap().eval(&[]).unwrap_err();
        assert!(err.contains("over the limit"), "{err}");
        // An 8M/4M-character search that is quadratic in cel's own indexOf.
        let e = Expr::compile("self.a.indexOf(self.b) >= -1").unwrap();
        let vars = [(
            "self",
            to_cel(
                &json!({"a": "a".repeat(2_000_000), "b": format!("{}b", "a".repeat(1_000_000))}),
            ),
        )];
        let started = std::time::Instant::now();
        let _ = e.eval(&vars);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn a_deep_expression_is_evaluated_off_the_callers_stack() {
        // 28 levels of `+` (56 once guarded) on a small stack.
        let src = format!("{}1{} > 0", "(1 + ".repeat(28), ")".repeat(28));
        let e = Expr::compile(&src).unwrap();
        let out = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || e.eval_bool(&[]))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(out, Ok(true));
    }

    #[test]
    fn round_trip_through_cel() {
        let v = json!({"a": [1, "x", true, null, 1.5], "b": {"c": -2}});
        assert_eq!(to_json(&to_cel(&v)), Some(v));
    }
}
