//! Errors of the admin and lifecycle APIs:
//! `{"error": {"code": "<Code>", "message": "…"}}`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::redfish::AUTH_CHALLENGE;

/// A refused admin or lifecycle request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ApiError {
    /// 404 `NotFound`.
    #[error("{0}")]
    NotFound(String),
    /// 400 `BadRequest`.
    #[error("{0}")]
    BadRequest(String),
    /// 401 `Unauthorized`.
    #[error("valid HTTP Basic credentials are required")]
    Unauthorized,
    /// 405 `MethodNotAllowed`.
    #[error("method not allowed on this path")]
    MethodNotAllowed,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = match &self {
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "NotFound"),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
        };
        let body = json!({ "error": { "code": code, "message": self.to_string() } });
        let mut response = (status, Json(body)).into_response();
        if self == ApiError::Unauthorized {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(AUTH_CHALLENGE),
            );
        }
        response
    }
}
