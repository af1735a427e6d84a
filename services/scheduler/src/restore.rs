//! After a database restore (`flow-scheduler --restored`;
//! docs/operating.md, "Backup and restore"). The backup's state is older
//! than the hardware's and JetStream's: steps it says are running may have
//! run on, finished, or started the next stage since, and the results that
//! said so were consumed by the database that was lost. So the scheduler
//! begins a new restore epoch (`shared/protocol/src/restore.rs`) and sends
//! every running step's job again under its generation
//! (`flow_decisions::lifecycle::Event::Restored`): a worker resumes it
//! from the job's checkpoint — a step that had finished reports at once,
//! one that had sent its commands only checks them, none is sent twice —
//! and the results move the tasks on as if the database had never gone.
//! The epoch keeps JetStream's duplicate window from dropping the jobs
//! and results sent again, and everything after them.
//!
//! What creates tasks on its own from the database's state — schedules,
//! rollouts, a firing in progress — may have acted after the backup and
//! would act again: it is held (paused, closed) for an operator to review
//! and resume, and the restore's audit record names it.

use std::sync::atomic::Ordering;

use flow_decisions::lifecycle::{Effect, Event};
use flow_protocol::TaskStatus;
use flow_telemetry::ErrorChain;

use crate::error::SchedulerError;
use crate::service::TaskService;

/// What a restore sent again and held back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentAgain {
    /// The epoch it began.
    pub epoch: u32,
    /// Running tasks whose steps were sent again.
    pub tasks: usize,
    /// Their running steps.
    pub steps: usize,
    /// The schedules and rollouts paused, the firings closed.
    pub held: flow_store::restore::Held,
}

impl TaskService {
    /// The epoch this scheduler publishes in.
    pub(crate) fn epoch(&self) -> u32 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Reads the epoch to publish in from the database (the newest
    /// restore's).
    pub(crate) async fn load_epoch(&self) -> Result<u32, SchedulerError> {
        let epoch = self.store.restore_epoch().await?;
        self.epoch.store(epoch, Ordering::SeqCst);
        if epoch != 0 {
            tracing::info!(epoch, "publishing in the restore epoch");
        }
        Ok(epoch)
    }

    /// Begins a restore epoch and sends every running step's job again,
    /// one task per transaction (a task that cannot be moved is logged and
    /// left to its deadline); then records what it sent, audited.
    pub async fn send_again_after_restore(&self) -> Result<SentAgain, SchedulerError> {
        let start = self.store.begin_restore().await?;
        self.epoch.store(start.epoch, Ordering::SeqCst);
        tracing::warn!(
            epoch = start.epoch,
            tasks = start.running.len(),
            "database restored from a backup: sending the running steps' jobs again"
        );
        let mut sent = SentAgain {
            epoch: start.epoch,
            tasks: 0,
            steps: 0,
            held: flow_store::restore::Held::default(),
        };
        for task in start.running {
            let moved = async {
                let mut tx = self.store.begin_tasks().await?;
                let Some(state) = tx.lock(task).await? else {
                    return Ok::<_, SchedulerError>(0);
                };
                if state.status != TaskStatus::Running {
                    return Ok(0);
                }
                let t =
                    crate::transition::apply_and_save(&mut tx, &state, &Event::Restored).await?;
                tx.commit().await?;
                Ok(t.effects
                    .iter()
                    .filter(|e| matches!(e, Effect::PublishJob(_)))
                    .count())
            };
            match moved.await {
                Ok(0) => {}
                Ok(steps) => {
                    sent.tasks += 1;
                    sent.steps += steps;
                }
                Err(error) => {
                    tracing::error!(task_id = %task, error = %ErrorChain(&error), "a running task's steps could not be sent again; its deadline ends it");
                }
            }
        }
        let held = self.store.hold_automation().await?;
        self.store
            .finish_restore(sent.epoch, sent.tasks, sent.steps, &held)
            .await?;
        self.poke();
        tracing::warn!(
            epoch = sent.epoch,
            tasks = sent.tasks,
            steps = sent.steps,
            "running steps sent again after the restore"
        );
        if !held.schedules.is_empty() || !held.runs.is_empty() || held.firings > 0 {
            tracing::warn!(
                schedules = ?held.schedules,
                runs = ?held.runs,
                firings = held.firings,
                "schedules and rollouts paused after the restore: what they did after the backup is not known; review and resume them"
            );
        }
        sent.held = held;
        Ok(sent)
    }
}
