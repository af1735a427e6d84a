//! `flow-engine`: the execution core, free of I/O (no NATS, HTTP or
//! Postgres crate in its dependencies: `cargo tree -p flow-engine -e
//! normal`).
//!
//! * [`lifecycle`] is the task state machine: a task's state and an event
//!   (submitted, a step result, a deadline, a cancel request, a queue
//!   expiry, a promotion) give its new state and the effects (jobs, events,
//!   cancel marks, a rack to hand on); the scheduler persists them.
//! * [`plan`] turns a rule snapshot and a task's components into stages of
//!   steps — steps of absent types are kept as *skipped*; a rule with no
//!   steps, or with no step for any targeted type, is refused ("nothing to
//!   do" is an error, not a success).
//! * [`images`] checks a firmware task's images against its plan before
//!   anything is flashed.
//! * [`executor`] runs one step job the way a worker does: action by action,
//!   components progressing independently with at most `max_parallel` in
//!   flight, retries per component per call with the step's policy, and every
//!   wait expressed as "come back at time T" so a worker can checkpoint and
//!   let JetStream do the waiting. All progress lives in a serialisable
//!   [`Checkpoint`]: any worker can resume it.
//!
//! Hardware comes in as a [`flow_hardware::ManagerRegistry`] (the contract,
//! not an adapter) and time as a [`Clock`], so the engine is tested with a
//! paused clock and a fake manager, and against the rack simulator with
//! compressed time, with no message bus.

pub mod admission;
pub mod calendar;
pub mod checkpoint;
pub mod clock;
pub mod events;
pub mod executor;
pub mod images;
pub mod job;
pub mod lifecycle;
pub mod plan;
pub mod rollout;
pub mod versions;
pub mod wake;

pub use checkpoint::Checkpoint;
pub use clock::{Clock, SystemClock};
pub use executor::{CallError, Progress, StepFailure, advance};
pub use job::{FirmwareImage, StepJob};
pub use plan::{Plan, PlanError, PlannedStage, PlannedStep, plan};
