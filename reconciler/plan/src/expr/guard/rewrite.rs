//! The AST rewrite: every value-building call and every comprehension iteration of a compiled
//! expression is wrapped in a metering call, so the guard sees each step.

use super::*;

/// Calls that build a new value (strings, bytes, lists) and are not charged inside: their
/// results are metered. Comparisons, logic, arithmetic, `size`, `contains` and the like yield
/// scalars; the interpreter's short-circuits (`&&`, `||`, `?:`) and the macros' helpers are
/// left as they are (their operands are guarded).
pub(super) fn produces(name: &str) -> bool {
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

pub(super) fn wrap(e: IdedExpr) -> IdedExpr {
    call(METER, vec![e])
}

pub(super) fn call(name: &str, args: Vec<IdedExpr>) -> IdedExpr {
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
pub(super) fn tick_with(e: IdedExpr, c: &ComprehensionExpr) -> IdedExpr {
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
pub(crate) fn rewrite(e: &IdedExpr) -> IdedExpr {
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
pub(super) fn rewrite_comprehension(c: &ComprehensionExpr) -> ComprehensionExpr {
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

pub(super) fn is_accu(e: &IdedExpr, accu: &str) -> bool {
    matches!(&e.expr, Ast::Ident(n) if n == accu)
}

/// Rewrites a loop step, keeping its top-level fold or append shape and metering its parts.
pub(super) fn rewrite_step(step: &IdedExpr, comp: &ComprehensionExpr) -> IdedExpr {
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
pub(super) fn counts_in_step(step: &IdedExpr, accu: &str) -> bool {
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
