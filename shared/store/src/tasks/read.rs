//! What the API shows of tasks: one task with its steps, recent tasks, and
//! counts by status.

use std::collections::BTreeMap;

use flow_protocol::TaskId;
use flow_protocol::task::{TaskCounts, TaskListReply, TaskRecord};

use super::rows::{StepRow, SummaryRow, TaskRow, step_columns, task_columns};
use crate::{Store, StoreError};

impl Store {
    /// A task with its steps.
    pub async fn task_record(&self, task: TaskId) -> Result<TaskRecord, StoreError> {
        // One snapshot for the task and its steps: a transition committed
        // between the two reads would otherwise show half of it.
        let mut tx = self.pool().begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let row: Option<TaskRow> = sqlx::query_as(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE id = $1"
        ))
        .bind(task.as_uuid())
        .fetch_optional(&mut *tx)
        .await?;
        let row = row.ok_or_else(|| StoreError::NotFound(format!("task {task} not found")))?;
        let steps: Vec<StepRow> = sqlx::query_as(concat!(
            "SELECT ",
            step_columns!(),
            " FROM task_steps WHERE task_id = $1 ORDER BY stage, step_index"
        ))
        .bind(task.as_uuid())
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        row.into_record(steps)
    }

    /// Recent tasks, newest first.
    pub async fn list_tasks(&self, limit: i64) -> Result<TaskListReply, StoreError> {
        let rows: Vec<SummaryRow> = sqlx::query_as(
            "SELECT id, rack_name, operation_code, status, current_stage, message, description, \
             created_at, finished_at FROM tasks ORDER BY created_at DESC, id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok(TaskListReply {
            tasks: rows
                .into_iter()
                .map(SummaryRow::into_summary)
                .collect::<Result<_, _>>()?,
        })
    }

    /// How many tasks have each status.
    pub async fn task_counts(&self) -> Result<TaskCounts, StoreError> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT status, count(*) FROM tasks GROUP BY status")
                .fetch_all(self.pool())
                .await?;
        let mut by_status = BTreeMap::new();
        for (status, n) in rows {
            let status = status
                .parse()
                .map_err(
                    |e: flow_protocol::status::UnknownStatus| StoreError::Corrupt {
                        what: "task counts".into(),
                        reason: e.to_string(),
                    },
                )?;
            by_status.insert(status, u64::try_from(n).unwrap_or(0));
        }
        Ok(TaskCounts { by_status })
    }
}
