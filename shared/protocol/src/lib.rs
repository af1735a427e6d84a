//! `flow-protocol`: Flow's wire contract, shared by every service and the
//! CLI — typed IDs, NATS subjects, and the `flow.api` request and reply
//! types (JSON, versioned with `schema: 1`). No I/O.

pub mod api;
pub mod decode;
pub mod ids;
pub mod jobs;
pub mod rack;
pub mod subjects;

pub use ids::{ComponentId, RackId, RuleId, TaskId};
