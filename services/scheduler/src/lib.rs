//! `flow-scheduler`: owns tasks and serves the `flow.api` request/reply
//! service (a NATS micro service named `flow`). This build serves the rule
//! and rack endpoints; task execution arrives with the execution issue. All
//! state is in Postgres, so any number of schedulers can serve at once.

pub mod api;
pub mod telemetry;
