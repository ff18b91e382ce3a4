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
//! - every charge also checks the evaluation's age against [`MAX_EVAL_TIME`], in the CPU
//!   time of the evaluating thread ([`clock`]).
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

pub mod clock;
mod functions;
mod rewrite;
use functions::*;
pub(super) use rewrite::rewrite;

/// Most steps (function calls and comprehension iterations) one evaluation may take.
pub const MAX_EVAL_STEPS: u64 = 1_000_000;
/// Most bytes the values one evaluation produces may add up to.
pub const MAX_EVAL_BYTES: u64 = 16 << 20;
/// Most CPU time one evaluation may use (checked at every step; time spent waiting for a
/// core is not counted, see [`clock`]).
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
    with_pass_deadline(Some(std::time::Instant::now() + budget), f)
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
    /// How long it has run.
    pub clock: clock::EvalClock,
}

impl Default for Meter {
    fn default() -> Self {
        Meter {
            steps: 0,
            bytes: 0,
            clock: clock::EvalClock::start(),
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
        let over_time = meter.clock.over(MAX_EVAL_TIME);
        m.set(Some(meter));
        if meter.steps > MAX_EVAL_STEPS {
            return Err(over_budget(function, &format!("{MAX_EVAL_STEPS} steps")));
        }
        if meter.bytes > MAX_EVAL_BYTES {
            return Err(over_budget(function, &format!("{MAX_EVAL_BYTES} bytes")));
        }
        if over_time {
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
