//! Phased rollouts ("runs") and their targets: persistence only. What a
//! run does next is `flow_decisions::rollout`'s; this module stores runs and
//! targets, reads a target's task status with it, and hands schedulers the
//! runs to advance under row locks (`FOR NO KEY UPDATE SKIP LOCKED`: one
//! scheduler at a time acts on a run, and none waits for another). The
//! lock is `NO KEY UPDATE`, not `UPDATE`, because a task submitted while it
//! is held references the run (`tasks.run_id`): the foreign key's check
//! takes a key-share lock, which `FOR UPDATE` would block until the
//! holder — waiting for that very submission — commits.

use flow_protocol::api::TaskSubmit;
use flow_protocol::run::{
    Gate, GateState, Ordering, PhaseCounts, PhasePolicy, RetryPolicy, RunReason, RunRecord,
    RunStatus, RunTargetRecord, TargetStatus,
};
use flow_protocol::schedule::MaintenanceWindow;
use flow_protocol::task::timestamp::{from_ms, to_ms};
use flow_protocol::{RackId, RunId, TaskId, TaskStatus};
use serde_json::Value;
use sqlx::{Postgres, Transaction};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Store, StoreError};

/// A run as the scheduler works with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Its ID.
    pub id: RunId,
    /// Its unique name.
    pub name: String,
    /// What it is for.
    pub description: String,
    /// The task request each target's task is made from.
    pub task: TaskSubmit,
    /// Where it is.
    pub status: RunStatus,
    /// Why it is paused.
    pub reason: RunReason,
    /// The current phase (0-based).
    pub phase: usize,
    /// How many phases.
    pub phase_count: usize,
    /// How the racks were cut.
    pub phase_policy: PhasePolicy,
    /// At most this many tasks open at once.
    pub max_concurrent: usize,
    /// Its gates.
    pub gates: Vec<Gate>,
    /// Whether it advances by itself.
    pub auto_advance: bool,
    /// The order, with its seed.
    pub ordering: Ordering,
    /// Its maintenance windows.
    pub windows: Vec<MaintenanceWindow>,
    /// Their zone.
    pub timezone: String,
    /// Conflict retries.
    pub retry: RetryPolicy,
    /// The last gate that tripped.
    pub gate: Option<GateState>,
    /// Failures accepted by resumes (current phase, run).
    pub accepted: (usize, usize),
    /// When it was created.
    pub created_at: OffsetDateTime,
    /// When it last changed.
    pub updated_at: OffsetDateTime,
    /// When it ended.
    pub finished_at: Option<OffsetDateTime>,
}

/// One target of a run, with its task's status.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The rack.
    pub rack_id: RackId,
    /// Its name.
    pub rack: String,
    /// Its phase (0-based).
    pub phase: usize,
    /// Its place in the order (0-based).
    pub seq: usize,
    /// Where it is.
    pub status: TargetStatus,
    /// Its task, once submitted.
    pub task_id: Option<TaskId>,
    /// The task's status and message, read with the target.
    pub task: Option<(TaskStatus, String)>,
    /// Submissions tried.
    pub attempts: u32,
    /// The last refusal or the task's message.
    pub message: String,
    /// When a conflict first blocked it (epoch ms).
    pub first_blocked_ms: Option<i64>,
    /// Its next try when blocked (epoch ms).
    pub next_attempt_ms: Option<i64>,
}

impl Target {
    /// The record the API shows.
    pub fn record(&self) -> RunTargetRecord {
        RunTargetRecord {
            rack: self.rack.clone(),
            phase: u32::try_from(self.phase + 1).unwrap_or(u32::MAX),
            seq: u32::try_from(self.seq + 1).unwrap_or(u32::MAX),
            status: self.status,
            task_id: self.task_id,
            attempts: self.attempts,
            message: self.message.clone(),
            next_attempt_at: self.next_attempt_ms.map(time_of),
        }
    }
}

fn time_of(ms: i64) -> OffsetDateTime {
    from_ms(u64::try_from(ms).unwrap_or(0))
}

fn ms_of(t: OffsetDateTime) -> i64 {
    i64::try_from(to_ms(t)).unwrap_or(i64::MAX)
}

impl Run {
    /// The record the API shows, with each phase's counts from `targets`.
    pub fn record(&self, targets: &[Target]) -> RunRecord {
        let mut phases = vec![PhaseCounts::default(); self.phase_count];
        for t in targets {
            let Some(p) = phases.get_mut(t.phase) else {
                continue;
            };
            p.planned += 1;
            match t.status {
                TargetStatus::Pending | TargetStatus::Blocked => p.pending += 1,
                TargetStatus::Submitted => p.running += 1,
                TargetStatus::Completed => p.completed += 1,
                TargetStatus::Failed | TargetStatus::Terminated => p.failed += 1,
                TargetStatus::Skipped => p.skipped += 1,
            }
        }
        RunRecord {
            id: self.id,
            name: self.name.clone(),
            description: self.description.clone(),
            task: self.task.clone(),
            status: self.status,
            reason: self.reason,
            phase: u32::try_from(self.phase + 1).unwrap_or(u32::MAX),
            phases,
            phase_policy: self.phase_policy.clone(),
            max_concurrent: u32::try_from(self.max_concurrent).unwrap_or(u32::MAX),
            gates: self.gates.clone(),
            auto_advance: self.auto_advance,
            ordering: self.ordering.clone(),
            windows: self.windows.clone(),
            timezone: self.timezone.clone(),
            retry: self.retry,
            gate: self.gate.clone(),
            accepted: [self.accepted.0, self.accepted.1],
            created_at: self.created_at,
            updated_at: self.updated_at,
            finished_at: self.finished_at,
        }
    }
}

macro_rules! run_columns {
    () => {
        "id, name, description, request, status, reason, phase, phase_count, phase_policy, \
         max_concurrent, gates, auto_advance, ordering, windows, timezone, retry, gate_state, \
         accepted_phase, accepted_run, created_at, updated_at, finished_at"
    };
}

macro_rules! target_columns {
    () => {
        "t.rack_id, t.rack_name, t.phase, t.seq, t.status, t.task_id, t.attempts, t.message, \
         t.first_blocked_at, t.next_attempt_at, k.status AS task_status, k.message AS task_message"
    };
}

#[derive(sqlx::FromRow)]
struct RunRow {
    id: Uuid,
    name: String,
    description: String,
    request: Value,
    status: String,
    reason: String,
    phase: i32,
    phase_count: i32,
    phase_policy: Value,
    max_concurrent: i32,
    gates: Value,
    auto_advance: bool,
    ordering: Value,
    windows: Value,
    timezone: String,
    retry: Value,
    gate_state: Option<Value>,
    accepted_phase: i32,
    accepted_run: i32,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
    finished_at: Option<OffsetDateTime>,
}

fn corrupt(run: Uuid, part: &str, e: impl ToString) -> StoreError {
    StoreError::Corrupt {
        what: format!("{part} of run {run}"),
        reason: e.to_string(),
    }
}

fn json<T: serde::de::DeserializeOwned>(run: Uuid, part: &str, v: Value) -> Result<T, StoreError> {
    serde_json::from_value(v).map_err(|e| corrupt(run, part, e))
}

fn count(v: i32) -> usize {
    usize::try_from(v).unwrap_or(0)
}

impl RunRow {
    fn into_run(self) -> Result<Run, StoreError> {
        let id = self.id;
        Ok(Run {
            id: RunId(id),
            task: json(id, "task request", self.request)?,
            status: self.status.parse().map_err(|e| corrupt(id, "status", e))?,
            reason: self.reason.parse().map_err(|e| corrupt(id, "reason", e))?,
            phase_policy: json(id, "phase policy", self.phase_policy)?,
            gates: json(id, "gates", self.gates)?,
            ordering: json(id, "ordering", self.ordering)?,
            windows: json(id, "windows", self.windows)?,
            retry: json(id, "retry policy", self.retry)?,
            gate: match self.gate_state {
                Some(v) => Some(json(id, "gate state", v)?),
                None => None,
            },
            name: self.name,
            description: self.description,
            phase: count(self.phase),
            phase_count: count(self.phase_count),
            max_concurrent: count(self.max_concurrent),
            auto_advance: self.auto_advance,
            timezone: self.timezone,
            accepted: (count(self.accepted_phase), count(self.accepted_run)),
            created_at: self.created_at,
            updated_at: self.updated_at,
            finished_at: self.finished_at,
        })
    }
}

#[derive(sqlx::FromRow)]
struct TargetRow {
    rack_id: Uuid,
    rack_name: String,
    phase: i32,
    seq: i32,
    status: String,
    task_id: Option<Uuid>,
    attempts: i32,
    message: String,
    first_blocked_at: Option<OffsetDateTime>,
    next_attempt_at: Option<OffsetDateTime>,
    task_status: Option<String>,
    task_message: Option<String>,
}

impl TargetRow {
    fn into_target(self, run: RunId) -> Result<Target, StoreError> {
        let task = match (self.task_status, self.task_message) {
            (Some(s), m) => Some((
                s.parse()
                    .map_err(|e: flow_protocol::status::UnknownStatus| {
                        corrupt(run.as_uuid(), "a target's task status", e)
                    })?,
                m.unwrap_or_default(),
            )),
            _ => None,
        };
        Ok(Target {
            rack_id: RackId(self.rack_id),
            rack: self.rack_name,
            phase: count(self.phase),
            seq: count(self.seq),
            status: self
                .status
                .parse()
                .map_err(|e| corrupt(run.as_uuid(), "a target's status", e))?,
            task_id: self.task_id.map(TaskId),
            task,
            attempts: u32::try_from(self.attempts).unwrap_or(0),
            message: self.message,
            first_blocked_ms: self.first_blocked_at.map(ms_of),
            next_attempt_ms: self.next_attempt_at.map(ms_of),
        })
    }
}

fn encode<T: serde::Serialize>(what: &str, v: &T) -> Result<Value, StoreError> {
    serde_json::to_value(v).map_err(|e| StoreError::Corrupt {
        what: what.to_owned(),
        reason: e.to_string(),
    })
}

fn int(v: usize) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// One transaction over runs; dropped without [`RunTx::commit`], it rolls
/// back (and lets go of the runs it locked).
pub struct RunTx {
    tx: Transaction<'static, Postgres>,
    now_ms: i64,
    /// The request whose audit record the commit carries.
    audit: Option<std::sync::Arc<crate::audit::AuditScope>>,
}

impl Store {
    /// Stores a new run and its targets `(rack, name, phase, seq)`.
    pub async fn insert_run(
        &self,
        run: &Run,
        targets: &[(RackId, String, usize, usize)],
    ) -> Result<RunRecord, StoreError> {
        let mut tx = self.pool().begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO runs (id, name, description, request, status, reason, phase, \
             phase_count, phase_policy, max_concurrent, gates, auto_advance, ordering, windows, \
             timezone, retry, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
             $12, $13, $14, $15, $16, $17)",
        )
        .bind(run.id.as_uuid())
        .bind(&run.name)
        .bind(&run.description)
        .bind(encode("task request", &run.task)?)
        .bind(run.status.as_str())
        .bind(run.reason.as_str())
        .bind(int(run.phase))
        .bind(int(run.phase_count))
        .bind(encode("phase policy", &run.phase_policy)?)
        .bind(int(run.max_concurrent))
        .bind(encode("gates", &run.gates)?)
        .bind(run.auto_advance)
        .bind(encode("ordering", &run.ordering)?)
        .bind(encode("windows", &run.windows)?)
        .bind(&run.timezone)
        .bind(encode("retry policy", &run.retry)?)
        .bind(self.verified_actor())
        .execute(&mut *tx)
        .await;
        if let Err(e) = inserted {
            return Err(match StoreError::unique_violation(&e) {
                Some(_) => {
                    StoreError::Conflict(format!("a run named {:?} already exists", run.name))
                }
                None => StoreError::Database(e),
            });
        }
        let racks: Vec<Uuid> = targets.iter().map(|t| t.0.as_uuid()).collect();
        let names: Vec<&str> = targets.iter().map(|t| t.1.as_str()).collect();
        let phases: Vec<i32> = targets.iter().map(|t| int(t.2)).collect();
        let seqs: Vec<i32> = targets.iter().map(|t| int(t.3)).collect();
        sqlx::query(
            "INSERT INTO run_targets (run_id, rack_id, rack_name, phase, seq, status) \
             SELECT $1, * , 'pending' FROM UNNEST($2::uuid[], $3::text[], $4::int[], $5::int[])",
        )
        .bind(run.id.as_uuid())
        .bind(&racks)
        .bind(&names)
        .bind(&phases)
        .bind(&seqs)
        .execute(&mut *tx)
        .await?;
        self.commit(tx).await?;
        self.run_record(&run.id.to_string()).await
    }

    /// A run by ID or name, with its phases' counts.
    pub async fn run_record(&self, reference: &str) -> Result<RunRecord, StoreError> {
        let mut tx = self.begin_runs().await?;
        let run = tx.find(reference, false).await?;
        let targets = tx.targets(run.id).await?;
        Ok(run.record(&targets))
    }

    /// Runs, newest first.
    pub async fn runs(&self, limit: u32) -> Result<Vec<RunRecord>, StoreError> {
        let ids: Vec<Uuid> =
            sqlx::query_scalar("SELECT id FROM runs ORDER BY created_at DESC, id LIMIT $1")
                .bind(i64::from(limit))
                .fetch_all(self.pool())
                .await?;
        let mut out = Vec::new();
        for id in ids {
            out.push(self.run_record(&id.to_string()).await?);
        }
        Ok(out)
    }

    /// A run's targets (of one phase, 0-based), by phase then order.
    pub async fn run_targets(
        &self,
        reference: &str,
        phase: Option<usize>,
    ) -> Result<Vec<RunTargetRecord>, StoreError> {
        let mut tx = self.begin_runs().await?;
        let run = tx.find(reference, false).await?;
        Ok(tx
            .targets(run.id)
            .await?
            .iter()
            .filter(|t| phase.is_none_or(|p| t.phase == p))
            .map(Target::record)
            .collect())
    }

    /// Begins a transaction over runs, with the database's time.
    pub async fn begin_runs(&self) -> Result<RunTx, StoreError> {
        let mut tx = self.pool().begin().await?;
        let now: OffsetDateTime = sqlx::query_scalar("SELECT now()")
            .fetch_one(&mut *tx)
            .await?;
        Ok(RunTx {
            tx,
            now_ms: ms_of(now),
            audit: self.audit_scope().cloned(),
        })
    }
}

impl RunTx {
    /// The database's time when the transaction began (epoch ms).
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// Locks up to `limit` runs that have not ended (pending, running or
    /// paused: a paused run's open tasks still finish, and its targets must
    /// say so) that no other transaction holds, the least recently saved
    /// first (every look saves its run, so more than a batch of open runs
    /// take turns).
    pub async fn claim_active(&mut self, limit: i64) -> Result<Vec<RunId>, StoreError> {
        let ids: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM runs WHERE status IN ('pending', 'running', 'paused') \
             ORDER BY updated_at LIMIT $1 FOR NO KEY UPDATE SKIP LOCKED",
        )
        .bind(limit)
        .fetch_all(&mut *self.tx)
        .await?;
        Ok(ids.into_iter().map(RunId).collect())
    }

    /// A run by ID or name; with `lock`, its row is locked until the
    /// transaction ends (waiting for a scheduler that holds it).
    pub async fn find(&mut self, reference: &str, lock: bool) -> Result<Run, StoreError> {
        let by_id: Uuid = reference.parse().unwrap_or(Uuid::nil());
        let row: Option<RunRow> = if lock {
            sqlx::query_as(concat!(
                "SELECT ",
                run_columns!(),
                " FROM runs WHERE id = $1 OR name = $2 ORDER BY (id = $1) DESC LIMIT 1 FOR NO KEY UPDATE"
            ))
            .bind(by_id)
            .bind(reference)
            .fetch_optional(&mut *self.tx)
            .await?
        } else {
            sqlx::query_as(concat!(
                "SELECT ",
                run_columns!(),
                " FROM runs WHERE id = $1 OR name = $2 ORDER BY (id = $1) DESC LIMIT 1"
            ))
            .bind(by_id)
            .bind(reference)
            .fetch_optional(&mut *self.tx)
            .await?
        };
        row.ok_or_else(|| {
            StoreError::NotFound(format!("run {reference:?} not found (by ID or name)"))
        })?
        .into_run()
    }

    /// The run's targets with their tasks' statuses, by phase then order.
    pub async fn targets(&mut self, run: RunId) -> Result<Vec<Target>, StoreError> {
        let rows: Vec<TargetRow> = sqlx::query_as(concat!(
            "SELECT ",
            target_columns!(),
            " FROM run_targets t LEFT JOIN tasks k ON k.id = t.task_id \
             WHERE t.run_id = $1 ORDER BY t.phase, t.seq"
        ))
        .bind(run.as_uuid())
        .fetch_all(&mut *self.tx)
        .await?;
        rows.into_iter().map(|r| r.into_target(run)).collect()
    }

    /// Saves the run's status, reason, phase, gate state and accepted
    /// failures.
    pub async fn save_run(&mut self, run: &Run) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE runs SET status = $2, reason = $3, phase = $4, gate_state = $5, \
             accepted_phase = $6, accepted_run = $7, updated_at = now(), \
             finished_at = CASE WHEN $8 THEN coalesce(finished_at, now()) END WHERE id = $1",
        )
        .bind(run.id.as_uuid())
        .bind(run.status.as_str())
        .bind(run.reason.as_str())
        .bind(int(run.phase))
        .bind(match &run.gate {
            Some(g) => Some(encode("gate state", g)?),
            None => None,
        })
        .bind(int(run.accepted.0))
        .bind(int(run.accepted.1))
        .bind(run.status.is_final())
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Saves a target's status, task, attempts, message and retry times.
    pub async fn save_target(&mut self, run: RunId, t: &Target) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE run_targets SET status = $3, task_id = $4, attempts = $5, message = $6, \
             first_blocked_at = $7, next_attempt_at = $8 WHERE run_id = $1 AND rack_id = $2",
        )
        .bind(run.as_uuid())
        .bind(t.rack_id.as_uuid())
        .bind(t.status.as_str())
        .bind(t.task_id.map(|id| id.as_uuid()))
        .bind(i32::try_from(t.attempts).unwrap_or(i32::MAX))
        .bind(&t.message)
        .bind(t.first_blocked_ms.map(time_of))
        .bind(t.next_attempt_ms.map(time_of))
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Commits.
    pub async fn commit(self) -> Result<(), StoreError> {
        crate::audit::commit(self.audit.as_deref(), self.tx).await
    }
}
