//! The size-aware cost estimate, computed before an evaluation from the expression and the
//! actual variables: an upper bound of the steps it can take and the bytes it can produce.
//!
//! Every node gets a bound of the value it yields — bytes in all, entries (list elements, map
//! entries or string bytes) and the bytes of its largest entry. Paths into the variables are
//! followed on the real data (`self.status.conditions` is measured, not guessed); anything
//! else is bounded from its operands: `+` adds, `replace` multiplies by the number of
//! matches it could make, `split` makes at most one entry per byte, `join` adds a separator
//! per entry, a comprehension runs its body once per entry of its range. The cost of a node
//! is what evaluating it touches and produces, so the sum bounds both time and memory.

use std::collections::HashMap;

use cel::Value as Cel;
use cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr as Ast, IdedExpr, ListExpr, LiteralValue, MapExpr,
    SelectExpr, operators,
};
use cel::objects::Key;

/// A bound of a value: total bytes, entries, and the bytes of its largest entry.
#[derive(Clone, Copy, Debug, Default)]
struct Size {
    bytes: u64,
    entries: u64,
    entry: u64,
}

impl Size {
    const SCALAR: Size = Size {
        bytes: 8,
        entries: 0,
        entry: 0,
    };

    /// A value no larger than `bytes`, shape unknown.
    fn within(bytes: u64) -> Size {
        Size {
            bytes,
            entries: bytes,
            entry: bytes,
        }
    }

    fn max(self, o: Size) -> Size {
        Size {
            bytes: self.bytes.max(o.bytes),
            entries: self.entries.max(o.entries),
            entry: self.entry.max(o.entry),
        }
    }
}

/// A node's bound, and the real value when the node is a path into the variables.
#[derive(Clone)]
struct Bound<'a> {
    size: Size,
    value: Option<&'a Cel>,
}

impl Bound<'_> {
    fn of(size: Size) -> Self {
        Bound { size, value: None }
    }
}

/// Bytes charged per entry beside its content.
const ENTRY: u64 = 16;

/// A string or bytes of `len` bytes.
fn text(len: usize) -> Size {
    Size {
        bytes: len as u64 + 8,
        entries: len as u64,
        entry: 1,
    }
}

fn measure(v: &Cel) -> Size {
    match v {
        Cel::String(s) => text(s.len()),
        Cel::Bytes(b) => text(b.len()),
        Cel::List(items) => {
            let mut out = Size {
                bytes: ENTRY,
                entries: items.len() as u64,
                entry: 0,
            };
            for item in items.iter() {
                let s = measure(item);
                out.bytes = out.bytes.saturating_add(s.bytes + ENTRY);
                out.entry = out.entry.max(s.bytes);
            }
            out
        }
        Cel::Map(m) => {
            let mut out = Size {
                bytes: ENTRY,
                entries: m.map.len() as u64,
                entry: 0,
            };
            for (k, item) in m.map.iter() {
                let key = match k {
                    Key::String(s) => s.len() as u64,
                    _ => 8,
                };
                let s = measure(item);
                out.bytes = out.bytes.saturating_add(s.bytes + key + ENTRY);
                out.entry = out.entry.max(s.bytes.max(key));
            }
            out
        }
        _ => Size::SCALAR,
    }
}

/// The estimator: variables, comprehension scopes and a cache of measured values.
pub(super) struct Estimator<'a> {
    vars: &'a [(&'a str, Cel)],
    scopes: Vec<(String, Size)>,
    measured: HashMap<*const Cel, Size>,
}

impl<'a> Estimator<'a> {
    pub(super) fn new(vars: &'a [(&'a str, Cel)]) -> Self {
        Estimator {
            vars,
            scopes: Vec::new(),
            measured: HashMap::new(),
        }
    }

    /// Upper bound of the cost of evaluating `e`.
    pub(super) fn cost(&mut self, e: &IdedExpr) -> u64 {
        self.node(e).1
    }

    fn size_of(&mut self, v: &Cel) -> Size {
        *self
            .measured
            .entry(v as *const Cel)
            .or_insert_with(|| measure(v))
    }

    fn real(&mut self, v: &'a Cel) -> Bound<'a> {
        Bound {
            size: self.size_of(v),
            value: Some(v),
        }
    }

    /// The bound of `e` and the cost of evaluating it.
    fn node(&mut self, e: &IdedExpr) -> (Bound<'a>, u64) {
        match &e.expr {
            Ast::Literal(l) => (Bound::of(literal(l)), 1),
            Ast::Ident(name) => {
                if let Some((_, s)) = self.scopes.iter().rev().find(|(n, _)| n == name) {
                    return (Bound::of(*s), 1);
                }
                let vars = self.vars;
                match vars.iter().find(|(n, _)| n == name) {
                    Some((_, v)) => (self.real(v), 1),
                    None => (Bound::of(Size::SCALAR), 1),
                }
            }
            Ast::Select(s) => self.select(s),
            Ast::List(l) => self.list(l),
            Ast::Map(m) => self.map(m),
            Ast::Comprehension(c) => self.comprehension(c),
            Ast::Call(call) => self.call(call),
            Ast::Struct(_) | Ast::Unspecified => (Bound::of(Size::SCALAR), 1),
        }
    }

    /// A field of a map (its real value where the operand is known), or a `has()` test.
    fn select(&mut self, s: &SelectExpr) -> (Bound<'a>, u64) {
        let (operand, cost) = self.node(&s.operand);
        if s.test {
            return (Bound::of(Size::SCALAR), cost + 1);
        }
        let field = match operand.value {
            Some(Cel::Map(m)) => {
                let key = Key::String(std::sync::Arc::new(s.field.clone()));
                match m.map.get(&key) {
                    Some(v) => self.real(v),
                    None => Bound::of(Size::SCALAR),
                }
            }
            _ => Bound::of(Size::within(operand.size.entry)),
        };
        (field, cost + 1)
    }

    /// A list literal: its elements' sizes, each with an entry's overhead.
    fn list(&mut self, l: &ListExpr) -> (Bound<'a>, u64) {
        let mut out = Size {
            bytes: ENTRY,
            entries: l.elements.len() as u64,
            entry: 0,
        };
        let mut cost = 1u64;
        for x in &l.elements {
            let (b, c) = self.node(x);
            out.bytes = out.bytes.saturating_add(b.size.bytes + ENTRY);
            out.entry = out.entry.max(b.size.bytes);
            cost = cost.saturating_add(c);
        }
        (Bound::of(out), cost.saturating_add(out.bytes))
    }

    /// A map (or struct) literal: its keys' and values' sizes, each with an entry's overhead.
    fn map(&mut self, m: &MapExpr) -> (Bound<'a>, u64) {
        let mut out = Size {
            bytes: ENTRY,
            entries: m.entries.len() as u64,
            entry: 0,
        };
        let mut cost = 1u64;
        for entry in &m.entries {
            let parts: Vec<&IdedExpr> = match &entry.expr {
                EntryExpr::MapEntry(me) => vec![&me.key, &me.value],
                EntryExpr::StructField(f) => vec![&f.value],
            };
            for p in parts {
                let (b, c) = self.node(p);
                out.bytes = out.bytes.saturating_add(b.size.bytes + ENTRY);
                out.entry = out.entry.max(b.size.bytes);
                cost = cost.saturating_add(c);
            }
        }
        (Bound::of(out), cost.saturating_add(out.bytes))
    }

    /// A comprehension (macros such as `map`, `filter`, `all`): the accumulator grown by one
    /// step's growth per element of the range, and the cost of every iteration.
    fn comprehension(&mut self, c: &ComprehensionExpr) -> (Bound<'a>, u64) {
        let (range, range_cost) = self.node(&c.iter_range);
        let (init, init_cost) = self.node(&c.accu_init);
        let n = range.size.entries;
        let item = Size::within(range.size.entry.max(8));
        let mut pushed = 1;
        self.scopes.push((c.iter_var.clone(), item));
        if let Some(v2) = &c.iter_var2 {
            self.scopes.push((v2.clone(), item));
            pushed += 1;
        }
        // One step from the initial accumulator tells how much a step adds.
        self.scopes.push((c.accu_var.clone(), init.size));
        let (first, _) = self.node(&c.loop_step);
        self.scopes.pop();
        let grow = Size {
            bytes: first.size.bytes.saturating_sub(init.size.bytes),
            entries: first.size.entries.saturating_sub(init.size.entries),
            entry: first.size.entry,
        };
        let accu = Size {
            bytes: init.size.bytes.saturating_add(n.saturating_mul(grow.bytes)),
            entries: init
                .size
                .entries
                .saturating_add(n.saturating_mul(grow.entries)),
            entry: init.size.entry.max(grow.entry),
        }
        .max(first.size);
        self.scopes.push((c.accu_var.clone(), accu));
        let (_, cond_cost) = self.node(&c.loop_cond);
        let (_, step_cost) = self.node(&c.loop_step);
        let (result, result_cost) = self.node(&c.result);
        self.scopes.pop();
        for _ in 0..pushed {
            self.scopes.pop();
        }
        let per_iteration = cond_cost.saturating_add(step_cost).saturating_add(1);
        let cost = range_cost
            .saturating_add(init_cost)
            .saturating_add(n.saturating_mul(per_iteration))
            .saturating_add(result_cost)
            .saturating_add(accu.bytes);
        (Bound::of(result.size), cost)
    }

    fn call(&mut self, call: &CallExpr) -> (Bound<'a>, u64) {
        let operands: Vec<&IdedExpr> = call
            .target
            .iter()
            .map(|t| t.as_ref())
            .chain(call.args.iter())
            .collect();
        let mut cost = 1u64;
        let mut args: Vec<Bound<'a>> = Vec::new();
        for a in &operands {
            let (b, c) = self.node(a);
            cost = cost.saturating_add(c);
            args.push(b);
        }
        if matches!(
            call.func_name.as_str(),
            operators::INDEX | operators::OPT_INDEX
        ) && let Some(found) = self.index_real(call, &args)
        {
            return (found, cost + 1);
        }
        // A macro's accumulator (`@result`) is appended to in place by the interpreter: its
        // size is not touched again by the step that grows it.
        let accumulator: Vec<bool> = operands
            .iter()
            .map(|a| matches!(&a.expr, Ast::Ident(n) if n.starts_with('@')))
            .collect();
        let sizes: Vec<Size> = args.iter().map(|b| b.size).collect();
        let touched: u64 = sizes
            .iter()
            .zip(&accumulator)
            .filter(|(_, accu)| !**accu)
            .map(|(s, _)| s.bytes)
            .fold(0, u64::saturating_add);
        let replaced = match operands.get(1).map(|a| &a.expr) {
            Some(Ast::Literal(LiteralValue::String(from))) => Some(from.len() as u64),
            _ => None,
        };
        let result = result_size(&call.func_name, &sizes, touched, replaced);
        // Comparisons and searches touch their operands; builders produce their result (an
        // append produces only what it appends).
        let appended = name_is_add(call) && accumulator.first() == Some(&true);
        let produced = if appended {
            result.bytes.saturating_sub(sizes[0].bytes)
        } else {
            result.bytes
        };
        let cost = cost.saturating_add(touched).saturating_add(produced);
        (Bound::of(result), cost)
    }

    /// `list[literal int]` or `map[literal string]` on real data: the real element.
    fn index_real(&mut self, call: &CallExpr, args: &[Bound<'a>]) -> Option<Bound<'a>> {
        let key = call.args.get(1).map(|a| &a.expr);
        let found = match (args.first().and_then(|b| b.value), key) {
            (Some(Cel::List(items)), Some(Ast::Literal(LiteralValue::Int(i)))) => {
                usize::try_from(*i.inner()).ok().and_then(|i| items.get(i))
            }
            (Some(Cel::Map(m)), Some(Ast::Literal(LiteralValue::String(k)))) => m
                .map
                .get(&Key::String(std::sync::Arc::new(k.inner().to_string()))),
            _ => None,
        }?;
        Some(self.real(found))
    }
}

/// The bound of what function `name` returns from operands of `sizes` (`touched`: their
/// bytes in all; `replaced`: the length of a literal second operand, `replace`'s `from`).
fn result_size(name: &str, sizes: &[Size], touched: u64, replaced: Option<u64>) -> Size {
    let s = |i: usize| sizes.get(i).copied().unwrap_or(Size::SCALAR);
    match name {
        operators::ADD => Size {
            bytes: s(0).bytes.saturating_add(s(1).bytes),
            entries: s(0).entries.saturating_add(s(1).entries),
            entry: s(0).entry.max(s(1).entry),
        },
        operators::CONDITIONAL => s(1).max(s(2)),
        // Not a literal key into real data (`Estimator::index_real`): any element.
        operators::INDEX | operators::OPT_INDEX => Size::within(s(0).entry),
        "replace" => {
            let this = s(0).bytes;
            let matches = match replaced {
                Some(from) if from > 0 => this / from + 1,
                _ => this.saturating_add(1),
            };
            Size::within(this.saturating_add(matches.saturating_mul(s(2).bytes)))
        }
        "split" => {
            let this = s(0).bytes;
            Size {
                bytes: this.saturating_add((this + 1).saturating_mul(ENTRY * 4)),
                entries: this + 1,
                entry: this,
            }
        }
        "join" => Size::within(
            s(0).bytes
                .saturating_add(s(0).entries.saturating_mul(s(1).bytes)),
        ),
        // cel-go's largest precision (1,000 digits) per clause, a clause per 2 bytes.
        "format" => Size::within(
            s(1).bytes
                .saturating_mul(2)
                .saturating_add(s(0).bytes.saturating_mul(600)),
        ),
        "strings.quote" => Size::within(s(0).bytes.saturating_mul(6).saturating_add(2)),
        "base64.encode" | "encode" => Size::within(s(0).bytes.saturating_mul(2).saturating_add(4)),
        n if returns_scalar(n) => Size::SCALAR,
        // Anything else (conversions, case, trim, substrings, decoders) returns at most what
        // it was given.
        _ => Size::within(touched.saturating_add(8)),
    }
}

/// Comparisons, logic, arithmetic, sizes and searches.
fn returns_scalar(name: &str) -> bool {
    matches!(
        name,
        operators::LOGICAL_AND
            | operators::LOGICAL_OR
            | operators::LOGICAL_NOT
            | operators::NEGATE
            | operators::EQUALS
            | operators::NOT_EQUALS
            | operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS
            | operators::SUBSTRACT
            | operators::MULTIPLY
            | operators::DIVIDE
            | operators::MODULO
            | operators::IN
            | operators::NOT_STRICTLY_FALSE
            | "size"
            | "contains"
            | "startsWith"
            | "endsWith"
            | "matches"
            | "indexOf"
            | "lastIndexOf"
            | "int"
            | "uint"
            | "double"
            | "bool"
            | "type"
            | "duration"
            | "timestamp"
            | "compareResourceQuantities"
    ) || name.starts_with("get")
}

fn name_is_add(call: &CallExpr) -> bool {
    call.func_name == operators::ADD && call.target.is_none()
}

fn literal(l: &LiteralValue) -> Size {
    match l {
        LiteralValue::String(s) => text(s.len()),
        LiteralValue::Bytes(b) => text(b.inner().len()),
        _ => Size::SCALAR,
    }
}
