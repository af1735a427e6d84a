//! Tasks: persistence only. The lifecycle (`flow_decisions::lifecycle`)
//! decides; this module loads a task's state under its row lock, saves the
//! state a transition produced (compare-and-set on what it was) and writes
//! the transition's effects to the outbox, all in one [`TaskTx`]. It also
//! reads what the decisions about a rack need (its open tasks, its queue),
//! the records the API shows, and the outbox for the publisher.

mod outbox;
mod pending;
mod read;
pub(crate) mod rows;

use flow_protocol::power::DomainName;
use std::collections::HashMap;

use flow_decisions::lifecycle::queue::{OpenTask, RackTasks};
use flow_decisions::lifecycle::{Effect, TaskState};
use flow_protocol::api::ResolveReply;
use flow_protocol::readiness::{ComponentStatus, NotReady, UnknownComponentStatus};
use flow_protocol::{EventId, RackId, RunId, ScheduleId, StepStatus, TaskId, TaskStatus};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

pub use outbox::{Claimed, OutboxMessage};
use pending::Pending;

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
    /// A firmware task's snapshot: each component's version before it ran.
    pub firmware_snapshot: Vec<flow_protocol::firmware::InstalledVersion>,
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
    /// Tasks [`TaskTx::lock_all`] locked and loaded, each handed out once by
    /// [`TaskTx::lock`] (a second lock of the same task reads it again,
    /// with what this transaction wrote since).
    locked: HashMap<TaskId, TaskState>,
    /// Outbox messages to insert at commit, in order: nothing in a task
    /// transaction reads the outbox, so one statement for the whole
    /// transaction instead of one per transition.
    outbox: Vec<OutboxMessage>,
    /// Rows [`TaskTx::save`] saved, not yet written.
    pending: Pending,
    /// Whether saves wait to be written together ([`TaskTx::lock_all`]
    /// sets it); otherwise each is written at once.
    defer_writes: bool,
    /// How long the step jobs committed are claimed for the caller's own
    /// publish ([`TaskTx::claim_jobs`]).
    claim: Option<std::time::Duration>,
    /// The request whose audit record the commit carries.
    audit: Option<std::sync::Arc<crate::audit::AuditScope>>,
}

/// A step row with its task.
#[derive(sqlx::FromRow)]
struct OwnedStepRow {
    task_id: Uuid,
    #[sqlx(flatten)]
    step: StepRow,
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
            locked: HashMap::new(),
            outbox: Vec::new(),
            pending: Pending::default(),
            defer_writes: false,
            claim: None,
            audit: self.audit_scope().cloned(),
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
            .execute(self.conn().await?)
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
                .fetch_optional(self.conn().await?)
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
        .fetch_all(self.conn().await?)
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
        .fetch_all(self.conn().await?)
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

    /// Records that hardware event `event` preempted `task` (cancelled it
    /// so that the event's task could start at once).
    pub async fn mark_preempted(
        &mut self,
        task: TaskId,
        event: flow_protocol::EventId,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE tasks SET preempted_by = $2 WHERE id = $1")
            .bind(task.as_uuid())
            .bind(event.as_uuid())
            .execute(self.conn().await?)
            .await?;
        Ok(())
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
        .execute(self.conn().await?)
        .await?;
        Ok(())
    }

    /// Stores a new task in the state its submission left it, with its
    /// steps.
    pub async fn insert(&mut self, new: &NewTask, state: &TaskState) -> Result<(), StoreError> {
        // The request's audit record names the tasks it created (who
        // submitted a task is found by it once its detail is archived).
        if let Some(scope) = &self.audit {
            scope.note_tasks([state.id]);
        }
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
             not_after, schedule_id, run_id, event_id, power_domains, firmware_snapshot) VALUES ($1, \
             $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
             CASE WHEN $17 THEN now() END, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, \
             $29, $30)",
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
        .bind(
            plan.power_domains
                .iter()
                .map(DomainName::as_str)
                .collect::<Vec<_>>(),
        )
        .bind(serde_json::to_value(&new.firmware_snapshot).map_err(encode)?)
        .execute(self.conn().await?)
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
            .execute(self.conn().await?)
            .await?;
        }
        Ok(())
    }

    /// Loads a task and its steps, locking its row until the transaction
    /// ends (`None`: no such task).
    pub async fn lock(&mut self, task: TaskId) -> Result<Option<TaskState>, StoreError> {
        if let Some(state) = self.locked.remove(&task) {
            return Ok(Some(state));
        }
        let row: Option<TaskRow> = sqlx::query_as(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE id = $1 FOR UPDATE"
        ))
        .bind(task.as_uuid())
        .fetch_optional(self.conn().await?)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let steps = self.steps(task).await?;
        row.into_state(steps).map(Some)
    }

    /// Locks and loads several tasks in two statements (ids in ascending
    /// order, the order every batch takes its locks in), for
    /// [`TaskTx::lock`] to hand out. A task that is missing or cannot be
    /// read is left for [`TaskTx::lock`] to report. From here on, saves are
    /// written together before the transaction next reads or commits, so a
    /// save's conflict may be reported by a later call.
    pub async fn lock_all(&mut self, tasks: &[TaskId]) -> Result<(), StoreError> {
        self.defer_writes = true;
        let mut ids: Vec<Uuid> = tasks.iter().map(|t| t.as_uuid()).collect();
        ids.sort_unstable();
        ids.dedup();
        let rows: Vec<TaskRow> = sqlx::query_as(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE id = ANY($1) ORDER BY id FOR UPDATE"
        ))
        .bind(&ids)
        .fetch_all(self.conn().await?)
        .await?;
        let steps: Vec<OwnedStepRow> = sqlx::query_as(concat!(
            "SELECT task_id, ",
            step_columns!(),
            " FROM task_steps WHERE task_id = ANY($1) ORDER BY task_id, step_index"
        ))
        .bind(&ids)
        .fetch_all(self.conn().await?)
        .await?;
        let mut by_task: HashMap<Uuid, Vec<StepRow>> = HashMap::new();
        for s in steps {
            by_task.entry(s.task_id).or_default().push(s.step);
        }
        for row in rows {
            let id = row.id;
            let steps = by_task.remove(&id).unwrap_or_default();
            if let Ok(state) = row.into_state(steps) {
                self.locked.insert(TaskId(id), state);
            }
        }
        Ok(())
    }

    async fn steps(&mut self, task: TaskId) -> Result<Vec<StepRow>, StoreError> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            step_columns!(),
            " FROM task_steps WHERE task_id = $1 ORDER BY step_index"
        ))
        .bind(task.as_uuid())
        .fetch_all(self.conn().await?)
        .await?)
    }

    /// Saves what a transition changed, as a compare-and-set: the task row
    /// if its status, stage, message, cancel request or times changed
    /// (where its status is still `before`'s), each step that changed (where
    /// its status and generation are still `before`'s). The row lock taken
    /// by [`TaskTx::lock`] keeps the other columns as loaded; a row whose
    /// status moved underneath is an error, never overwritten. After
    /// [`TaskTx::lock_all`] the rows are written with every other
    /// transition's before the transaction next reads or commits (two
    /// statements for all, `pending.rs`), so the error may come from a
    /// later call.
    pub async fn save(&mut self, before: &TaskState, after: &TaskState) -> Result<(), StoreError> {
        // One statement writes a row once: a second save of a task goes
        // after the first.
        if self.pending.has(after.id) {
            self.conn().await?;
        }
        self.pending.add(before, after)?;
        if !self.defer_writes {
            self.conn().await?;
        }
        Ok(())
    }

    /// The connection, with every saved row written first: whatever this
    /// transaction reads or writes next sees them.
    async fn conn(&mut self) -> Result<&mut sqlx::PgConnection, StoreError> {
        if !self.pending.is_empty() {
            self.pending.write(&mut self.tx).await?;
        }
        Ok(&mut *self.tx)
    }

    /// Writes the effects that are messages (jobs, events, cancel marks) to
    /// the outbox, in order, at commit (one statement for the whole
    /// transaction); the publisher sends them once it has committed. Other effects are the caller's.
    pub async fn outbox(&mut self, effects: &[Effect]) -> Result<(), StoreError> {
        let messages = effects
            .iter()
            .filter_map(OutboxMessage::of)
            .collect::<Result<Vec<_>, _>>()?;
        self.outbox.extend(messages);
        Ok(())
    }

    /// Claims the step jobs this transaction commits for `claim`: the
    /// outbox publisher leaves them alone until then, and
    /// [`TaskTx::commit`] returns them for the caller to publish at once
    /// (and mark published). A caller that dies or fails to publish leaves
    /// them to the publisher once the claim ends.
    pub fn claim_jobs(&mut self, claim: std::time::Duration) {
        self.claim = Some(claim);
    }

    /// Writes the saved rows and the outbox messages of the whole
    /// transaction, then commits. Returns the step jobs it claimed
    /// ([`TaskTx::claim_jobs`]; none otherwise), with their outbox ids.
    pub async fn commit(mut self) -> Result<Claimed, StoreError> {
        self.pending.write(&mut self.tx).await?;
        let messages = std::mem::take(&mut self.outbox);
        let claimed = outbox::insert(&mut self.tx, messages, self.claim).await?;
        crate::audit::commit(self.audit.as_deref(), self.tx).await?;
        Ok(claimed)
    }
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
