//! Reading what arrives from outside — `flow.api` request bodies and
//! JetStream messages — so that anything hostile is refused with a reason
//! that names the field, never a panic: not JSON, a wrong field or type, a
//! missing field, or a `schema` version this build does not speak.
//!
//! Every request and message may carry `"schema"`; a request without it is
//! schema [`SCHEMA`]; a message ([`JobMessage`](crate::jobs::JobMessage),
//! [`ResultMessage`](crate::jobs::ResultMessage)) must carry it. Any other
//! version is refused before the body is read, so a future version with a new
//! shape is refused for its version, not for a confusing field error.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::envelope::{ApiError, ErrorCode, SCHEMA};

/// The longest reason text kept: serde's messages quote the offending
/// value, which a hostile body can make as large as the whole message, and
/// a reason must fit in a reply and a NATS header.
pub const MAX_REASON_CHARS: usize = 512;

/// Why a request body or a message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON at all (bad syntax, not UTF-8, nested too deeply).
    #[error("{0}")]
    Syntax(String),
    /// The body is JSON but not an object.
    #[error("expected a JSON object, found {0}")]
    NotAnObject(&'static str),
    /// A `schema` this build does not speak.
    #[error("schema: version {found} is not supported (this build speaks schema {SCHEMA})")]
    UnknownSchema {
        /// The version as sent (JSON text, capped).
        found: String,
    },
    /// A field is missing, unknown, or of the wrong type or value.
    #[error("{path}: {message}")]
    Field {
        /// Where, `rack.components[0]`.
        path: String,
        /// What was wrong there.
        message: String,
    },
    /// The body as a whole does not fit (e.g. a missing top-level field:
    /// serde's message names it).
    #[error("{0}")]
    Content(String),
}

/// Decodes a `flow.api` request body (also the body of a message on
/// `flow.tasks.submit`). An empty body reads as `{}`; `"schema": 1` is
/// accepted and removed before the fields are checked.
pub fn request<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    let body: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    let mut value = parse(body)?;
    if let Value::Object(map) = &mut value {
        map.remove("schema");
    }
    fields(value)
}

/// Decodes a JetStream message that carries its own `schema` field.
pub fn message<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    fields(parse(bytes)?)
}

/// Reads JSON and checks its `schema`, if any.
fn parse(bytes: &[u8]) -> Result<Value, DecodeError> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| DecodeError::Syntax(cap(e.to_string())))?;
    let Value::Object(map) = &value else {
        return Err(DecodeError::NotAnObject(kind(&value)));
    };
    match map.get("schema") {
        None => Ok(value),
        Some(v) if v.as_u64() == Some(u64::from(SCHEMA)) => Ok(value),
        Some(other) => Err(DecodeError::UnknownSchema {
            found: cap(other.to_string()),
        }),
    }
}

/// Checks the fields, naming the path of the first problem.
fn fields<T: DeserializeOwned>(value: Value) -> Result<T, DecodeError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let message = cap(e.into_inner().to_string());
        if path == "." {
            DecodeError::Content(message)
        } else {
            DecodeError::Field { path, message }
        }
    })
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `text` cut to [`MAX_REASON_CHARS`] characters, saying how long it was.
pub fn cap(text: String) -> String {
    let chars = text.chars().count();
    if chars <= MAX_REASON_CHARS {
        return text;
    }
    let kept: String = text.chars().take(MAX_REASON_CHARS).collect();
    format!("{kept}… ({chars} characters in all)")
}

/// Decodes a request body; an empty body reads as `{}`. A body that is not
/// JSON, names an unknown field, lacks one, has a wrong type, or speaks
/// another `schema` is a `bad_request` whose message names the field (see
/// [`crate::decode`]).
pub fn decode_request<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    request(bytes).map_err(|e| {
        ApiError::new(
            ErrorCode::BadRequest,
            format!("request body is not a valid request: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{RuleById, TaskList, TaskSubmit};
    use crate::jobs::ResultMessage;

    #[test]
    fn requests_name_the_field_and_refuse_other_schemas() {
        let e = request::<RuleById>(br#"{"id": 42}"#).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("id: invalid type: integer `42`, expected a formatted UUID string"),
            "{e}"
        );
        let e = request::<TaskList>(br#"{"limit": "ten"}"#).unwrap_err();
        assert!(
            e.to_string().starts_with("limit: invalid type: string"),
            "{e}"
        );
        let e = request::<TaskSubmit>(br#"{"request_id": "r", "racks": ["a"]}"#).unwrap_err();
        assert_eq!(e.to_string(), "missing field `operation`");
        let e = request::<TaskList>(br#"{"schema": 2, "limit": 1}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "schema: version 2 is not supported (this build speaks schema 1)"
        );
        let e = request::<TaskList>(br#"{"schema": "1"}"#).unwrap_err();
        assert!(matches!(e, DecodeError::UnknownSchema { .. }), "{e}");
        assert_eq!(
            request::<TaskList>(br#"{"schema": 1, "limit": 3}"#).unwrap(),
            TaskList { limit: Some(3) }
        );
        assert_eq!(request::<TaskList>(b"  ").unwrap(), TaskList::default());
        let e = request::<TaskList>(b"[1]").unwrap_err();
        assert_eq!(e.to_string(), "expected a JSON object, found an array");
    }

    #[test]
    fn messages_keep_their_schema_and_refuse_other_versions() {
        let e = message::<ResultMessage>(br#"{"schema": 7, "id": 1}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "schema: version 7 is not supported (this build speaks schema 1)"
        );
        let e = message::<ResultMessage>(br#"{"id": 1}"#).unwrap_err();
        assert!(e.to_string().starts_with("id: invalid type"), "{e}");
    }

    #[test]
    fn quoted_values_are_capped() {
        let huge = "x".repeat(100_000);
        let body = format!(r#"{{"limit": "{huge}"}}"#);
        let e = request::<TaskList>(body.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.len() < MAX_REASON_CHARS + 100, "{} bytes", e.len());
        assert!(e.ends_with("characters in all)"), "{e}");
    }
}
