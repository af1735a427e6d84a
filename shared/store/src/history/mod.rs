//! Bounded history (docs/operating.md, "History and the archive"): what
//! the scheduler's retention pass reads out of Postgres to archive, and
//! what it removes once the archive holds it. Nothing here decides what is
//! old enough or writes files: the pass does (services/scheduler/src/history.rs).
//!
//! - [`tasks`]: a finished task's detail (steps and component results)
//!   goes; the task row stays for good with a summary ([`ArchivedDetail`]).
//! - [`audit`]: the audit log's hash chain — seals appended in order, the
//!   live chain checked, sealed records exported then removed, the
//!   removal itself recorded.
//! - [`expire`]: schedule firings and the published outbox.
//!
//! [`ArchivedDetail`]: flow_protocol::history::ArchivedDetail

pub mod audit;
pub mod expire;
pub mod tasks;

use flow_protocol::audit::{Actor, ActorSource, EndpointKind};
use serde_json::Value;

use crate::audit::AuditEntry;

/// The endpoint name retention's own audit records carry.
pub use flow_protocol::history::EXPIRE_ENDPOINT;

/// The audit entry of one retention step: the scheduler acting for the
/// policy, naming the segment the records went to.
pub(crate) fn expire_entry(segment: &str, request: Value, reason: String) -> AuditEntry {
    AuditEntry {
        actor: Actor {
            name: "flow-scheduler".into(),
            source: ActorSource::Service,
            claimed: None,
            via: None,
        },
        endpoint: EXPIRE_ENDPOINT.into(),
        kind: EndpointKind::Internal,
        racks: Vec::new(),
        task_ids: Vec::new(),
        target: Some(segment.to_owned()),
        request,
        reason: Some(reason),
    }
}

/// The advisory lock one retention pass holds (`flowhist`).
const PASS_LOCK: i64 = 0x666c_6f77_6869_7374;

/// One scheduler's hold on the retention pass: a session-scoped advisory
/// lock on a connection of its own. [`HistoryLock::release`] unlocks it;
/// dropped without that, the connection is closed (never handed back to
/// the pool still holding the lock).
pub struct HistoryLock {
    conn: Option<sqlx::pool::PoolConnection<sqlx::Postgres>>,
}

impl HistoryLock {
    /// Lets go of the pass.
    pub async fn release(mut self) {
        if let Some(mut conn) = self.conn.take() {
            let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(PASS_LOCK)
                .execute(&mut *conn)
                .await;
            if unlocked.is_err() {
                drop(conn.detach());
            }
        }
    }
}

impl Drop for HistoryLock {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            drop(conn.detach());
        }
    }
}

impl crate::Store {
    /// The retention pass's lock, unless another scheduler holds it.
    pub async fn try_history_lock(&self) -> Result<Option<HistoryLock>, crate::StoreError> {
        let mut conn = self.pool().acquire().await?;
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(PASS_LOCK)
            .fetch_one(&mut *conn)
            .await?;
        Ok(got.then_some(HistoryLock { conn: Some(conn) }))
    }
}
