//! A finished task's detail out to the archive: read with everything
//! `task.get` showed, then — once the archive holds it — its steps
//! removed and a summary kept on the task row.

use std::collections::HashMap;

use flow_protocol::TaskId;
use flow_protocol::history::{ArchivedDetail, ArchivedFailure, SUMMARY_FAILURES};
use flow_protocol::status::ComponentOutcome;
use flow_protocol::task::TaskRecord;
use serde_json::{Value, json};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::tasks::rows::{StepRow, TaskRow, step_columns, task_columns};
use crate::{Store, StoreError};

/// The archive line's format for a task.
pub const TASK_LINE_FORMAT: u32 = 1;

/// A finished task ready to be archived.
#[derive(Debug, Clone)]
pub struct ArchivableTask {
    /// The task.
    pub id: TaskId,
    /// When it ended.
    pub finished_at: OffsetDateTime,
    /// Its archive line: `{"format": 1, "task": <as task.get showed it,
    /// with its steps>, "components": <its targets by type>, "firmware":
    /// <its images>}`.
    pub line: Value,
    /// What its summary will say (the time and segment are set when it is
    /// marked).
    pub summary: ArchivedDetail,
}

#[derive(sqlx::FromRow)]
struct StepOf {
    task_id: Uuid,
    #[sqlx(flatten)]
    step: StepRow,
}

/// Where a task's summary starts: counts and the first failures of its steps.
pub fn summarize(record: &TaskRecord, submitted_by: Option<String>) -> ArchivedDetail {
    let mut summary = ArchivedDetail {
        at: OffsetDateTime::UNIX_EPOCH,
        segment: String::new(),
        submitted_by,
        steps: u32::try_from(record.steps.len()).unwrap_or(u32::MAX),
        components: 0,
        failed: 0,
        calls: 0,
        failures: Vec::new(),
    };
    for step in &record.steps {
        summary.calls += step.calls;
        for (component, result) in &step.results {
            summary.components += 1;
            if result.status != ComponentOutcome::Done {
                summary.failed += 1;
                if summary.failures.len() < SUMMARY_FAILURES {
                    summary.failures.push(ArchivedFailure {
                        step_index: step.step_index,
                        component_type: step.component_type,
                        component: component.clone(),
                        status: result.status,
                        error: result.error.clone(),
                    });
                }
            }
        }
    }
    summary
}

impl Store {
    /// Finished tasks (completed, failed, terminated) that ended before
    /// `before` and whose detail is not archived, oldest first, at most
    /// `limit`, each with its archive line and summary. An open task is
    /// never among them.
    pub async fn tasks_to_archive(
        &self,
        before: OffsetDateTime,
        limit: i64,
    ) -> Result<Vec<ArchivableTask>, StoreError> {
        let mut tx = self.pool().begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let rows: Vec<TaskRow> = sqlx::query_as(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE archived IS NULL AND finished_at IS NOT NULL AND finished_at < $1 \
             AND status IN ('completed', 'failed', 'terminated') \
             ORDER BY finished_at, id LIMIT $2"
        ))
        .bind(before)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
        let steps: Vec<StepOf> = sqlx::query_as(concat!(
            "SELECT task_id, ",
            step_columns!(),
            " FROM task_steps WHERE task_id = ANY($1) ORDER BY task_id, stage, step_index"
        ))
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?;
        // Who submitted each: the first audit record naming it.
        let submitters: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT DISTINCT ON (t) t, actor FROM audit_log, unnest(task_ids) AS t \
             WHERE task_ids && $1 AND t = ANY($1) AND kind = 'change' ORDER BY t, id",
        )
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let mut submitters: HashMap<Uuid, String> = submitters.into_iter().collect();
        let mut by_task: HashMap<Uuid, Vec<StepRow>> = HashMap::new();
        for s in steps {
            by_task.entry(s.task_id).or_default().push(s.step);
        }
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let id = row.id;
            let components = row.components.clone();
            let firmware = row.firmware.clone();
            let finished_at = row.finished_at.unwrap_or(OffsetDateTime::UNIX_EPOCH);
            let record = row.into_record(by_task.remove(&id).unwrap_or_default())?;
            let summary = summarize(&record, submitters.remove(&id));
            let line = json!({
                "format": TASK_LINE_FORMAT,
                "task": record,
                "components": components,
                "firmware": firmware,
            });
            out.push(ArchivableTask {
                id: TaskId(id),
                finished_at,
                line,
                summary,
            });
        }
        Ok(out)
    }

    /// Marks `tasks` archived in `segment` with their summaries and
    /// removes their steps and their targets (`components`: every
    /// component's BMC address, most of a task row; the archive line keeps
    /// them), in one transaction with an audit record of it.
    /// A task that is no longer finished-and-unarchived is left alone.
    /// Returns the tasks marked.
    pub async fn mark_tasks_archived(
        &self,
        segment: &str,
        tasks: &[ArchivableTask],
        reason: String,
    ) -> Result<Vec<TaskId>, StoreError> {
        let at = OffsetDateTime::now_utc();
        let mut ids = Vec::with_capacity(tasks.len());
        let mut details = Vec::with_capacity(tasks.len());
        for t in tasks {
            let mut summary = t.summary.clone();
            summary.at = at;
            summary.segment = segment.to_owned();
            ids.push(t.id.as_uuid());
            details.push(
                serde_json::to_value(&summary).map_err(|e| StoreError::Corrupt {
                    what: format!("summary of task {}", t.id),
                    reason: e.to_string(),
                })?,
            );
        }
        let mut tx = self.pool().begin().await?;
        let marked: Vec<Uuid> = sqlx::query_scalar(
            "UPDATE tasks t SET archived = v.detail, components = '{}'::jsonb \
             FROM unnest($1::uuid[], $2::jsonb[]) AS v(id, detail) \
             WHERE t.id = v.id AND t.archived IS NULL \
             AND t.status IN ('completed', 'failed', 'terminated') RETURNING t.id",
        )
        .bind(&ids)
        .bind(&details)
        .fetch_all(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM task_steps WHERE task_id = ANY($1)")
            .bind(&marked)
            .execute(&mut *tx)
            .await?;
        let mut entry = super::expire_entry(
            segment,
            json!({"kind": "tasks", "segment": segment, "tasks": marked.len()}),
            reason,
        );
        entry.task_ids = marked.iter().copied().map(TaskId).collect();
        let message = format!(
            "archived the detail of {} finished tasks to segment {segment} and removed their steps",
            marked.len()
        );
        crate::audit::insert(
            &mut tx,
            &entry,
            flow_protocol::audit::AuditOutcome::Ok,
            &message,
        )
        .await?;
        tx.commit().await?;
        Ok(marked.into_iter().map(TaskId).collect())
    }
}
