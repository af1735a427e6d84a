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

/// The subject the outcome of a submission published on
/// `flow.tasks.submit` is answered on: `flow.events.submit.<request_id>`,
/// the request ID as a subject token (every character but ASCII letters,
/// digits, `-` and `_` becomes `_`).
pub fn submit_outcome(request_id: &str) -> String {
    let token: String = request_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("flow.events.submit.{token}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_request_id_becomes_one_subject_token() {
        assert_eq!(
            super::submit_outcome("bench.1 *>x"),
            "flow.events.submit.bench_1___x"
        );
    }
}
