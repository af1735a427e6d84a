//! The audit log (`audit_log`, migrations/20261205200001_audit_log.sql):
//! one append-only record per state-changing request.
//!
//! How a record gets into the change's transaction: the API layer gives
//! the request an [`AuditScope`] and answers it with a store that carries
//! it ([`Store::with_audit`]). Every transaction of the store commits
//! through [`commit`], which writes the scope's record in that
//! transaction the first time (outcome `ok`), so the record and the change
//! are committed together or not at all. When the request ends without
//! having committed anything (refused, failed, or nothing to change),
//! [`AuditScope::finish`] writes the record alone with the outcome. Either
//! way a request leaves exactly one record.

use std::sync::{Arc, Mutex};

use flow_protocol::TaskId;
use flow_protocol::audit::{
    Actor, ActorSource, AuditList, AuditOutcome, AuditRecord, EndpointKind,
};
use serde_json::Value;
use sqlx::{Postgres, Transaction};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Store, StoreError};

/// What one request's record says, apart from how it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// Who the request claims to come from.
    pub actor: Actor,
    /// The endpoint.
    pub endpoint: String,
    /// Its kind.
    pub kind: EndpointKind,
    /// Racks it names (by name).
    pub racks: Vec<String>,
    /// Tasks it names.
    pub task_ids: Vec<TaskId>,
    /// Any other target.
    pub target: Option<String>,
    /// The request as received.
    pub request: Value,
    /// The operator's reason.
    pub reason: Option<String>,
}

/// One request's pending audit record: written once, by the first
/// transaction that commits or by [`AuditScope::finish`].
#[derive(Debug)]
pub struct AuditScope {
    entry: Mutex<AuditEntry>,
    /// Whether the record is written; held across the write and its commit
    /// so two transactions of one request cannot both write it.
    written: tokio::sync::Mutex<bool>,
}

impl AuditScope {
    /// A scope for the request `entry` describes.
    pub fn new(entry: AuditEntry) -> Arc<AuditScope> {
        Arc::new(AuditScope {
            entry: Mutex::new(entry),
            written: tokio::sync::Mutex::new(false),
        })
    }

    /// Who the request comes from.
    pub fn actor(&self) -> Actor {
        self.entry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .actor
            .clone()
    }

    /// Adds racks the request turned out to name (e.g. those a label
    /// selects), if the record is not written yet.
    pub fn note_racks(&self, racks: impl IntoIterator<Item = String>) {
        let mut entry = self.entry.lock().unwrap_or_else(|e| e.into_inner());
        for rack in racks {
            if !entry.racks.contains(&rack) {
                entry.racks.push(rack);
            }
        }
    }

    /// Adds tasks the request turned out to name.
    pub fn note_tasks(&self, tasks: impl IntoIterator<Item = TaskId>) {
        let mut entry = self.entry.lock().unwrap_or_else(|e| e.into_inner());
        for task in tasks {
            if !entry.task_ids.contains(&task) {
                entry.task_ids.push(task);
            }
        }
    }

    fn entry(&self) -> AuditEntry {
        self.entry.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Ends the request: unless a committed transaction already holds its
    /// record, writes the record alone with `outcome` and `message`.
    /// Returns whether it wrote one.
    pub async fn finish(
        &self,
        store: &Store,
        outcome: AuditOutcome,
        message: &str,
    ) -> Result<bool, StoreError> {
        let mut written = self.written.lock().await;
        if *written {
            return Ok(false);
        }
        let mut tx = store.pool().begin().await?;
        insert(&mut tx, &self.entry(), outcome, message).await?;
        tx.commit().await?;
        *written = true;
        Ok(true)
    }
}

/// Commits `tx`, first writing `scope`'s record in it (outcome `ok`) if no
/// transaction of the request has yet. Every transaction the store opens
/// for a change commits through here.
pub(crate) async fn commit(
    scope: Option<&AuditScope>,
    mut tx: Transaction<'static, Postgres>,
) -> Result<(), StoreError> {
    let Some(scope) = scope else {
        tx.commit().await?;
        return Ok(());
    };
    let mut written = scope.written.lock().await;
    if *written {
        tx.commit().await?;
        return Ok(());
    }
    insert(&mut tx, &scope.entry(), AuditOutcome::Ok, "").await?;
    tx.commit().await?;
    *written = true;
    Ok(())
}

pub(crate) async fn insert(
    tx: &mut Transaction<'static, Postgres>,
    entry: &AuditEntry,
    outcome: AuditOutcome,
    message: &str,
) -> Result<(), StoreError> {
    let task_ids: Vec<Uuid> = entry.task_ids.iter().map(|t| t.as_uuid()).collect();
    // Postgres refuses NUL in text and jsonb: a request carrying one is
    // still recorded, with the NULs replaced.
    let clean = |s: &str| s.replace('\0', "\u{FFFD}");
    let request: Value = match serde_json::to_string(&entry.request) {
        Ok(text) if text.contains("\\u0000") => {
            serde_json::from_str(&text.replace("\\u0000", "\\uFFFD")).unwrap_or(Value::Null)
        }
        _ => entry.request.clone(),
    };
    sqlx::query(
        "INSERT INTO audit_log (actor, actor_source, endpoint, kind, racks, task_ids, target, \
         request, outcome, message, reason, claimed_actor, via) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
    )
    .bind(clean(&entry.actor.name))
    .bind(entry.actor.source.as_str())
    .bind(&entry.endpoint)
    .bind(entry.kind.as_str())
    .bind(entry.racks.iter().map(|r| clean(r)).collect::<Vec<_>>())
    .bind(&task_ids)
    .bind(entry.target.as_deref().map(clean))
    .bind(sqlx::types::Json(request))
    .bind(outcome.as_str())
    .bind(clean(message))
    .bind(entry.reason.as_deref().map(clean))
    .bind(entry.actor.claimed.as_deref().map(clean))
    .bind(entry.actor.via.as_deref().map(clean))
    .execute(&mut **tx)
    .await?;
    tracing::info!(
        actor = %entry.actor.name,
        actor_source = entry.actor.source.as_str(),
        claimed = entry.actor.claimed.as_deref().unwrap_or_default(),
        via = entry.actor.via.as_deref().unwrap_or_default(),
        endpoint = %entry.endpoint,
        outcome = outcome.as_str(),
        racks = ?entry.racks,
        "audit record"
    );
    Ok(())
}

#[derive(sqlx::FromRow)]
pub(crate) struct AuditRow {
    id: i64,
    at: OffsetDateTime,
    actor: String,
    actor_source: String,
    endpoint: String,
    kind: String,
    racks: Vec<String>,
    task_ids: Vec<Uuid>,
    target: Option<String>,
    request: sqlx::types::Json<Value>,
    outcome: String,
    message: String,
    reason: Option<String>,
    claimed_actor: Option<String>,
    via: Option<String>,
}

/// The columns of [`AuditRow`], for `SELECT`s (each prefixed `a.`).
macro_rules! audit_columns {
    () => {
        "a.id, a.at, a.actor, a.actor_source, a.endpoint, a.kind, a.racks, a.task_ids, a.target, \
         a.request, a.outcome, a.message, a.reason, a.claimed_actor, a.via"
    };
}
pub(crate) use audit_columns;

impl AuditRow {
    /// The record as the hash chain covers it: the fixed shape of chain
    /// version 1 (`flow_archive::chain`), whatever columns are added later.
    pub(crate) fn chain_record(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "at": flow_archive::segment::rfc3339(self.at),
            "actor": self.actor,
            "actor_source": self.actor_source,
            "claimed_actor": self.claimed_actor,
            "via": self.via,
            "endpoint": self.endpoint,
            "kind": self.kind,
            "racks": self.racks,
            "task_ids": self.task_ids.iter().map(Uuid::to_string).collect::<Vec<_>>(),
            "target": self.target,
            "request": self.request.0,
            "outcome": self.outcome,
            "message": self.message,
            "reason": self.reason,
        })
    }

    /// Its id.
    pub(crate) fn id(&self) -> i64 {
        self.id
    }

    /// When it was written.
    pub(crate) fn at(&self) -> OffsetDateTime {
        self.at
    }

    fn into_record(self) -> Result<AuditRecord, StoreError> {
        let corrupt = |what: &str, value: &str| StoreError::Corrupt {
            what: format!("audit record {}", self.id),
            reason: format!("unknown {what} {value:?}"),
        };
        let kind = match self.kind.as_str() {
            "change" => EndpointKind::Change,
            "internal" => EndpointKind::Internal,
            other => return Err(corrupt("kind", other)),
        };
        Ok(AuditRecord {
            id: self.id,
            at: self.at,
            actor_source: ActorSource::parse(&self.actor_source)
                .ok_or_else(|| corrupt("actor_source", &self.actor_source))?,
            outcome: AuditOutcome::parse(&self.outcome)
                .ok_or_else(|| corrupt("outcome", &self.outcome))?,
            actor: self.actor,
            claimed_actor: self.claimed_actor,
            via: self.via,
            endpoint: self.endpoint,
            kind,
            racks: self.racks,
            task_ids: self.task_ids.into_iter().map(TaskId).collect(),
            target: self.target,
            request: self.request.0,
            message: self.message,
            reason: self.reason,
        })
    }
}

impl Store {
    /// This store, with every transaction it commits for a change writing
    /// `scope`'s record (see the module's doc).
    pub fn with_audit(&self, scope: Arc<AuditScope>) -> Store {
        Store {
            pool: self.pool().clone(),
            audit: Some(scope),
            power_known_for: self.power_known_for,
            draws: self.draws.clone(),
            batches: self.batches.clone(),
        }
    }

    /// The request scope this store writes records for, if any.
    pub fn audit_scope(&self) -> Option<&Arc<AuditScope>> {
        self.audit.as_ref()
    }

    /// Commits a transaction of a change (with the audit record, when the
    /// store carries a scope).
    pub(crate) async fn commit(
        &self,
        tx: Transaction<'static, Postgres>,
    ) -> Result<(), StoreError> {
        commit(self.audit.as_deref(), tx).await
    }

    /// Audit records matching `filter`, newest first.
    pub async fn audit_records(&self, filter: &AuditList) -> Result<Vec<AuditRecord>, StoreError> {
        let rows: Vec<AuditRow> = sqlx::query_as(
            "SELECT id, at, actor, actor_source, endpoint, kind, racks, task_ids, target, \
             request, outcome, message, reason, claimed_actor, via FROM audit_log \
             WHERE ($1::timestamptz IS NULL OR at >= $1) \
             AND ($2::timestamptz IS NULL OR at < $2) \
             AND ($3::text IS NULL OR actor = $3 OR claimed_actor = $3) \
             AND ($4::text IS NULL OR racks @> ARRAY[$4::text]) \
             AND ($5::text IS NULL OR endpoint = $5) \
             AND ($6::text IS NULL OR outcome = $6) \
             ORDER BY id DESC LIMIT $7",
        )
        .bind(filter.since)
        .bind(filter.until)
        .bind(filter.actor.as_deref())
        .bind(filter.rack.as_deref())
        .bind(filter.endpoint.as_deref())
        .bind(filter.outcome.map(AuditOutcome::as_str))
        .bind(i64::from(filter.effective_limit()))
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(AuditRow::into_record).collect()
    }
}
