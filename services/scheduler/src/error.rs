//! The scheduler's errors, and how a store error reads on the API.

use flow_decisions::lifecycle::LifecycleError;
use flow_protocol::TaskId;
use flow_protocol::api::{ApiError, ErrorCode};
use flow_store::StoreError;
use flow_telemetry::ErrorChain;

/// What went wrong in the scheduler.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// The store failed (or refused a value).
    #[error("the store failed")]
    Store(#[from] StoreError),
    /// The scheduler is stopping: a result handed to its applier was not
    /// applied (it is redelivered).
    #[error("the scheduler is stopping; the result was not applied")]
    Stopped,
    /// The lifecycle refused an event: it cannot happen to the task in its
    /// state.
    #[error("task {task}: the event was refused")]
    Lifecycle {
        /// The task.
        task: TaskId,
        /// Why.
        #[source]
        source: LifecycleError,
    },
    /// JetStream's streams, consumers or bucket could not be set up.
    #[error("JetStream set-up failed")]
    Topology(#[source] flow_jetstream::TopologyError),
    /// The `flow.api` service could not start or stop.
    #[error("the flow.api service failed")]
    Api(#[source] async_nats::Error),
    /// Verified identity mode on a nats-server that may let a forged
    /// `Nats-Request-Info` through (CVE-2026-33223).
    #[error(
        "--identity verified needs a nats-server that strips forged Nats-Request-Info headers (2.11.15+, 2.12.6+ or 2.14.0+); this one is {version}"
    )]
    ServerTooOld {
        /// The server's version, as it announced it.
        version: String,
    },
    /// The history archive could not be opened.
    #[error("the history archive cannot be opened")]
    History(#[source] crate::history::HistoryError),
    /// A message could not be published or its ack not collected.
    #[error("publishing to JetStream failed")]
    Publish(#[source] async_nats::Error),
}

impl SchedulerError {
    /// True when the same input would fail the same way again (a value the
    /// database refuses, an event the lifecycle refuses): the caller's to
    /// refuse or park, never a reason to retry.
    pub fn is_refused_input(&self) -> bool {
        match self {
            SchedulerError::Store(e) => e.is_refused_value(),
            SchedulerError::Lifecycle { .. } => true,
            _ => false,
        }
    }
}

/// A store error as the API reports it (also for each rack of a
/// submission); a failure of the database itself is logged with its whole
/// cause.
pub(crate) fn store_error(error: StoreError) -> ApiError {
    match error {
        StoreError::NotFound(m) => ApiError::new(ErrorCode::NotFound, m),
        StoreError::Conflict(m) => ApiError::new(ErrorCode::Conflict, m),
        StoreError::Invalid { message, details } => ApiError::invalid(message, details),
        // The error of a batch of admissions: each ask of it is told, the
        // first as if alone.
        StoreError::Batch(shared) => match std::sync::Arc::try_unwrap(shared) {
            Ok(alone) => store_error(alone),
            Err(shared) => {
                let code = match *shared {
                    StoreError::Database(_) => ErrorCode::Unavailable,
                    _ => ErrorCode::Internal,
                };
                ApiError::new(code, flow_telemetry::chain(&*shared))
            }
        },
        refused if refused.is_refused_value() => {
            let chain = flow_telemetry::chain(&refused);
            tracing::warn!(error = %chain, "the database refused a value");
            ApiError::new(
                ErrorCode::Invalid,
                format!("the database refused a value of the request: {chain}"),
            )
        }
        other => {
            tracing::error!(error = %ErrorChain(&other), "store failure");
            let code = match other {
                StoreError::Database(_) => ErrorCode::Unavailable,
                _ => ErrorCode::Internal,
            };
            ApiError::new(code, flow_telemetry::chain(&other))
        }
    }
}

/// A scheduler error as the API reports it.
pub(crate) fn api_error(error: SchedulerError) -> ApiError {
    match error {
        SchedulerError::Store(e) => store_error(e),
        other => {
            tracing::error!(error = %ErrorChain(&other), "scheduler failure");
            ApiError::new(ErrorCode::Internal, flow_telemetry::chain(&other))
        }
    }
}

/// An `invalid` error for a request with `problems`: "the <what> is invalid
/// (N problems)" listing each.
pub(crate) fn invalid_request(what: &str, problems: Vec<String>) -> ApiError {
    ApiError::invalid(
        format!(
            "the {what} is invalid ({} {})",
            problems.len(),
            if problems.len() == 1 {
                "problem"
            } else {
                "problems"
            }
        ),
        problems,
    )
}
