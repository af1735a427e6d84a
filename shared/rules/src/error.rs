//! Validation errors: where in the document ([`Path`]) and what is wrong
//! ([`Problem`]). A document's errors are collected, not only the first.

use std::fmt;

/// Where a value sits in a rule document, e.g.
/// `steps[1].post_operation[0] (VerifyPowerStatus)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    /// The document itself.
    pub fn root() -> Self {
        Path(String::new())
    }

    /// The field `name` of this object.
    pub fn field(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Path(name.to_owned())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }

    /// Element `index` of this array.
    pub fn index(&self, index: usize) -> Self {
        Path(format!("{}[{index}]", self.0))
    }

    /// This path with a label in parentheses, such as the action name.
    pub fn label(&self, label: &str) -> Self {
        Path(format!("{} ({label})", self.0))
    }

    /// True for the document itself.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The path as text (empty for the document itself).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("document")
        } else {
            f.write_str(&self.0)
        }
    }
}

/// What is wrong at a path. Each message says what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    /// The document is not well-formed JSON or YAML.
    #[error("not valid {format}: {message}")]
    Syntax {
        /// `JSON` or `YAML`.
        format: &'static str,
        /// The parser's message (with line and column).
        message: String,
    },
    /// A field the schema does not have at this level.
    #[error("unknown field `{field}`{hint}; allowed: {allowed}", hint = suggestion_hint(suggestion.as_deref()))]
    UnknownField {
        /// The field as written.
        field: String,
        /// An allowed field it is probably a typo of.
        suggestion: Option<&'static str>,
        /// The allowed fields.
        allowed: String,
    },
    /// A field the schema knows but that has no meaning here.
    #[error("`{field}` is not allowed here: {advice}")]
    NotAllowedHere {
        /// The field.
        field: &'static str,
        /// What to do instead.
        advice: &'static str,
    },
    /// A required field or parameter is absent.
    #[error("requires {what}{hint}", hint = hint.map(|h| format!(" ({h})")).unwrap_or_default())]
    Missing {
        /// The field, e.g. `timeout` or `parameter expected_status`.
        what: String,
        /// What a valid value looks like.
        hint: Option<&'static str>,
    },
    /// The value has the wrong JSON/YAML type.
    #[error("must be {expected}, got {found}")]
    WrongType {
        /// What is allowed.
        expected: &'static str,
        /// What was found, with the value when it is short.
        found: String,
    },
    /// A string that is not a Go duration.
    #[error("invalid duration {text:?}: {reason} (use Go syntax such as 30s, 1m30s, 1.5h, 500ms)")]
    InvalidDuration {
        /// The text as written.
        text: String,
        /// Why it does not parse.
        reason: crate::duration::DurationError,
    },
    /// A value outside its range.
    #[error("must be {bound}, got {got}")]
    OutOfRange {
        /// The bound, e.g. `>= 1` or `positive`.
        bound: &'static str,
        /// The value found.
        got: String,
    },
    /// A string that is not one of the allowed names.
    #[error("{0}")]
    InvalidName(String),
    /// An empty list where at least one element is needed.
    #[error("must not be empty; {advice}")]
    Empty {
        /// What to put there.
        advice: &'static str,
    },
    /// An action name the validator does not accept.
    #[error("unknown action {name:?}{hint}; allowed: {allowed}", hint = suggestion_hint(suggestion.as_deref()), allowed = crate::action::ActionName::USER_ALLOWED)]
    UnknownAction {
        /// The name as written.
        name: String,
        /// An allowed name it probably means.
        suggestion: Option<&'static str>,
    },
    /// An action that exists inside Flow but not in user rules.
    #[error("action {name} is internal to Flow and not allowed in user rules; allowed: {allowed}", allowed = crate::action::ActionName::USER_ALLOWED)]
    InternalAction {
        /// The name.
        name: String,
    },
    /// Two steps with the same component type in one stage.
    #[error("duplicate step: {component_type} already has a step in stage {stage} ({first})")]
    DuplicateStep {
        /// The component type.
        component_type: crate::ComponentType,
        /// The stage.
        stage: u32,
        /// The path of the first step.
        first: String,
    },
    /// `max_interval` below `initial_interval`.
    #[error(
        "max_interval {max} is shorter than initial_interval {initial}; make it at least as long, or omit it for no cap"
    )]
    MaxBelowInitial {
        /// The cap.
        max: String,
        /// The first delay.
        initial: String,
    },
    /// Two rules of a batch for one operation.
    #[error(
        "second rule for {operation_type}/{code} ({first}); a batch holds one rule per operation"
    )]
    DuplicateRule {
        /// The type.
        operation_type: crate::OperationType,
        /// The code.
        code: crate::OperationCode,
        /// The path of the first rule.
        first: String,
    },
    /// A batch that has rules of a type but lacks a required code of it.
    #[error(
        "has {operation_type} rules but none for {code}; a batch with {operation_type} rules must include {required}"
    )]
    MissingRequiredOperation {
        /// The type.
        operation_type: crate::OperationType,
        /// The missing code.
        code: crate::OperationCode,
        /// Every required code of the type.
        required: String,
    },
    /// An action that cannot work in a rule of this operation type.
    #[error("{0}")]
    WrongOperationType(String),
}

fn suggestion_hint(suggestion: Option<&str>) -> String {
    suggestion
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default()
}

/// One thing wrong with a document.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct ValidationError {
    /// Where.
    pub path: Path,
    /// What.
    pub problem: Problem,
}

/// Everything wrong with a document, in document order (and, within one
/// object, in the reference system's order of checks:
/// `docs/rule-format.md`, "Order of checks").
#[derive(Debug, Clone, PartialEq)]
pub struct ValidationErrors(pub Vec<ValidationError>);

impl ValidationErrors {
    /// The errors.
    pub fn iter(&self) -> impl Iterator<Item = &ValidationError> {
        self.0.iter()
    }

    /// How many errors.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are none (never the case for a returned error).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

/// The closest of `candidates` to `word` (case-insensitive edit distance at
/// most 2, or a case-only difference), for "did you mean" hints.
pub(crate) fn closest(word: &str, candidates: &[&'static str]) -> Option<&'static str> {
    let lower = word.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (edit_distance(&lower, &c.to_ascii_lowercase()), *c))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_read_like_the_document() {
        let p = Path::root()
            .field("steps")
            .index(1)
            .field("post_operation")
            .index(0)
            .label("VerifyPowerStatus");
        assert_eq!(
            p.to_string(),
            "steps[1].post_operation[0] (VerifyPowerStatus)"
        );
        assert_eq!(Path::root().to_string(), "document");
    }

    #[test]
    fn suggestions_catch_typos_only() {
        assert_eq!(closest("timeot", &["timeout", "stage"]), Some("timeout"));
        assert_eq!(closest("STAGE", &["timeout", "stage"]), Some("stage"));
        assert_eq!(closest("colour", &["timeout", "stage"]), None);
    }
}
