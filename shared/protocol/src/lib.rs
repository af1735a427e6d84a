//! `flow-protocol`: Flow's wire contract, shared by every service and the
//! CLI — typed IDs, NATS subjects, the `flow.api` endpoints with their
//! request and reply types, task statuses, records and events, step jobs
//! and results (JSON, versioned with `schema: 1`). No I/O.

pub mod access;
pub mod api;
pub mod audit;
pub mod contract;
pub mod decode;
pub mod envelope;
pub mod event;
pub mod firmware;
pub mod history;
pub mod ids;
pub mod jobs;
pub mod labels;
pub mod partition;
pub mod power;
pub mod preview;
pub mod rack;
pub mod rack_api;
pub mod readiness;
pub mod restore;
pub mod rule_api;
pub mod run;
pub mod schedule;
pub mod state;
pub mod status;
pub mod subjects;
pub mod submit;
pub mod task;

pub use ids::{
    ComponentId, EventId, EventRuleId, ExecutionId, RackId, RuleId, RunId, ScheduleId, TaskId,
};
pub use status::{ComponentOutcome, StageStatus, StepStatus, TaskStatus};
