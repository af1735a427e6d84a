//! NATS subjects and the names of the `flow` micro service.

/// The micro service name (`nats micro info flow`).
pub const SERVICE_NAME: &str = "flow";

/// The API's version, reported by the micro service.
pub const SERVICE_VERSION: &str = "0.1.0";

/// Prefix of every API subject: `flow.api.<endpoint>`.
pub const API_PREFIX: &str = "flow.api";

/// The full subject of an API endpoint.
pub fn api_subject(endpoint: &str) -> String {
    format!("{API_PREFIX}.{endpoint}")
}
