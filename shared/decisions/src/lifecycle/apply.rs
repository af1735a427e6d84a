//! The transition function: one `match` on (status, event).

use std::time::Duration;

use flow_protocol::jobs::{CancelMark, JobId, JobMessage, ResultMessage, StepOutcome};
use flow_protocol::readiness::NotReady;
use flow_protocol::task::{TaskEvent, TaskEventKind};
use flow_protocol::{StepStatus, TaskId, TaskStatus};

use super::event::{Admission, Effect, Event, LifecycleError, Transition};
use super::state::{StepState, TaskPlan, TaskState};

/// The message of a task that expired while queued.
pub const EXPIRED_MESSAGE: &str = "expired while queued: the rack stayed busy";
/// The message of a waiting task that was cancelled.
pub const CANCELLED_WHILE_QUEUED: &str = "cancelled while queued";
/// The message of a task cancelled while it ran.
pub const CANCELLED: &str = "cancelled";
/// The message of a task with no runnable step.
pub const NOTHING_TO_DO: &str = "nothing to do";
/// The message of a task whose window ended before it could start.
pub const WINDOW_ENDED: &str = "its window ended before it could start";
/// The message of a task waiting for its window to open.
pub const WAITING_FOR_WINDOW: &str = "waiting for its window to open";
/// The message of a task whose readiness gate is about to be checked.
pub const CHECKING_READINESS: &str = "checking that its components are ready";

/// Applies `event` to `state` at `now_ms` (epoch ms): the new state and
/// its effects, or a typed refusal. Pure: no I/O, no clock.
///
/// A stale or repeated event (an older generation's result, a result for a
/// step that already ended, a second cancel request, a deadline that moved
/// on, an event for a finished task) changes nothing; applying an event
/// twice is the same as applying it once.
pub fn apply(state: &TaskState, event: &Event, now_ms: u64) -> Result<Transition, LifecycleError> {
    let mut next = Next {
        state: state.clone(),
        effects: Vec::new(),
        now_ms,
    };
    let illegal = || LifecycleError::IllegalEvent {
        task: state.id,
        event: event.name(),
        status: state.status,
    };
    match (state.status, event) {
        (TaskStatus::Pending, Event::Submitted(Admission::Start)) => next.start()?,
        (TaskStatus::Pending, Event::Submitted(Admission::Queue { expires_ms })) => {
            next.state.status = TaskStatus::Waiting;
            next.state.queue_expires_ms = Some(*expires_ms);
            if !state.plan.window.open_at(now_ms) {
                next.state.message = WAITING_FOR_WINDOW.to_owned();
            }
        }
        (TaskStatus::Pending, _) | (_, Event::Submitted(_)) => return Err(illegal()),

        // Not before its window opens (admission queues such a task; a
        // promotion that comes early changes nothing).
        (TaskStatus::Waiting, Event::Promoted) if !state.plan.window.open_at(now_ms) => {}
        (TaskStatus::Waiting, Event::Promoted) => {
            next.state.message.clear();
            next.start()?;
        }
        (TaskStatus::Waiting, Event::QueueExpired) => {
            if state.queue_expires_ms.is_some_and(|at| now_ms >= at) {
                let message = if state.plan.window.ended_at(now_ms) {
                    WINDOW_ENDED
                } else {
                    EXPIRED_MESSAGE
                };
                next.finish(TaskStatus::Failed, message, false);
            }
        }
        (TaskStatus::Waiting, Event::CancelRequested) => {
            next.finish(TaskStatus::Terminated, CANCELLED_WHILE_QUEUED, false);
        }
        (
            TaskStatus::Waiting,
            Event::StepResult(_) | Event::DeadlinePassed { .. } | Event::ReadinessChecked(_),
        ) => {
            return Err(illegal());
        }
        // Nothing of it was sent: it waits as before.
        (TaskStatus::Waiting, Event::Restored) => {}

        (TaskStatus::Running, Event::StepResult(result)) => next.result(result)?,
        (
            TaskStatus::Running,
            Event::DeadlinePassed {
                step_index,
                generation,
            },
        ) => next.deadline(*step_index, *generation)?,
        // Held by its readiness gate, nothing runs yet: it ends at once.
        (TaskStatus::Running, Event::CancelRequested) if state.readiness_until_ms.is_some() => {
            next.finish(TaskStatus::Terminated, CANCELLED, false);
        }
        (TaskStatus::Running, Event::CancelRequested) => {
            if !state.cancel_requested {
                next.state.cancel_requested = true;
                next.cancel_mark();
            }
        }
        (TaskStatus::Running, Event::ReadinessChecked(not_ready)) => next.readiness(not_ready)?,
        (TaskStatus::Running, Event::Restored) => next.send_again()?,
        // Promoted or expired already: a repeat, or a promotion that beat
        // the expiry.
        (TaskStatus::Running, Event::Promoted | Event::QueueExpired) => {}

        // Over: nothing changes it (late results of cancelled steps, a
        // cancel after the end, a repeated expiry).
        (TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Terminated, _) => {}
    }
    Ok(Transition {
        state: next.state,
        effects: next.effects,
    })
}

/// The job of running `step` of task `task`: its current generation, a
/// deadline its budget from `now`.
fn job_of(
    task: TaskId,
    plan: &TaskPlan,
    step: &StepState,
    now: u64,
) -> Result<JobMessage, LifecycleError> {
    let job = plan
        .job(step.step_index)
        .ok_or(LifecycleError::PlanMismatch {
            task,
            step_index: step.step_index,
        })?;
    Ok(JobMessage {
        schema: flow_protocol::api::SCHEMA,
        id: JobId {
            task,
            step_index: step.step_index,
            generation: step.generation,
        },
        stage: step.stage,
        deadline_ms: now.saturating_add(step.budget_ms),
        job,
    })
}

/// A transition being built.
struct Next {
    state: TaskState,
    effects: Vec<Effect>,
    now_ms: u64,
}

impl Next {
    /// The step an event names, or the refusal for a step the task lacks.
    fn step_mut(&mut self, step_index: u32) -> Result<&mut StepState, LifecycleError> {
        let task = self.state.id;
        self.state
            .steps
            .iter_mut()
            .find(|s| s.step_index == step_index)
            .ok_or(LifecycleError::UnknownStep { task, step_index })
    }

    fn emit(&mut self, kind: TaskEventKind) {
        self.effects.push(Effect::Emit(TaskEvent::new(
            self.state.id,
            self.now_ms,
            kind,
        )));
    }

    fn cancel_mark(&mut self) {
        self.effects.push(Effect::CancelMark(CancelMark {
            schema: flow_protocol::api::SCHEMA,
            task_id: self.state.id,
            at_ms: self.now_ms,
        }));
    }

    /// The task takes its components: its first stage starts (or it fails
    /// with nothing to do) — unless it has a readiness gate, which holds it
    /// until a [`Event::ReadinessChecked`] finds every component ready.
    fn start(&mut self) -> Result<(), LifecycleError> {
        if self.state.plan.window.ended_at(self.now_ms) {
            self.finish(TaskStatus::Failed, WINDOW_ENDED, false);
            return Ok(());
        }
        self.state.status = TaskStatus::Running;
        self.state.queue_expires_ms = None;
        if let Some(wait) = self.state.plan.readiness_wait_ms {
            // Never past the window's end: a task not started by then fails.
            let until = self.now_ms.saturating_add(wait);
            let until = self
                .state
                .plan
                .window
                .not_after_ms
                .map_or(until, |end| until.min(end));
            self.state.readiness_until_ms = Some(until);
            self.state.message = CHECKING_READINESS.to_owned();
            return Ok(());
        }
        self.start_first_stage()
    }

    fn start_first_stage(&mut self) -> Result<(), LifecycleError> {
        self.state.started_ms = Some(self.now_ms);
        if !self.start_stage_after(None)? {
            self.finish(TaskStatus::Failed, NOTHING_TO_DO, false);
        }
        Ok(())
    }

    /// The gate's answer: start when nothing blocks; fail naming the
    /// blockers once the wait is over; otherwise say what it waits for.
    fn readiness(&mut self, not_ready: &[NotReady]) -> Result<(), LifecycleError> {
        let Some(until) = self.state.readiness_until_ms else {
            // Not gated (any more): a late or repeated check.
            return Ok(());
        };
        if self.state.plan.window.ended_at(self.now_ms) {
            self.finish(TaskStatus::Failed, WINDOW_ENDED, false);
            return Ok(());
        }
        if not_ready.is_empty() {
            self.state.readiness_until_ms = None;
            self.state.message.clear();
            // A plan that cannot build its first jobs ends the task here:
            // refused, the task would stay held, holding its components.
            if let Err(error) = self.start_first_stage() {
                self.finish(TaskStatus::Failed, &error.to_string(), false);
            }
            return Ok(());
        }
        let names = not_ready
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        if self.now_ms >= until {
            let waited = self.state.plan.readiness_wait_ms.unwrap_or_default();
            let message = format!(
                "components not ready after {}: {names}",
                flow_rules::duration::format_short(Duration::from_millis(waited))
            );
            self.finish(TaskStatus::Failed, &message, false);
        } else {
            self.state.message = format!("waiting for components to be ready: {names}");
        }
        Ok(())
    }

    /// After a restore: the job of every running step again, same
    /// generation, deadline from now; the cancel mark again when a cancel
    /// was asked (it is idempotent).
    fn send_again(&mut self) -> Result<(), LifecycleError> {
        let now = self.now_ms;
        let mut jobs = Vec::new();
        for step in self
            .state
            .steps
            .iter_mut()
            .filter(|s| s.status == StepStatus::Running)
        {
            step.deadline_ms = Some(now.saturating_add(step.budget_ms));
            jobs.push(job_of(self.state.id, &self.state.plan, step, now)?);
        }
        if self.state.cancel_requested {
            self.cancel_mark();
        }
        self.effects
            .extend(jobs.into_iter().map(|j| Effect::PublishJob(Box::new(j))));
        Ok(())
    }

    /// Queues the jobs of the first stage after `after` that has pending
    /// steps. False when no such stage is left.
    fn start_stage_after(&mut self, after: Option<u32>) -> Result<bool, LifecycleError> {
        let Some(stage) = self
            .state
            .steps
            .iter()
            .filter(|s| s.status == StepStatus::Pending && after.is_none_or(|a| s.stage > a))
            .map(|s| s.stage)
            .min()
        else {
            return Ok(false);
        };
        let now = self.now_ms;
        let mut jobs = Vec::new();
        for step in self
            .state
            .steps
            .iter_mut()
            .filter(|s| s.stage == stage && s.status == StepStatus::Pending)
        {
            step.status = StepStatus::Running;
            step.generation += 1;
            step.started_ms = Some(now);
            step.deadline_ms = Some(now.saturating_add(step.budget_ms));
            step.finished_ms = None;
            jobs.push(job_of(self.state.id, &self.state.plan, step, now)?);
        }
        self.state.current_stage = Some(stage);
        self.emit(TaskEventKind::StageStarted {
            stage,
            steps: jobs.iter().map(|j| j.id.step_index).collect(),
        });
        self.effects
            .extend(jobs.into_iter().map(|j| Effect::PublishJob(Box::new(j))));
        Ok(true)
    }

    /// Ends the task: open steps are cancelled, running ones told to stop
    /// (a cancel mark, unless one is out already or `mark` forces one for
    /// a step that may still run), and its rack handed on.
    fn finish(&mut self, status: TaskStatus, message: &str, mark: bool) {
        let held_rack = self.state.status.holds_rack();
        let mut running = mark;
        for step in self.state.steps.iter_mut().filter(|s| s.status.is_open()) {
            running |= step.status == StepStatus::Running;
            step.status = StepStatus::Cancelled;
            step.finished_ms = Some(self.now_ms);
        }
        self.state.status = status;
        self.state.message = message.to_owned();
        self.state.finished_ms = Some(self.now_ms);
        self.state.queue_expires_ms = None;
        self.state.readiness_until_ms = None;
        self.emit(TaskEventKind::TaskFinished {
            status,
            message: message.to_owned(),
        });
        if running && !self.state.cancel_requested {
            self.cancel_mark();
        }
        if held_rack {
            self.effects.push(Effect::PromoteNext(self.state.rack));
        }
    }

    /// Records a worker's result, fenced by generation, and moves the task
    /// on.
    fn result(&mut self, result: &ResultMessage) -> Result<(), LifecycleError> {
        let task = self.state.id;
        let now = self.now_ms;
        let step_index = result.id.step_index;
        let step = self.step_mut(step_index)?;
        if result.id.generation > step.generation {
            return Err(LifecycleError::FutureGeneration {
                task,
                step_index,
                got: result.id.generation,
                current: step.generation,
            });
        }
        if result.id.generation < step.generation || step.status != StepStatus::Running {
            // An older generation's, or a repeat: nothing changes.
            return Ok(());
        }
        let (status, error) = match &result.outcome {
            StepOutcome::Completed => (StepStatus::Completed, None),
            StepOutcome::Failed { action, message } => {
                (StepStatus::Failed, Some(format!("{action}: {message}")))
            }
            StepOutcome::Cancelled => (StepStatus::Cancelled, Some(CANCELLED.to_owned())),
        };
        step.status = status;
        step.error = error.clone();
        step.results = result.components.clone();
        step.calls = result.calls;
        step.finished_ms = Some(now);
        let stage = step.stage;
        self.firmware_installed(&result.components);
        self.emit(TaskEventKind::StepFinished {
            stage,
            step_index,
            generation: result.id.generation,
            status,
            error: error.clone(),
            calls: result.calls,
        });
        match status {
            StepStatus::Failed => {
                let message = format!(
                    "stage {stage} failed: step {step_index} failed: {}",
                    error.unwrap_or_default()
                );
                self.finish(TaskStatus::Failed, &message, false);
            }
            StepStatus::Cancelled => self.finish(TaskStatus::Terminated, CANCELLED, false),
            _ => self.advance(stage)?,
        }
        Ok(())
    }

    /// The components whose `FirmwareControl` finished (flashed, or found
    /// already at the version) run that version now — also when the step
    /// then failed in a later action or on other components.
    fn firmware_installed(
        &mut self,
        results: &std::collections::BTreeMap<String, flow_protocol::jobs::ComponentResult>,
    ) {
        let mut by_version: std::collections::BTreeMap<&str, Vec<String>> =
            std::collections::BTreeMap::new();
        for (name, r) in results {
            if let Some(version) = r.installed_version.as_deref() {
                by_version.entry(version).or_default().push(name.clone());
            }
        }
        for (version, components) in by_version {
            self.effects.push(Effect::FirmwareInstalled {
                rack: self.state.rack,
                components,
                version: version.to_owned(),
            });
        }
    }

    /// After a step of `stage` completed: wait for its siblings, then start
    /// the next stage, or complete. A task cancelled meanwhile starts no
    /// further stage.
    fn advance(&mut self, stage: u32) -> Result<(), LifecycleError> {
        let siblings_running = self
            .state
            .steps
            .iter()
            .any(|s| s.stage == stage && s.status == StepStatus::Running);
        if siblings_running {
            return Ok(());
        }
        let more = self
            .state
            .steps
            .iter()
            .any(|s| s.status == StepStatus::Pending && s.stage > stage);
        if more && self.state.cancel_requested {
            self.finish(TaskStatus::Terminated, CANCELLED, false);
        } else if !self.start_stage_after(Some(stage))? {
            // Stages after this one were skipped: the task went through
            // them too, so its current stage is its last.
            self.state.current_stage = self.state.steps.iter().map(|s| s.stage).max();
            self.finish(TaskStatus::Completed, "", false);
        }
        Ok(())
    }

    /// Fails an overdue step and its task; the step may still be running on
    /// a worker, so the cancel mark goes out.
    fn deadline(&mut self, step_index: u32, generation: u32) -> Result<(), LifecycleError> {
        let now = self.now_ms;
        let step = self.step_mut(step_index)?;
        let overdue = step.status == StepStatus::Running
            && step.generation == generation
            && step.deadline_ms.is_some_and(|d| now >= d);
        if !overdue {
            return Ok(());
        }
        let message = format!(
            "step {step_index} exceeded its budget of {}",
            flow_rules::duration::format_short(Duration::from_millis(step.budget_ms))
        );
        step.status = StepStatus::Failed;
        step.error = Some(message.clone());
        step.finished_ms = Some(now);
        self.finish(TaskStatus::Failed, &message, true);
        Ok(())
    }
}
