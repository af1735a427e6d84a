//! Hardware errors, each of a class: transient (a retry can help),
//! permanent (it cannot: spend no retries on it) or unsupported (the
//! manager or the component cannot do it at all).

use flow_rules::ComponentType;

use crate::Capability;

/// Whether a retry can help, and why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Connect errors, timeouts, 5xx, 429, 408, 409 (busy): retry.
    Transient,
    /// Bad credentials, bad request, unknown resource, an operation the
    /// component refuses or a state where it makes no sense: fail at once.
    Permanent,
    /// The manager lacks the capability or no manager serves the type: fail
    /// at once (a rule or configuration problem, not a hardware fault; a
    /// component that refuses an operation, such as a power shelf asked to
    /// restart, is permanent).
    Unsupported,
}

impl ErrorClass {
    /// `transient`, `permanent` or `unsupported`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Permanent => "permanent",
            ErrorClass::Unsupported => "unsupported",
        }
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What went wrong talking to hardware. `component` is the component's name
/// (e.g. `compute-03`); messages never include credentials.
#[derive(Debug, thiserror::Error)]
pub enum HardwareError {
    /// The manager does not declare the capability.
    #[error("the {manager} manager for {component_type} does not support {capability}")]
    Unsupported {
        /// The component type.
        component_type: ComponentType,
        /// The manager's name.
        manager: &'static str,
        /// The missing capability.
        capability: Capability,
    },
    /// No manager is registered for the type.
    #[error("no component manager is configured for {component_type}")]
    NoManager {
        /// The component type.
        component_type: ComponentType,
    },
    /// The operation cannot be done on this kind of component.
    #[error("{component}: {operation} is not possible on a {component_type}: {reason}")]
    OperationNotSupported {
        /// Component name.
        component: String,
        /// Its type.
        component_type: ComponentType,
        /// The operation (e.g. `warm_reset`).
        operation: String,
        /// Why.
        reason: String,
    },
    /// The component is in a state where the operation makes no sense.
    #[error("{component}: {message}")]
    InvalidState {
        /// Component name.
        component: String,
        /// What is wrong.
        message: String,
    },
    /// The BMC or service could not be reached: the connection was not
    /// made, so the request never left.
    #[error("{component}: cannot reach {url}: {detail}")]
    Unreachable {
        /// Component name.
        component: String,
        /// The URL tried (no credentials in it).
        url: String,
        /// What the transport said.
        detail: String,
    },
    /// The request went out and no answer came (a timeout, a connection
    /// dropped mid-exchange): the device may have carried it out.
    #[error("{component}: no answer from {url}: {detail}")]
    NoAnswer {
        /// Component name.
        component: String,
        /// The URL tried (no credentials in it).
        url: String,
        /// What the transport said.
        detail: String,
    },
    /// TLS failed: the BMC's certificate is not trusted (a retry cannot help;
    /// add its CA with the CA-file option, or use the insecure switch in a lab).
    #[error("{component}: TLS with {url} failed: {detail}")]
    Tls {
        /// Component name.
        component: String,
        /// The URL tried.
        url: String,
        /// What TLS said.
        detail: String,
    },
    /// The BMC or service answered with an HTTP error.
    #[error("{component}: {action} answered HTTP {status}: {message}")]
    Http {
        /// Component name.
        component: String,
        /// What was being done.
        action: String,
        /// The status code.
        status: u16,
        /// The Redfish error message, or the body's start.
        message: String,
    },
    /// The BMC's answer did not make sense (missing resource, bad JSON).
    #[error("{component}: unexpected answer to {action}: {detail}")]
    Protocol {
        /// Component name.
        component: String,
        /// What was being done.
        action: String,
        /// What was wrong.
        detail: String,
    },
    /// The component's credential reference is not configured on this worker.
    #[error("{component}: credential {reference:?} is not configured on this worker")]
    MissingCredential {
        /// Component name.
        component: String,
        /// The reference.
        reference: String,
    },
    /// Local configuration (CA file, URL) is unusable.
    #[error("{0}")]
    Config(String),
}

impl HardwareError {
    /// Its class.
    pub fn class(&self) -> ErrorClass {
        match self {
            HardwareError::Unreachable { .. } | HardwareError::NoAnswer { .. } => {
                ErrorClass::Transient
            }
            HardwareError::Http { status, .. } => classify_status(*status),
            HardwareError::Unsupported { .. } | HardwareError::NoManager { .. } => {
                ErrorClass::Unsupported
            }
            HardwareError::OperationNotSupported { .. }
            | HardwareError::InvalidState { .. }
            | HardwareError::Tls { .. }
            | HardwareError::Protocol { .. }
            | HardwareError::MissingCredential { .. }
            | HardwareError::Config(_) => ErrorClass::Permanent,
        }
    }

    /// True when a retry can help.
    pub fn is_transient(&self) -> bool {
        self.class() == ErrorClass::Transient
    }

    /// Whether a request that ended in this error may still have been
    /// carried out: it left and no answer came. Every other error either
    /// never left (no connection, no credential) or was answered (an HTTP
    /// error is the device saying it did not do it).
    pub fn may_have_arrived(&self) -> bool {
        matches!(self, HardwareError::NoAnswer { .. })
    }
}

/// The class of an HTTP status: 408, 409, 429 and 5xx are transient;
/// everything else (400, 401, 403, 404, 405, …) is permanent.
pub fn classify_status(status: u16) -> ErrorClass {
    match status {
        408 | 409 | 429 | 500..=599 => ErrorClass::Transient,
        _ => ErrorClass::Permanent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified_as_the_issue_demands() {
        for s in [408, 409, 429, 500, 502, 503, 504] {
            assert_eq!(classify_status(s), ErrorClass::Transient, "{s}");
        }
        for s in [400, 401, 403, 404, 405, 412] {
            assert_eq!(classify_status(s), ErrorClass::Permanent, "{s}");
        }
    }
}
