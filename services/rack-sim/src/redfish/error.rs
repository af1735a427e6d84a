//! Redfish error replies: each variant is one DMTF Base message with its
//! HTTP status.

use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::json_response;

/// The Base message registry version the simulator cites.
pub(crate) const BASE_REGISTRY: &str = "Base.1.15.0";

/// The `WWW-Authenticate` challenge.
pub(crate) const AUTH_CHALLENGE: &str = "Basic realm=\"flow-rack-sim\"";

/// A request the BMC refuses, as a DMTF error reply.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum RedfishError {
    /// 401: no or wrong credentials.
    #[error("unauthorized request to {uri}")]
    Unauthorized {
        /// The path.
        uri: String,
    },
    /// 404: no such resource.
    #[error("no resource at {uri}")]
    NotFound {
        /// The path.
        uri: String,
    },
    /// 405: the resource does not take this method.
    #[error("{method} not allowed on {uri}")]
    MethodNotAllowed {
        /// The path.
        uri: String,
        /// The method tried.
        method: Method,
        /// The methods it takes (an `Allow` header).
        allowed: String,
    },
    /// 412: the request asks for an OData version the service does not
    /// speak (DSP0266: a service shall reject an unsupported
    /// `OData-Version` with `412 Precondition Failed`).
    #[error("unsupported OData-Version {version}")]
    UnsupportedODataVersion {
        /// The header's value.
        version: String,
    },
    /// 428: the BMC wants `If-Match` on this request (profile `if-match`).
    #[error("{uri} needs If-Match")]
    PreconditionRequired {
        /// The URI.
        uri: String,
    },
    /// 412: the `If-Match` ETag is not the resource's (profile `if-match`).
    #[error("{uri}: If-Match {sent} is not the resource's ETag")]
    PreconditionFailed {
        /// The URI.
        uri: String,
        /// The ETag sent.
        sent: String,
    },
    /// 400: a required action parameter is absent.
    #[error("action {action} needs parameter {parameter}")]
    ParameterMissing {
        /// The action, e.g. `ComputerSystem.Reset`.
        action: &'static str,
        /// The parameter.
        parameter: &'static str,
    },
    /// 400: an action parameter has a value not in its allowable values.
    #[error("value {value} of {parameter} not allowed for {action}")]
    ValueNotInList {
        /// The action.
        action: &'static str,
        /// The parameter.
        parameter: &'static str,
        /// The value sent.
        value: String,
    },
    /// 400: an action parameter has a value of the wrong shape.
    #[error("value {value} of {parameter} has the wrong format for {action}")]
    ValueFormat {
        /// The action.
        action: &'static str,
        /// The parameter.
        parameter: &'static str,
        /// The value sent.
        value: String,
    },
    /// 409: the resource is in use or in transition.
    #[error("resource {uri} in use: {reason}")]
    InUse {
        /// The path.
        uri: String,
        /// Why.
        reason: String,
    },
    /// An injected failure with this status.
    #[error("injected failure {0}")]
    Injected(StatusCode),
    /// 503: the BMC is going down.
    #[error("service unavailable")]
    Unavailable,
}

struct Message {
    status: StatusCode,
    id: &'static str,
    text: String,
    args: Vec<String>,
    severity: &'static str,
    resolution: &'static str,
}

impl RedfishError {
    fn message(&self) -> Message {
        match self {
            RedfishError::Unauthorized { uri } => Message {
                status: StatusCode::UNAUTHORIZED,
                id: "ResourceAtUriUnauthorized",
                text: format!(
                    "While accessing the resource at '{uri}', the service received an authorization error 'Unauthorized'."
                ),
                args: vec![uri.clone(), "Unauthorized".to_owned()],
                severity: "Critical",
                resolution: "Ensure that the appropriate access is provided for the service in order for it to access the URI.",
            },
            RedfishError::NotFound { uri } => Message {
                status: StatusCode::NOT_FOUND,
                id: "ResourceMissingAtURI",
                text: format!("The resource at the URI '{uri}' was not found."),
                args: vec![uri.clone()],
                severity: "Critical",
                resolution: "Place a valid resource at the URI or correct the URI and resubmit the request.",
            },
            RedfishError::MethodNotAllowed { .. } => Message {
                status: StatusCode::METHOD_NOT_ALLOWED,
                id: "OperationNotAllowed",
                text: "The HTTP method is not allowed on this resource.".to_owned(),
                args: vec![],
                severity: "Critical",
                resolution: "None.",
            },
            RedfishError::UnsupportedODataVersion { version } => Message {
                status: StatusCode::PRECONDITION_FAILED,
                id: "HeaderInvalid",
                text: format!("Header 'OData-Version: {version}' is invalid."),
                args: vec![format!("OData-Version: {version}")],
                severity: "Critical",
                resolution: "Resubmit the request with a valid request header.",
            },
            RedfishError::PreconditionRequired { uri } => Message {
                status: StatusCode::PRECONDITION_REQUIRED,
                id: "PreconditionRequired",
                text: format!(
                    "A precondition header or annotation is required to change the resource at {uri}."
                ),
                args: vec![uri.clone()],
                severity: "Critical",
                resolution: "Add the If-Match header with the resource's ETag and resubmit the request.",
            },
            RedfishError::PreconditionFailed { uri, .. } => Message {
                status: StatusCode::PRECONDITION_FAILED,
                id: "PreconditionFailed",
                text: format!(
                    "The ETag supplied did not match the ETag required to change the resource at {uri}."
                ),
                args: vec![uri.clone()],
                severity: "Critical",
                resolution: "Try the operation again using the appropriate ETag.",
            },
            RedfishError::ParameterMissing { action, parameter } => Message {
                status: StatusCode::BAD_REQUEST,
                id: "ActionParameterMissing",
                text: format!(
                    "The action '{action}' requires the parameter '{parameter}' to be present in the request body."
                ),
                args: vec![(*action).to_owned(), (*parameter).to_owned()],
                severity: "Critical",
                resolution: "Supply the action with the required parameter in the request body when the request is resubmitted.",
            },
            RedfishError::ValueNotInList {
                action,
                parameter,
                value,
            } => Message {
                status: StatusCode::BAD_REQUEST,
                id: "ActionParameterValueNotInList",
                text: format!(
                    "The value '{value}' for the parameter '{parameter}' in the action '{action}' is not in the list of acceptable values."
                ),
                args: vec![value.clone(), (*parameter).to_owned(), (*action).to_owned()],
                severity: "Warning",
                resolution: "Choose a value from the enumeration list that the implementation can support and resubmit the request if the operation failed.",
            },
            RedfishError::ValueFormat {
                action,
                parameter,
                value,
            } => Message {
                status: StatusCode::BAD_REQUEST,
                id: "ActionParameterValueFormatError",
                text: format!(
                    "The value '{value}' for the parameter '{parameter}' in the action '{action}' is of a different format than the parameter can accept."
                ),
                args: vec![value.clone(), (*parameter).to_owned(), (*action).to_owned()],
                severity: "Warning",
                resolution: "Correct the value for the parameter in the request body and resubmit the request if the operation failed.",
            },
            RedfishError::InUse { reason, .. } => Message {
                status: StatusCode::CONFLICT,
                id: "ResourceInUse",
                text: format!(
                    "The change to the requested resource failed because the resource is in use or in transition: {reason}."
                ),
                args: vec![],
                severity: "Warning",
                resolution: "Remove the condition and resubmit the request if the operation failed.",
            },
            RedfishError::Injected(status) => injected(*status),
            RedfishError::Unavailable => injected(StatusCode::SERVICE_UNAVAILABLE),
        }
    }

    /// The DMTF error body.
    pub(crate) fn body(&self) -> Value {
        let m = self.message();
        let id = format!("{BASE_REGISTRY}.{}", m.id);
        json!({
            "error": {
                "code": id,
                "message": m.text,
                "@Message.ExtendedInfo": [{
                    "@odata.type": "#Message.v1_1_1.Message",
                    "MessageId": id,
                    "Message": m.text,
                    "MessageArgs": m.args,
                    "Severity": m.severity,
                    "Resolution": m.resolution,
                }]
            }
        })
    }
}

fn injected(status: StatusCode) -> Message {
    let (id, text, resolution) = match status {
        StatusCode::SERVICE_UNAVAILABLE => (
            "ServiceTemporarilyUnavailable",
            "The service is temporarily unavailable.  Retry in 1 seconds.".to_owned(),
            "Wait for the indicated retry duration and retry the operation.",
        ),
        StatusCode::INTERNAL_SERVER_ERROR => (
            "InternalError",
            "The request failed due to an internal service error.  The service is still operational.".to_owned(),
            "Resubmit the request.  If the problem persists, consider resetting the service.",
        ),
        other => (
            "GeneralError",
            format!(
                "A general error has occurred (injected status {}).",
                other.as_u16()
            ),
            "None.",
        ),
    };
    Message {
        status,
        id,
        text,
        args: vec![],
        severity: "Critical",
        resolution,
    }
}

impl IntoResponse for RedfishError {
    fn into_response(self) -> Response {
        let status = self.message().status;
        let mut response = json_response(status, &self.body());
        let headers = response.headers_mut();
        match &self {
            RedfishError::Unauthorized { .. } => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static(AUTH_CHALLENGE),
                );
            }
            RedfishError::MethodNotAllowed { allowed, .. } => {
                if let Ok(v) = HeaderValue::from_str(allowed) {
                    headers.insert(header::ALLOW, v);
                }
            }
            RedfishError::Unavailable | RedfishError::Injected(StatusCode::SERVICE_UNAVAILABLE) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}
