//! The string functions the guard replaces with bounded versions: `replace`, `split` and `join`
//! charge their result before building it, `indexOf`/`lastIndexOf` search in linear time,
//! `matches` compiles a bounded program over a bounded subject.

use super::*;

/// `replace` with its result's size charged before it is built.
pub(super) fn replace_n(
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

pub(super) fn replace(
    this: &CelString<'_>,
    from: &CelString<'_>,
    to: &CelString<'_>,
) -> Result<CelString<'static>, ExecutionError> {
    replace_n(this, from, to, &CelInt::from(-1))
}

/// The byte offset of code point `i` of `s` (`s.len()` at the end), `None` past it.
pub(super) fn byte_of(s: &str, i: usize) -> Option<usize> {
    s.char_indices()
        .map(|(b, _)| b)
        .chain(std::iter::once(s.len()))
        .nth(i)
}

pub(super) fn out_of_range(function: &str, i: i64) -> ExecutionError {
    ExecutionError::function_error(function, format!("index out of range: {i}"))
}

/// `indexOf` (code-point indices, as cel-go) with a linear search.
pub(super) fn index_of_at(
    this: &str,
    needle: &str,
    offset: Option<i64>,
) -> Result<CelInt, ExecutionError> {
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
pub(super) fn last_index_of_at(
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

pub(super) fn index_of(
    this: &CelString<'_>,
    needle: &CelString<'_>,
) -> Result<CelInt, ExecutionError> {
    index_of_at(this, needle, None)
}

pub(super) fn index_of_offset(
    this: &CelString<'_>,
    needle: &CelString<'_>,
    offset: &CelInt,
) -> Result<CelInt, ExecutionError> {
    index_of_at(this, needle, Some(*offset.inner()))
}

pub(super) fn last_index_of(
    this: &CelString<'_>,
    needle: &CelString<'_>,
) -> Result<CelInt, ExecutionError> {
    last_index_of_at(this, needle, None)
}

pub(super) fn last_index_of_offset(
    this: &CelString<'_>,
    needle: &CelString<'_>,
    offset: &CelInt,
) -> Result<CelInt, ExecutionError> {
    last_index_of_at(this, needle, Some(*offset.inner()))
}

/// `matches` with a bounded regular expression: at most [`MAX_REGEX_BYTES`] of pattern compiled
/// to at most [`MAX_REGEX_PROGRAM_BYTES`], at most [`MAX_REGEX_SUBJECT_BYTES`] of subject, charged by its size.
pub(super) fn matches(
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
pub(super) fn split_n(
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

pub(super) fn split(
    this: &CelString<'_>,
    sep: &CelString<'_>,
) -> Result<CelList<'static>, ExecutionError> {
    split_n(this, sep, &CelInt::from(-1))
}

/// `join` with its result's size charged before it is built.
#[allow(clippy::needless_pass_by_value)] // the signature cel requires of an overload
pub(super) fn join<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
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
