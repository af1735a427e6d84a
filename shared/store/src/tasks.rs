//! Tasks: creation with the conflict check under a per-rack lock, result
//! application (idempotent, one transaction), stage advancement, deadlines,
//! and the outbox that publishes jobs only after the state that justifies
//! them is committed.

use std::collections::BTreeMap;

use flow_protocol::api::{ResolveReply, RuleSource};
use flow_protocol::jobs::{
    ComponentTarget, FirmwareImage, JobId, JobMessage, ResultMessage, StepJob, StepOutcome,
    job_subject,
};
use flow_protocol::{RackId, TaskId};
use flow_rules::{ComponentType, OperationCode, RuleDefinition};
use serde_json::{Value, json};
use sqlx::PgConnection;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Store, StoreError};

/// A step as planned, for insertion.
#[derive(Debug, Clone)]
pub struct NewStep {
    /// Index in the rule snapshot.
    pub step_index: u32,
    /// Stage number.
    pub stage: u32,
    /// Component type.
    pub component_type: ComponentType,
    /// Components of the step (0 = skipped).
    pub components: u32,
    /// Execution budget.
    pub budget_ms: u64,
}

/// A task ready to be stored.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// The request's idempotency key.
    pub request_id: String,
    /// The rack.
    pub rack_id: RackId,
    /// Its name.
    pub rack_name: String,
    /// The operation.
    pub operation: OperationCode,
    /// How the rule was resolved (with its canonical definition).
    pub rule: ResolveReply,
    /// The targeted components.
    pub components: Vec<ComponentTarget>,
    /// Firmware images by type.
    pub firmware: BTreeMap<ComponentType, FirmwareImage>,
    /// The plan's steps.
    pub steps: Vec<NewStep>,
    /// Wait this long for a busy rack instead of being refused.
    pub queue_timeout: Option<std::time::Duration>,
}

/// Most tasks that may wait for one rack (reference `execution.md` §2.7).
pub const MAX_WAITING_PER_RACK: i64 = 5;

/// The result of a submission for one rack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// A new task.
    Created(TaskId),
    /// The same request was already submitted: its task.
    Duplicate(TaskId),
    /// The rack is busy: the task waits (FIFO) until it is free.
    Queued(TaskId),
}

/// What applying a result did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Stale or repeated result: nothing changed.
    Ignored,
    /// The step was recorded; the task goes on.
    Recorded,
    /// The task reached a final status (steps still running were told to
    /// stop through a cancel mark on the outbox).
    Finished {
        /// The final status.
        status: &'static str,
    },
}

fn source_str(s: RuleSource) -> &'static str {
    match s {
        RuleSource::Explicit => "explicit",
        RuleSource::RackAssociation => "rack_association",
        RuleSource::Default => "default",
        RuleSource::Builtin => "builtin",
    }
}

fn now_ms() -> u64 {
    u64::try_from(OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

/// Queues a task event for `flow.events.task.<task>` in the same
/// transaction as the change it reports (so events are never lost and never
/// report a change that was rolled back).
async fn event(
    conn: &mut PgConnection,
    task: TaskId,
    msg_id: String,
    body: Value,
) -> Result<(), StoreError> {
    let mut body = body;
    body["schema"] = json!(1);
    body["task_id"] = json!(task);
    body["at_ms"] = json!(now_ms());
    sqlx::query("INSERT INTO outbox (subject, msg_id, payload) VALUES ($1, $2, $3)")
        .bind(flow_protocol::jobs::event_subject(task))
        .bind(format!("event/{task}/{msg_id}"))
        .bind(body)
        .execute(conn)
        .await?;
    Ok(())
}

/// Queues the task's cancel mark (`cancel.<task>` in the job-state bucket,
/// which workers watch) in the same transaction as the change that makes
/// it necessary: the outbox publishes it until the server has it, so a
/// cancel survives a NATS outage instead of being lost with a failed put.
async fn cancel_mark(conn: &mut PgConnection, task: TaskId) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO outbox (subject, msg_id, payload) VALUES ($1, $2, $3)")
        .bind(flow_protocol::jobs::cancel_mark_subject(task))
        .bind(format!("cancel/{task}"))
        .bind(json!({"schema": 1, "task_id": task, "at_ms": now_ms()}))
        .execute(conn)
        .await?;
    Ok(())
}

async fn lock_rack(conn: &mut PgConnection, rack: RackId) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('flow.rack/' || $1::text))")
        .bind(rack.as_uuid())
        .execute(conn)
        .await?;
    Ok(())
}

/// Queues the jobs of the task's next stage with runnable steps after
/// `after_stage` (or the first), marking them running. Returns false when no
/// stage is left.
async fn start_next_stage(
    conn: &mut PgConnection,
    task: TaskId,
    after_stage: Option<i32>,
) -> Result<bool, StoreError> {
    let next: Option<i32> = sqlx::query_scalar(
        "SELECT min(stage) FROM task_steps WHERE task_id = $1 AND status = 'pending' \
         AND ($2::int IS NULL OR stage > $2)",
    )
    .bind(task.as_uuid())
    .bind(after_stage)
    .fetch_one(&mut *conn)
    .await?;
    let Some(stage) = next else {
        return Ok(false);
    };
    let (operation, snapshot, components, firmware): (String, Value, Value, Value) =
        sqlx::query_as(
            "SELECT operation_code, rule_snapshot, components, firmware FROM tasks WHERE id = $1",
        )
        .bind(task.as_uuid())
        .fetch_one(&mut *conn)
        .await?;
    let corrupt = |reason: String| StoreError::Corrupt {
        what: format!("task {task}"),
        reason,
    };
    let operation: OperationCode = operation
        .parse()
        .map_err(|e: flow_rules::InvalidOperation| corrupt(e.to_string()))?;
    let rule = RuleDefinition::from_value(&snapshot).map_err(|e| corrupt(e.to_string()))?;
    let components: Vec<ComponentTarget> =
        serde_json::from_value(components).map_err(|e| corrupt(e.to_string()))?;
    let firmware: BTreeMap<ComponentType, FirmwareImage> =
        serde_json::from_value(firmware).map_err(|e| corrupt(e.to_string()))?;
    let mut all: BTreeMap<ComponentType, Vec<ComponentTarget>> = BTreeMap::new();
    for c in &components {
        all.entry(c.component_type).or_default().push(c.clone());
    }
    let steps: Vec<(i32, i64, i32)> = sqlx::query_as(
        "UPDATE task_steps SET status = 'running', generation = generation + 1, started_at = now(), \
         deadline = now() + budget_ms * interval '1 millisecond' \
         WHERE task_id = $1 AND stage = $2 AND status = 'pending' RETURNING step_index, budget_ms, generation",
    )
    .bind(task.as_uuid())
    .bind(stage)
    .fetch_all(&mut *conn)
    .await?;
    sqlx::query("UPDATE tasks SET current_stage = $2, updated_at = now() WHERE id = $1")
        .bind(task.as_uuid())
        .bind(stage)
        .execute(&mut *conn)
        .await?;
    event(
        conn,
        task,
        format!("stage/{stage}"),
        json!({"kind": "stage_started", "stage": stage, "steps": steps.iter().map(|s| s.0).collect::<Vec<_>>()}),
    )
    .await?;
    for (step_index, budget_ms, generation) in steps {
        let step = rule
            .steps
            .get(usize::try_from(step_index).unwrap_or(usize::MAX))
            .cloned()
            .ok_or_else(|| corrupt(format!("no step {step_index} in the snapshot")))?;
        let id = JobId {
            task,
            step_index: u32::try_from(step_index).unwrap_or(0),
            generation: u32::try_from(generation).unwrap_or(0),
        };
        let message = JobMessage {
            schema: 1,
            id,
            stage: u32::try_from(stage).unwrap_or(0),
            deadline_ms: now_ms().saturating_add(u64::try_from(budget_ms).unwrap_or(0)),
            job: StepJob {
                operation,
                components: all.get(&step.component_type).cloned().unwrap_or_default(),
                all_components: all.clone(),
                firmware: firmware.clone(),
                step,
            },
        };
        let subject = job_subject(message.job.step.component_type);
        sqlx::query("INSERT INTO outbox (subject, msg_id, payload) VALUES ($1, $2, $3)")
            .bind(subject)
            .bind(format!("job/{id}"))
            .bind(serde_json::to_value(&message).map_err(|e| corrupt(e.to_string()))?)
            .execute(&mut *conn)
            .await?;
    }
    Ok(true)
}

/// Finishes a task, cancels its open steps, and promotes the oldest task
/// waiting for the same rack (expiring the ones whose time has passed).
/// Returns whether steps were still open (their cancel mark is then on the
/// outbox).
async fn finish_task(
    conn: &mut PgConnection,
    task: TaskId,
    status: &'static str,
    message: &str,
) -> Result<bool, StoreError> {
    let cancel = finish_one(conn, task, status, message).await?;
    let rack: Option<Uuid> = sqlx::query_scalar("SELECT rack_id FROM tasks WHERE id = $1")
        .bind(task.as_uuid())
        .fetch_optional(&mut *conn)
        .await?;
    if let Some(rack) = rack {
        promote_waiting(conn, RackId(rack)).await?;
    }
    Ok(cancel)
}

/// Expires waiting tasks of a rack past their time, then starts the oldest
/// waiting one (FIFO) if the rack is free.
async fn promote_waiting(conn: &mut PgConnection, rack: RackId) -> Result<(), StoreError> {
    lock_rack(conn, rack).await?;
    sqlx::query(
        "UPDATE tasks SET status = 'failed', message = 'expired while queued: the rack stayed busy', \
         finished_at = now(), updated_at = now() WHERE rack_id = $1 AND status = 'waiting' \
         AND queue_expires_at < now()",
    )
    .bind(rack.as_uuid())
    .execute(&mut *conn)
    .await?;
    let busy: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE rack_id = $1 AND status IN ('pending', 'running')",
    )
    .bind(rack.as_uuid())
    .fetch_one(&mut *conn)
    .await?;
    if busy > 0 {
        return Ok(());
    }
    let next: Option<Uuid> = sqlx::query_scalar(
        "SELECT id FROM tasks WHERE rack_id = $1 AND status = 'waiting' ORDER BY created_at, id LIMIT 1",
    )
    .bind(rack.as_uuid())
    .fetch_optional(&mut *conn)
    .await?;
    let Some(next) = next else { return Ok(()) };
    let next = TaskId(next);
    sqlx::query(
        "UPDATE tasks SET status = 'running', started_at = now(), updated_at = now() WHERE id = $1 AND status = 'waiting'",
    )
    .bind(next.as_uuid())
    .execute(&mut *conn)
    .await?;
    if !start_next_stage(conn, next, None).await? {
        finish_one(conn, next, "failed", "nothing to do").await?;
    }
    Ok(())
}

async fn finish_one(
    conn: &mut PgConnection,
    task: TaskId,
    status: &'static str,
    message: &str,
) -> Result<bool, StoreError> {
    let n = sqlx::query(
        "UPDATE tasks SET status = $2, message = $3, finished_at = now(), updated_at = now() \
         WHERE id = $1 AND status IN ('pending', 'running')",
    )
    .bind(task.as_uuid())
    .bind(status)
    .bind(message)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    let cancelled = sqlx::query(
        "UPDATE task_steps SET status = 'cancelled', finished_at = now() \
         WHERE task_id = $1 AND status IN ('pending', 'running')",
    )
    .bind(task.as_uuid())
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if n > 0 {
        event(
            conn,
            task,
            "finished".to_owned(),
            json!({"kind": "task_finished", "status": status, "message": message}),
        )
        .await?;
    }
    let cancel = n > 0 && cancelled > 0;
    if cancel {
        cancel_mark(conn, task).await?;
    }
    Ok(cancel)
}

impl Store {
    /// Stores a planned task and queues its first stage, unless the rack
    /// already has an unfinished task (`Conflict`). A repeated request ID
    /// returns the existing task.
    pub async fn create_task(&self, task: &NewTask) -> Result<Submitted, StoreError> {
        let mut tx = self.pool().begin().await?;
        lock_rack(&mut tx, task.rack_id).await?;
        let existing: Option<Uuid> =
            sqlx::query_scalar("SELECT id FROM tasks WHERE request_id = $1 AND rack_id = $2")
                .bind(&task.request_id)
                .bind(task.rack_id.as_uuid())
                .fetch_optional(&mut *tx)
                .await?;
        if let Some(id) = existing {
            return Ok(Submitted::Duplicate(TaskId(id)));
        }
        let busy: Option<(Uuid, String, String)> = sqlx::query_as(
            "SELECT id, status, operation_code FROM tasks WHERE rack_id = $1 \
             AND status IN ('waiting', 'pending', 'running') ORDER BY created_at LIMIT 1",
        )
        .bind(task.rack_id.as_uuid())
        .fetch_optional(&mut *tx)
        .await?;
        let waiting = match (busy, task.queue_timeout) {
            (None, _) => None,
            (Some((id, status, op)), None) => {
                return Err(StoreError::Conflict(format!(
                    "rack {} already has task {id} ({op}, {status}); wait for it, cancel it, or submit with the queue strategy",
                    task.rack_name
                )));
            }
            (Some(_), Some(timeout)) => {
                let queued: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM tasks WHERE rack_id = $1 AND status = 'waiting'",
                )
                .bind(task.rack_id.as_uuid())
                .fetch_one(&mut *tx)
                .await?;
                if queued >= MAX_WAITING_PER_RACK {
                    return Err(StoreError::Conflict(format!(
                        "rack {} already has {queued} queued tasks (at most {MAX_WAITING_PER_RACK})",
                        task.rack_name
                    )));
                }
                Some(timeout)
            }
        };
        let id = TaskId::new();
        let corrupt = |e: serde_json::Error| StoreError::Corrupt {
            what: "new task".into(),
            reason: e.to_string(),
        };
        sqlx::query(
            "INSERT INTO tasks (id, request_id, rack_id, rack_name, operation_type, operation_code, \
             status, rule_id, rule_revision, rule_source, rule_name, rule_snapshot, components, firmware, \
             started_at, queue_expires_at) VALUES ($1, $2, $3, $4, $5, $6, $14, $7, $8, $9, $10, $11, $12, $13, \
             CASE WHEN $14 = 'running' THEN now() END, now() + $15 * interval '1 millisecond')",
        )
        .bind(id.as_uuid())
        .bind(&task.request_id)
        .bind(task.rack_id.as_uuid())
        .bind(&task.rack_name)
        .bind(task.operation.operation_type().as_str())
        .bind(task.operation.as_str())
        .bind(task.rule.rule_id.map(|r| r.as_uuid()))
        .bind(task.rule.revision.map(|r| i32::try_from(r).unwrap_or(i32::MAX)))
        .bind(source_str(task.rule.source))
        .bind(&task.rule.name)
        .bind(&task.rule.definition)
        .bind(serde_json::to_value(&task.components).map_err(corrupt)?)
        .bind(serde_json::to_value(&task.firmware).map_err(corrupt)?)
        .bind(if waiting.is_some() { "waiting" } else { "running" })
        .bind(waiting.map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX)))
        .execute(&mut *tx)
        .await?;
        for s in &task.steps {
            sqlx::query(
                "INSERT INTO task_steps (task_id, step_index, stage, component_type, status, components, budget_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(id.as_uuid())
            .bind(i32::try_from(s.step_index).unwrap_or(i32::MAX))
            .bind(i32::try_from(s.stage).unwrap_or(i32::MAX))
            .bind(s.component_type.as_str())
            .bind(if s.components == 0 { "skipped" } else { "pending" })
            .bind(i32::try_from(s.components).unwrap_or(i32::MAX))
            .bind(i64::try_from(s.budget_ms).unwrap_or(i64::MAX))
            .execute(&mut *tx)
            .await?;
        }
        if waiting.is_some() {
            tx.commit().await?;
            return Ok(Submitted::Queued(id));
        }
        if !start_next_stage(&mut tx, id, None).await? {
            finish_task(&mut tx, id, "failed", "nothing to do").await?;
        }
        tx.commit().await?;
        Ok(Submitted::Created(id))
    }

    /// Applies a worker's result: idempotent (a repeated or stale result
    /// changes nothing) and transactional; the next stage's jobs enter the
    /// outbox in the same transaction.
    pub async fn apply_result(&self, result: &ResultMessage) -> Result<Applied, StoreError> {
        let task = result.id.task;
        let mut tx = self.pool().begin().await?;
        let status: Option<String> =
            sqlx::query_scalar("SELECT status FROM tasks WHERE id = $1 FOR UPDATE")
                .bind(task.as_uuid())
                .fetch_optional(&mut *tx)
                .await?;
        if status.as_deref() != Some("running") {
            return Ok(Applied::Ignored);
        }
        let step: Option<(i32, String, i32)> = sqlx::query_as(
            "SELECT stage, status, generation FROM task_steps WHERE task_id = $1 AND step_index = $2",
        )
        .bind(task.as_uuid())
        .bind(i32::try_from(result.id.step_index).unwrap_or(-1))
        .fetch_optional(&mut *tx)
        .await?;
        let Some((stage, step_status, generation)) = step else {
            return Ok(Applied::Ignored);
        };
        if step_status != "running" || u32::try_from(generation).ok() != Some(result.id.generation)
        {
            return Ok(Applied::Ignored);
        }
        let (new_status, error) = match &result.outcome {
            StepOutcome::Completed => ("completed", None),
            StepOutcome::Failed { action, message } => {
                ("failed", Some(format!("{action}: {message}")))
            }
            StepOutcome::Cancelled => ("cancelled", Some("cancelled".to_owned())),
        };
        sqlx::query(
            "UPDATE task_steps SET status = $3, error = $4, results = $5, calls = $6, finished_at = now() \
             WHERE task_id = $1 AND step_index = $2",
        )
        .bind(task.as_uuid())
        .bind(i32::try_from(result.id.step_index).unwrap_or(-1))
        .bind(new_status)
        .bind(&error)
        .bind(json!(result.components))
        .bind(i64::try_from(result.calls).unwrap_or(i64::MAX))
        .execute(&mut *tx)
        .await?;
        event(
            &mut tx,
            task,
            format!("step/{}.{}", result.id.step_index, result.id.generation),
            json!({"kind": "step_finished", "stage": stage, "step_index": result.id.step_index,
                   "status": new_status, "error": error, "calls": result.calls}),
        )
        .await?;
        let applied = match &result.outcome {
            StepOutcome::Failed { .. } => {
                let message = format!(
                    "stage {stage} failed: step {} failed: {}",
                    result.id.step_index,
                    error.unwrap_or_default()
                );
                finish_task(&mut tx, task, "failed", &message).await?;
                Applied::Finished { status: "failed" }
            }
            StepOutcome::Cancelled => {
                finish_task(&mut tx, task, "terminated", "cancelled").await?;
                Applied::Finished {
                    status: "terminated",
                }
            }
            StepOutcome::Completed => {
                let open: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM task_steps WHERE task_id = $1 AND stage = $2 AND status = 'running'",
                )
                .bind(task.as_uuid())
                .bind(stage)
                .fetch_one(&mut *tx)
                .await?;
                // The stage goes on while a sibling runs; else the next
                // stage starts, or the task is complete.
                if open > 0 || start_next_stage(&mut tx, task, Some(stage)).await? {
                    Applied::Recorded
                } else {
                    finish_task(&mut tx, task, "completed", "").await?;
                    Applied::Finished {
                        status: "completed",
                    }
                }
            }
        };
        tx.commit().await?;
        Ok(applied)
    }

    /// Fails every running step past its deadline, and its task, and queues
    /// the task's cancel mark (the step may still be running on a worker).
    /// Returns the tasks failed.
    pub async fn fail_overdue_steps(&self) -> Result<Vec<TaskId>, StoreError> {
        let overdue: Vec<(Uuid, i32, i64)> = sqlx::query_as(
            "SELECT task_id, step_index, budget_ms FROM task_steps WHERE status = 'running' AND deadline < now()",
        )
        .fetch_all(self.pool())
        .await?;
        let mut failed = Vec::new();
        for (task, step_index, budget_ms) in overdue {
            let mut tx = self.pool().begin().await?;
            let locked: Option<String> =
                sqlx::query_scalar("SELECT status FROM tasks WHERE id = $1 FOR UPDATE")
                    .bind(task)
                    .fetch_optional(&mut *tx)
                    .await?;
            let message = format!(
                "step {step_index} exceeded its budget of {}",
                flow_rules::duration::format_short(std::time::Duration::from_millis(
                    u64::try_from(budget_ms).unwrap_or(0)
                ))
            );
            let n = sqlx::query(
                "UPDATE task_steps SET status = 'failed', error = $3, finished_at = now() \
                 WHERE task_id = $1 AND step_index = $2 AND status = 'running' AND deadline < now()",
            )
            .bind(task)
            .bind(step_index)
            .bind(&message)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n > 0 && locked.as_deref() == Some("running") {
                // The overdue step itself may still be running on a worker:
                // it is told to stop along with its siblings.
                if !finish_task(&mut tx, TaskId(task), "failed", &message).await? {
                    cancel_mark(&mut tx, TaskId(task)).await?;
                }
                failed.push(TaskId(task));
            }
            tx.commit().await?;
        }
        Ok(failed)
    }

    /// Whether a task can still be cancelled (it is pending or running): if
    /// so its cancel mark is queued on the outbox (workers stop its steps at
    /// their next action boundary and report `cancelled`, which terminates
    /// it). A waiting task is terminated at once.
    pub async fn cancel_task(&self, task: TaskId) -> Result<bool, StoreError> {
        let mut tx = self.pool().begin().await?;
        let status: Option<String> =
            sqlx::query_scalar("SELECT status FROM tasks WHERE id = $1 FOR UPDATE")
                .bind(task.as_uuid())
                .fetch_optional(&mut *tx)
                .await?;
        let cancelling = match status.as_deref() {
            None => return Err(StoreError::NotFound(format!("task {task} not found"))),
            Some("running" | "pending") => {
                cancel_mark(&mut tx, task).await?;
                true
            }
            Some("waiting") => {
                // Never started: terminated at once, nothing to stop.
                sqlx::query(
                    "UPDATE tasks SET status = 'terminated', message = 'cancelled while queued', \
                     finished_at = now(), updated_at = now() WHERE id = $1 AND status = 'waiting'",
                )
                .bind(task.as_uuid())
                .execute(&mut *tx)
                .await?;
                false
            }
            Some(_) => false,
        };
        tx.commit().await?;
        Ok(cancelling)
    }

    /// Expires queued tasks past their time and promotes waiting tasks of
    /// free racks (the sweeper's safety net; promotion normally happens when
    /// the task before finishes).
    pub async fn sweep_queues(&self) -> Result<(), StoreError> {
        let racks: Vec<Uuid> =
            sqlx::query_scalar("SELECT DISTINCT rack_id FROM tasks WHERE status = 'waiting'")
                .fetch_all(self.pool())
                .await?;
        for rack in racks {
            let mut tx = self.pool().begin().await?;
            promote_waiting(&mut tx, RackId(rack)).await?;
            tx.commit().await?;
        }
        Ok(())
    }

    /// Claims up to `limit` unpublished outbox messages: `(id, subject,
    /// msg_id, payload)`.
    pub async fn outbox_pending(
        &self,
        limit: i64,
    ) -> Result<Vec<(i64, String, String, Value)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT id, subject, msg_id, payload FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(self.pool())
        .await?)
    }

    /// Marks outbox messages published.
    pub async fn outbox_published(&self, ids: &[i64]) -> Result<(), StoreError> {
        sqlx::query("UPDATE outbox SET published_at = now() WHERE id = ANY($1)")
            .bind(ids)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// A task with its steps, as JSON for the API.
    pub async fn task_json(&self, task: TaskId) -> Result<Value, StoreError> {
        let row: Option<Value> = sqlx::query_scalar(
            "SELECT jsonb_build_object('id', t.id, 'request_id', t.request_id, 'rack_id', t.rack_id, \
             'rack', t.rack_name, 'operation_type', t.operation_type, 'operation', t.operation_code, \
             'status', t.status, 'rule_id', t.rule_id, 'rule_revision', t.rule_revision, \
             'rule_source', t.rule_source, 'rule_name', t.rule_name, 'rule', t.rule_snapshot, \
             'current_stage', t.current_stage, 'message', t.message, 'created_at', t.created_at, \
             'started_at', t.started_at, 'finished_at', t.finished_at, \
             'steps', COALESCE((SELECT jsonb_agg(jsonb_build_object('step_index', s.step_index, \
                'stage', s.stage, 'component_type', s.component_type, 'status', s.status, \
                'components', s.components, 'budget_ms', s.budget_ms, 'deadline', s.deadline, \
                'started_at', s.started_at, 'finished_at', s.finished_at, 'error', s.error, \
                'results', s.results, 'calls', s.calls, 'generation', s.generation) ORDER BY s.stage, s.step_index) \
                FROM task_steps s WHERE s.task_id = t.id), '[]'::jsonb)) \
             FROM tasks t WHERE t.id = $1",
        )
        .bind(task.as_uuid())
        .fetch_optional(self.pool())
        .await?;
        row.ok_or_else(|| StoreError::NotFound(format!("task {task} not found")))
    }

    /// How many tasks have each status.
    pub async fn task_counts(&self) -> Result<Value, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT COALESCE(jsonb_object_agg(status, n), '{}'::jsonb) FROM \
             (SELECT status, count(*) AS n FROM tasks GROUP BY status) q",
        )
        .fetch_one(self.pool())
        .await?)
    }

    /// Recent tasks, newest first.
    pub async fn list_tasks(&self, limit: i64) -> Result<Value, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT COALESCE(jsonb_agg(x ORDER BY x->>'created_at' DESC), '[]'::jsonb) FROM \
             (SELECT jsonb_build_object('id', id, 'rack', rack_name, 'operation', operation_code, \
              'status', status, 'current_stage', current_stage, 'message', message, \
              'created_at', created_at, 'finished_at', finished_at) AS x FROM tasks \
              ORDER BY created_at DESC LIMIT $1) q",
        )
        .bind(limit)
        .fetch_one(self.pool())
        .await?)
    }
}
