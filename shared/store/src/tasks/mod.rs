//! Tasks: persistence only. The lifecycle (`flow_engine::lifecycle`)
//! decides; this module loads a task's state under its row lock, saves the
//! state a transition produced (compare-and-set on what it was) and writes
//! the transition's effects to the outbox, all in one [`TaskTx`]. It also
//! reads what the decisions about a rack need (its open tasks, its queue),
//! the records the API shows, and the outbox for the publisher.

mod outbox;
mod read;
mod rows;

use flow_engine::lifecycle::queue::{OpenTask, RackTasks};
use flow_engine::lifecycle::{Effect, TaskState};
use flow_protocol::api::ResolveReply;
use flow_protocol::readiness::{ComponentStatus, NotReady, UnknownComponentStatus};
use flow_protocol::{EventId, RackId, RunId, ScheduleId, StepStatus, TaskId, TaskStatus};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

pub use outbox::OutboxMessage;

use crate::{Store, StoreError};
use rows::{StepRow, TaskRow, at, big, int, step_columns, task_columns, task_status};

/// What a task row holds beside the lifecycle's state: who asked, for
/// which rack, with which rule.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// The submission's idempotency key.
    pub request_id: String,
    /// The rack's name.
    pub rack_name: String,
    /// What the operator said it is for.
    pub description: String,
    /// How the rule was resolved (its definition is the snapshot).
    pub rule: ResolveReply,
    /// What submitted it.
    pub origin: Origin,
}

/// What submitted a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Origin {
    /// A request (`task.submit`, `flow.tasks.submit`).
    #[default]
    Request,
    /// A schedule's firing.
    Schedule(ScheduleId),
    /// A phased rollout, for one of its targets.
    Run(RunId),
    /// An event rule's action, for a hardware event.
    Event(EventId),
}

/// One transaction over tasks, with the database's time at its start
/// (every time the lifecycle writes in it is this one, so schedulers on
/// hosts with different clocks agree). Dropped without [`TaskTx::commit`],
/// it rolls back.
pub struct TaskTx {
    tx: Transaction<'static, Postgres>,
    now_ms: u64,
}

impl Store {
    /// Begins a transaction over tasks.
    pub async fn begin_tasks(&self) -> Result<TaskTx, StoreError> {
        let mut tx = self.pool().begin().await?;
        let now: time::OffsetDateTime = sqlx::query_scalar("SELECT now()")
            .fetch_one(&mut *tx)
            .await?;
        Ok(TaskTx {
            tx,
            now_ms: rows::ms(now),
        })
    }
}

fn open_statuses() -> Vec<&'static str> {
    TaskStatus::ALL
        .iter()
        .filter(|s| s.is_open())
        .map(|s| s.as_str())
        .collect()
}

impl TaskTx {
    /// The database's time when the transaction began (epoch ms).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Takes the rack's lock until the transaction ends: submissions and
    /// promotions for one rack happen one at a time.
    pub async fn lock_rack(&mut self, rack: RackId) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('flow.rack/' || $1::text))")
            .bind(rack.as_uuid())
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    /// The task a request already created for this rack.
    pub async fn find_request(
        &mut self,
        request_id: &str,
        rack: RackId,
    ) -> Result<Option<TaskId>, StoreError> {
        let id: Option<Uuid> =
            sqlx::query_scalar("SELECT id FROM tasks WHERE request_id = $1 AND rack_id = $2")
                .bind(request_id)
                .bind(rack.as_uuid())
                .fetch_optional(&mut *self.tx)
                .await?;
        Ok(id.map(TaskId))
    }

    /// The rack's open tasks oldest first, each with what it occupies (for
    /// admission and promotion). A task whose operation or components
    /// cannot be read has an unknown footprint, which the lifecycle treats
    /// as conflicting with everything.
    pub async fn rack_tasks(&mut self, rack: RackId) -> Result<RackTasks, StoreError> {
        type Row = (
            Uuid,
            String,
            String,
            serde_json::Value,
            Option<time::OffsetDateTime>,
            Option<time::OffsetDateTime>,
        );
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, status, operation_code, components, queue_expires_at, not_before \
             FROM tasks WHERE rack_id = $1 AND status = ANY($2) ORDER BY created_at, id",
        )
        .bind(rack.as_uuid())
        .bind(open_statuses())
        .fetch_all(&mut *self.tx)
        .await?;
        let mut tasks = RackTasks::default();
        for (id, status, operation, components, expires, not_before) in rows {
            tasks.open.push(OpenTask {
                id: TaskId(id),
                status: task_status(&status, id)?,
                footprint: rows::footprint(id, &operation, components),
                expires_ms: expires.map(rows::ms),
                not_before_ms: not_before.map(rows::ms),
            });
        }
        Ok(tasks)
    }

    /// The components of `state`'s plan that are not `ready`, by name (for
    /// its readiness gate).
    pub async fn not_ready(&mut self, state: &TaskState) -> Result<Vec<NotReady>, StoreError> {
        let names: Vec<&str> = state
            .plan
            .components
            .values()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT name, status FROM components WHERE rack_id = $1 AND name = ANY($2) \
             AND status <> $3 ORDER BY name",
        )
        .bind(state.rack.as_uuid())
        .bind(&names)
        .bind(ComponentStatus::Ready.as_str())
        .fetch_all(&mut *self.tx)
        .await?;
        rows.into_iter()
            .map(|(component, status)| {
                let status =
                    status
                        .parse()
                        .map_err(|e: UnknownComponentStatus| StoreError::Corrupt {
                            what: format!("component {component} of rack {}", state.rack),
                            reason: e.to_string(),
                        })?;
                Ok(NotReady { component, status })
            })
            .collect()
    }

    /// Records that these components of `rack` now run `version`.
    pub async fn record_firmware(
        &mut self,
        rack: RackId,
        components: &[String],
        version: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE components SET firmware_version = $3, updated_at = now() \
             WHERE rack_id = $1 AND name = ANY($2)",
        )
        .bind(rack.as_uuid())
        .bind(components)
        .bind(version)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Stores a new task in the state its submission left it, with its
    /// steps.
    pub async fn insert(&mut self, new: &NewTask, state: &TaskState) -> Result<(), StoreError> {
        let encode = |e: serde_json::Error| StoreError::Corrupt {
            what: format!("new task {}", state.id),
            reason: e.to_string(),
        };
        let plan = &state.plan;
        sqlx::query(
            "INSERT INTO tasks (id, request_id, rack_id, rack_name, operation_type, operation_code, \
             status, rule_id, rule_revision, rule_source, rule_name, rule_snapshot, components, \
             firmware, current_stage, message, cancel_requested_at, started_at, finished_at, \
             queue_expires_at, description, readiness_wait_ms, readiness_until, not_before, \
             not_after, schedule_id, run_id, event_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
             $12, $13, $14, $15, $16, CASE WHEN $17 THEN now() END, $18, $19, $20, $21, $22, $23, \
             $24, $25, $26, $27, $28)",
        )
        .bind(state.id.as_uuid())
        .bind(&new.request_id)
        .bind(state.rack.as_uuid())
        .bind(&new.rack_name)
        .bind(plan.operation.operation_type().as_str())
        .bind(plan.operation.as_str())
        .bind(state.status.as_str())
        .bind(new.rule.rule_id.map(|r| r.as_uuid()))
        .bind(new.rule.revision.map(int))
        .bind(new.rule.source.as_str())
        .bind(&new.rule.name)
        .bind(&new.rule.definition)
        .bind(serde_json::to_value(&plan.components).map_err(encode)?)
        .bind(serde_json::to_value(&plan.firmware).map_err(encode)?)
        .bind(state.current_stage.map(int))
        .bind(&state.message)
        .bind(state.cancel_requested)
        .bind(state.started_ms.map(at))
        .bind(state.finished_ms.map(at))
        .bind(state.queue_expires_ms.map(at))
        .bind(&new.description)
        .bind(plan.readiness_wait_ms.map(big))
        .bind(state.readiness_until_ms.map(at))
        .bind(plan.window.not_before_ms.map(at))
        .bind(plan.window.not_after_ms.map(at))
        .bind(match new.origin {
            Origin::Schedule(s) => Some(s.as_uuid()),
            _ => None,
        })
        .bind(match new.origin {
            Origin::Run(r) => Some(r.as_uuid()),
            _ => None,
        })
        .bind(match new.origin {
            Origin::Event(e) => Some(e.as_uuid()),
            _ => None,
        })
        .execute(&mut *self.tx)
        .await?;
        for step in &state.steps {
            sqlx::query(
                "INSERT INTO task_steps (task_id, step_index, stage, component_type, status, \
                 generation, components, budget_ms, deadline, started_at, finished_at, error, \
                 results, calls) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
            )
            .bind(state.id.as_uuid())
            .bind(int(step.step_index))
            .bind(int(step.stage))
            .bind(step.component_type.as_str())
            .bind(step.status.as_str())
            .bind(int(step.generation))
            .bind(int(step.components))
            .bind(big(step.budget_ms))
            .bind(step.deadline_ms.map(at))
            .bind(step.started_ms.map(at))
            .bind(step.finished_ms.map(at))
            .bind(&step.error)
            .bind(serde_json::to_value(&step.results).map_err(encode)?)
            .bind(big(step.calls))
            .execute(&mut *self.tx)
            .await?;
        }
        Ok(())
    }

    /// Loads a task and its steps, locking its row until the transaction
    /// ends (`None`: no such task).
    pub async fn lock(&mut self, task: TaskId) -> Result<Option<TaskState>, StoreError> {
        let row: Option<TaskRow> = sqlx::query_as(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE id = $1 FOR UPDATE"
        ))
        .bind(task.as_uuid())
        .fetch_optional(&mut *self.tx)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let steps = self.steps(task).await?;
        row.into_state(steps).map(Some)
    }

    async fn steps(&mut self, task: TaskId) -> Result<Vec<StepRow>, StoreError> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            step_columns!(),
            " FROM task_steps WHERE task_id = $1 ORDER BY step_index"
        ))
        .bind(task.as_uuid())
        .fetch_all(&mut *self.tx)
        .await?)
    }

    /// Saves what a transition changed, as a compare-and-set: the task row
    /// if its status, stage, message, cancel request or times changed
    /// (where its status is still `before`'s), each step that changed (where
    /// its status and generation are still `before`'s). The row lock taken
    /// by [`TaskTx::lock`] keeps the other columns as loaded; a row whose
    /// status moved underneath is an error, never overwritten.
    pub async fn save(&mut self, before: &TaskState, after: &TaskState) -> Result<(), StoreError> {
        let moved = |what: String| StoreError::Conflict(format!("{what} changed underneath"));
        if task_row_changed(before, after) {
            let n = sqlx::query(
                "UPDATE tasks SET status = $3, current_stage = $4, message = $5, \
                 cancel_requested_at = CASE WHEN $6 THEN COALESCE(cancel_requested_at, now()) END, \
                 started_at = $7, finished_at = $8, queue_expires_at = $9, readiness_until = $10, \
                 updated_at = now() WHERE id = $1 AND status = $2",
            )
            .bind(after.id.as_uuid())
            .bind(before.status.as_str())
            .bind(after.status.as_str())
            .bind(after.current_stage.map(int))
            .bind(&after.message)
            .bind(after.cancel_requested)
            .bind(after.started_ms.map(at))
            .bind(after.finished_ms.map(at))
            .bind(after.queue_expires_ms.map(at))
            .bind(after.readiness_until_ms.map(at))
            .execute(&mut *self.tx)
            .await?
            .rows_affected();
            if n != 1 {
                return Err(moved(format!("task {}", after.id)));
            }
        }
        for (old, new) in before.steps.iter().zip(&after.steps) {
            if old == new {
                continue;
            }
            let results = serde_json::to_value(&new.results).map_err(|e| StoreError::Corrupt {
                what: format!("results of step {} of task {}", new.step_index, after.id),
                reason: e.to_string(),
            })?;
            let n = sqlx::query(
                "UPDATE task_steps SET status = $5, generation = $6, deadline = $7, started_at = $8, \
                 finished_at = $9, error = $10, results = $11, calls = $12 \
                 WHERE task_id = $1 AND step_index = $2 AND status = $3 AND generation = $4",
            )
            .bind(after.id.as_uuid())
            .bind(int(new.step_index))
            .bind(old.status.as_str())
            .bind(int(old.generation))
            .bind(new.status.as_str())
            .bind(int(new.generation))
            .bind(new.deadline_ms.map(at))
            .bind(new.started_ms.map(at))
            .bind(new.finished_ms.map(at))
            .bind(&new.error)
            .bind(results)
            .bind(big(new.calls))
            .execute(&mut *self.tx)
            .await?
            .rows_affected();
            if n != 1 {
                return Err(moved(format!(
                    "step {} of task {}",
                    new.step_index, after.id
                )));
            }
        }
        Ok(())
    }

    /// Writes the effects that are messages (jobs, events, cancel marks) to
    /// the outbox, in order, in one statement; the publisher sends them
    /// once the transaction commits. Other effects are the caller's.
    pub async fn outbox(&mut self, effects: &[Effect]) -> Result<(), StoreError> {
        let messages = effects
            .iter()
            .filter_map(OutboxMessage::of)
            .collect::<Result<Vec<_>, _>>()?;
        outbox::insert(&mut self.tx, &messages).await
    }

    /// Commits.
    pub async fn commit(self) -> Result<(), StoreError> {
        self.tx.commit().await?;
        Ok(())
    }
}

fn task_row_changed(before: &TaskState, after: &TaskState) -> bool {
    before.status != after.status
        || before.current_stage != after.current_stage
        || before.message != after.message
        || before.cancel_requested != after.cancel_requested
        || before.started_ms != after.started_ms
        || before.finished_ms != after.finished_ms
        || before.queue_expires_ms != after.queue_expires_ms
        || before.readiness_until_ms != after.readiness_until_ms
}

impl Store {
    /// Tasks their readiness gate holds.
    pub async fn held_by_readiness(&self) -> Result<Vec<TaskId>, StoreError> {
        let ids: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM tasks WHERE readiness_until IS NOT NULL ORDER BY readiness_until",
        )
        .fetch_all(self.pool())
        .await?;
        Ok(ids.into_iter().map(TaskId).collect())
    }

    /// Running steps past their deadline (by the database's clock): task,
    /// step and the generation found overdue.
    pub async fn overdue_steps(&self) -> Result<Vec<(TaskId, u32, u32)>, StoreError> {
        let rows: Vec<(Uuid, i32, i32)> = sqlx::query_as(
            "SELECT task_id, step_index, generation FROM task_steps \
             WHERE status = $1 AND deadline < now() ORDER BY deadline",
        )
        .bind(StepStatus::Running.as_str())
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(t, s, g)| {
                (
                    TaskId(t),
                    u32::try_from(s).unwrap_or(0),
                    u32::try_from(g).unwrap_or(0),
                )
            })
            .collect())
    }

    /// Racks with waiting tasks (for the queue sweep).
    pub async fn racks_with_waiting(&self) -> Result<Vec<RackId>, StoreError> {
        let racks: Vec<Uuid> =
            sqlx::query_scalar("SELECT DISTINCT rack_id FROM tasks WHERE status = $1")
                .bind(TaskStatus::Waiting.as_str())
                .fetch_all(self.pool())
                .await?;
        Ok(racks.into_iter().map(RackId).collect())
    }
}
