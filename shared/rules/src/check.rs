//! The reading layer under the parser: typed reads of a JSON value tree that
//! record an error with its path instead of stopping, so a document's errors
//! are all reported at once.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::duration::{self, SignedDuration};
use crate::error::{Path, Problem, ValidationError, ValidationErrors, closest};

/// Collects the errors of one document.
#[derive(Debug, Default)]
pub(crate) struct Checker {
    errors: Vec<ValidationError>,
}

/// A field the schema knows but rejects at this level, with advice.
pub(crate) type Refused = (&'static str, &'static str);

impl Checker {
    pub(crate) fn report(&mut self, path: &Path, problem: Problem) {
        self.errors.push(ValidationError {
            path: path.clone(),
            problem,
        });
    }

    /// How many errors so far; compare before and after to see whether a
    /// part of the document was valid.
    pub(crate) fn count(&self) -> usize {
        self.errors.len()
    }

    pub(crate) fn finish<T>(self, value: Option<T>) -> Result<T, ValidationErrors> {
        match value {
            Some(v) if self.errors.is_empty() => Ok(v),
            _ => Err(ValidationErrors(self.errors)),
        }
    }

    /// Reads an object whose keys must be among `allowed`; keys in `refused`
    /// get their own advice.
    pub(crate) fn object<'v>(
        &mut self,
        path: &Path,
        value: &'v Value,
        allowed: &[&'static str],
        refused: &[Refused],
    ) -> Option<&'v Map<String, Value>> {
        let Value::Object(map) = value else {
            self.wrong_type(path, "an object", value);
            return None;
        };
        for key in map.keys() {
            if allowed.contains(&key.as_str()) {
                continue;
            }
            if let Some((field, advice)) = refused.iter().find(|(f, _)| *f == key) {
                self.report(path, Problem::NotAllowedHere { field, advice });
                continue;
            }
            self.report(
                path,
                Problem::UnknownField {
                    field: key.clone(),
                    suggestion: closest(key, allowed),
                    allowed: if allowed.is_empty() {
                        "none".to_owned()
                    } else {
                        allowed.join(", ")
                    },
                },
            );
        }
        Some(map)
    }

    pub(crate) fn wrong_type(&mut self, path: &Path, expected: &'static str, found: &Value) {
        self.report(
            path,
            Problem::WrongType {
                expected,
                found: describe(found),
            },
        );
    }

    pub(crate) fn string<'v>(&mut self, path: &Path, value: &'v Value) -> Option<&'v str> {
        match value {
            Value::String(s) => Some(s),
            other => {
                self.wrong_type(path, "a string", other);
                None
            }
        }
    }

    pub(crate) fn boolean(&mut self, path: &Path, value: &Value) -> Option<bool> {
        match value {
            Value::Bool(b) => Some(*b),
            other => {
                self.wrong_type(path, "true or false", other);
                None
            }
        }
    }

    /// An integer in `min..=max`; `bound` describes the range for messages.
    pub(crate) fn integer(
        &mut self,
        path: &Path,
        value: &Value,
        min: i64,
        max: i64,
        bound: &'static str,
    ) -> Option<i64> {
        let n = match value {
            Value::Number(n) if n.is_i64() || n.is_u64() => n,
            other => {
                self.wrong_type(path, "an integer", other);
                return None;
            }
        };
        match n.as_i64() {
            Some(i) if (min..=max).contains(&i) => Some(i),
            _ => {
                self.report(
                    path,
                    Problem::OutOfRange {
                        bound,
                        got: n.to_string(),
                    },
                );
                None
            }
        }
    }

    /// A number (integers accepted).
    pub(crate) fn number(&mut self, path: &Path, value: &Value) -> Option<f64> {
        match value.as_f64() {
            Some(f) if value.is_number() => Some(f),
            _ => {
                self.wrong_type(path, "a number", value);
                None
            }
        }
    }

    /// A Go duration string, sign kept.
    pub(crate) fn duration(&mut self, path: &Path, value: &Value) -> Option<SignedDuration> {
        let text = match value {
            Value::String(s) => s,
            other => {
                self.wrong_type(path, "a duration string such as \"30s\"", other);
                return None;
            }
        };
        match duration::parse_go(text) {
            Ok(d) => Some(d),
            Err(reason) => {
                self.report(
                    path,
                    Problem::InvalidDuration {
                        text: text.clone(),
                        reason,
                    },
                );
                None
            }
        }
    }

    /// A duration that may be zero but not negative.
    pub(crate) fn non_negative_duration(&mut self, path: &Path, value: &Value) -> Option<Duration> {
        let d = self.duration(path, value)?;
        let magnitude = d.non_negative();
        if magnitude.is_none() {
            self.report(
                path,
                Problem::OutOfRange {
                    bound: "non-negative",
                    got: d.to_string(),
                },
            );
        }
        magnitude
    }

    /// A duration that must be greater than zero.
    pub(crate) fn positive_duration(&mut self, path: &Path, value: &Value) -> Option<Duration> {
        let d = self.duration(path, value)?;
        match d.non_negative() {
            Some(m) if !m.is_zero() => Some(m),
            _ => {
                self.report(
                    path,
                    Problem::OutOfRange {
                        bound: "positive",
                        got: d.to_string(),
                    },
                );
                None
            }
        }
    }

    /// An optional array; `None` when absent, wrong type reported.
    pub(crate) fn array<'v>(
        &mut self,
        path: &Path,
        value: &'v Value,
        expected: &'static str,
    ) -> Option<&'v [Value]> {
        match value {
            Value::Array(items) => Some(items),
            other => {
                self.wrong_type(path, expected, other);
                None
            }
        }
    }
}

/// A field's value; JSON `null` and YAML `~` count as absent.
pub(crate) fn field<'v>(map: &'v Map<String, Value>, key: &str) -> Option<&'v Value> {
    map.get(key).filter(|v| !v.is_null())
}

/// A value described for messages: its kind, and the value when short.
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() <= 40 => format!("the string {s:?}"),
        Value::String(_) => "a long string".to_owned(),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}
