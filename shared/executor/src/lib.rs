//! `flow-executor`: the step executor a worker runs, free of I/O (no
//! NATS, HTTP or Postgres crate in its dependencies: `cargo tree -p
//! flow-executor -e normal`). What the scheduler and store decide — the
//! task lifecycle, plans, rollouts, calendars, power admission — is
//! `flow-decisions` (`shared/decisions`), which this crate does not use.
//!
//! * [`executor`] runs one step job the way a worker does: action by action,
//!   components progressing independently with at most `max_parallel` in
//!   flight, retries per component per call with the step's policy, and every
//!   wait expressed as "come back at time T" so a worker can checkpoint and
//!   let JetStream do the waiting. All progress lives in a serialisable
//!   [`Checkpoint`]: any worker can resume it.
//! * [`command`] decides every command from the step's own record of what it
//!   sent and the state read just before, and sends it only once that
//!   record is kept in the [`journal`] (the worker's job-state bucket): a
//!   redelivered job never sends a command its record says went, and never
//!   takes a component's transition for the end of its command.
//! * [`images`] is where a firmware step gets the URL a BMC fetches its
//!   image from: bytes verified against the image's digest, never the
//!   origin's.
//! * [`gate`] is where it asks before a power command (the worker answers
//!   over `power.admit`); [`wake`] ends a verification's wait early on a
//!   BMC event.
//!
//! Hardware comes in as a [`flow_hardware::ManagerRegistry`] (the contract,
//! not an adapter) and time as a [`Clock`], so the executor is tested with a
//! paused clock and a fake manager, and against the rack simulator with
//! compressed time, with no message bus.

pub mod checkpoint;
pub mod clock;
pub mod command;
pub mod executor;
pub mod gate;
pub mod images;
pub mod job;
pub mod journal;
pub mod observe;
pub mod wake;

pub use checkpoint::Checkpoint;
pub use clock::{Clock, SystemClock};
pub use executor::{CallError, Effects, Progress, StepFailure, advance};
pub use job::{FirmwareImage, StepJob};
pub use journal::{Journal, MemoryJournal};
pub use observe::{Observer, Unobserved};
