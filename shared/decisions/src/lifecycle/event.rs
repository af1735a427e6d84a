//! What happens to a task ([`Event`]), what the lifecycle asks the world to
//! do about it ([`Effect`]), and what it refuses ([`LifecycleError`]).

use flow_protocol::jobs::{CancelMark, JobMessage, ResultMessage};
use flow_protocol::readiness::NotReady;
use flow_protocol::task::TaskEvent;
use flow_protocol::{RackId, TaskId, TaskStatus};

use super::state::TaskState;

/// How a submitted task enters its rack (decided by
/// [`super::queue::admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The rack is free: start now.
    Start,
    /// The rack is busy: wait until it is free, at most until this time
    /// (epoch ms).
    Queue {
        /// When it gives up.
        expires_ms: u64,
    },
}

/// Something that happens to a task.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// It was planned and admitted.
    Submitted(Admission),
    /// A worker reported a step (with the job's generation).
    StepResult(ResultMessage),
    /// The scheduler found a step past its deadline.
    DeadlinePassed {
        /// The step.
        step_index: u32,
        /// The generation that was found overdue.
        generation: u32,
    },
    /// An operator asked to cancel it.
    CancelRequested,
    /// Its time in the queue may have run out.
    QueueExpired,
    /// Its rack is free and it is first in line.
    Promoted,
    /// Its gated components were looked at: those not ready (none: it may
    /// start).
    ReadinessChecked(Vec<NotReady>),
    /// Its database was restored from a backup (`flow-scheduler
    /// --restored`): what it says is running may have run on, or ended,
    /// since. Every running step's job is sent again under the same
    /// generation — a worker resumes it from its checkpoint, repeating no
    /// command that record says went, and reports how it ended — with a
    /// deadline counted from now.
    Restored,
}

impl Event {
    /// The event's name, for errors and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Submitted(_) => "submission",
            Event::StepResult(_) => "step result",
            Event::DeadlinePassed { .. } => "deadline",
            Event::CancelRequested => "cancel request",
            Event::QueueExpired => "queue expiry",
            Event::Promoted => "promotion",
            Event::ReadinessChecked(_) => "readiness check",
            Event::Restored => "restore",
        }
    }
}

/// What the world must do because of a transition. The store writes the
/// first three to the outbox in the transaction that saves the new state;
/// the scheduler handles [`Effect::PromoteNext`] and
/// [`Effect::FirmwareInstalled`] in the same transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Queue a step job on `flow.jobs.<type>` (boxed: a job carries its
    /// step and components).
    PublishJob(Box<JobMessage>),
    /// Publish a task event on `flow.events.task.<task>`.
    Emit(TaskEvent),
    /// Put the task's cancel mark, so workers stop its steps.
    CancelMark(CancelMark),
    /// The task let go of its rack: the oldest task waiting for it may
    /// start (and waiting tasks past their time expire).
    PromoteNext(RackId),
    /// These components of the rack now run this firmware version (a
    /// firmware step finished them): the inventory records it.
    FirmwareInstalled {
        /// The rack.
        rack: RackId,
        /// The components, by name.
        components: Vec<String>,
        /// The version installed.
        version: String,
    },
}

/// A task's new state and the effects of getting there.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The new state (equal to the old one when nothing changed).
    pub state: TaskState,
    /// What to do about it, in order.
    pub effects: Vec<Effect>,
}

/// What a transition amounted to, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Stale or repeated: nothing changed.
    Ignored,
    /// The task changed and goes on.
    Recorded,
    /// The task reached this final status.
    Finished(TaskStatus),
}

impl Transition {
    /// Nothing changes.
    pub fn unchanged(state: &TaskState) -> Transition {
        Transition {
            state: state.clone(),
            effects: Vec::new(),
        }
    }

    /// What it amounted to, against the state before.
    pub fn applied(&self, before: &TaskState) -> Applied {
        if self.state == *before && self.effects.is_empty() {
            Applied::Ignored
        } else if self.state.status.is_final() && !before.status.is_final() {
            Applied::Finished(self.state.status)
        } else {
            Applied::Recorded
        }
    }

    /// True when the state or the effects say something happened.
    pub fn changed(&self, before: &TaskState) -> bool {
        self.applied(before) != Applied::Ignored
    }
}

/// An event the lifecycle refuses: it cannot happen to a task in that
/// state (a stale or repeated event is not an error: it changes nothing).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LifecycleError {
    /// The event makes no sense in the task's status.
    #[error("task {task}: a {event} is not possible while it is {status}")]
    IllegalEvent {
        /// The task.
        task: TaskId,
        /// The event's name.
        event: &'static str,
        /// The task's status.
        status: TaskStatus,
    },
    /// A result or deadline names a step the task does not have.
    #[error("task {task} has no step {step_index}")]
    UnknownStep {
        /// The task.
        task: TaskId,
        /// The step named.
        step_index: u32,
    },
    /// A result names a generation the step never had.
    #[error(
        "task {task}, step {step_index}: a result of generation {got}, but the step was only ever queued {current} times"
    )]
    FutureGeneration {
        /// The task.
        task: TaskId,
        /// The step.
        step_index: u32,
        /// The generation the result names.
        got: u32,
        /// The step's generation.
        current: u32,
    },
    /// The plan cannot produce a step's job (its rule snapshot lacks it).
    #[error("task {task}: its rule snapshot has no step {step_index}")]
    PlanMismatch {
        /// The task.
        task: TaskId,
        /// The step.
        step_index: u32,
    },
}
