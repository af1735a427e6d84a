//! Go duration syntax (`time.ParseDuration` / `Duration.String`), the format
//! every duration field of a rule uses (`docs/rule-format.md`,
//! "Durations").

use std::fmt;
use std::time::Duration;

/// Why a duration string does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string is empty.
    #[error("empty duration")]
    Empty,
    /// A group has a number but no unit (`"30"`).
    #[error("missing unit after {number:?}")]
    MissingUnit {
        /// The number that has no unit.
        number: String,
    },
    /// A unit that Go does not know (`"1d"`).
    #[error("unknown unit {unit:?}")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
    },
    /// Something that is neither a number nor a unit where a number belongs.
    #[error("expected a number at {rest:?}")]
    ExpectedNumber {
        /// The remaining text.
        rest: String,
    },
    /// The value does not fit Go's 64-bit nanosecond range (about 292 years).
    #[error("out of range")]
    Overflow,
}

/// A parsed duration that keeps its sign: rules reject negative values with a
/// message that names the field, so parsing itself accepts them as Go does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SignedDuration {
    /// True for a negative duration.
    pub negative: bool,
    /// The magnitude.
    pub magnitude: Duration,
}

impl SignedDuration {
    /// The duration when it is not negative.
    pub fn non_negative(self) -> Option<Duration> {
        (!self.negative || self.magnitude.is_zero()).then_some(self.magnitude)
    }
}

impl fmt::Display for SignedDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.negative && !self.magnitude.is_zero() {
            f.write_str("-")?;
        }
        f.write_str(&format_go(self.magnitude))
    }
}

/// Go's limit: durations are an `int64` count of nanoseconds.
const MAX_NANOS: u128 = i64::MAX as u128;

fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60 * 1_000_000_000,
        "h" => 3_600 * 1_000_000_000,
        _ => return None,
    })
}

/// Parses a Go duration string: an optional sign, then one or more
/// `<decimal><unit>` groups (`"1m30s"`, `"1.5h"`, `"500ms"`), or `"0"`.
pub fn parse_go(text: &str) -> Result<SignedDuration, DurationError> {
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        Some(_) => (false, text),
        None => return Err(DurationError::Empty),
    };
    if body == "0" {
        return Ok(SignedDuration {
            negative,
            magnitude: Duration::ZERO,
        });
    }
    if body.is_empty() {
        return Err(DurationError::ExpectedNumber {
            rest: String::new(),
        });
    }
    let mut total: u128 = 0;
    let mut rest = body;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after_int) = rest.split_at(int_len);
        let (frac_part, after_num) = match after_int.strip_prefix('.') {
            Some(after_dot) => {
                let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
                after_dot.split_at(frac_len)
            }
            None => ("", after_int),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(DurationError::ExpectedNumber {
                rest: rest.to_owned(),
            });
        }
        let unit_len = after_num
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(after_num.len(), |(i, _)| i);
        let (unit, after_unit) = after_num.split_at(unit_len);
        if unit.is_empty() {
            let number = &rest[..rest.len() - after_num.len()];
            return Err(DurationError::MissingUnit {
                number: number.to_owned(),
            });
        }
        let scale = unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit {
            unit: unit.to_owned(),
        })?;
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| DurationError::Overflow)?
        };
        let mut group = whole.checked_mul(scale).ok_or(DurationError::Overflow)?;
        // Fraction digits beyond nanosecond precision cannot change the result;
        // keep at most 30 so the arithmetic stays in range.
        let frac_digits = &frac_part[..frac_part.len().min(30)];
        if !frac_digits.is_empty() {
            let frac: u128 = frac_digits.parse().map_err(|_| DurationError::Overflow)?;
            let denom = 10u128.pow(frac_digits.len() as u32);
            // frac < denom ≤ 10^30 and scale ≤ 3.6e12: the product fits in u128.
            group += frac * scale / denom;
        }
        total = total.checked_add(group).ok_or(DurationError::Overflow)?;
        if total > MAX_NANOS {
            return Err(DurationError::Overflow);
        }
        rest = after_unit;
    }
    Ok(SignedDuration {
        negative,
        magnitude: Duration::from_nanos(total as u64),
    })
}

/// Formats a duration as Go's `Duration.String()` does: `"0s"`, `"500ms"`,
/// `"1.5s"`, `"10m0s"`, `"1h0m0s"`. The output always parses back with
/// [`parse_go`] to the same value.
pub fn format_go(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000_000_000 {
        let (div, unit) = if nanos < 1_000 {
            (1, "ns")
        } else if nanos < 1_000_000 {
            (1_000, "\u{b5}s")
        } else {
            (1_000_000, "ms")
        };
        return format!("{}{unit}", fixed(nanos, div));
    }
    let secs = nanos / 1_000_000_000;
    let hours = secs / 3_600;
    let minutes = (secs % 3_600) / 60;
    let seconds = nanos - (hours * 3_600 + minutes * 60) * 1_000_000_000;
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&format!("{}s", fixed(seconds, 1_000_000_000)));
    out
}

/// `value / div` as a decimal with trailing zeros trimmed.
fn fixed(value: u128, div: u128) -> String {
    let whole = value / div;
    let frac = value % div;
    if frac == 0 {
        return whole.to_string();
    }
    let width = div.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// A duration for humans in messages: Go syntax without the zero groups
/// (`"10m"`, `"1h2m3s"`), as operators write it.
pub fn format_short(d: Duration) -> String {
    let long = format_go(d);
    let mut out = long.as_str();
    for suffix in ["0s", "0m"] {
        if let Some(stripped) = out.strip_suffix(suffix)
            && !stripped.is_empty()
            && !stripped.ends_with(|c: char| c.is_ascii_digit())
        {
            out = stripped;
        }
    }
    out.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Duration {
        parse_go(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .non_negative()
            .expect("non-negative")
    }

    #[test]
    fn parses_go_syntax() {
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("30s"), Duration::from_secs(30));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("1.5h"), Duration::from_secs(5_400));
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("2us"), Duration::from_micros(2));
        assert_eq!(ok("2\u{b5}s"), Duration::from_micros(2));
        assert_eq!(ok("2\u{3bc}s"), Duration::from_micros(2));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("5.s"), Duration::from_secs(5));
        assert_eq!(ok("+10m"), Duration::from_secs(600));
        assert_eq!(ok("1h0m0s"), Duration::from_secs(3_600));
        assert_eq!(ok("100ns"), Duration::from_nanos(100));
        let neg = parse_go("-5s").unwrap();
        assert!(neg.negative);
        assert_eq!(neg.non_negative(), None);
        assert_eq!(neg.to_string(), "-5s");
    }

    #[test]
    fn rejects_what_go_rejects() {
        assert_eq!(parse_go(""), Err(DurationError::Empty));
        assert_eq!(
            parse_go("30"),
            Err(DurationError::MissingUnit {
                number: "30".into()
            })
        );
        assert_eq!(
            parse_go("1d"),
            Err(DurationError::UnknownUnit { unit: "d".into() })
        );
        assert!(matches!(
            parse_go("abc"),
            Err(DurationError::ExpectedNumber { .. })
        ));
        assert!(matches!(
            parse_go("1m 30s"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(parse_go("-").is_err());
        assert!(parse_go(".s").is_err());
        assert_eq!(parse_go("3000000h"), Err(DurationError::Overflow));
        assert_eq!(
            parse_go("99999999999999999999999999s"),
            Err(DurationError::Overflow)
        );
    }

    #[test]
    fn formats_like_go() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(500), "500ns"),
            (Duration::from_micros(1), "1\u{b5}s"),
            (Duration::from_micros(1_500), "1.5ms"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_millis(1_500), "1.5s"),
            (Duration::from_secs(30), "30s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(600), "10m0s"),
            (Duration::from_secs(3_600), "1h0m0s"),
            (Duration::from_secs(3_723), "1h2m3s"),
            (Duration::new(3_723, 5), "1h2m3.000000005s"),
        ];
        for (d, text) in cases {
            assert_eq!(format_go(d), text);
            assert_eq!(ok(text), d, "round trip of {text}");
        }
    }

    #[test]
    fn short_form_drops_zero_groups() {
        assert_eq!(format_short(Duration::from_secs(600)), "10m");
        assert_eq!(format_short(Duration::from_secs(3_600)), "1h");
        assert_eq!(format_short(Duration::from_secs(3_630)), "1h0m30s");
        assert_eq!(format_short(Duration::from_secs(62 * 60 + 3)), "1h2m3s");
        assert_eq!(format_short(Duration::from_secs(10)), "10s");
        assert_eq!(format_short(Duration::ZERO), "0s");
    }
}
