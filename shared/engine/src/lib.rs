//! `flow-engine`: the execution core, free of NATS and Postgres.
//!
//! * [`plan`] turns a rule snapshot and a task's components into stages of
//!   steps — steps of absent types are kept as *skipped*; a rule with no
//!   steps, or with no step for any targeted type, is refused ("nothing to
//!   do" is an error, not a success).
//! * [`exec`] runs one step job the way a worker does: action by action,
//!   components progressing independently with at most `max_parallel` in
//!   flight, retries per component per call with the step's policy, and every
//!   wait expressed as "come back at time T" so a worker can checkpoint and
//!   let JetStream do the waiting. All progress lives in a serialisable
//!   [`Checkpoint`]: any worker can resume it.
//!
//! Hardware comes in as a [`flow_hardware::ManagerRegistry`] and time as a
//! [`Clock`], so the engine is tested against the rack simulator with
//! compressed time and no message bus.

pub mod checkpoint;
pub mod clock;
pub mod exec;
pub mod job;
pub mod plan;

pub use checkpoint::Checkpoint;
pub use clock::{Clock, SystemClock};
pub use exec::{Progress, StepFailure, advance};
pub use job::{FirmwareImage, StepJob};
pub use plan::{Plan, PlanError, PlannedStage, PlannedStep, plan};
