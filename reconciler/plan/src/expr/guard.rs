//! The runtime guard: whatever the cost estimate said, an evaluation stops with an error once
//! it has taken [`MAX_EVAL_STEPS`] steps or produced [`MAX_EVAL_BYTES`] bytes.
//!
//! The `cel` crate has no cost tracking and no hook in its interpreter, so the compiled
//! program is rewritten once, at compile time:
//! - every iteration of a comprehension (`all`, `exists`, `exists_one`, `map`, `filter`) passes
//!   through a metering call that counts a step and charges the loop variables it copies;
//! - the result of every call that builds a value (`+`, indexing, conversions, the string
//!   functions) passes through a metering call that counts a step and charges the bytes of the
//!   value (strings and bytes by length, lists and maps by entries); list and map literals are
//!   charged by everything they hold;
//! - the functions whose output can be much larger than their input (`replace`, `join`,
//!   `split`) are replaced by versions that compute the size of their result from their
//!   arguments and charge it **before** allocating, so one call can never ask for more memory
//!   than the budget; list and map literals and the loop variables a comprehension copies on
//!   every iteration are charged by everything they hold;
//! - the functions whose time can be much larger than their input (`indexOf`, `lastIndexOf`,
//!   `matches`) are replaced by linear or bounded versions (a regular expression of at most
//!   [`MAX_REGEX_BYTES`], compiled to at most 1 MiB);
//! - every charge also checks the evaluation's age against [`MAX_EVAL_TIME`].
//!
//! The counters live in a thread-local [`Meter`] that [`metered`] arms around one evaluation;
//! evaluation is synchronous, so every guarded call of that evaluation sees it.

use std::cell::Cell;

use cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr as Ast, IdedExpr, operators};
use cel::common::types::{
    CelBytes, CelInt, CelList, CelMap, CelString, DYN_TYPE, LIST_TYPE, STRING_TYPE,
};
use cel::common::value::{CowVal, Val};
use cel::{Env, ExecutionError};

/// Most steps (function calls and comprehension iterations) one evaluation may take.
pub const MAX_EVAL_STEPS: u64 = 1_000_000;
/// Most bytes the values one evaluation produces may add up to.
pub const MAX_EVAL_BYTES: u64 = 16 << 20;
/// Longest one evaluation may run (checked at every step).
pub const MAX_EVAL_TIME: std::time::Duration = std::time::Duration::from_millis(250);
/// Longest regular expression `matches` accepts.
pub const MAX_REGEX_BYTES: usize = 1024;
/// Longest string `matches` searches.
pub const MAX_REGEX_SUBJECT_BYTES: usize = 64 << 10;
/// Largest compiled program `matches` accepts (bytes).
pub const MAX_REGEX_PROGRAM_BYTES: usize = 16 << 10;
/// Longest all the evaluations of one reconcile pass may run together (see
/// [`with_pass_budget`]).
pub const MAX_PASS_TIME: std::time::Duration = std::time::Duration::from_secs(2);

/// Counts a step and charges its argument's size; returns the argument.
pub(super) const METER: &str = "@enoki_meter";
/// Counts a step and charges the full size of its argument (list and map literals, which copy
/// what they hold); returns the argument.
const METER_DEEP: &str = "@enoki_meter_deep";
/// One comprehension iteration: counts a step and charges the full size of the loop
/// variables after the first argument (the interpreter copies them); returns the first.
const TICK: &str = "@enoki_tick";
const REPLACE: &str = "@enoki_replace";
const INDEX_OF: &str = "@enoki_index_of";
const LAST_INDEX_OF: &str = "@enoki_last_index_of";
const MATCHES: &str = "@enoki_matches";
const SPLIT: &str = "@enoki_split";
const JOIN: &str = "@enoki_join";

/// Bytes a list element or map entry is charged beside its own content.
const ENTRY_BYTES: u64 = 48;

thread_local! {
    static METER_STATE: Cell<Option<Meter>> = const { Cell::new(None) };
    /// When the CEL time of the pass running on this thread is spent.
    static PASS_DEADLINE: Cell<Option<std::time::Instant>> = const { Cell::new(None) };
}

/// Runs `f` (one reconcile pass's planning) with at most `budget` of CEL time in all its
/// evaluations together: once spent, every further evaluation in `f` fails at once (and one
/// running stops at its next step), so a Composition with many expensive expressions holds
/// its reconcile worker for about `budget`, not for the sum of every expression's 250 ms.
pub fn with_pass_budget<T>(budget: std::time::Duration, f: impl FnOnce() -> T) -> T {
    let outer = PASS_DEADLINE.with(|d| d.replace(Some(std::time::Instant::now() + budget)));
    let out = f();
    PASS_DEADLINE.with(|d| d.set(outer));
    out
}

/// The deadline of the pass running on this thread, if any.
pub fn pass_deadline() -> Option<std::time::Instant> {
    PASS_DEADLINE.with(Cell::get)
}

/// Runs `f` under `deadline` (a pass deadline carried to another thread).
pub fn with_pass_deadline<T>(deadline: Option<std::time::Instant>, f: impl FnOnce() -> T) -> T {
    let outer = PASS_DEADLINE.with(|d| d.replace(deadline));
    let out = f();
    PASS_DEADLINE.with(|d| d.set(outer));
    out
}

/// The words of the error of an evaluation the pass had no time left for.
pub const PASS_SPENT: &str = "not evaluated: this reconcile pass spent its CEL time";

/// What one evaluation has used so far.
#[derive(Clone, Copy, Debug)]
pub struct Meter {
    /// Steps taken.
    pub steps: u64,
    /// Bytes produced.
    pub bytes: u64,
    /// When it started.
    pub started: std::time::Instant,
}

impl Default for Meter {
    fn default() -> Self {
        Meter {
            steps: 0,
            bytes: 0,
            started: std::time::Instant::now(),
        }
    }
}

/// Runs `f` with a fresh meter armed on this thread; returns its result and what it used.
pub fn metered<T>(f: impl FnOnce() -> T) -> (T, Meter) {
    let outer = METER_STATE.with(|m| m.replace(Some(Meter::default())));
    let out = f();
    let used = METER_STATE.with(|m| m.replace(outer)).unwrap_or_default();
    (out, used)
}

/// Charges `steps` and `bytes` to the armed meter; an error once over either budget.
fn charge(function: &str, steps: u64, bytes: u64) -> Result<(), ExecutionError> {
    METER_STATE.with(|m| {
        let Some(mut meter) = m.get() else {
            return Ok(());
        };
        meter.steps = meter.steps.saturating_add(steps);
        meter.bytes = meter.bytes.saturating_add(bytes);
        m.set(Some(meter));
        if meter.steps > MAX_EVAL_STEPS {
            return Err(over_budget(function, &format!("{MAX_EVAL_STEPS} steps")));
        }
        if meter.bytes > MAX_EVAL_BYTES {
            return Err(over_budget(function, &format!("{MAX_EVAL_BYTES} bytes")));
        }
        if meter.started.elapsed() > MAX_EVAL_TIME {
            return Err(over_budget(function, &format!("{MAX_EVAL_TIME:?}")));
        }
        if pass_deadline().is_some_and(|d| std::time::Instant::now() > d) {
            return Err(ExecutionError::function_error(
                function,
                format!("{PASS_SPENT} ({MAX_PASS_TIME:?} per pass)"),
            ));
        }
        Ok(())
    })
}

fn over_budget(function: &str, what: &str) -> ExecutionError {
    let function = match function {
        METER => "evaluation",
        REPLACE => "replace",
        INDEX_OF => "indexOf",
        LAST_INDEX_OF => "lastIndexOf",
        MATCHES => "matches",
        SPLIT => "split",
        JOIN => "join",
        other => other,
    };
    ExecutionError::function_error(
        function,
        format!("{OVER_BUDGET} of {what} for one expression"),
    )
}

/// The words every over-budget error carries.
pub const OVER_BUDGET: &str = "evaluation exceeds its budget";

/// Bytes a value is charged: its length for strings and bytes, its entries for lists and maps.
fn shallow_bytes(v: &dyn Val) -> u64 {
    if let Some(s) = v.downcast_ref::<CelString<'_>>() {
        return s.len() as u64;
    }
    if let Some(b) = v.downcast_ref::<CelBytes<'_>>() {
        return b.inner().len() as u64;
    }
    match v.as_sizer() {
        Some(s) => u64::try_from(*s.size().inner())
            .unwrap_or(0)
            .saturating_mul(ENTRY_BYTES),
        None => 8,
    }
}

/// Bytes a value holds in all: strings and bytes by length, lists and maps by their entries
/// and everything in them.
fn deep_bytes(v: &dyn Val) -> u64 {
    if let Some(l) = v.downcast_ref::<CelList<'_>>() {
        return l
            .inner()
            .iter()
            .map(|x| deep_bytes(x.as_ref()).saturating_add(ENTRY_BYTES))
            .fold(0, u64::saturating_add);
    }
    if let Some(m) = v.downcast_ref::<CelMap<'_>>() {
        return m
            .inner()
            .iter()
            .map(|(k, x)| {
                deep_bytes(k.inner())
                    .saturating_add(deep_bytes(x.as_ref()))
                    .saturating_add(ENTRY_BYTES)
            })
            .fold(0, u64::saturating_add);
    }
    shallow_bytes(v)
}

#[allow(clippy::needless_pass_by_value)] // the signature cel requires of an overload
fn meter_deep<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    if args.len() != 1 {
        return Err(ExecutionError::invalid_argument_count(1, args.len()));
    }
    let v = args.remove(0);
    charge(METER, 1, deep_bytes(v.as_ref()))?;
    Ok(v)
}

#[allow(clippy::needless_pass_by_value)] // the signature cel requires of an overload
fn tick<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    if args.is_empty() {
        return Err(ExecutionError::invalid_argument_count(1, 0));
    }
    let copied = args[1..]
        .iter()
        .map(|v| deep_bytes(v.as_ref()))
        .fold(0, u64::saturating_add);
    charge(METER, 1, copied)?;
    Ok(args.remove(0))
}

fn meter<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    if args.len() != 1 {
        return Err(ExecutionError::invalid_argument_count(1, args.len()));
    }
    let v = args.remove(0);
    charge(METER, 1, shallow_bytes(v.as_ref()))?;
    Ok(v)
}

/// `replace` with its result's size charged before it is built.
fn replace_n(
    this: &CelString<'_>,
    from: &CelString<'_>,
    to: &CelString<'_>,
    n: &CelInt,
) -> Result<CelString<'static>, ExecutionError> {
    let limit = usize::try_from(*n.inner()).ok();
    let found = if from.is_empty() {
        this.chars().count() as u64 + 1
    } else {
        this.matches(from.inner()).count() as u64
    };
    let count = limit.map_or(found, |l| found.min(l as u64));
    let size = (this.len() as u64)
        .saturating_sub(count.saturating_mul(from.len() as u64))
        .saturating_add(count.saturating_mul(to.len() as u64));
    charge(REPLACE, 1, size)?;
    Ok(match limit {
        Some(l) => this.replacen(from.inner(), to.inner(), l),
        None => this.replace(from.inner(), to.inner()),
    }
    .into())
}

fn replace(
    this: &CelString<'_>,
    from: &CelString<'_>,
    to: &CelString<'_>,
) -> Result<CelString<'static>, ExecutionError> {
    replace_n(this, from, to, &CelInt::from(-1))
}

/// The byte offset of code point `i` of `s` (`s.len()` at the end), `None` past it.
fn byte_of(s: &str, i: usize) -> Option<usize> {
    s.char_indices()
        .map(|(b, _)| b)
        .chain(std::iter::once(s.len()))
        .nth(i)
}

fn out_of_range(function: &str, i: i64) -> ExecutionError {
    ExecutionError::function_error(function, format!("index out of range: {i}"))
}

/// `indexOf` (code-point indices, as cel-go) with a linear search.
fn index_of_at(this: &str, needle: &str, offset: Option<i64>) -> Result<CelInt, ExecutionError> {
    charge(INDEX_OF, 1, this.len() as u64)?;
    let n = this.chars().count() as i64;
    let start = match offset {
        None => 0,
        Some(o) if o < 0 => return Err(out_of_range("indexOf", o)),
        Some(o) if needle.is_empty() => return Ok(CelInt::from(o.min(n))),
        Some(o) if o >= n => return Err(out_of_range("indexOf", o)),
        Some(o) => o,
    };
    let from = byte_of(this, usize::try_from(start).unwrap_or(0)).unwrap_or(this.len());
    Ok(CelInt::from(this[from..].find(needle).map_or(-1, |b| {
        start + this[from..from + b].chars().count() as i64
    })))
}

/// `lastIndexOf` (code-point indices, as cel-go) with a linear search.
fn last_index_of_at(
    this: &str,
    needle: &str,
    offset: Option<i64>,
) -> Result<CelInt, ExecutionError> {
    charge(LAST_INDEX_OF, 1, this.len() as u64)?;
    let n = this.chars().count() as i64;
    let m = needle.chars().count() as i64;
    let at = match offset {
        None => n,
        Some(o) if o < 0 => return Err(out_of_range("lastIndexOf", o)),
        Some(o) if needle.is_empty() => return Ok(CelInt::from(o.min(n))),
        Some(o) if o >= n => return Err(out_of_range("lastIndexOf", o)),
        Some(o) => o,
    };
    if m > n {
        return Ok(CelInt::from(-1));
    }
    // An occurrence starting at or before `at` ends at or before `at + m`.
    let last = at.min(n - m);
    let end = byte_of(this, usize::try_from(last + m).unwrap_or(0)).unwrap_or(this.len());
    Ok(CelInt::from(
        this[..end]
            .rfind(needle)
            .map_or(-1, |b| this[..b].chars().count() as i64),
    ))
}

fn index_of(this: &CelString<'_>, needle: &CelString<'_>) -> Result<CelInt, ExecutionError> {
    index_of_at(this, needle, None)
}

fn index_of_offset(
    this: &CelString<'_>,
    needle: &CelString<'_>,
    offset: &CelInt,
) -> Result<CelInt, ExecutionError> {
    index_of_at(this, needle, Some(*offset.inner()))
}

fn last_index_of(this: &CelString<'_>, needle: &CelString<'_>) -> Result<CelInt, ExecutionError> {
    last_index_of_at(this, needle, None)
}

fn last_index_of_offset(
    this: &CelString<'_>,
    needle: &CelString<'_>,
    offset: &CelInt,
) -> Result<CelInt, ExecutionError> {
    last_index_of_at(this, needle, Some(*offset.inner()))
}

/// `matches` with a bounded regular expression: at most [`MAX_REGEX_BYTES`] of pattern compiled
/// to at most [`MAX_REGEX_PROGRAM_BYTES`], at most [`MAX_REGEX_SUBJECT_BYTES`] of subject, charged by its size.
fn matches(
    this: &CelString<'_>,
    re: &CelString<'_>,
) -> Result<cel::common::types::CelBool, ExecutionError> {
    if re.len() > MAX_REGEX_BYTES {
        return Err(ExecutionError::function_error(
            "matches",
            format!(
                "the regular expression is {} bytes, over the limit of {MAX_REGEX_BYTES}",
                re.len()
            ),
        ));
    }
    if this.len() > MAX_REGEX_SUBJECT_BYTES {
        return Err(ExecutionError::function_error(
            "matches",
            format!(
                "the string is {} bytes, over the limit of {MAX_REGEX_SUBJECT_BYTES}",
                this.len()
            ),
        ));
    }
    charge(
        MATCHES,
        1,
        (this.len() as u64).saturating_mul(re.len() as u64 / 64 + 1),
    )?;
    let compiled = regex::RegexBuilder::new(re.inner())
        .size_limit(MAX_REGEX_PROGRAM_BYTES)
        .dfa_size_limit(1 << 20)
        .build()
        .map_err(|e| {
            ExecutionError::function_error(
                "matches",
                format!("'{}' not a valid regex: {e}", re.inner()),
            )
        })?;
    Ok(cel::common::types::CelBool::from(
        compiled.is_match(this.inner()),
    ))
}

/// `split` with the size of its list charged before it is built.
fn split_n(
    this: &CelString<'_>,
    sep: &CelString<'_>,
    n: &CelInt,
) -> Result<CelList<'static>, ExecutionError> {
    let limit = usize::try_from(*n.inner()).ok();
    let found = if sep.is_empty() {
        this.chars().count() as u64
    } else {
        this.matches(sep.inner()).count() as u64 + 1
    };
    let parts = limit.map_or(found, |l| found.min(l as u64));
    charge(
        SPLIT,
        1,
        (this.len() as u64).saturating_add(parts.saturating_mul(ENTRY_BYTES)),
    )?;
    let pieces: Vec<&str> = match (limit, sep.is_empty()) {
        (Some(0), _) => Vec::new(),
        (Some(n), true) => {
            let mut pieces = Vec::new();
            let mut rest: &str = this;
            while let Some(c) = rest.chars().next() {
                if pieces.len() + 1 == n {
                    break;
                }
                let (head, tail) = rest.split_at(c.len_utf8());
                pieces.push(head);
                rest = tail;
            }
            if !rest.is_empty() {
                pieces.push(rest);
            }
            pieces
        }
        (Some(n), false) => this.splitn(n, sep.inner()).collect(),
        (None, true) => this
            .char_indices()
            .map(|(i, c)| &this[i..i + c.len_utf8()])
            .collect(),
        (None, false) => this.split(sep.inner()).collect(),
    };
    Ok(pieces
        .into_iter()
        .map(|s| Box::new(CelString::from(s.to_owned())) as Box<dyn Val>)
        .collect::<Vec<_>>()
        .into())
}

fn split(this: &CelString<'_>, sep: &CelString<'_>) -> Result<CelList<'static>, ExecutionError> {
    split_n(this, sep, &CelInt::from(-1))
}

/// `join` with its result's size charged before it is built.
#[allow(clippy::needless_pass_by_value)] // the signature cel requires of an overload
fn join<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (list, sep) = match args.as_slice() {
        [list] => (list, ""),
        [list, sep] => (
            list,
            sep.downcast_ref::<CelString<'_>>()
                .map(|s| s.inner())
                .ok_or_else(|| {
                    ExecutionError::function_error("join", "separator is not a string")
                })?,
        ),
        _ => return Err(ExecutionError::invalid_argument_count(2, args.len())),
    };
    let iterable = list
        .as_iterable()
        .ok_or_else(|| ExecutionError::function_error("join", "receiver is not a list"))?;
    let mut parts: Vec<&str> = Vec::new();
    let mut items = iterable.iter();
    while let Some(item) = items.next() {
        let s = item
            .downcast_ref::<CelString<'_>>()
            .ok_or_else(|| ExecutionError::function_error("join", "list holds a non-string"))?;
        parts.push(s.inner());
    }
    let size = parts
        .iter()
        .map(|p| p.len() as u64)
        .sum::<u64>()
        .saturating_add((parts.len() as u64).saturating_mul(sep.len() as u64));
    charge(JOIN, 1, size)?;
    Ok(CowVal::owned(CelString::from(parts.join(sep))))
}

/// Declares the guard's functions in `env`.
pub(super) fn install(env: &mut Env) -> Result<(), cel::DeclarationError> {
    env.add_overload(METER, "enoki_meter_dyn", vec![DYN_TYPE], meter)?;
    env.add_overload(
        METER_DEEP,
        "enoki_meter_deep_dyn",
        vec![DYN_TYPE],
        meter_deep,
    )?;
    env.add_overload(TICK, "enoki_tick_1", vec![DYN_TYPE], tick)?;
    env.add_overload(TICK, "enoki_tick_2", vec![DYN_TYPE, DYN_TYPE], tick)?;
    env.add_overload(
        TICK,
        "enoki_tick_3",
        vec![DYN_TYPE, DYN_TYPE, DYN_TYPE],
        tick,
    )?;
    cel::add_member_overload!(env, fn replace: (CelString<'_>, CelString<'_>, CelString<'_>) -> Result<CelString<'_>>, name = REPLACE)?;
    cel::add_member_overload!(env, fn replace_n: (CelString<'_>, CelString<'_>, CelString<'_>, CelInt) -> Result<CelString<'_>>, name = REPLACE)?;
    cel::add_member_overload!(env, fn split: (CelString<'_>, CelString<'_>) -> Result<CelList<'_>>, name = SPLIT)?;
    cel::add_member_overload!(env, fn split_n: (CelString<'_>, CelString<'_>, CelInt) -> Result<CelList<'_>>, name = SPLIT)?;
    cel::add_member_overload!(env, fn index_of: (CelString<'_>, CelString<'_>) -> Result<CelInt>, name = INDEX_OF)?;
    cel::add_member_overload!(env, fn index_of_offset: (CelString<'_>, CelString<'_>, CelInt) -> Result<CelInt>, name = INDEX_OF)?;
    cel::add_member_overload!(env, fn last_index_of: (CelString<'_>, CelString<'_>) -> Result<CelInt>, name = LAST_INDEX_OF)?;
    cel::add_member_overload!(env, fn last_index_of_offset: (CelString<'_>, CelString<'_>, CelInt) -> Result<CelInt>, name = LAST_INDEX_OF)?;
    cel::add_member_overload!(env, fn matches: (CelString<'_>, CelString<'_>) -> Result<cel::common::types::CelBool>, name = MATCHES)?;
    cel::add_overload!(env, fn matches: (CelString<'_>, CelString<'_>) -> Result<cel::common::types::CelBool>, name = MATCHES, id = "enoki_matches_global")?;
    env.add_member_overload(JOIN, "enoki_join", LIST_TYPE, vec![], join)?;
    env.add_member_overload(JOIN, "enoki_join_sep", LIST_TYPE, vec![STRING_TYPE], join)?;
    Ok(())
}

/// Calls that build a new value (strings, bytes, lists) and are not charged inside: their
/// results are metered. Comparisons, logic, arithmetic, `size`, `contains` and the like yield
/// scalars; the interpreter's short-circuits (`&&`, `||`, `?:`) and the macros' helpers are
/// left as they are (their operands are guarded).
fn produces(name: &str) -> bool {
    matches!(
        name,
        operators::ADD
            | operators::INDEX
            | "string"
            | "bytes"
            | "dyn"
            | "format"
            | "strings.quote"
            | "base64.encode"
            | "base64.decode"
            | "lowerAscii"
            | "upperAscii"
            | "trim"
            | "reverse"
            | "substring"
            | "charAt"
    )
}

fn wrap(e: IdedExpr) -> IdedExpr {
    call(METER, vec![e])
}

fn call(name: &str, args: Vec<IdedExpr>) -> IdedExpr {
    IdedExpr {
        id: args.first().map_or(0, |a| a.id),
        expr: Ast::Call(CallExpr {
            func_name: name.into(),
            target: None,
            args,
        }),
    }
}

/// One iteration of `c`: `e` passes through [`TICK`] with the loop variables.
fn tick_with(e: IdedExpr, c: &ComprehensionExpr) -> IdedExpr {
    let mut args = vec![e];
    args.extend(
        std::iter::once(&c.iter_var)
            .chain(c.iter_var2.as_ref())
            .map(|v| IdedExpr {
                id: 0,
                expr: Ast::Ident(v.clone()),
            }),
    );
    call(TICK, args)
}

/// Rewrites a compiled expression so that evaluating it is guarded (see the module docs).
pub(super) fn rewrite(e: &IdedExpr) -> IdedExpr {
    let expr = match &e.expr {
        Ast::Call(c) => {
            let mut call = CallExpr {
                func_name: c.func_name.clone(),
                target: c.target.as_ref().map(|t| Box::new(rewrite(t))),
                args: c.args.iter().map(rewrite).collect(),
            };
            if call.target.is_some() {
                match call.func_name.as_str() {
                    "replace" => call.func_name = REPLACE.into(),
                    "split" => call.func_name = SPLIT.into(),
                    "join" => call.func_name = JOIN.into(),
                    "indexOf" => call.func_name = INDEX_OF.into(),
                    "lastIndexOf" => call.func_name = LAST_INDEX_OF.into(),
                    "matches" => call.func_name = MATCHES.into(),
                    _ => {}
                }
            } else if call.func_name == "matches" {
                call.func_name = MATCHES.into();
            }
            let node = IdedExpr {
                id: e.id,
                expr: Ast::Call(call),
            };
            return if produces(&c.func_name) {
                wrap(node)
            } else {
                node
            };
        }
        Ast::Comprehension(c) => Ast::Comprehension(Box::new(rewrite_comprehension(c))),
        Ast::List(l) => {
            let mut l = l.clone();
            l.elements = l.elements.iter().map(rewrite).collect();
            return call(
                METER_DEEP,
                vec![IdedExpr {
                    id: e.id,
                    expr: Ast::List(l),
                }],
            );
        }
        Ast::Map(m) => {
            let mut m = m.clone();
            for entry in &mut m.entries {
                match &mut entry.expr {
                    EntryExpr::MapEntry(me) => {
                        me.key = rewrite(&me.key);
                        me.value = rewrite(&me.value);
                    }
                    EntryExpr::StructField(f) => f.value = rewrite(&f.value),
                }
            }
            return call(
                METER_DEEP,
                vec![IdedExpr {
                    id: e.id,
                    expr: Ast::Map(m),
                }],
            );
        }
        Ast::Select(s) => {
            let mut s = s.clone();
            s.operand = Box::new(rewrite(&s.operand));
            Ast::Select(s)
        }
        other => other.clone(),
    };
    IdedExpr { id: e.id, expr }
}

/// Guards a comprehension without changing the shapes the interpreter recognises (`@result
/// && x` for `all`, `@result + [x]` and `c ? @result + [x] : @result` for `map`/`filter`):
/// a loop condition that is not a literal counts each iteration; otherwise the appended
/// element (and a filter's guard) does.
fn rewrite_comprehension(c: &ComprehensionExpr) -> ComprehensionExpr {
    let mut out = c.clone();
    out.iter_range = rewrite(&c.iter_range);
    out.accu_init = rewrite(&c.accu_init);
    out.result = rewrite(&c.result);
    out.loop_step = rewrite_step(&c.loop_step, c);
    if matches!(c.loop_cond.expr, Ast::Literal(_)) && counts_in_step(&out.loop_step, &c.accu_var) {
        out.loop_cond = c.loop_cond.clone();
    } else {
        // The loop variables are not bound yet when the condition first runs.
        out.loop_cond = call(TICK, vec![rewrite(&c.loop_cond)]);
    }
    out
}

fn is_accu(e: &IdedExpr, accu: &str) -> bool {
    matches!(&e.expr, Ast::Ident(n) if n == accu)
}

/// Rewrites a loop step, keeping its top-level fold or append shape and metering its parts.
fn rewrite_step(step: &IdedExpr, comp: &ComprehensionExpr) -> IdedExpr {
    let accu = comp.accu_var.as_str();
    let Ast::Call(c) = &step.expr else {
        return rewrite(step);
    };
    let keep_shape = |c: &CallExpr| -> Option<CallExpr> {
        let folds = c.target.is_none()
            && c.args.first().is_some_and(|a| is_accu(a, accu))
            && c.args.len() == 2;
        match c.func_name.as_str() {
            operators::LOGICAL_AND | operators::LOGICAL_OR if folds => Some(CallExpr {
                func_name: c.func_name.clone(),
                target: None,
                args: vec![c.args[0].clone(), tick_with(rewrite(&c.args[1]), comp)],
            }),
            operators::ADD if folds && matches!(c.args[1].expr, Ast::List(_)) => {
                let Ast::List(l) = &c.args[1].expr else {
                    return None;
                };
                let mut l = l.clone();
                l.elements = l
                    .elements
                    .iter()
                    .map(|x| tick_with(rewrite(x), comp))
                    .collect();
                Some(CallExpr {
                    func_name: c.func_name.clone(),
                    target: None,
                    args: vec![
                        c.args[0].clone(),
                        IdedExpr {
                            id: c.args[1].id,
                            expr: Ast::List(l),
                        },
                    ],
                })
            }
            _ => None,
        }
    };
    if let Some(shaped) = keep_shape(c) {
        return IdedExpr {
            id: step.id,
            expr: Ast::Call(shaped),
        };
    }
    if c.func_name == operators::CONDITIONAL
        && c.target.is_none()
        && c.args.len() == 3
        && let (Ast::Call(then), true) = (&c.args[1].expr, is_accu(&c.args[2], accu))
        && let Some(shaped) = keep_shape(then)
    {
        {
            {
                return IdedExpr {
                    id: step.id,
                    expr: Ast::Call(CallExpr {
                        func_name: c.func_name.clone(),
                        target: None,
                        args: vec![
                            tick_with(rewrite(&c.args[0]), comp),
                            IdedExpr {
                                id: c.args[1].id,
                                expr: Ast::Call(shaped),
                            },
                            c.args[2].clone(),
                        ],
                    }),
                };
            }
        }
    }
    rewrite(step)
}

/// Whether a rewritten loop step meters every iteration on its own (so the literal loop
/// condition can stay, keeping the interpreter's append fast path).
fn counts_in_step(step: &IdedExpr, accu: &str) -> bool {
    let Ast::Call(c) = &step.expr else {
        return false;
    };
    let metered = |e: &IdedExpr| matches!(&e.expr, Ast::Call(m) if m.func_name == TICK);
    match c.func_name.as_str() {
        operators::ADD => match c.args.get(1).map(|a| &a.expr) {
            Some(Ast::List(l)) => !l.elements.is_empty() && l.elements.iter().all(metered),
            _ => false,
        },
        operators::CONDITIONAL => {
            c.args.first().is_some_and(metered) && c.args.get(2).is_some_and(|a| is_accu(a, accu))
        }
        _ => false,
    }
}
