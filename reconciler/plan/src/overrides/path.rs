//! Override paths (`self.spec.items[name="a"].value`) parsed into segments.

use super::*;

/// Parses an override path such as `self.spec.template["x-y"].containers[name="app"].image`.
///
/// # Errors
/// A message with the byte offset when the path does not follow the grammar.
pub fn parse_path(path: &str) -> Result<Vec<Segment>, String> {
    let rest = path
        .strip_prefix("self")
        .ok_or_else(|| "path must start with \"self\"".to_string())?;
    let bytes = rest.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < bytes.len() {
        match bytes[i] {
            b'.' => {
                let (name, j) = ident(rest, i + 1);
                if name.is_empty() || name.as_bytes()[0].is_ascii_digit() {
                    return Err(format!("expected a field name at offset {}", at(i + 1)));
                }
                out.push(Segment::Field(name));
                i = j;
            }
            b'[' => {
                let (seg, k) = bracket(rest, i)?;
                out.push(seg);
                i = k + 1;
            }
            _ => {
                return Err(format!(
                    "unexpected {:?} at offset {}",
                    bytes[i] as char,
                    at(i)
                ));
            }
        }
    }
    if out.is_empty() {
        return Err("path must name a field below self".into());
    }
    Ok(out)
}

/// The offset in the whole path (after `self`) of byte `i` of the rest, for messages.
pub(super) fn at(i: usize) -> usize {
    i + 4
}

/// The identifier starting at `i` (possibly empty) and where it ends.
pub(super) fn ident(rest: &str, i: usize) -> (String, usize) {
    let bytes = rest.as_bytes();
    let mut j = i;
    while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_') {
        j += 1;
    }
    (rest[i..j].to_string(), j)
}

/// The string quoted (`"` or `'`) from `i`, and the offset after its closing quote.
pub(super) fn quoted(rest: &str, i: usize) -> Result<(String, usize), String> {
    let q = rest.as_bytes()[i];
    let end = rest[i + 1..]
        .find(q as char)
        .ok_or_else(|| format!("unterminated string at offset {}", at(i)))?;
    Ok((rest[i + 1..i + 1 + end].to_string(), i + end + 2))
}

/// The segment in the brackets opening at `i` (`["name"]`, `[N]`, `[*]`, `[key="value"]`),
/// and the offset of its closing `]`.
pub(super) fn bracket(rest: &str, i: usize) -> Result<(Segment, usize), String> {
    let bytes = rest.as_bytes();
    let j = i + 1;
    if j >= bytes.len() {
        return Err(format!("unterminated [ at offset {}", at(i)));
    }
    let (seg, k) = match bytes[j] {
        b'"' | b'\'' => {
            let (s, k) = quoted(rest, j)?;
            (Segment::Field(s), k)
        }
        b'*' => (Segment::Wildcard, j + 1),
        b'0'..=b'9' => {
            let mut k = j;
            while k < bytes.len() && bytes[k].is_ascii_digit() {
                k += 1;
            }
            let n = rest[j..k]
                .parse::<usize>()
                .map_err(|_| format!("index too large at offset {}", at(j)))?;
            (Segment::Index(n), k)
        }
        _ => {
            let (key, k) = ident(rest, j);
            if key.is_empty() || k >= bytes.len() || bytes[k] != b'=' {
                return Err(format!(
                    "expected \"key\", N, * or key=\"value\" at offset {}",
                    at(j)
                ));
            }
            if k + 1 >= bytes.len() || !matches!(bytes[k + 1], b'"' | b'\'') {
                return Err(format!("expected a quoted value at offset {}", at(k + 1)));
            }
            let (value, k) = quoted(rest, k + 1)?;
            (Segment::Match { key, value }, k)
        }
    };
    if k >= bytes.len() || bytes[k] != b']' {
        return Err(format!("expected ] at offset {}", at(k)));
    }
    Ok((seg, k))
}
