//! The task lifecycle as a pure state machine.
//!
//! A task is a [`TaskState`] (status, current stage, steps with status and
//! generation) over a fixed [`TaskPlan`]. [`apply`] takes the state, an
//! [`Event`] (submitted, a step result, a deadline passed, a cancel request,
//! a queue expiry, a promotion) and the time, and returns a [`Transition`]:
//! the new state and its [`Effect`]s (step jobs to publish, task events to
//! emit, cancel marks, a rack to hand on), or a [`LifecycleError`] for an
//! event that cannot happen in that state. [`queue`] decides about a rack's
//! tasks together: admission of a new task, expiry and FIFO promotion.
//!
//! No I/O: the scheduler loads the state under a row lock, calls these
//! functions, and the store saves the new state and writes the effects to
//! the outbox in the same transaction (`docs/architecture.md`, "The life of
//! one task").

mod apply;
pub mod conflict;
mod event;
pub mod queue;
mod state;

pub use apply::{
    CANCELLED, CANCELLED_WHILE_QUEUED, CHECKING_READINESS, EXPIRED_MESSAGE, NOTHING_TO_DO,
    WAITING_FOR_WINDOW, WINDOW_ENDED, apply,
};
pub use event::{Admission, Applied, Effect, Event, LifecycleError, Transition};
pub use state::{StepState, TaskPlan, TaskState, Window};
