//! What a task transaction has saved but not yet written: task and step
//! rows, written together in two statements (one for every task row, one
//! for every step row) before the transaction reads anything or commits.
//! Each row is written as a compare-and-set on what it was when loaded; a
//! row that moved underneath fails the whole write.

use flow_decisions::lifecycle::{StepState, TaskState};
use sqlx::PgConnection;
use time::OffsetDateTime;
use uuid::Uuid;

use super::rows::{at, big, int};
use crate::StoreError;

/// Task and step rows to write.
#[derive(Debug, Default)]
pub(super) struct Pending {
    tasks: Vec<TaskUpdate>,
    steps: Vec<StepUpdate>,
}

#[derive(Debug)]
struct TaskUpdate {
    id: Uuid,
    before_status: &'static str,
    status: &'static str,
    current_stage: Option<i32>,
    message: String,
    cancel_requested: bool,
    started: Option<OffsetDateTime>,
    finished: Option<OffsetDateTime>,
    queue_expires: Option<OffsetDateTime>,
    readiness_until: Option<OffsetDateTime>,
}

#[derive(Debug)]
struct StepUpdate {
    task: Uuid,
    step_index: i32,
    before_status: &'static str,
    before_generation: i32,
    status: &'static str,
    generation: i32,
    deadline: Option<OffsetDateTime>,
    started: Option<OffsetDateTime>,
    finished: Option<OffsetDateTime>,
    error: Option<String>,
    results: serde_json::Value,
    calls: i64,
}

impl Pending {
    /// Whether a row of `task` waits to be written.
    pub(super) fn has(&self, task: flow_protocol::TaskId) -> bool {
        let id = task.as_uuid();
        self.tasks.iter().any(|t| t.id == id) || self.steps.iter().any(|s| s.task == id)
    }

    /// Whether nothing waits to be written.
    pub(super) fn is_empty(&self) -> bool {
        self.tasks.is_empty() && self.steps.is_empty()
    }

    /// Adds what a transition changed: the task row if its status, stage,
    /// message, cancel request or times changed, each step that changed.
    pub(super) fn add(&mut self, before: &TaskState, after: &TaskState) -> Result<(), StoreError> {
        if task_row_changed(before, after) {
            self.tasks.push(TaskUpdate {
                id: after.id.as_uuid(),
                before_status: before.status.as_str(),
                status: after.status.as_str(),
                current_stage: after.current_stage.map(int),
                message: after.message.clone(),
                cancel_requested: after.cancel_requested,
                started: after.started_ms.map(at),
                finished: after.finished_ms.map(at),
                queue_expires: after.queue_expires_ms.map(at),
                readiness_until: after.readiness_until_ms.map(at),
            });
        }
        for (old, new) in before.steps.iter().zip(&after.steps) {
            if old != new {
                self.steps.push(step_update(after, old, new)?);
            }
        }
        Ok(())
    }

    /// Writes everything, two statements at most, and empties itself.
    pub(super) async fn write(&mut self, conn: &mut PgConnection) -> Result<(), StoreError> {
        let tasks = std::mem::take(&mut self.tasks);
        let steps = std::mem::take(&mut self.steps);
        if !tasks.is_empty() {
            write_tasks(conn, &tasks).await?;
        }
        if !steps.is_empty() {
            write_steps(conn, &steps).await?;
        }
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

fn step_update(
    task: &TaskState,
    old: &StepState,
    new: &StepState,
) -> Result<StepUpdate, StoreError> {
    let results = serde_json::to_value(&new.results).map_err(|e| StoreError::Corrupt {
        what: format!("results of step {} of task {}", new.step_index, task.id),
        reason: e.to_string(),
    })?;
    Ok(StepUpdate {
        task: task.id.as_uuid(),
        step_index: int(new.step_index),
        before_status: old.status.as_str(),
        before_generation: int(old.generation),
        status: new.status.as_str(),
        generation: int(new.generation),
        deadline: new.deadline_ms.map(at),
        started: new.started_ms.map(at),
        finished: new.finished_ms.map(at),
        error: new.error.clone(),
        results,
        calls: big(new.calls),
    })
}

/// A compare-and-set that did not find every row as loaded.
fn moved(what: String) -> StoreError {
    StoreError::Conflict(format!("{what} changed underneath"))
}

async fn write_tasks(conn: &mut PgConnection, tasks: &[TaskUpdate]) -> Result<(), StoreError> {
    let col = |f: fn(&TaskUpdate) -> Option<OffsetDateTime>| -> Vec<Option<OffsetDateTime>> {
        tasks.iter().map(f).collect()
    };
    let n = sqlx::query(
        "UPDATE tasks t SET status = u.status, current_stage = u.current_stage, message = u.message, \
         cancel_requested_at = CASE WHEN u.cancel THEN COALESCE(t.cancel_requested_at, now()) END, \
         started_at = u.started_at, finished_at = u.finished_at, queue_expires_at = u.queue_expires_at, \
         readiness_until = u.readiness_until, updated_at = now() \
         FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::int4[], $5::text[], $6::bool[], \
                     $7::timestamptz[], $8::timestamptz[], $9::timestamptz[], $10::timestamptz[]) \
           AS u(id, before_status, status, current_stage, message, cancel, started_at, finished_at, \
                queue_expires_at, readiness_until) \
         WHERE t.id = u.id AND t.status = u.before_status",
    )
    .bind(tasks.iter().map(|t| t.id).collect::<Vec<_>>())
    .bind(tasks.iter().map(|t| t.before_status).collect::<Vec<_>>())
    .bind(tasks.iter().map(|t| t.status).collect::<Vec<_>>())
    .bind(tasks.iter().map(|t| t.current_stage).collect::<Vec<_>>())
    .bind(tasks.iter().map(|t| t.message.as_str()).collect::<Vec<_>>())
    .bind(tasks.iter().map(|t| t.cancel_requested).collect::<Vec<_>>())
    .bind(col(|t| t.started))
    .bind(col(|t| t.finished))
    .bind(col(|t| t.queue_expires))
    .bind(col(|t| t.readiness_until))
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if n != tasks.len() as u64 {
        let ids: Vec<String> = tasks.iter().map(|t| format!("task {}", t.id)).collect();
        return Err(moved(ids.join(" or ")));
    }
    // A finished task's commands wait for no power domain any more.
    let finished: Vec<_> = tasks
        .iter()
        .filter(|t| t.finished.is_some())
        .map(|t| t.id)
        .collect();
    if !finished.is_empty() {
        sqlx::query("DELETE FROM power_waits WHERE task_id = ANY($1)")
            .bind(finished)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

async fn write_steps(conn: &mut PgConnection, steps: &[StepUpdate]) -> Result<(), StoreError> {
    let col = |f: fn(&StepUpdate) -> Option<OffsetDateTime>| -> Vec<Option<OffsetDateTime>> {
        steps.iter().map(f).collect()
    };
    let n = sqlx::query(
        "UPDATE task_steps s SET status = u.status, generation = u.generation, deadline = u.deadline, \
         started_at = u.started_at, finished_at = u.finished_at, error = u.error, results = u.results, \
         calls = u.calls \
         FROM UNNEST($1::uuid[], $2::int4[], $3::text[], $4::int4[], $5::text[], $6::int4[], \
                     $7::timestamptz[], $8::timestamptz[], $9::timestamptz[], $10::text[], \
                     $11::jsonb[], $12::int8[]) \
           AS u(task_id, step_index, before_status, before_generation, status, generation, deadline, \
                started_at, finished_at, error, results, calls) \
         WHERE s.task_id = u.task_id AND s.step_index = u.step_index \
           AND s.status = u.before_status AND s.generation = u.before_generation",
    )
    .bind(steps.iter().map(|s| s.task).collect::<Vec<_>>())
    .bind(steps.iter().map(|s| s.step_index).collect::<Vec<_>>())
    .bind(steps.iter().map(|s| s.before_status).collect::<Vec<_>>())
    .bind(steps.iter().map(|s| s.before_generation).collect::<Vec<_>>())
    .bind(steps.iter().map(|s| s.status).collect::<Vec<_>>())
    .bind(steps.iter().map(|s| s.generation).collect::<Vec<_>>())
    .bind(col(|s| s.deadline))
    .bind(col(|s| s.started))
    .bind(col(|s| s.finished))
    .bind(steps.iter().map(|s| s.error.as_deref()).collect::<Vec<_>>())
    .bind(steps.iter().map(|s| &s.results).collect::<Vec<_>>())
    .bind(steps.iter().map(|s| s.calls).collect::<Vec<_>>())
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if n != steps.len() as u64 {
        let which: Vec<String> = steps
            .iter()
            .map(|s| format!("step {} of task {}", s.step_index, s.task))
            .collect();
        return Err(moved(which.join(" or ")));
    }
    Ok(())
}
