//! Event rules, their bindings, hardware events and the executions of
//! their actions: persistence only. Which rule applies and what its
//! actions target is decided by the caller (`flow_decisions::events`); this
//! module stores rules with compare-and-set on their revision, stores each
//! event identity once with its executions in one transaction, and hands
//! due executions out with `FOR UPDATE SKIP LOCKED` and a fenced lease.

use std::collections::BTreeSet;

use flow_protocol::event::{
    BindingRecord, BindingScope, ComponentLock, EventRecord, EventRuleRecord, EventRuleSpec,
    EventType, ExecutionRecord, ExecutionStatus, HardwareEvent, RuleAction, Severity,
};
use flow_protocol::{EventId, EventRuleId, ExecutionId, RackId, TaskId};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Store, StoreError};

/// An execution as the store inserts it with its event.
#[derive(Debug, Clone)]
pub struct NewExecution {
    /// The action.
    pub action: RuleAction,
    /// `pending` or `skipped`.
    pub status: ExecutionStatus,
    /// Why it was skipped.
    pub reason: String,
    /// Its targets (`<rack>/<name>`).
    pub targets: Vec<String>,
}

/// An execution a scheduler holds for one attempt.
#[derive(Debug, Clone)]
pub struct ClaimedExecution {
    /// Its ID.
    pub id: ExecutionId,
    /// The fence: only the holder of this claim records the outcome.
    pub claim: Uuid,
    /// The event.
    pub event_id: EventId,
    /// The event as observed.
    pub event: HardwareEvent,
    /// The action.
    pub action: RuleAction,
    /// Its targets (`<rack>/<name>`).
    pub targets: Vec<String>,
    /// This attempt's number (from 1).
    pub attempt: u32,
}

/// What an attempt came to.
#[derive(Debug, Clone)]
pub enum AttemptOutcome {
    /// Done.
    Completed,
    /// Failed; due again at the time given (epoch ms from now: a delay).
    Retry {
        /// How long until the next attempt.
        after: std::time::Duration,
        /// Why it failed.
        error: String,
    },
    /// Failed for good.
    Failed {
        /// Why.
        error: String,
    },
}

fn corrupt(what: String, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        what,
        reason: e.to_string(),
    }
}

fn encode<T: serde::Serialize>(what: &str, value: &T) -> Result<Value, StoreError> {
    serde_json::to_value(value).map_err(|e| corrupt(what.to_owned(), e))
}

#[derive(sqlx::FromRow)]
struct RuleRow {
    id: Uuid,
    name: String,
    enabled: bool,
    spec: Value,
    revision: i64,
    created_at: OffsetDateTime,
    updated_at: OffsetDateTime,
}

macro_rules! rule_columns {
    () => {
        "id, name, enabled, spec, revision, created_at, updated_at"
    };
}

impl RuleRow {
    fn into_record(self) -> Result<EventRuleRecord, StoreError> {
        let mut spec: EventRuleSpec = serde_json::from_value(self.spec)
            .map_err(|e| corrupt(format!("spec of event rule {}", self.id), e))?;
        spec.name = self.name;
        Ok(EventRuleRecord {
            id: Some(EventRuleId(self.id)),
            read_only: false,
            enabled: self.enabled,
            revision: self.revision,
            spec,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

fn name_taken(e: &sqlx::Error, name: &str) -> Option<StoreError> {
    StoreError::unique_violation(e)
        .map(|_| StoreError::Conflict(format!("an event rule named {name:?} already exists")))
}

impl Store {
    /// Stores a new rule.
    pub async fn insert_event_rule(
        &self,
        spec: &EventRuleSpec,
        enabled: bool,
    ) -> Result<EventRuleRecord, StoreError> {
        let row: RuleRow = sqlx::query_as(concat!(
            "INSERT INTO event_rules (id, name, event_type, enabled, spec) \
             VALUES ($1, $2, $3, $4, $5) RETURNING ",
            rule_columns!()
        ))
        .bind(Uuid::new_v4())
        .bind(&spec.name)
        .bind(spec.event_type.as_str())
        .bind(enabled)
        .bind(encode("event rule", spec)?)
        .fetch_one(self.pool())
        .await
        .map_err(|e| name_taken(&e, &spec.name).unwrap_or(StoreError::Database(e)))?;
        row.into_record()
    }

    /// A rule by ID or name.
    pub async fn get_event_rule(&self, reference: &str) -> Result<EventRuleRecord, StoreError> {
        let id = reference.parse::<Uuid>().ok();
        let row: Option<RuleRow> = sqlx::query_as(concat!(
            "SELECT ",
            rule_columns!(),
            " FROM event_rules WHERE id = $1 OR name = $2"
        ))
        .bind(id)
        .bind(reference)
        .fetch_optional(self.pool())
        .await?;
        row.ok_or_else(|| StoreError::NotFound(format!("no event rule {reference:?}")))?
            .into_record()
    }

    /// Every stored rule, by name.
    pub async fn list_event_rules(&self) -> Result<Vec<EventRuleRecord>, StoreError> {
        let rows: Vec<RuleRow> = sqlx::query_as(concat!(
            "SELECT ",
            rule_columns!(),
            " FROM event_rules ORDER BY name"
        ))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(RuleRow::into_record).collect()
    }

    /// Replaces a rule's content if it is still at `revision`; a bound rule
    /// keeps its event type.
    pub async fn update_event_rule(
        &self,
        id: EventRuleId,
        revision: i64,
        spec: &EventRuleSpec,
    ) -> Result<EventRuleRecord, StoreError> {
        let mut tx = self.pool().begin().await?;
        let current: Option<(i64, String)> =
            sqlx::query_as("SELECT revision, event_type FROM event_rules WHERE id = $1 FOR UPDATE")
                .bind(id.as_uuid())
                .fetch_optional(&mut *tx)
                .await?;
        let Some((stored, event_type)) = current else {
            return Err(StoreError::NotFound(format!("no event rule {id}")));
        };
        if stored != revision {
            return Err(StoreError::Conflict(format!(
                "event rule {id} is at revision {stored}, not {revision}: read it again"
            )));
        }
        if event_type != spec.event_type.as_str() {
            let bound: i64 =
                sqlx::query_scalar("SELECT count(*) FROM event_rule_bindings WHERE rule_id = $1")
                    .bind(id.as_uuid())
                    .fetch_one(&mut *tx)
                    .await?;
            if bound > 0 {
                return Err(StoreError::Conflict(format!(
                    "event rule {id} is bound {bound} time(s) for {event_type}: unbind it before changing its event type"
                )));
            }
        }
        let row: RuleRow = sqlx::query_as(concat!(
            "UPDATE event_rules SET name = $2, event_type = $3, spec = $4, revision = revision + 1, \
             updated_at = now() WHERE id = $1 RETURNING ", rule_columns!()
        ))
        .bind(id.as_uuid())
        .bind(&spec.name)
        .bind(spec.event_type.as_str())
        .bind(encode("event rule", spec)?)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| name_taken(&e, &spec.name).unwrap_or(StoreError::Database(e)))?;
        self.commit(tx).await?;
        row.into_record()
    }

    /// Enables or disables a rule (a new revision).
    pub async fn set_event_rule_enabled(
        &self,
        id: EventRuleId,
        enabled: bool,
    ) -> Result<EventRuleRecord, StoreError> {
        let row: Option<RuleRow> = sqlx::query_as(concat!(
            "UPDATE event_rules SET enabled = $2, revision = revision + 1, updated_at = now() \
             WHERE id = $1 RETURNING ",
            rule_columns!()
        ))
        .bind(id.as_uuid())
        .bind(enabled)
        .fetch_optional(self.pool())
        .await?;
        row.ok_or_else(|| StoreError::NotFound(format!("no event rule {id}")))?
            .into_record()
    }

    /// Deletes a rule and its bindings; returns how many bindings went.
    pub async fn delete_event_rule(&self, id: EventRuleId) -> Result<u64, StoreError> {
        let mut tx = self.pool().begin().await?;
        let bindings = sqlx::query("DELETE FROM event_rule_bindings WHERE rule_id = $1")
            .bind(id.as_uuid())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let deleted = sqlx::query("DELETE FROM event_rules WHERE id = $1")
            .bind(id.as_uuid())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if deleted == 0 {
            return Err(StoreError::NotFound(format!("no event rule {id}")));
        }
        self.commit(tx).await?;
        Ok(bindings)
    }

    /// Binds a rule for its event type at the site (`rack` none) or a rack,
    /// replacing the rule bound there.
    pub async fn bind_event_rule(
        &self,
        rule: &EventRuleRecord,
        rack: Option<RackId>,
    ) -> Result<(), StoreError> {
        let id = rule
            .id
            .ok_or_else(|| StoreError::Conflict("a built-in rule cannot be bound".to_owned()))?;
        let mut tx = self.pool().begin().await?;
        sqlx::query(
            "DELETE FROM event_rule_bindings WHERE event_type = $1 \
             AND rack_id IS NOT DISTINCT FROM $2",
        )
        .bind(rule.spec.event_type.as_str())
        .bind(rack.map(|r| r.as_uuid()))
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO event_rule_bindings (event_type, rack_id, rule_id) VALUES ($1, $2, $3)",
        )
        .bind(rule.spec.event_type.as_str())
        .bind(rack.map(|r| r.as_uuid()))
        .bind(id.as_uuid())
        .execute(&mut *tx)
        .await?;
        self.commit(tx).await?;
        Ok(())
    }

    /// Removes the binding of `event_type` at the site or a rack.
    pub async fn unbind_event_rule(
        &self,
        event_type: EventType,
        rack: Option<RackId>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool().begin().await?;
        let removed = sqlx::query(
            "DELETE FROM event_rule_bindings WHERE event_type = $1 \
             AND rack_id IS NOT DISTINCT FROM $2",
        )
        .bind(event_type.as_str())
        .bind(rack.map(|r| r.as_uuid()))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        self.commit(tx).await?;
        Ok(removed > 0)
    }

    /// Every binding, by event type, the site's first, then racks by name.
    pub async fn list_bindings(&self) -> Result<Vec<BindingRecord>, StoreError> {
        let rows: Vec<(String, Option<String>, Uuid, String, bool)> = sqlx::query_as(
            "SELECT b.event_type, r.name, e.id, e.name, e.enabled FROM event_rule_bindings b \
             JOIN event_rules e ON e.id = b.rule_id LEFT JOIN racks r ON r.id = b.rack_id \
             ORDER BY b.event_type, r.name NULLS FIRST",
        )
        .fetch_all(self.pool())
        .await?;
        rows.into_iter()
            .map(|(event_type, rack, id, name, enabled)| {
                Ok(BindingRecord {
                    event_type: event_type
                        .parse()
                        .map_err(|e| corrupt(format!("binding of rule {name}"), e))?,
                    scope: rack.map_or(BindingScope::Site, BindingScope::Rack),
                    rule_id: EventRuleId(id),
                    rule_name: name,
                    enabled,
                })
            })
            .collect()
    }

    /// The rules bound for `event_type` at `rack` and at the site, with
    /// whether each is enabled.
    pub async fn bound_rules(
        &self,
        event_type: EventType,
        rack: RackId,
    ) -> Result<(Option<EventRuleRecord>, Option<EventRuleRecord>), StoreError> {
        let rows: Vec<(Option<Uuid>, Uuid)> = sqlx::query_as(
            "SELECT rack_id, rule_id FROM event_rule_bindings WHERE event_type = $1 \
             AND (rack_id IS NULL OR rack_id = $2)",
        )
        .bind(event_type.as_str())
        .bind(rack.as_uuid())
        .fetch_all(self.pool())
        .await?;
        let (mut at_rack, mut at_site) = (None, None);
        for (scope, rule) in rows {
            let record = self.get_event_rule(&rule.to_string()).await?;
            if scope.is_some() {
                at_rack = Some(record);
            } else {
                at_site = Some(record);
            }
        }
        Ok((at_rack, at_site))
    }

    /// Stores an event with its executions, once per identity. Returns the
    /// event's ID and whether it was new (a repeat stores nothing).
    pub async fn insert_event(
        &self,
        event: &HardwareEvent,
        rule_name: &str,
        executions: &[NewExecution],
    ) -> Result<(EventId, bool), StoreError> {
        self.insert_event_planned(event, rule_name, |_| (executions.to_vec(), Vec::new()))
            .await
    }

    /// Stores an event once per identity, with the executions and locks
    /// `plan` decides from the components of its rack that leak (those
    /// with an uncleared leak event, this one's included when it is a
    /// leak). One event of a rack at a time (a transaction-scoped advisory
    /// lock on the rack's name): two leaks arriving together are counted
    /// together. Returns the event's ID and whether it was new (a repeat
    /// stores nothing and `plan` is not called).
    pub async fn insert_event_planned(
        &self,
        event: &HardwareEvent,
        rule_name: &str,
        plan: impl FnOnce(&BTreeSet<String>) -> (Vec<NewExecution>, Vec<String>),
    ) -> Result<(EventId, bool), StoreError> {
        let mut tx = self.pool().begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('flow.event.rack:' || $1, 0))")
            .bind(&event.rack)
            .execute(&mut *tx)
            .await?;
        let inserted: Option<Uuid> = sqlx::query_scalar(
            "INSERT INTO hardware_events (id, source, key, event_type, severity, rack_name, \
             component, message, origin, observed_at, rule_name) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
             ON CONFLICT (source, key) DO NOTHING RETURNING id",
        )
        .bind(Uuid::new_v4())
        .bind(&event.source)
        .bind(&event.key)
        .bind(event.event_type.as_str())
        .bind(event.severity.as_str())
        .bind(&event.rack)
        .bind(&event.component)
        .bind(&event.message)
        .bind(&event.origin)
        .bind(event.observed_at)
        .bind(rule_name)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(id) = inserted else {
            let id: Uuid =
                sqlx::query_scalar("SELECT id FROM hardware_events WHERE source = $1 AND key = $2")
                    .bind(&event.source)
                    .bind(&event.key)
                    .fetch_one(&mut *tx)
                    .await?;
            return Ok((EventId(id), false));
        };
        let leaking: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT component FROM hardware_events WHERE rack_name = $1 \
             AND event_type = $2 AND cleared_at IS NULL",
        )
        .bind(&event.rack)
        .bind(EventType::LeakDetected.as_str())
        .fetch_all(&mut *tx)
        .await?;
        let (executions, locks) = plan(&leaking.into_iter().collect());
        for (position, e) in executions.iter().enumerate() {
            sqlx::query(
                "INSERT INTO event_executions (id, event_id, position, action, spec, status, \
                 next_attempt_at, last_error, targets) \
                 VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $6 = 'pending' THEN now() END, $7, $8)",
            )
            .bind(Uuid::new_v4())
            .bind(id)
            .bind(i32::try_from(position).unwrap_or(i32::MAX))
            .bind(&e.action.name)
            .bind(encode("action", &e.action)?)
            .bind(e.status.as_str())
            .bind(&e.reason)
            .bind(encode("targets", &e.targets)?)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(
            "INSERT INTO component_locks (rack_name, component, event_id) \
             SELECT $1, unnest($2::text[]), $3 ON CONFLICT DO NOTHING",
        )
        .bind(&event.rack)
        .bind(&locks)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        self.commit(tx).await?;
        Ok((EventId(id), true))
    }

    /// Clears an event: its locks go, and who cleared it, when and why are
    /// recorded on it. An event cleared already is a conflict (its first
    /// clearing stands).
    pub async fn clear_event(&self, id: EventId, reason: &str, by: &str) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await?;
        let cleared: Option<Option<OffsetDateTime>> =
            sqlx::query_scalar("SELECT cleared_at FROM hardware_events WHERE id = $1 FOR UPDATE")
                .bind(id.as_uuid())
                .fetch_optional(&mut *tx)
                .await?;
        match cleared {
            None => return Err(StoreError::NotFound(format!("no event {id}"))),
            Some(Some(at)) => {
                return Err(StoreError::Conflict(format!(
                    "event {id} was cleared already at {}",
                    flow_protocol::task::timestamp::format(at)
                )));
            }
            Some(None) => {}
        }
        sqlx::query(
            "UPDATE hardware_events SET cleared_at = now(), cleared_reason = $2, cleared_by = $3 \
             WHERE id = $1",
        )
        .bind(id.as_uuid())
        .bind(reason)
        .bind(by)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM component_locks WHERE event_id = $1")
            .bind(id.as_uuid())
            .execute(&mut *tx)
            .await?;
        self.commit(tx).await?;
        Ok(())
    }

    /// The locks on these components of a rack (by name), oldest first.
    pub async fn locks_on(
        &self,
        rack: &str,
        components: &[String],
    ) -> Result<Vec<ComponentLock>, StoreError> {
        let rows: Vec<(String, String, Uuid, OffsetDateTime)> = sqlx::query_as(
            "SELECT rack_name, component, event_id, since FROM component_locks \
             WHERE rack_name = $1 AND component = ANY($2) ORDER BY since, component",
        )
        .bind(rack)
        .bind(components)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(rack, component, event_id, since)| ComponentLock {
                rack,
                component,
                event_id: EventId(event_id),
                since,
            })
            .collect())
    }

    /// Claims up to `limit` due executions for `lease`: pending ones whose
    /// time has come (a new attempt), and running ones whose holder's lease
    /// ran out (the interrupted attempt is not counted).
    pub async fn claim_executions(
        &self,
        limit: i64,
        lease: std::time::Duration,
    ) -> Result<Vec<ClaimedExecution>, StoreError> {
        type Row = (Uuid, Uuid, Uuid, Value, Value, i32);
        let claim = Uuid::new_v4();
        let rows: Vec<Row> = sqlx::query_as(
            "UPDATE event_executions x SET status = 'running', claim = $1, \
             claimed_until = now() + make_interval(secs => $3), updated_at = now(), \
             attempts = x.attempts + CASE WHEN x.status = 'pending' THEN 1 ELSE 0 END \
             FROM (SELECT id FROM event_executions \
                   WHERE (status = 'pending' AND next_attempt_at <= now()) \
                      OR (status = 'running' AND claimed_until < now()) \
                   ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED) due \
             WHERE x.id = due.id \
             RETURNING x.id, x.claim, x.event_id, x.spec, x.targets, x.attempts",
        )
        .bind(claim)
        .bind(limit)
        .bind(lease.as_secs_f64())
        .fetch_all(self.pool())
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for (id, claim, event_id, spec, targets, attempts) in rows {
            let what = || format!("execution {id}");
            out.push(ClaimedExecution {
                id: ExecutionId(id),
                claim,
                event_id: EventId(event_id),
                event: self.event_row(event_id).await?.0,
                action: serde_json::from_value(spec).map_err(|e| corrupt(what(), e))?,
                targets: serde_json::from_value(targets).map_err(|e| corrupt(what(), e))?,
                attempt: u32::try_from(attempts).unwrap_or(0),
            });
        }
        Ok(out)
    }

    /// Records an attempt's outcome and the tasks it submitted, if the
    /// claim still holds (false: another scheduler took it over).
    pub async fn finish_execution(
        &self,
        held: &ClaimedExecution,
        outcome: &AttemptOutcome,
        tasks: &[TaskId],
    ) -> Result<bool, StoreError> {
        let (status, delay, error) = match outcome {
            AttemptOutcome::Completed => (ExecutionStatus::Completed, None, ""),
            AttemptOutcome::Retry { after, error } => (
                ExecutionStatus::Pending,
                Some(after.as_secs_f64()),
                error.as_str(),
            ),
            AttemptOutcome::Failed { error } => (ExecutionStatus::Failed, None, error.as_str()),
        };
        let tasks: Vec<Uuid> = tasks.iter().map(|t| t.as_uuid()).collect();
        let updated = sqlx::query(
            "UPDATE event_executions SET status = $3, last_error = $4, claim = NULL, \
             claimed_until = NULL, updated_at = now(), \
             next_attempt_at = CASE WHEN $5::float8 IS NULL THEN NULL \
                                    ELSE now() + make_interval(secs => $5::float8) END, \
             tasks = ARRAY(SELECT DISTINCT unnest(tasks || $6::uuid[])) \
             WHERE id = $1 AND claim = $2",
        )
        .bind(held.id.as_uuid())
        .bind(held.claim)
        .bind(status.as_str())
        .bind(error)
        .bind(delay)
        .bind(&tasks)
        .execute(self.pool())
        .await?
        .rows_affected();
        Ok(updated == 1)
    }

    async fn event_row(
        &self,
        id: Uuid,
    ) -> Result<(HardwareEvent, OffsetDateTime, String), StoreError> {
        type Row = (
            String,
            String,
            String,
            String,
            String,
            String,
            String,
            String,
            OffsetDateTime,
            OffsetDateTime,
            String,
        );
        let row: Option<Row> = sqlx::query_as(
            "SELECT source, key, event_type, severity, rack_name, component, message, origin, \
             observed_at, received_at, rule_name FROM hardware_events WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(self.pool())
        .await?;
        let Some((
            source,
            key,
            event_type,
            severity,
            rack,
            component,
            message,
            origin,
            observed_at,
            received_at,
            rule,
        )) = row
        else {
            return Err(StoreError::NotFound(format!("no event {id}")));
        };
        let what = || format!("event {id}");
        Ok((
            HardwareEvent {
                source,
                key,
                event_type: event_type.parse().map_err(|e| corrupt(what(), e))?,
                severity: severity
                    .parse::<Severity>()
                    .map_err(|e| corrupt(what(), e))?,
                rack,
                component,
                message,
                origin,
                observed_at,
            },
            received_at,
            rule,
        ))
    }

    /// An event with its executions.
    pub async fn get_event(&self, id: EventId) -> Result<EventRecord, StoreError> {
        let (event, received_at, rule) = self.event_row(id.as_uuid()).await?;
        type Row = (
            Uuid,
            String,
            Value,
            String,
            i32,
            Option<OffsetDateTime>,
            String,
            Value,
            Vec<Uuid>,
        );
        let rows: Vec<Row> = sqlx::query_as(
            "SELECT id, action, spec, status, attempts, next_attempt_at, last_error, targets, tasks \
             FROM event_executions WHERE event_id = $1 ORDER BY position",
        )
        .bind(id.as_uuid())
        .fetch_all(self.pool())
        .await?;
        let mut executions = Vec::with_capacity(rows.len());
        for (x, action, spec, status, attempts, next, error, targets, tasks) in rows {
            let what = || format!("execution {x}");
            let kind = serde_json::from_value::<RuleAction>(spec)
                .map_err(|e| corrupt(what(), e))?
                .kind
                .as_str()
                .to_owned();
            executions.push(ExecutionRecord {
                id: ExecutionId(x),
                action,
                kind,
                status: status.parse().map_err(|e| corrupt(what(), e))?,
                attempts: u32::try_from(attempts).unwrap_or(0),
                next_attempt_at: next,
                last_error: error,
                targets: serde_json::from_value(targets).map_err(|e| corrupt(what(), e))?,
                tasks: tasks.into_iter().map(TaskId).collect(),
            });
        }
        let (cleared_at, cleared_reason, cleared_by): (Option<OffsetDateTime>, String, String) =
            sqlx::query_as(
                "SELECT cleared_at, cleared_reason, cleared_by FROM hardware_events WHERE id = $1",
            )
            .bind(id.as_uuid())
            .fetch_one(self.pool())
            .await?;
        let locks: Vec<(String, String, OffsetDateTime)> = sqlx::query_as(
            "SELECT rack_name, component, since FROM component_locks WHERE event_id = $1 \
             ORDER BY component",
        )
        .bind(id.as_uuid())
        .fetch_all(self.pool())
        .await?;
        Ok(EventRecord {
            id,
            event,
            received_at,
            rule,
            executions,
            locks: locks
                .into_iter()
                .map(|(rack, component, since)| ComponentLock {
                    rack,
                    component,
                    event_id: id,
                    since,
                })
                .collect(),
            cleared_at,
            cleared_reason,
            cleared_by,
        })
    }

    /// Events newest first, of one rack or all, with their executions.
    pub async fn list_events(
        &self,
        rack: Option<&str>,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let ids: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM hardware_events WHERE $1::text IS NULL OR rack_name = $1 \
             ORDER BY received_at DESC, id LIMIT $2",
        )
        .bind(rack)
        .bind(i64::from(limit))
        .fetch_all(self.pool())
        .await?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.push(self.get_event(EventId(id)).await?);
        }
        Ok(out)
    }
}
