//! Reading documents: JSON and YAML text into one value tree (the raw layer),
//! with syntax errors reported like any other validation error.

use serde_json::Value;

use crate::check::Checker;
use crate::error::{Path, Problem, ValidationError, ValidationErrors};
use crate::{RuleDefinition, parse};

/// Reads YAML text. YAML 1.2 booleans only: an unquoted `on`/`off`/`yes`
/// stays a string, as operators writing `expected_status: on` expect.
pub(crate) fn yaml_value(text: &str) -> Result<Value, ValidationErrors> {
    let options = serde_saphyr::options! { strict_booleans: true };
    serde_saphyr::from_str_with_options::<Value>(text, options).map_err(|e| syntax("YAML", e))
}

/// Reads JSON text.
pub(crate) fn json_value(text: &str) -> Result<Value, ValidationErrors> {
    serde_json::from_str::<Value>(text).map_err(|e| syntax("JSON", e))
}

fn syntax(format: &'static str, error: impl std::fmt::Display) -> ValidationErrors {
    let message = error
        .to_string()
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    ValidationErrors(vec![ValidationError {
        path: Path::root(),
        problem: Problem::Syntax { format, message },
    }])
}

impl RuleDefinition {
    /// Parses and validates a JSON rule definition `{"version", "steps"}`.
    pub fn from_json_str(text: &str) -> Result<RuleDefinition, ValidationErrors> {
        Self::from_value(&json_value(text)?)
    }

    /// Parses and validates a rule definition written in YAML.
    pub fn from_yaml_str(text: &str) -> Result<RuleDefinition, ValidationErrors> {
        Self::from_value(&yaml_value(text)?)
    }

    /// Validates a definition already read into a value tree.
    pub fn from_value(value: &Value) -> Result<RuleDefinition, ValidationErrors> {
        let mut c = Checker::default();
        let definition = parse::definition(&mut c, &Path::root(), value);
        c.finish(definition)
    }
}
