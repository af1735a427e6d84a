//! The outbox: messages committed with the state that justifies them, and
//! published by the scheduler afterwards (`Nats-Msg-Id` drops a repeat).

use flow_engine::lifecycle::Effect;
use serde_json::Value;
use sqlx::PgConnection;

use crate::{Store, StoreError};

/// One message to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxMessage {
    /// The subject.
    pub subject: String,
    /// Its `Nats-Msg-Id`.
    pub msg_id: String,
    /// The JSON body.
    pub payload: Value,
}

impl OutboxMessage {
    /// The message an effect publishes (none for an effect that is not a
    /// message).
    pub fn of(effect: &Effect) -> Option<Result<OutboxMessage, StoreError>> {
        let (subject, msg_id, payload) = match effect {
            Effect::PublishJob(job) => (job.subject(), job.msg_id(), serde_json::to_value(job)),
            Effect::Emit(event) => {
                // Only live progress has no message ID, and it never goes
                // through the outbox (the workers publish it).
                let Some(msg_id) = event.msg_id() else {
                    return Some(Err(StoreError::Corrupt {
                        what: format!("an event of task {}", event.task_id),
                        reason: "live progress does not go through the outbox".into(),
                    }));
                };
                (event.subject(), msg_id, serde_json::to_value(event))
            }
            Effect::CancelMark(mark) => (mark.subject(), mark.msg_id(), serde_json::to_value(mark)),
            Effect::PromoteNext(_) | Effect::FirmwareInstalled { .. } => return None,
        };
        Some(
            payload
                .map(|payload| OutboxMessage {
                    subject,
                    msg_id: msg_id.clone(),
                    payload,
                })
                .map_err(|e| StoreError::Corrupt {
                    what: format!("outbox message {msg_id}"),
                    reason: e.to_string(),
                }),
        )
    }
}

/// Inserts messages in order (ids ascend in the order given).
pub(crate) async fn insert(
    conn: &mut PgConnection,
    messages: &[OutboxMessage],
) -> Result<(), StoreError> {
    if messages.is_empty() {
        return Ok(());
    }
    let subjects: Vec<&str> = messages.iter().map(|m| m.subject.as_str()).collect();
    let ids: Vec<&str> = messages.iter().map(|m| m.msg_id.as_str()).collect();
    let payloads: Vec<&Value> = messages.iter().map(|m| &m.payload).collect();
    sqlx::query(
        "INSERT INTO outbox (subject, msg_id, payload) \
         SELECT s, i, p FROM UNNEST($1::text[], $2::text[], $3::jsonb[]) \
         WITH ORDINALITY AS m(s, i, p, n) ORDER BY n",
    )
    .bind(subjects)
    .bind(ids)
    .bind(payloads)
    .execute(conn)
    .await?;
    Ok(())
}

impl Store {
    /// Up to `limit` unpublished outbox messages, oldest first, with their
    /// row ids.
    pub async fn outbox_pending(
        &self,
        limit: i64,
    ) -> Result<Vec<(i64, OutboxMessage)>, StoreError> {
        let rows: Vec<(i64, String, String, Value)> = sqlx::query_as(
            "SELECT id, subject, msg_id, payload FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT $1",
        )
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, subject, msg_id, payload)| {
                (
                    id,
                    OutboxMessage {
                        subject,
                        msg_id,
                        payload,
                    },
                )
            })
            .collect())
    }

    /// Marks outbox messages published.
    pub async fn outbox_published(&self, ids: &[i64]) -> Result<(), StoreError> {
        sqlx::query("UPDATE outbox SET published_at = now() WHERE id = ANY($1)")
            .bind(ids)
            .execute(self.pool())
            .await?;
        Ok(())
    }
}
