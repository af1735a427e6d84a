//! Figures for the scheduler's metrics, read from the database: task counts
//! by status, the outbox backlog, overdue steps, and the timing of a step
//! (and of its stage, once the stage is over) after its result is applied.

use std::collections::BTreeMap;

use flow_protocol::{StageStatus, StepStatus, TaskId, TaskStatus};
use flow_rules::ComponentType;

use crate::{Store, StoreError};

/// Gauges refreshed periodically.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gauges {
    /// Tasks by status; statuses with no task are absent.
    pub tasks: BTreeMap<TaskStatus, i64>,
    /// Outbox messages not yet published.
    pub outbox_pending: i64,
    /// Running steps past their deadline (the deadline sweeper fails them
    /// within a second; more than zero for long means it is not running).
    pub steps_overdue: i64,
    /// Open tasks by status with no progress (the task or one of its steps
    /// changed) for [`STUCK_AFTER_MINUTES`]; statuses with none are absent.
    pub stuck: BTreeMap<TaskStatus, i64>,
    /// Running tasks past their whole budget (started + every step's
    /// budget).
    pub over_budget: i64,
    /// Runs paused by a safety gate, waiting for an operator.
    pub runs_gate_paused: i64,
    /// Leak events whose first action has not started
    /// [`LEAK_ACT_WITHIN_SECONDS`] after the event arrived.
    pub leaks_unacted: i64,
}

/// How soon a leak's first action must have started.
pub const LEAK_ACT_WITHIN_SECONDS: i64 = 30;

/// How long an open task may go without progress before it counts as stuck.
pub const STUCK_AFTER_MINUTES: i64 = 15;

/// Where and how long a finished step ran.
#[derive(Debug, Clone, PartialEq)]
pub struct StepTiming {
    /// The rack's name.
    pub rack: String,
    /// The step's stage.
    pub stage: u32,
    /// The step's component type.
    pub component_type: ComponentType,
    /// The step's status.
    pub status: StepStatus,
    /// From the step's start (its jobs queued) to its result applied, when
    /// both are known.
    pub seconds: Option<f64>,
    /// Set when this step's result closed its stage: the stage's status and
    /// its length from the first step start to the last step end.
    pub stage_finished: Option<(StageStatus, f64)>,
}

fn corrupt(what: &str, e: impl ToString) -> StoreError {
    StoreError::Corrupt {
        what: what.to_owned(),
        reason: e.to_string(),
    }
}

fn names(statuses: &[StepStatus]) -> Vec<&'static str> {
    statuses.iter().map(|s| s.as_str()).collect()
}

impl Store {
    /// The gauges: one round trip.
    pub async fn gauges(&self) -> Result<Gauges, StoreError> {
        let (counts, outbox_pending, steps_overdue): (
            sqlx::types::Json<BTreeMap<String, i64>>,
            i64,
            i64,
        ) = sqlx::query_as(
            "SELECT \
                   (SELECT COALESCE(jsonb_object_agg(status, n), '{}'::jsonb) FROM \
                      (SELECT status, count(*) AS n FROM tasks GROUP BY status) q), \
                   (SELECT count(*) FROM outbox WHERE published_at IS NULL), \
                   (SELECT count(*) FROM task_steps WHERE status = $1 AND deadline < now())",
        )
        .bind(StepStatus::Running.as_str())
        .fetch_one(self.pool())
        .await?;
        let tasks = counts
            .0
            .into_iter()
            .map(|(status, n)| Ok((status.parse().map_err(|e| corrupt("task counts", e))?, n)))
            .collect::<Result<_, StoreError>>()?;
        let rows: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT t.status, \
               count(*) FILTER (WHERE greatest(t.updated_at, s.last) \
                                < now() - make_interval(mins => $1::int)), \
               count(*) FILTER (WHERE t.status = 'running' AND t.started_at \
                                + make_interval(secs => s.budget_ms / 1000.0) < now()) \
             FROM tasks t LEFT JOIN LATERAL ( \
               SELECT max(greatest(started_at, finished_at)) AS last, \
                      COALESCE(sum(budget_ms) FILTER (WHERE status <> 'skipped'), 0) AS budget_ms \
               FROM task_steps WHERE task_id = t.id) s ON true \
             WHERE t.status IN ('pending', 'waiting', 'running') GROUP BY t.status",
        )
        .bind(i32::try_from(STUCK_AFTER_MINUTES).unwrap_or(i32::MAX))
        .fetch_all(self.pool())
        .await?;
        let mut stuck = BTreeMap::new();
        let mut over_budget = 0;
        for (status, n, over) in rows {
            let status: TaskStatus = status.parse().map_err(|e| corrupt("stuck tasks", e))?;
            if n > 0 {
                stuck.insert(status, n);
            }
            over_budget += over;
        }
        let runs_gate_paused: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM runs WHERE status = 'paused' AND reason = 'safety_gate'",
        )
        .fetch_one(self.pool())
        .await?;
        let leaks_unacted: i64 = sqlx::query_scalar(
            "SELECT count(DISTINCT e.id) FROM hardware_events e \
             JOIN event_executions x ON x.event_id = e.id AND x.position = 0 \
             WHERE e.event_type = 'hardware.leak.detected' AND x.status = 'pending' \
               AND e.received_at < now() - make_interval(secs => $1::float8)",
        )
        .bind(LEAK_ACT_WITHIN_SECONDS as f64)
        .fetch_one(self.pool())
        .await?;
        Ok(Gauges {
            tasks,
            outbox_pending,
            steps_overdue,
            stuck,
            over_budget,
            runs_gate_paused,
            leaks_unacted,
        })
    }

    /// Steps' timings, read after their results were applied: one round
    /// trip for all, `None` for a step that does not exist, in the order
    /// asked. The stage is reported by exactly one step: the last one to
    /// finish (by finish time, then index) among those that completed or
    /// failed, once no step of the stage is open, so that two schedulers
    /// applying the last two results of a stage do not both count it.
    pub async fn step_timings(
        &self,
        steps: &[(TaskId, u32)],
    ) -> Result<Vec<Option<StepTiming>>, StoreError> {
        type Row = (
            i64,
            String,
            i32,
            String,
            String,
            Option<f64>,
            bool,
            Option<f64>,
            Vec<String>,
        );
        if steps.is_empty() {
            return Ok(Vec::new());
        }
        let tasks: Vec<uuid::Uuid> = steps.iter().map(|(t, _)| t.as_uuid()).collect();
        let indexes: Vec<i32> = steps
            .iter()
            .map(|(_, i)| i32::try_from(*i).unwrap_or(-1))
            .collect();
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT k.ord, t.rack_name, s.stage, s.component_type, s.status, \
               EXTRACT(EPOCH FROM (s.finished_at - s.started_at))::float8, \
               NOT EXISTS (SELECT 1 FROM task_steps o WHERE o.task_id = s.task_id AND o.stage = s.stage \
                   AND (o.status = ANY($3) \
                        OR (o.step_index <> s.step_index AND o.status = ANY($4) \
                            AND (o.finished_at, o.step_index) > (s.finished_at, s.step_index)))), \
               (SELECT EXTRACT(EPOCH FROM (max(o.finished_at) - min(o.started_at)))::float8 \
                  FROM task_steps o WHERE o.task_id = s.task_id AND o.stage = s.stage AND o.started_at IS NOT NULL), \
               (SELECT COALESCE(array_agg(o.status), '{}') \
                  FROM task_steps o WHERE o.task_id = s.task_id AND o.stage = s.stage) \
             FROM unnest($1::uuid[], $2::int4[]) WITH ORDINALITY AS k(task_id, step_index, ord) \
             JOIN task_steps s ON s.task_id = k.task_id AND s.step_index = k.step_index \
             JOIN tasks t ON t.id = s.task_id",
        )
        .bind(&tasks)
        .bind(&indexes)
        .bind(names(&[StepStatus::Pending, StepStatus::Running]))
        .bind(names(&[StepStatus::Completed, StepStatus::Failed]))
        .fetch_all(self.pool())
        .await?;
        let mut timings: Vec<Option<StepTiming>> = vec![None; steps.len()];
        for (ord, rack, stage, component_type, status, seconds, last, stage_seconds, stage_steps) in
            rows
        {
            // WITH ORDINALITY counts from 1.
            let Some(i) = usize::try_from(ord - 1).ok().filter(|i| *i < steps.len()) else {
                continue;
            };
            let (task, step_index) = steps[i];
            let what = format!("step {step_index} of task {task}");
            let status: StepStatus = status.parse().map_err(|e| corrupt(&what, e))?;
            let stage_steps = stage_steps
                .iter()
                .map(|s| s.parse::<StepStatus>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| corrupt(&what, e))?;
            timings[i] = Some(StepTiming {
                rack,
                stage: u32::try_from(stage).unwrap_or(0),
                component_type: component_type
                    .parse()
                    .map_err(|e: flow_rules::UnknownComponentType| corrupt(&what, e))?,
                status,
                seconds,
                stage_finished: match (status.is_finished() && last, stage_seconds) {
                    (true, Some(s)) => Some((StageStatus::of(stage_steps), s)),
                    _ => None,
                },
            });
        }
        Ok(timings)
    }
}
