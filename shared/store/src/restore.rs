//! Database restores: the epoch the scheduler publishes in
//! (`shared/protocol/src/restore.rs`) and the record of each restore
//! (`migrations/20261209000001_restores.sql`). What a restore sends again is
//! the lifecycle's (`flow_decisions::lifecycle::Event::Restored`) and the
//! scheduler's (`services/scheduler/src/restore.rs`).

use flow_protocol::TaskId;
use flow_protocol::audit::{Actor, ActorSource, AuditOutcome, EndpointKind};
use serde_json::json;
use uuid::Uuid;

use crate::audit::AuditEntry;
use crate::{Store, StoreError};

/// The endpoint name a restore's audit record carries.
pub use flow_protocol::restore::RESTORE_ENDPOINT;

/// What a restore held back: the automation that creates tasks from the
/// database's state, which may have acted after the backup (a schedule
/// that fired, a rollout that moved on) and would act again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    /// Schedules paused (by name).
    pub schedules: Vec<String>,
    /// Rollouts paused (by name).
    pub runs: Vec<String>,
    /// Schedule firings that were in progress, closed unfinished.
    pub firings: usize,
}

/// A restore begun: its epoch and the tasks that were running in the
/// backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreStart {
    /// The new epoch.
    pub epoch: u32,
    /// Tasks running in the restored state, in ID order.
    pub running: Vec<TaskId>,
}

impl Store {
    /// The epoch to publish in: the newest restore's (0: never restored).
    pub async fn restore_epoch(&self) -> Result<u32, StoreError> {
        let epoch: Option<i64> =
            sqlx::query_scalar("SELECT epoch FROM restores ORDER BY at DESC, epoch DESC LIMIT 1")
                .fetch_optional(&self.pool)
                .await?;
        Ok(epoch.map_or(0, |e| u32::try_from(e).unwrap_or(u32::MAX)))
    }

    /// Begins a restore: a new epoch (the database's clock in seconds,
    /// past every earlier one) and the running tasks to send again.
    pub async fn begin_restore(&self) -> Result<RestoreStart, StoreError> {
        let epoch: i64 = sqlx::query_scalar(
            "INSERT INTO restores (epoch) \
             SELECT greatest(extract(epoch FROM now())::bigint, \
                             coalesce(max(epoch), 0) + 1) FROM restores \
             RETURNING epoch",
        )
        .fetch_one(&self.pool)
        .await?;
        let running: Vec<Uuid> =
            sqlx::query_scalar("SELECT id FROM tasks WHERE status = 'running' ORDER BY id")
                .fetch_all(&self.pool)
                .await?;
        Ok(RestoreStart {
            epoch: u32::try_from(epoch).map_err(|_| StoreError::Corrupt {
                what: "restores".into(),
                reason: format!("epoch {epoch} does not fit 32 bits"),
            })?,
            running: running.into_iter().map(TaskId).collect(),
        })
    }

    /// Holds the automation back after a restore: every enabled schedule
    /// paused, every rollout that would submit on its own (pending,
    /// running, or waiting for its window) paused as an operator would
    /// (`operator_paused`), and every schedule firing in progress closed
    /// with why — what each did after the backup is not known, and done
    /// again it would operate the hardware a second time. An operator
    /// reviews and resumes them (docs/operating.md, "Backup and restore").
    pub async fn hold_automation(&self) -> Result<Held, StoreError> {
        let mut tx = self.pool.begin().await?;
        let schedules: Vec<String> = sqlx::query_scalar(
            "UPDATE schedules SET enabled = false, next_run_at = NULL, \
             revision = revision + 1, updated_at = now() WHERE enabled RETURNING name",
        )
        .fetch_all(&mut *tx)
        .await?;
        let runs: Vec<String> = sqlx::query_scalar(
            "UPDATE runs SET status = 'paused', reason = 'operator_paused', updated_at = now() \
             WHERE status IN ('pending', 'running') \
                OR (status = 'paused' AND reason = 'outside_window') RETURNING name",
        )
        .fetch_all(&mut *tx)
        .await?;
        let outcome = flow_protocol::schedule::FiringOutcome {
            error: Some(flow_protocol::api::ApiError::new(
                flow_protocol::api::ErrorCode::Conflict,
                "not finished: the database was restored from a backup taken while it fired, \
                 and what it created after the backup is not known; it is not fired again",
            )),
            ..Default::default()
        };
        let firings = sqlx::query(
            "UPDATE schedule_firings SET done_at = now(), outcome = $1 WHERE done_at IS NULL",
        )
        .bind(sqlx::types::Json(&outcome))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        let mut held = Held {
            schedules,
            runs,
            firings: usize::try_from(firings).unwrap_or(usize::MAX),
        };
        held.schedules.sort();
        held.runs.sort();
        Ok(held)
    }

    /// Records what a restore sent again and held back, with its audit
    /// record.
    pub async fn finish_restore(
        &self,
        epoch: u32,
        tasks: usize,
        steps: usize,
        held: &Held,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
        sqlx::query(
            "UPDATE restores SET tasks = $2, steps = $3, finished_at = now() WHERE epoch = $1",
        )
        .bind(i64::from(epoch))
        .bind(count(tasks))
        .bind(count(steps))
        .execute(&mut *tx)
        .await?;
        let entry = AuditEntry {
            actor: Actor {
                name: "flow-scheduler".into(),
                source: ActorSource::Service,
                claimed: None,
                via: None,
            },
            endpoint: RESTORE_ENDPOINT.into(),
            kind: EndpointKind::Internal,
            racks: Vec::new(),
            task_ids: Vec::new(),
            target: Some(format!("epoch {epoch}")),
            request: json!({"epoch": epoch, "tasks": tasks, "steps": steps,
                            "paused_schedules": held.schedules, "paused_runs": held.runs,
                            "closed_firings": held.firings}),
            reason: Some("started with --restored: the database was restored from a backup".into()),
        };
        let message = format!(
            "database restored: {steps} running steps of {tasks} tasks sent again in epoch {epoch}; \
             {} schedules and {} rollouts paused, {} firings in progress closed: review and resume them",
            held.schedules.len(),
            held.runs.len(),
            held.firings
        );
        crate::audit::insert(&mut tx, &entry, AuditOutcome::Ok, &message).await?;
        tx.commit().await?;
        Ok(())
    }
}
