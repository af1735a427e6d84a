//! The rest of history: finished schedule firings (archived, then
//! removed) and the published outbox (removed: its messages are in
//! JetStream, and each task's record says what they did).

use serde_json::{Value, json};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Store, StoreError};

/// Outbox rows removed per statement.
const OUTBOX_BATCH: i64 = 10_000;

/// A finished schedule firing ready to be archived.
#[derive(Debug, Clone)]
pub struct ArchivableFiring {
    /// Its schedule.
    pub schedule_id: Uuid,
    /// The time it was due (with the schedule, its key).
    pub due_at: OffsetDateTime,
    /// When it was done.
    pub done_at: OffsetDateTime,
    /// Its archive line: the row as it stood.
    pub line: Value,
}

impl Store {
    /// Firings done before `before`, oldest first, at most `limit`.
    pub async fn firings_to_archive(
        &self,
        before: OffsetDateTime,
        limit: i64,
    ) -> Result<Vec<ArchivableFiring>, StoreError> {
        let rows: Vec<(Uuid, OffsetDateTime, OffsetDateTime, Value)> = sqlx::query_as(
            "SELECT schedule_id, due_at, done_at, to_jsonb(f) FROM schedule_firings f \
             WHERE done_at IS NOT NULL AND done_at < $1 ORDER BY done_at LIMIT $2",
        )
        .bind(before)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(schedule_id, due_at, done_at, row)| ArchivableFiring {
                schedule_id,
                due_at,
                done_at,
                line: json!({"format": 1, "firing": row}),
            })
            .collect())
    }

    /// Removes `firings` (archived in `segment`), with an audit record.
    pub async fn remove_firings(
        &self,
        segment: &str,
        firings: &[ArchivableFiring],
        reason: String,
    ) -> Result<u64, StoreError> {
        let schedules: Vec<Uuid> = firings.iter().map(|f| f.schedule_id).collect();
        let due: Vec<OffsetDateTime> = firings.iter().map(|f| f.due_at).collect();
        let mut tx = self.pool().begin().await?;
        let removed = sqlx::query(
            "DELETE FROM schedule_firings f USING unnest($1::uuid[], $2::timestamptz[]) AS v(s, d) \
             WHERE f.schedule_id = v.s AND f.due_at = v.d AND f.done_at IS NOT NULL",
        )
        .bind(&schedules)
        .bind(&due)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let entry = super::expire_entry(
            segment,
            json!({"kind": "firings", "segment": segment, "firings": removed}),
            reason,
        );
        let message =
            format!("archived {removed} schedule firings to segment {segment} and removed them");
        crate::audit::insert(
            &mut tx,
            &entry,
            flow_protocol::audit::AuditOutcome::Ok,
            &message,
        )
        .await?;
        tx.commit().await?;
        Ok(removed)
    }

    /// Removes outbox rows published before `before` (in batches); returns
    /// how many.
    pub async fn expire_outbox(&self, before: OffsetDateTime) -> Result<u64, StoreError> {
        let mut total = 0;
        loop {
            let n = sqlx::query(
                "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox \
                 WHERE published_at IS NOT NULL AND published_at < $1 LIMIT $2)",
            )
            .bind(before)
            .bind(OUTBOX_BATCH)
            .execute(self.pool())
            .await?
            .rows_affected();
            total += n;
            if n < OUTBOX_BATCH as u64 {
                return Ok(total);
            }
        }
    }
}
