//! Schedules and their firings: persistence only. What a schedule's next
//! time is, and which window its tasks get, is decided by the caller
//! (`flow_decisions::calendar`); this module stores schedules with
//! compare-and-set on their revision, claims due ones with `FOR UPDATE SKIP
//! LOCKED` (several schedulers never make one firing twice: a firing's key
//! is its schedule and due time), and records what each firing did.

use flow_protocol::api::TaskSubmit;
use flow_protocol::schedule::{
    FiringOutcome, FiringRecord, FiringTrigger, MaintenanceWindow, Overlap, ScheduleRecord,
    ScheduleSpec,
};
use flow_protocol::{ScheduleId, TaskId, TaskStatus};

use serde_json::Value;
use sqlx::types::Json;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Store, StoreError};
use flow_protocol::task::timestamp::{from_ms as at, to_ms as ms};

/// A firing a scheduler holds: the schedule as it was when claimed and the
/// firing's key and window.
#[derive(Debug, Clone)]
pub struct Firing {
    /// The schedule.
    pub schedule: ScheduleRecord,
    /// When the firing was due: with the schedule, its identity.
    pub due: OffsetDateTime,
    /// The same in epoch ms.
    pub due_ms: i64,
    /// What started it.
    pub trigger: FiringTrigger,
    /// The window its tasks get (epoch ms), when the schedule has windows.
    pub window: Option<(i64, i64)>,
}

/// What the caller decided for a due schedule: its next time and the
/// window of this firing's tasks.
#[derive(Debug, Clone, Copy, Default)]
pub struct FiringPlan {
    /// The next time it fires (none: it is done, a fired one-time schedule).
    pub next_ms: Option<i64>,
    /// The window this firing's tasks may start in.
    pub window: Option<(i64, i64)>,
}

#[derive(sqlx::FromRow)]
struct ScheduleRow {
    id: Uuid,
    name: String,
    spec: Value,
    timezone: String,
    overlap: String,
    windows: Value,
    request: Value,
    enabled: bool,
    next_run_at: Option<OffsetDateTime>,
    last_fired_at: Option<OffsetDateTime>,
    revision: i64,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
}

macro_rules! columns {
    () => {
        "id, name, spec, timezone, overlap, windows, request, enabled, next_run_at, \
         last_fired_at, revision, created_at, updated_at"
    };
}

impl ScheduleRow {
    fn into_record(self) -> Result<ScheduleRecord, StoreError> {
        let corrupt = |part: &str, e: String| StoreError::Corrupt {
            what: format!("{part} of schedule {}", self.id),
            reason: e,
        };
        Ok(ScheduleRecord {
            id: ScheduleId(self.id),
            spec: serde_json::from_value::<ScheduleSpec>(self.spec.clone())
                .map_err(|e| corrupt("spec", e.to_string()))?,
            overlap: match self.overlap.as_str() {
                "skip" => Overlap::Skip,
                "queue" => Overlap::Queue,
                other => return Err(corrupt("overlap", format!("unknown policy {other:?}"))),
            },
            windows: serde_json::from_value::<Vec<MaintenanceWindow>>(self.windows.clone())
                .map_err(|e| corrupt("windows", e.to_string()))?,
            task: serde_json::from_value::<TaskSubmit>(self.request.clone())
                .map_err(|e| corrupt("task request", e.to_string()))?,
            name: self.name,
            timezone: self.timezone,
            enabled: self.enabled,
            next_run_at: self.next_run_at,
            last_fired_at: self.last_fired_at,
            revision: u64::try_from(self.revision).unwrap_or(0),
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

fn encode<T: serde::Serialize>(what: &str, value: &T) -> Result<Value, StoreError> {
    serde_json::to_value(value).map_err(|e| StoreError::Corrupt {
        what: what.to_owned(),
        reason: e.to_string(),
    })
}

fn name_taken(e: &sqlx::Error, name: &str) -> Option<StoreError> {
    StoreError::unique_violation(e)
        .map(|_| StoreError::Conflict(format!("a schedule named {name:?} already exists")))
}

impl Store {
    /// The database's time (epoch ms): schedules are computed against it so
    /// that schedulers on hosts with different clocks agree.
    pub async fn now_ms(&self) -> Result<i64, StoreError> {
        let now: OffsetDateTime = sqlx::query_scalar("SELECT now()")
            .fetch_one(self.pool())
            .await?;
        Ok(i64::try_from(ms(now)).unwrap_or(i64::MAX))
    }

    /// Stores a new schedule (its ID, revision and times are set here).
    pub async fn insert_schedule(
        &self,
        schedule: &ScheduleRecord,
    ) -> Result<ScheduleRecord, StoreError> {
        let mut tx = self.pool().begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO schedules (id, name, kind, spec, timezone, overlap, windows, request, \
             enabled, next_run_at, created_at, updated_at, created_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12)",
        )
        .bind(schedule.id.as_uuid())
        .bind(&schedule.name)
        .bind(schedule.spec.kind())
        .bind(encode("spec", &schedule.spec)?)
        .bind(&schedule.timezone)
        .bind(schedule.overlap.as_str())
        .bind(encode("windows", &schedule.windows)?)
        .bind(encode("task request", &schedule.task)?)
        .bind(schedule.enabled)
        .bind(schedule.next_run_at)
        .bind(schedule.created_at)
        .bind(self.verified_actor())
        .execute(&mut *tx)
        .await;
        if let Err(e) = inserted {
            return Err(name_taken(&e, &schedule.name).unwrap_or(StoreError::Database(e)));
        }
        self.commit(tx).await?;
        self.schedule(&schedule.id.to_string()).await
    }

    /// A schedule by ID or name.
    pub async fn schedule(&self, reference: &str) -> Result<ScheduleRecord, StoreError> {
        let by_id: Option<Uuid> = reference.parse().ok();
        let row: Option<ScheduleRow> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM schedules WHERE id = $1 OR name = $2 ORDER BY (id = $1) DESC \
             LIMIT 1"
        ))
        .bind(by_id.unwrap_or(Uuid::nil()))
        .bind(reference)
        .fetch_optional(self.pool())
        .await?;
        row.ok_or_else(|| {
            StoreError::NotFound(format!("schedule {reference:?} not found (by ID or name)"))
        })?
        .into_record()
    }

    /// Every schedule (or only the enabled ones), oldest first.
    pub async fn schedules(&self, enabled_only: bool) -> Result<Vec<ScheduleRecord>, StoreError> {
        let rows: Vec<ScheduleRow> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM schedules WHERE enabled OR NOT $1 ORDER BY created_at, id"
        ))
        .bind(enabled_only)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(ScheduleRow::into_record).collect()
    }

    /// Saves a changed schedule if it is still at `revision` (its revision
    /// goes up by one); a schedule changed meanwhile is a conflict and
    /// nothing is written.
    pub async fn save_schedule(
        &self,
        schedule: &ScheduleRecord,
        revision: u64,
    ) -> Result<ScheduleRecord, StoreError> {
        let mut tx = self.pool().begin().await?;
        let updated = sqlx::query(
            "UPDATE schedules SET name = $3, kind = $4, spec = $5, timezone = $6, overlap = $7, \
             windows = $8, enabled = $9, next_run_at = $10, revision = revision + 1, \
             updated_at = now() WHERE id = $1 AND revision = $2",
        )
        .bind(schedule.id.as_uuid())
        .bind(i64::try_from(revision).unwrap_or(i64::MAX))
        .bind(&schedule.name)
        .bind(schedule.spec.kind())
        .bind(encode("spec", &schedule.spec)?)
        .bind(&schedule.timezone)
        .bind(schedule.overlap.as_str())
        .bind(encode("windows", &schedule.windows)?)
        .bind(schedule.enabled)
        .bind(schedule.next_run_at)
        .execute(&mut *tx)
        .await;
        match updated {
            Err(e) => Err(name_taken(&e, &schedule.name).unwrap_or(StoreError::Database(e))),
            Ok(done) if done.rows_affected() == 0 => {
                drop(tx);
                let current = self.schedule(&schedule.id.to_string()).await?;
                Err(StoreError::Conflict(format!(
                    "schedule {:?} is at revision {}, not {revision}: it changed since it was \
                     read; get it again and repeat the change",
                    current.name, current.revision
                )))
            }
            Ok(_) => {
                self.commit(tx).await?;
                self.schedule(&schedule.id.to_string()).await
            }
        }
    }

    /// Deletes a schedule and its firings; its tasks stay (unlinked).
    pub async fn delete_schedule(&self, id: ScheduleId) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await?;
        let done = sqlx::query("DELETE FROM schedules WHERE id = $1")
            .bind(id.as_uuid())
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("schedule {id} not found")));
        }
        self.commit(tx).await?;
        Ok(())
    }

    /// Claims up to `limit` due schedules nobody else holds (`FOR UPDATE
    /// SKIP LOCKED`): for each, `decide` gives its next time and this
    /// firing's window; the firing is recorded (once: a firing already made
    /// for this due time is not made again) and the schedule moved on, all
    /// in one transaction. The caller then submits the firings' tasks and
    /// [`Store::finish_firing`]s them.
    pub async fn claim_due(
        &self,
        limit: i64,
        mut decide: impl FnMut(&ScheduleRecord, i64, i64) -> FiringPlan,
    ) -> Result<Vec<Firing>, StoreError> {
        let mut tx = self.pool().begin().await?;
        let now: OffsetDateTime = sqlx::query_scalar("SELECT now()")
            .fetch_one(&mut *tx)
            .await?;
        let now_ms = i64::try_from(ms(now)).unwrap_or(i64::MAX);
        let rows: Vec<ScheduleRow> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM schedules WHERE enabled AND next_run_at <= $1 \
             ORDER BY next_run_at LIMIT $2 FOR UPDATE SKIP LOCKED"
        ))
        .bind(now)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let mut firings = Vec::new();
        for row in rows {
            let id = row.id;
            let Some(due) = row.next_run_at else { continue };
            let schedule = match row.into_record() {
                Ok(s) => s,
                Err(error) => {
                    // Unreadable: stop it firing rather than fail every tick.
                    tracing::error!(schedule_id = %id, error = %error, "schedule unreadable; paused");
                    sqlx::query(
                        "UPDATE schedules SET enabled = false, next_run_at = NULL, \
                         revision = revision + 1, updated_at = now() WHERE id = $1",
                    )
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                    continue;
                }
            };
            let due_ms = i64::try_from(ms(due)).unwrap_or(i64::MAX);
            let plan = decide(&schedule, due_ms, now_ms);
            let made =
                insert_firing(&mut tx, id, due, FiringTrigger::Scheduled, plan.window).await?;
            sqlx::query("UPDATE schedules SET next_run_at = $2, last_fired_at = $3 WHERE id = $1")
                .bind(id)
                .bind(plan.next_ms.map(to_time))
                .bind(due)
                .execute(&mut *tx)
                .await?;
            if made {
                firings.push(Firing {
                    schedule,
                    due,
                    due_ms,
                    trigger: FiringTrigger::Scheduled,
                    window: plan.window,
                });
            }
        }
        self.commit(tx).await?;
        Ok(firings)
    }

    /// Firings claimed longer ago than `lease_ms` and not finished (their
    /// scheduler died or lost the database mid-firing): claimed again, for
    /// this scheduler to finish.
    pub async fn claim_unfinished(
        &self,
        lease_ms: i64,
        limit: i64,
    ) -> Result<Vec<Firing>, StoreError> {
        let mut tx = self.pool().begin().await?;
        type Row = (
            Uuid,
            OffsetDateTime,
            String,
            Option<OffsetDateTime>,
            Option<OffsetDateTime>,
        );
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT schedule_id, due_at, trigger, window_start, window_end \
                 FROM schedule_firings WHERE done_at IS NULL \
                 AND claimed_at < now() - make_interval(secs => $1::float8 / 1000) \
                 ORDER BY claimed_at LIMIT $2 FOR UPDATE SKIP LOCKED",
        )
        .bind(lease_ms as f64)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let mut firings = Vec::new();
        for (id, due, trigger, start, end) in rows {
            sqlx::query(
                "UPDATE schedule_firings SET claimed_at = now() WHERE schedule_id = $1 AND due_at = $2",
            )
            .bind(id)
            .bind(due)
            .execute(&mut *tx)
            .await?;
            let row: Option<ScheduleRow> = sqlx::query_as(concat!(
                "SELECT ",
                columns!(),
                " FROM schedules WHERE id = $1"
            ))
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(row) = row else { continue };
            firings.push(Firing {
                schedule: row.into_record()?,
                due,
                due_ms: i64::try_from(ms(due)).unwrap_or(i64::MAX),
                trigger: trigger_of(&trigger),
                window: start.zip(end).map(|(s, e)| {
                    (
                        i64::try_from(ms(s)).unwrap_or(0),
                        i64::try_from(ms(e)).unwrap_or(0),
                    )
                }),
            });
        }
        self.commit(tx).await?;
        Ok(firings)
    }

    /// Records an operator's firing of `schedule` now (`decide` gives its
    /// window; its next time is unchanged).
    pub async fn manual_firing(
        &self,
        schedule: &ScheduleRecord,
        decide: impl FnOnce(i64) -> Option<(i64, i64)>,
    ) -> Result<Firing, StoreError> {
        let mut tx = self.pool().begin().await?;
        let now: OffsetDateTime = sqlx::query_scalar("SELECT now()")
            .fetch_one(&mut *tx)
            .await?;
        let now_ms = i64::try_from(ms(now)).unwrap_or(i64::MAX);
        let window = decide(now_ms);
        if !insert_firing(
            &mut tx,
            schedule.id.as_uuid(),
            now,
            FiringTrigger::Manual,
            window,
        )
        .await?
        {
            return Err(StoreError::Conflict(format!(
                "schedule {:?} already fired at this instant",
                schedule.name
            )));
        }
        self.commit(tx).await?;
        Ok(Firing {
            schedule: schedule.clone(),
            due: now,
            due_ms: now_ms,
            trigger: FiringTrigger::Manual,
            window,
        })
    }

    /// Records what a firing did and marks it done.
    pub async fn finish_firing(
        &self,
        schedule: ScheduleId,
        due: OffsetDateTime,
        outcome: &FiringOutcome,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE schedule_firings SET done_at = now(), outcome = $3 \
             WHERE schedule_id = $1 AND due_at = $2",
        )
        .bind(schedule.as_uuid())
        .bind(due)
        .bind(Json(outcome))
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The schedule's tasks that have not finished, by rack name.
    pub async fn schedule_open_tasks(
        &self,
        schedule: ScheduleId,
    ) -> Result<Vec<(String, TaskId)>, StoreError> {
        let open: Vec<&str> = TaskStatus::ALL
            .iter()
            .filter(|s| s.is_open())
            .map(|s| s.as_str())
            .collect();
        let rows: Vec<(String, Uuid)> = sqlx::query_as(
            "SELECT rack_name, id FROM tasks WHERE schedule_id = $1 AND status = ANY($2) \
             ORDER BY created_at",
        )
        .bind(schedule.as_uuid())
        .bind(open)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(|(r, id)| (r, TaskId(id))).collect())
    }

    /// The schedule's firings, newest first.
    pub async fn firings(
        &self,
        schedule: ScheduleId,
        limit: u32,
    ) -> Result<Vec<FiringRecord>, StoreError> {
        type Row = (
            OffsetDateTime,
            OffsetDateTime,
            String,
            Option<OffsetDateTime>,
            Option<OffsetDateTime>,
            Option<OffsetDateTime>,
            Option<Value>,
        );
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT due_at, fired_at, trigger, done_at, window_start, window_end, outcome \
             FROM schedule_firings WHERE schedule_id = $1 ORDER BY fired_at DESC, due_at DESC \
             LIMIT $2",
        )
        .bind(schedule.as_uuid())
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter()
            .map(|(due, fired, trigger, done, start, end, outcome)| {
                let outcome: FiringOutcome = match outcome {
                    Some(v) => serde_json::from_value(v).map_err(|e| StoreError::Corrupt {
                        what: format!("firing {} of schedule {schedule}", at_text(due)),
                        reason: e.to_string(),
                    })?,
                    None => FiringOutcome::default(),
                };
                Ok(FiringRecord {
                    due_at: due,
                    fired_at: fired,
                    late: fired - due > time::Duration::minutes(1),
                    trigger: trigger_of(&trigger),
                    done: done.is_some(),
                    results: outcome.results,
                    skipped: outcome.skipped,
                    error: outcome.error,
                    window_start: start,
                    window_end: end,
                })
            })
            .collect()
    }
}

fn at_text(t: OffsetDateTime) -> String {
    flow_protocol::task::timestamp::format(t)
}

fn trigger_of(text: &str) -> FiringTrigger {
    match text {
        "manual" => FiringTrigger::Manual,
        _ => FiringTrigger::Scheduled,
    }
}

fn to_time(ms_: i64) -> OffsetDateTime {
    at(u64::try_from(ms_).unwrap_or(0))
}

/// Inserts a firing unless one exists for this due time: whether it did.
async fn insert_firing(
    tx: &mut sqlx::PgConnection,
    schedule: Uuid,
    due: OffsetDateTime,
    trigger: FiringTrigger,
    window: Option<(i64, i64)>,
) -> Result<bool, StoreError> {
    let done = sqlx::query(
        "INSERT INTO schedule_firings (schedule_id, due_at, trigger, window_start, window_end) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (schedule_id, due_at) DO NOTHING",
    )
    .bind(schedule)
    .bind(due)
    .bind(trigger.as_str())
    .bind(window.map(|(s, _)| to_time(s)))
    .bind(window.map(|(_, e)| to_time(e)))
    .execute(&mut *tx)
    .await?;
    Ok(done.rows_affected() == 1)
}
