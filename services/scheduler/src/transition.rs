//! The lifecycle's transactions: load a task under its row lock, apply an
//! event (`flow_decisions::lifecycle::apply`), save the new state and write
//! its effects to the outbox, hand the rack on when the task let go of it,
//! and commit, all in one transaction. Nothing here decides; the lifecycle
//! does.

use flow_decisions::lifecycle::{
    self, Admission, Applied, Effect, Event, TaskState, Transition, queue,
};
use flow_protocol::api::{ApiError, CancelOutcome, ErrorCode, Submission, TaskCancelReply};
use flow_protocol::jobs::ResultMessage;
use flow_protocol::{RackId, TaskId, TaskStatus};
use flow_store::StoreError;
use flow_store::tasks::{Claimed, NewTask, TaskTx};
use flow_telemetry::ErrorChain;

use crate::error::SchedulerError;
use crate::service::TaskService;

/// How long the step jobs a results transaction commits are left to the
/// applier that committed them, which publishes them at once (not through
/// the outbox publisher's next round); past it — the scheduler died or
/// could not publish — the outbox publisher sends them
/// (`migrations/20261203000001_outbox_claim.sql`).
pub const JOB_CLAIM: std::time::Duration = std::time::Duration::from_secs(5);

/// The most promotions one transaction makes for a rack (each promoted
/// task that fails at once with nothing to do hands the rack on again).
const MAX_PROMOTIONS: usize = queue::MAX_WAITING_PER_RACK + 1;

/// What [`TaskService::would_create`] found.
pub(crate) struct WouldCreate {
    /// The submission's answer.
    pub(crate) submission: Submission,
    /// The task's first transition, when it would be created.
    pub(crate) transition: Option<Transition>,
    /// The rack's open tasks it would queue behind or conflict with.
    pub(crate) open: Vec<TaskId>,
    /// Its components that are not ready.
    pub(crate) not_ready: Vec<flow_protocol::readiness::NotReady>,
}

/// What a submission's transaction decides before it writes.
enum Verdict {
    /// Answered without a task: a duplicate request or a refusal.
    Answer(Submission),
    /// A task is admitted: its first transition, how, and how many tasks
    /// wait on the rack before it.
    Admit {
        transition: Transition,
        admission: Admission,
        waiting: usize,
        open: Vec<TaskId>,
    },
}

/// The answers that come before admission: the request already made this
/// task, or its window has passed.
async fn before_admission(
    tx: &mut TaskTx,
    new: &NewTask,
    planned: &TaskState,
) -> Result<Option<Submission>, SchedulerError> {
    if let Some(id) = tx.find_request(&new.request_id, planned.rack).await? {
        return Ok(Some(Submission::Duplicate(id)));
    }
    let window = planned.plan.window;
    if window.ended_at(tx.now_ms()) {
        let end = flow_protocol::task::timestamp::from_ms(window.not_after_ms.unwrap_or_default());
        return Ok(Some(Submission::Refused(ApiError::new(
            ErrorCode::Invalid,
            format!(
                "not_after: {} has passed",
                flow_protocol::task::timestamp::format(end)
            ),
        ))));
    }
    Ok(None)
}

/// Decides a new task against the rack's open tasks (`queue::admit`) and
/// applies its submission (`decide`), writing nothing.
async fn admit_new(
    tx: &mut TaskTx,
    new: &NewTask,
    planned: &TaskState,
    queue_timeout: Option<std::time::Duration>,
) -> Result<Verdict, SchedulerError> {
    if let Some(answer) = before_admission(tx, new, planned).await? {
        return Ok(Verdict::Answer(answer));
    }
    let tasks = tx.rack_tasks(planned.rack).await?;
    let footprint = planned.plan.footprint();
    let admission = match queue::admit(
        &new.rack_name,
        &footprint,
        planned.plan.window,
        &tasks,
        queue_timeout,
        tx.now_ms(),
    ) {
        Ok(admission) => admission,
        Err(refusal) => {
            return Ok(Verdict::Answer(Submission::Refused(ApiError::new(
                ErrorCode::Conflict,
                refusal.to_string(),
            ))));
        }
    };
    let transition = decide(tx, planned, &Event::Submitted(admission)).await?;
    Ok(Verdict::Admit {
        transition,
        admission,
        waiting: tasks.waiting_count(),
        open: tasks.open.iter().map(|t| t.id).collect(),
    })
}

/// The submission's answer for an admitted task.
fn submission(t: &Transition, admission: Admission, waiting: usize) -> Submission {
    match (t.state.status, admission) {
        (TaskStatus::Waiting, Admission::Queue { expires_ms }) => Submission::Queued {
            task_id: t.state.id,
            position: u32::try_from(waiting + 1).unwrap_or(u32::MAX),
            expires_at: flow_protocol::task::timestamp::from_ms(expires_ms),
        },
        _ => Submission::Created(t.state.id),
    }
}

/// `event` applied to `state` at the transaction's time. A transition into
/// the readiness gate (a task just started or promoted) is followed at once
/// by a check of the task's components, so ready ones start in the same
/// transaction.
async fn decide(
    tx: &mut TaskTx,
    state: &TaskState,
    event: &Event,
) -> Result<Transition, SchedulerError> {
    let lifecycle_error = |source| SchedulerError::Lifecycle {
        task: state.id,
        source,
    };
    let mut t = lifecycle::apply(state, event, tx.now_ms()).map_err(lifecycle_error)?;
    if state.readiness_until_ms.is_none() && t.state.readiness_until_ms.is_some() {
        let not_ready = tx.not_ready(&t.state).await?;
        let checked = lifecycle::apply(&t.state, &Event::ReadinessChecked(not_ready), tx.now_ms())
            .map_err(lifecycle_error)?;
        t.effects.extend(checked.effects);
        t.state = checked.state;
    }
    Ok(t)
}

/// Applies `event` to the locked `state` ([`decide`]), saves the new state
/// and writes the effects that are messages.
pub(crate) async fn apply_and_save(
    tx: &mut TaskTx,
    state: &TaskState,
    event: &Event,
) -> Result<Transition, SchedulerError> {
    let t = decide(tx, state, event).await?;
    if t.changed(state) {
        tx.save(state, &t.state).await?;
        tx.outbox(&t.effects).await?;
        for effect in &t.effects {
            if let Effect::FirmwareInstalled {
                rack,
                components,
                version,
            } = effect
            {
                tx.record_firmware(*rack, components, version).await?;
            }
        }
    }
    Ok(t)
}

/// [`apply_and_save`], then hands the rack on if the task let go of it.
async fn transition(
    tx: &mut TaskTx,
    state: &TaskState,
    event: &Event,
) -> Result<Transition, SchedulerError> {
    let t = apply_and_save(tx, state, event).await?;
    hand_on(tx, &t.effects).await?;
    Ok(t)
}

/// Promotes the next task of every rack the effects hand on.
async fn hand_on(tx: &mut TaskTx, effects: &[Effect]) -> Result<(), SchedulerError> {
    for effect in effects {
        if let Effect::PromoteNext(rack) = effect {
            promote(tx, *rack).await?;
        }
    }
    Ok(())
}

/// A task of the rack let go of its components: waiting tasks past their
/// time expire, and those that now conflict with nothing start (oldest
/// first, none ahead of an older one it conflicts with), under the rack's
/// lock.
///
/// A waiting task that cannot be loaded or moved on (an unreadable row, a
/// rule snapshot its plan cannot build a job from) is logged and left
/// waiting, where its expiry ends it: it must not fail the transaction of
/// the task that handed the rack on, whose result would then never apply.
async fn promote(tx: &mut TaskTx, rack: RackId) -> Result<(), SchedulerError> {
    tx.lock_rack(rack).await?;
    for _ in 0..MAX_PROMOTIONS {
        let decision = queue::next_in_line(&tx.rack_tasks(rack).await?, tx.now_ms());
        for task in decision.expire {
            if let Err(error) = move_waiting(tx, task, &Event::QueueExpired).await? {
                tracing::error!(task_id = %task, error = %ErrorChain(&error), "a waiting task could not expire; left waiting");
            }
        }
        // A promoted task that ends at once (nothing to do) lets go of its
        // components again: look once more.
        let mut again = false;
        for next in decision.promote {
            match move_waiting(tx, next, &Event::Promoted).await? {
                Ok(Some(status)) if status.is_final() => again = true,
                Ok(_) => {}
                Err(error) => {
                    tracing::error!(task_id = %next, error = %ErrorChain(&error), "a waiting task could not start; left waiting until it expires");
                }
            }
        }
        if !again {
            return Ok(());
        }
    }
    Ok(())
}

/// Applies an expiry or a promotion to a waiting task: its new status (none
/// when it is gone), or — as the inner error — why this task cannot move
/// (the outer error is the database's: the transaction is lost).
async fn move_waiting(
    tx: &mut TaskTx,
    task: TaskId,
    event: &Event,
) -> Result<Result<Option<TaskStatus>, SchedulerError>, SchedulerError> {
    let state = match tx.lock(task).await {
        Ok(Some(state)) => state,
        Ok(None) => return Ok(Ok(None)),
        Err(error @ StoreError::Corrupt { .. }) => return Ok(Err(error.into())),
        Err(error) => return Err(error.into()),
    };
    match apply_and_save(tx, &state, event).await {
        Ok(t) => Ok(Ok(Some(t.state.status))),
        Err(error @ SchedulerError::Lifecycle { .. }) => Ok(Err(error)),
        Err(error) => Err(error),
    }
}

/// Locks `task` and applies `event` to it (nothing when it is gone).
async fn apply_locked(
    tx: &mut TaskTx,
    task: TaskId,
    event: &Event,
) -> Result<Option<(TaskState, Transition)>, SchedulerError> {
    let Some(state) = tx.lock(task).await? else {
        return Ok(None);
    };
    let t = transition(tx, &state, event).await?;
    Ok(Some((state, t)))
}

impl TaskService {
    /// Admits a planned task for its rack: a repeated request returns its
    /// task; otherwise it starts, waits (`queue_timeout`) or is refused, in
    /// one transaction under the rack's lock.
    ///
    /// With `preempt` (a hardware event's task that goes first), the open
    /// tasks it conflicts with (`queue::preempted`) are cancelled in the
    /// same transaction — a waiting one ends, a running one stops at its
    /// next action boundary (its cancel mark on the outbox) — their record
    /// names the event, and the new task starts at once beside them.
    pub(crate) async fn create(
        &self,
        new: &NewTask,
        planned: TaskState,
        queue_timeout: Option<std::time::Duration>,
        preempt: Option<flow_protocol::EventId>,
    ) -> Result<Submission, SchedulerError> {
        let mut tx = self.store.begin_tasks().await?;
        tx.lock_rack(planned.rack).await?;
        if let Some(event) = preempt {
            if let Some(answer) = before_admission(&mut tx, new, &planned).await? {
                return Ok(answer);
            }
            let tasks = tx.rack_tasks(planned.rack).await?;
            let footprint = planned.plan.footprint();
            let mut handed = Vec::new();
            for victim in queue::preempted(&footprint, &tasks) {
                let Some(state) = tx.lock(victim).await? else {
                    continue;
                };
                // The rack is handed on only after the new task is in:
                // nothing waiting may start ahead of it.
                let t = apply_and_save(&mut tx, &state, &Event::CancelRequested).await?;
                tx.mark_preempted(victim, event).await?;
                handed.extend(t.effects.iter().cloned());
                tracing::warn!(
                    task_id = %victim,
                    event_id = %event,
                    rack = %new.rack_name,
                    status = %t.state.status,
                    "task preempted by a hardware event's task"
                );
            }
            let t = decide(&mut tx, &planned, &Event::Submitted(Admission::Start)).await?;
            tx.insert(new, &t.state).await?;
            tx.outbox(&t.effects).await?;
            handed.extend(t.effects);
            hand_on(&mut tx, &handed).await?;
            tx.commit().await?;
            return Ok(Submission::Created(t.state.id));
        }
        let (t, admission, waiting) = match admit_new(&mut tx, new, &planned, queue_timeout).await?
        {
            Verdict::Answer(answer) => return Ok(answer),
            Verdict::Admit {
                transition,
                admission,
                waiting,
                ..
            } => (transition, admission, waiting),
        };
        tx.insert(new, &t.state).await?;
        tx.outbox(&t.effects).await?;
        // A task that ends at once (nothing to do) hands the rack on.
        hand_on(&mut tx, &t.effects).await?;
        tx.commit().await?;
        Ok(submission(&t, admission, waiting))
    }

    /// What [`TaskService::create`] would answer for `planned`, decided
    /// by the same functions in a transaction that is rolled back:
    /// nothing is written and no rack is locked. With the transition, for
    /// the preview to say why a created task would wait.
    pub(crate) async fn would_create(
        &self,
        new: &NewTask,
        planned: &TaskState,
        queue_timeout: Option<std::time::Duration>,
    ) -> Result<WouldCreate, SchedulerError> {
        let mut tx = self.store.begin_tasks().await?;
        let not_ready = tx.not_ready(planned).await?;
        let verdict = admit_new(&mut tx, new, planned, queue_timeout).await?;
        // Dropped uncommitted: rolled back.
        drop(tx);
        Ok(match verdict {
            Verdict::Answer(submission) => WouldCreate {
                submission,
                transition: None,
                open: Vec::new(),
                not_ready,
            },
            Verdict::Admit {
                transition,
                admission,
                waiting,
                open,
            } => WouldCreate {
                submission: submission(&transition, admission, waiting),
                transition: Some(transition),
                open,
                not_ready,
            },
        })
    }

    /// Applies a worker's result in one transaction: idempotent (a repeated
    /// or stale result changes nothing), the next stage's jobs on the
    /// outbox in the same commit, claimed for the caller to publish
    /// ([`JOB_CLAIM`]) and added to `claimed`.
    async fn apply_result(
        &self,
        result: &ResultMessage,
        claimed: &mut Claimed,
    ) -> Result<Applied, SchedulerError> {
        let mut tx = self.store.begin_tasks().await?;
        tx.claim_jobs(JOB_CLAIM);
        let applied = match apply_locked(
            &mut tx,
            result.id.task,
            &Event::StepResult(result.clone()),
        )
        .await?
        {
            Some((before, t)) => t.applied(&before),
            None => Applied::Ignored,
        };
        if applied != Applied::Ignored {
            claimed.extend(tx.commit().await?);
        }
        Ok(applied)
    }

    /// Applies several workers' results in one transaction (one commit
    /// for all), each as [`TaskService::apply_result`] would, in task
    /// order. A result the lifecycle refuses gets its error (nothing of it
    /// was written) and the others go on; any other failure (the database,
    /// a row that moved underneath, a deadlock with another transaction)
    /// loses the whole transaction, and then each result is applied in a
    /// transaction of its own, as if it had come alone. Returns the
    /// outcomes and the step jobs committed, claimed for the caller to
    /// publish at once ([`JOB_CLAIM`]).
    pub(crate) async fn apply_results(
        &self,
        results: &[ResultMessage],
    ) -> (Vec<Result<Applied, SchedulerError>>, Claimed) {
        if results.len() > 1 {
            match self.apply_together(results).await {
                Ok(applied) => return applied,
                Err(error) => {
                    tracing::warn!(results = results.len(), error = %ErrorChain(&error), "results not applied together; applying each alone");
                }
            }
        }
        let mut outcomes = Vec::with_capacity(results.len());
        let mut claimed = Claimed::new();
        for result in results {
            outcomes.push(self.apply_result(result, &mut claimed).await);
        }
        (outcomes, claimed)
    }

    async fn apply_together(
        &self,
        results: &[ResultMessage],
    ) -> Result<(Vec<Result<Applied, SchedulerError>>, Claimed), SchedulerError> {
        // One order for every batch: two schedulers' batches lock tasks in
        // the same order.
        let mut order: Vec<usize> = (0..results.len()).collect();
        order.sort_by_key(|&i| {
            let id = results[i].id;
            (id.task, id.step_index, id.generation)
        });
        let started = std::time::Instant::now();
        let mut tx = self.store.begin_tasks().await?;
        tx.claim_jobs(JOB_CLAIM);
        let begun = started.elapsed();
        let tasks: Vec<TaskId> = results.iter().map(|r| r.id.task).collect();
        tx.lock_all(&tasks).await?;
        let locked = started.elapsed();
        let mut outcomes: Vec<Option<Result<Applied, SchedulerError>>> =
            (0..results.len()).map(|_| None).collect();
        let mut changed = false;
        for i in order {
            let result = &results[i];
            let event = Event::StepResult(result.clone());
            let outcome = match apply_locked(&mut tx, result.id.task, &event).await {
                Ok(Some((before, t))) => Ok(t.applied(&before)),
                Ok(None) => Ok(Applied::Ignored),
                // Decided before anything of it was written.
                Err(error @ SchedulerError::Lifecycle { .. }) => Err(error),
                Err(error) => return Err(error),
            };
            changed |= matches!(&outcome, Ok(a) if *a != Applied::Ignored);
            outcomes[i] = Some(outcome);
        }
        let decided = started.elapsed();
        let claimed = if changed {
            tx.commit().await?
        } else {
            Claimed::new()
        };
        tracing::debug!(
            results = results.len(),
            begin_us = begun.as_micros() as u64,
            lock_us = (locked - begun).as_micros() as u64,
            decide_us = (decided - locked).as_micros() as u64,
            commit_us = (started.elapsed() - decided).as_micros() as u64,
            "results transaction"
        );
        let outcomes = outcomes
            .into_iter()
            .map(|o| o.unwrap_or(Ok(Applied::Ignored)))
            .collect();
        Ok((outcomes, claimed))
    }

    /// Fails every running step past its deadline, and its task (the cancel
    /// mark goes out: the step may still run on a worker). Returns the
    /// tasks failed.
    pub(crate) async fn fail_overdue(&self) -> Result<Vec<TaskId>, SchedulerError> {
        let mut failed = Vec::new();
        for (task, step_index, generation) in self.store.overdue_steps().await? {
            let mut tx = self.store.begin_tasks().await?;
            let event = Event::DeadlinePassed {
                step_index,
                generation,
            };
            match apply_locked(&mut tx, task, &event).await {
                Ok(Some((_, t))) if t.state.status == TaskStatus::Failed => {
                    tx.commit().await?;
                    failed.push(task);
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::error!(task_id = %task, step = step_index, error = %ErrorChain(&error), "deadline not applied");
                }
            }
        }
        Ok(failed)
    }

    /// Cancels a task: a running one stops at its next action boundary
    /// (its cancel mark is committed on the outbox), a waiting one is
    /// terminated at once.
    pub(crate) async fn cancel(&self, task: TaskId) -> Result<TaskCancelReply, SchedulerError> {
        let mut tx = self.store.begin_tasks().await?;
        let Some((before, t)) = apply_locked(&mut tx, task, &Event::CancelRequested).await? else {
            return Err(StoreError::NotFound(format!("task {task} not found")).into());
        };
        tx.commit().await?;
        let outcome = match before.status {
            TaskStatus::Waiting => CancelOutcome::CancelledWhileQueued,
            status if status.is_final() => CancelOutcome::AlreadyFinished,
            _ if before.readiness_until_ms.is_some() => CancelOutcome::CancelledBeforeStart,
            _ => CancelOutcome::Cancelling,
        };
        Ok(TaskCancelReply {
            cancelling: outcome == CancelOutcome::Cancelling,
            outcome,
            status: t.state.status,
        })
    }

    /// Looks again at the components of every task its readiness gate
    /// holds: the ready ones start, those past their wait fail naming the
    /// components that are not ready. Returns how many changed.
    pub(crate) async fn check_readiness(&self) -> Result<usize, SchedulerError> {
        let mut changed = 0;
        for task in self.store.held_by_readiness().await? {
            let checked = async {
                let mut tx = self.store.begin_tasks().await?;
                let Some(state) = tx.lock(task).await? else {
                    return Ok(false);
                };
                let not_ready = tx.not_ready(&state).await?;
                let t = transition(&mut tx, &state, &Event::ReadinessChecked(not_ready)).await?;
                let moved = t.changed(&state);
                if moved {
                    tx.commit().await?;
                }
                Ok::<_, SchedulerError>(moved)
            };
            match checked.await {
                Ok(true) => changed += 1,
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(task_id = %task, error = %ErrorChain(&error), "readiness check failed");
                }
            }
        }
        Ok(changed)
    }

    /// Expires queued tasks past their time and promotes waiting tasks of
    /// free racks (the sweeper's safety net; promotion normally happens when
    /// the task before finishes).
    pub(crate) async fn sweep_queues(&self) -> Result<(), SchedulerError> {
        for rack in self.store.racks_with_waiting().await? {
            // One rack's failure does not hold up the others.
            let swept = async {
                let mut tx = self.store.begin_tasks().await?;
                promote(&mut tx, rack).await?;
                tx.commit().await?;
                Ok::<_, SchedulerError>(())
            };
            if let Err(error) = swept.await {
                tracing::warn!(rack_id = %rack, error = %ErrorChain(&error), "queue sweep of a rack failed");
            }
        }
        Ok(())
    }
}
