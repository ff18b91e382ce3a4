//! Kubernetes resource quantities: parse (`100m`, `1.5Gi`, `2e3`, `129M`), add, compare, and
//! print in canonical form (what the API server would print), so sums never churn.

use std::cmp::Ordering;
use std::fmt;

/// How a quantity prints: binary (`Ki`, `Mi`, …) or decimal (`m`, `k`, `M`, …) suffixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Powers of 1024.
    BinarySi,
    /// Powers of 1000 (also used for `e` exponents).
    DecimalSi,
}

/// A quantity, exactly, in nano-units (10⁻⁹), with the format it prints in.
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.nanos.cmp(&other.nanos))
    }
}

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// Zero (decimal).
    pub const ZERO: Quantity = Quantity {
        nanos: 0,
        format: Format::DecimalSi,
    };

    /// A whole count (decimal), e.g. a number of pods.
    pub fn count(n: usize) -> Quantity {
        Quantity {
            nanos: i128::try_from(n).unwrap_or(i128::MAX / NANO) * NANO,
            format: Format::DecimalSi,
        }
    }

    /// Millicores and the like: `millis` thousandths (decimal).
    pub fn from_millis(millis: i64) -> Quantity {
        Quantity {
            nanos: i128::from(millis) * 1_000_000,
            format: Format::DecimalSi,
        }
    }

    /// `n` × 1024^`power` (binary), e.g. `from_binary(512, 2)` is 512Mi.
    pub fn from_binary(n: i64, power: u32) -> Quantity {
        Quantity {
            nanos: i128::from(n) * 1024i128.pow(power) * NANO,
            format: Format::BinarySi,
        }
    }

    /// The value as a float (approximate), e.g. for a usage ratio.
    #[allow(clippy::cast_precision_loss)] // approximate by definition
    pub fn as_f64(&self) -> f64 {
        self.nanos as f64 / NANO as f64
    }

    /// Parses the Kubernetes quantity syntax.
    ///
    /// # Errors
    /// A message naming what is wrong.
    pub fn parse(text: &str) -> Result<Quantity, String> {
        let t = text.trim();
        if t.is_empty() {
            return Err("empty quantity".into());
        }
        let split = t
            .char_indices()
            .find(|(_, c)| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
            .map_or(t.len(), |(i, _)| i);
        let (number, suffix) = t.split_at(split);
        let (negative, digits) = match number.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, number.strip_prefix('+').unwrap_or(number)),
        };
        let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if whole.is_empty() && frac.is_empty()
            || !whole.chars().all(|c| c.is_ascii_digit())
            || !frac.chars().all(|c| c.is_ascii_digit())
        {
            return Err(format!("{text:?} is not a quantity"));
        }
        let (format, mul_num, exp10) = suffix_of(text, suffix)?;
        // value = (whole.frac) × mul × 10^exp10, in nanos, rounded up (as Kubernetes does).
        let digits_all = format!("{whole}{frac}");
        let mantissa: i128 = digits_all
            .trim_start_matches('0')
            .parse::<i128>()
            .or_else(|e| {
                if digits_all.trim_start_matches('0').is_empty() {
                    Ok(0)
                } else {
                    Err(e)
                }
            })
            .map_err(|_| format!("{text:?} is too large"))?;
        let scale = 9i32
            .checked_add(exp10)
            .and_then(|x| x.checked_sub(i32::try_from(frac.len()).ok()?))
            .ok_or_else(|| format!("{text:?}: exponent out of range"))?;
        let scaled = mantissa
            .checked_mul(mul_num)
            .ok_or_else(|| format!("{text:?} is too large"))?;
        let nanos = if scale >= 0 {
            10i128
                .checked_pow(scale.unsigned_abs())
                .and_then(|p| scaled.checked_mul(p))
                .ok_or_else(|| format!("{text:?} is too large"))?
        } else {
            let div = 10i128
                .checked_pow(scale.unsigned_abs())
                .ok_or_else(|| format!("{text:?} is too small"))?;
            (scaled + div - 1) / div
        };
        Ok(Quantity {
            nanos: if negative { -nanos } else { nanos },
            format,
        })
    }

    /// The quantity as a whole number of units (bytes, for a memory quantity), rounded up as
    /// Kubernetes rounds; `None` when it is negative or does not fit in a `u64`.
    pub fn whole_units(&self) -> Option<u64> {
        if self.nanos < 0 {
            return None;
        }
        u64::try_from((self.nanos + NANO - 1) / NANO).ok()
    }

    /// Whether the quantity is a whole number of units (`512Mi`, `1.5Gi`; not `512m`).
    pub fn is_whole(&self) -> bool {
        self.nanos % NANO == 0
    }

    /// Whether it is zero.
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// The larger of two (keeping that one's format).
    #[must_use]
    pub fn max(self, other: Quantity) -> Quantity {
        if other.nanos > self.nanos {
            other
        } else {
            self
        }
    }
}

impl std::ops::Add for Quantity {
    type Output = Quantity;
    /// Sums; the format of the first non-zero operand wins (as in Kubernetes).
    fn add(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos + other.nanos,
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        }
    }
}

impl std::iter::Sum for Quantity {
    fn sum<I: Iterator<Item = Quantity>>(iter: I) -> Quantity {
        iter.fold(Quantity::ZERO, |a, b| a + b)
    }
}

impl fmt::Display for Quantity {
    /// Canonical form: binary suffixes for whole binary quantities of at least 1Ki, otherwise
    /// the largest decimal suffix that keeps the number whole (`1500m`, `2k`, `0`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.nanos;
        if n == 0 {
            return f.write_str("0");
        }
        let sign = if n < 0 { "-" } else { "" };
        let abs = n.abs();
        if self.format == Format::BinarySi && abs % NANO == 0 && abs / NANO >= 1024 {
            let mut units = abs / NANO;
            let mut i = 0;
            while i < 6 && units % 1024 == 0 {
                units /= 1024;
                i += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][i];
            return write!(f, "{sign}{units}{suffix}");
        }
        let suffixes = [
            (18, "E"),
            (15, "P"),
            (12, "T"),
            (9, "G"),
            (6, "M"),
            (3, "k"),
            (0, ""),
            (-3, "m"),
            (-6, "u"),
            (-9, "n"),
        ];
        for (exp, suffix) in suffixes {
            let unit = 10i128.pow(u32::try_from(exp + 9).unwrap_or(0));
            if abs % unit == 0 {
                return write!(f, "{sign}{}{suffix}", abs / unit);
            }
        }
        write!(f, "{sign}{abs}n")
    }
}

/// A quantity suffix: its format, its binary multiplier and its power of ten.
fn suffix_of(text: &str, suffix: &str) -> Result<(Format, i128, i32), String> {
    Ok(match suffix {
        "" => (Format::DecimalSi, 1, 0),
        "n" => (Format::DecimalSi, 1, -9),
        "u" => (Format::DecimalSi, 1, -6),
        "m" => (Format::DecimalSi, 1, -3),
        "k" => (Format::DecimalSi, 1, 3),
        "M" => (Format::DecimalSi, 1, 6),
        "G" => (Format::DecimalSi, 1, 9),
        "T" => (Format::DecimalSi, 1, 12),
        "P" => (Format::DecimalSi, 1, 15),
        "E" => (Format::DecimalSi, 1, 18),
        "Ki" => (Format::BinarySi, 1 << 10, 0),
        "Mi" => (Format::BinarySi, 1 << 20, 0),
        "Gi" => (Format::BinarySi, 1 << 30, 0),
        "Ti" => (Format::BinarySi, 1 << 40, 0),
        "Pi" => (Format::BinarySi, 1 << 50, 0),
        "Ei" => (Format::BinarySi, 1 << 60, 0),
        s if s.starts_with(['e', 'E']) => {
            let e: i32 = s[1..]
                .parse()
                .map_err(|_| format!("{text:?}: bad exponent"))?;
            (Format::DecimalSi, 1, e)
        }
        _ => return Err(format!("{text:?}: unknown suffix {suffix:?}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        Quantity::parse(s).unwrap().to_string()
    }

    #[test]
    fn parses_and_prints_canonically() {
        for (input, want) in [
            ("100m", "100m"),
            ("1000m", "1"),
            ("1.5", "1500m"),
            ("2000", "2k"),
            ("0.1", "100m"),
            ("128Mi", "128Mi"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("512", "512"),
            ("129e6", "129M"),
            ("0", "0"),
            ("0Gi", "0"),
            ("1Ki", "1Ki"),
            ("-2", "-2"),
            ("10G", "10G"),
        ] {
            assert_eq!(canon(input), want, "{input}");
        }
        assert!(Quantity::parse("abc").is_err());
        assert!(Quantity::parse("1Q").is_err());
        assert!(Quantity::parse("").is_err());
    }

    #[test]
    fn sums_keep_the_first_non_zero_format_and_compare_by_value() {
        let sum: Quantity = ["0", "512Mi", "512Mi"]
            .iter()
            .map(|s| Quantity::parse(s).unwrap())
            .sum();
        assert_eq!(sum.to_string(), "1Gi");
        let cpu = Quantity::parse("250m").unwrap() + Quantity::parse("750m").unwrap();
        assert_eq!(cpu.to_string(), "1");
        assert_eq!(
            Quantity::parse("1000m").unwrap(),
            Quantity::parse("1").unwrap()
        );
        assert_eq!(Quantity::from_binary(5, 3).to_string(), "5Gi");
        assert_eq!(Quantity::from_millis(2500).to_string(), "2500m");
    }
}
