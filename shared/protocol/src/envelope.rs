//! The `flow.api` reply envelope and its errors: every reply is
//! `{"schema": 1, "result": …}` or `{"schema": 1, "error": {"code",
//! "message", "details"}}`.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The schema version of every message.
pub const SCHEMA: u32 = 1;

/// Stable error codes, for scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is not valid JSON or has wrong fields or types.
    BadRequest,
    /// The request is well-formed but its content is invalid (e.g. a rule
    /// that fails validation); `details` lists every problem.
    Invalid,
    /// What the request names does not exist.
    NotFound,
    /// The request conflicts with the current state (a default already
    /// exists, a name is taken, a rule still has associations).
    Conflict,
    /// The caller's identity could not be established: in verified mode
    /// a request without exactly one `Nats-Request-Info` from the NATS
    /// server, where one is needed (docs/audit.md, "Who").
    Unauthenticated,
    /// The caller is known but may not do this.
    Forbidden,
    /// No service answered (client side), or a dependency is down.
    Unavailable,
    /// A fault inside the service; the message says what.
    Internal,
}

impl ErrorCode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::Invalid => "invalid",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
        }
    }
}

/// An error reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[error("{code}: {message}", code = code.as_str())]
pub struct ApiError {
    /// The stable code.
    pub code: ErrorCode,
    /// What was wrong, naming the field or object.
    pub message: String,
    /// Every individual problem, when there are several.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
}

impl ApiError {
    /// An error without details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// An `invalid` error listing every problem.
    pub fn invalid(message: impl Into<String>, details: Vec<String>) -> Self {
        ApiError {
            code: ErrorCode::Invalid,
            message: message.into(),
            details,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Envelope<T> {
    schema: u32,
    #[serde(
        default = "none",
        skip_serializing_if = "Option::is_none",
        bound(deserialize = "T: Deserialize<'de>")
    )]
    result: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ApiError>,
}

fn none<T>() -> Option<T> {
    None
}

/// Encodes a reply.
pub fn encode_reply<T: Serialize>(reply: &Result<T, ApiError>) -> Vec<u8> {
    let envelope = match reply {
        Ok(t) => Envelope {
            schema: SCHEMA,
            result: Some(t),
            error: None,
        },
        Err(e) => Envelope {
            schema: SCHEMA,
            result: None,
            error: Some(e.clone()),
        },
    };
    serde_json::to_vec(&envelope).unwrap_or_else(|e| {
        format!(
            r#"{{"schema":1,"error":{{"code":"internal","message":"reply could not be encoded: {e}"}}}}"#
        )
        .into_bytes()
    })
}

/// Decodes a reply.
pub fn decode_reply<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let envelope: Envelope<T> = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            ErrorCode::Internal,
            format!("the service sent a reply this client cannot read: {e}"),
        )
    })?;
    if envelope.schema != SCHEMA {
        return Err(ApiError::new(
            ErrorCode::Internal,
            format!(
                "the service speaks schema {}, this client schema {SCHEMA}",
                envelope.schema
            ),
        ));
    }
    match (envelope.result, envelope.error) {
        (_, Some(e)) => Err(e),
        (Some(r), None) => Ok(r),
        (None, None) => Err(ApiError::new(
            ErrorCode::Internal,
            "the service sent a reply with neither result nor error",
        )),
    }
}
