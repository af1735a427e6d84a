//! Reading documents: JSON and YAML text into one value tree (the raw layer),
//! with syntax errors reported like any other validation error.

use serde::de::{self, Deserialize, Deserializer, Visitor};
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

/// Reads JSON text. A key repeated in one object is an error (plain
/// `serde_json` keeps the last one silently).
pub(crate) fn json_value(text: &str) -> Result<Value, ValidationErrors> {
    serde_json::from_str::<UniqueKeys>(text)
        .map(|v| v.0)
        .map_err(|e| syntax("JSON", e))
}

/// A JSON value read with a check for repeated keys.
struct UniqueKeys(Value);

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(UniqueKeysVisitor)
            .map(UniqueKeys)
    }
}

struct UniqueKeysVisitor;

impl<'de> Visitor<'de> for UniqueKeysVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(UniqueKeys(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key `{key}`")));
            }
            let UniqueKeys(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
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
