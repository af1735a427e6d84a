//! What a BMC's answer or failure means: a Redfish error body's message,
//! and a transport or `nv-redfish` error as a [`HardwareError`] (whether the
//! request left, so whether the BMC may have carried it out).

use serde_json::Value;

use flow_hardware::{ComponentTarget, HardwareError};

/// The message of a Redfish error body, or the start of any other body.
pub fn error_message(body: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return snippet(body);
    };
    let extended = v["error"]["@Message.ExtendedInfo"][0]["Message"].as_str();
    let message = v["error"]["message"].as_str();
    match (extended, message) {
        (Some(m), _) | (None, Some(m)) => m.to_owned(),
        _ => snippet(body),
    }
}

/// The first 200 characters of a body, for messages.
pub fn snippet(body: &str) -> String {
    let trimmed: String = body.chars().take(200).collect();
    if trimmed.is_empty() {
        "(empty body)".to_owned()
    } else {
        trimmed
    }
}

pub(crate) fn transport_error(
    target: &ComponentTarget,
    url: &url::Url,
    e: &reqwest::Error,
) -> HardwareError {
    match e.status() {
        Some(status) => HardwareError::Http {
            component: target.name.clone(),
            action: format!("request to {}", url.path()),
            status: status.as_u16(),
            message: e.to_string(),
        },
        None => {
            let detail = flow_telemetry::chain(e);
            let url = format!("{}{}", target.bmc_url, url.path());
            if detail.contains("certificate") || detail.contains("UnknownIssuer") {
                HardwareError::Tls {
                    component: target.name.clone(),
                    url,
                    detail,
                }
            } else if e.is_connect() || e.is_builder() {
                // The request never left.
                HardwareError::Unreachable {
                    component: target.name.clone(),
                    url,
                    detail,
                }
            } else {
                // It left: a timeout or a connection dropped before the
                // answer. The BMC may have carried it out.
                HardwareError::NoAnswer {
                    component: target.name.clone(),
                    url,
                    detail,
                }
            }
        }
    }
}

/// Classifies an nv-redfish error.
pub(crate) fn nv_error(
    target: &ComponentTarget,
    action: &str,
    e: &nv_redfish::Error<super::Bmc>,
) -> HardwareError {
    use nv_redfish::bmc_http::reqwest::BmcError;
    match e {
        nv_redfish::Error::Bmc(BmcError::ReqwestError(re)) => {
            let url = re.url().cloned().unwrap_or_else(|| {
                url::Url::parse(&target.bmc_url).unwrap_or_else(|_| {
                    url::Url::parse("http://invalid").expect("static URL parses")
                })
            });
            transport_error(target, &url, re)
        }
        nv_redfish::Error::Bmc(BmcError::InvalidResponse { status, text, .. }) => {
            HardwareError::Http {
                component: target.name.clone(),
                action: action.to_owned(),
                status: status.as_u16(),
                message: error_message(text),
            }
        }
        nv_redfish::Error::ActionNotAvailable
        | nv_redfish::Error::Bmc(BmcError::ActionNotSupported) => {
            HardwareError::OperationNotSupported {
                component: target.name.clone(),
                component_type: target.component_type,
                operation: action.to_owned(),
                reason: "the BMC does not advertise this action".to_owned(),
            }
        }
        other => HardwareError::Protocol {
            component: target.name.clone(),
            action: action.to_owned(),
            detail: other.to_string(),
        },
    }
}
