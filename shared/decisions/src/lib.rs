//! `flow-decisions`: what Flow decides, pure — no I/O (`cargo tree -p
//! flow-decisions -e normal` shows no NATS, HTTP or Postgres crate). The scheduler and the store call these and
//! persist what they answer; the worker's step executor is
//! `shared/executor` and does not depend on this crate.
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
//!   anything is flashed (or resolves them from a bundle); [`versions`]
//!   compares installed and new versions; [`restore`] takes a firmware
//!   task's snapshot and plans the restore that brings it back.
//! * [`calendar`] computes schedule firings and maintenance windows in a
//!   time zone; [`rollout`] orders a run's targets into phases and decides
//!   its gates; [`events`] matches events to event rules.
//! * [`admission`] decides when a power command may go in its domains
//!   (budget, spacing, shelves-off cap); [`access`] whether a verified user
//!   may call an endpoint on the racks it touches (roles and rack scopes).

pub mod access;
pub mod admission;
pub mod calendar;
pub mod events;
pub mod images;
pub mod lifecycle;
pub mod plan;
pub mod restore;
pub mod rollout;
pub mod versions;

pub use plan::{Plan, PlanError, PlannedStage, PlannedStep, plan};
