//! The outbox: messages committed with the state that justifies them, and
//! published by the scheduler afterwards (`Nats-Msg-Id` drops a repeat).

use flow_decisions::lifecycle::Effect;
use std::collections::HashMap;
use std::time::Duration;

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

impl OutboxMessage {
    /// Whether it is a step job (`flow.jobs.…`).
    pub fn is_job(&self) -> bool {
        self.subject
            .starts_with(flow_protocol::jobs::JOB_SUBJECT_PREFIX)
    }
}

/// Outbox messages with their row ids, claimed by the transaction that
/// committed them for its own publisher ([`crate::tasks::TaskTx::claim_jobs`]).
pub type Claimed = Vec<(i64, OutboxMessage)>;

/// Inserts messages in order (ids ascend in the order given). With
/// `claim`, the step jobs among them are claimed for that long (the
/// publisher leaves them alone until then) and returned with their ids.
pub(crate) async fn insert(
    conn: &mut PgConnection,
    messages: Vec<OutboxMessage>,
    claim: Option<Duration>,
) -> Result<Claimed, StoreError> {
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    let claimed: Vec<bool> = messages
        .iter()
        .map(|m| claim.is_some() && m.is_job())
        .collect();
    let rows: Vec<(i64, String)> = sqlx::query_as::<_, (i64, Option<String>)>(
        "INSERT INTO outbox (subject, msg_id, payload, claimed_until) \
         SELECT s, i, p, CASE WHEN c THEN now() + make_interval(secs => $5) END \
         FROM UNNEST($1::text[], $2::text[], $3::jsonb[], $4::bool[]) \
         WITH ORDINALITY AS m(s, i, p, c, n) ORDER BY n \
         RETURNING id, CASE WHEN claimed_until IS NOT NULL THEN msg_id END",
    )
    .bind(
        messages
            .iter()
            .map(|m| m.subject.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        messages
            .iter()
            .map(|m| m.msg_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(messages.iter().map(|m| &m.payload).collect::<Vec<_>>())
    .bind(&claimed)
    .bind(claim.unwrap_or_default().as_secs_f64())
    .fetch_all(conn)
    .await?
    .into_iter()
    .filter_map(|(id, msg_id)| Some((id, msg_id?)))
    .collect();
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    // Matched by message ID: the order RETURNING gives is not promised.
    let mut by_msg_id: HashMap<String, i64> = rows.into_iter().map(|(id, m)| (m, id)).collect();
    let mut out: Claimed = messages
        .into_iter()
        .zip(claimed)
        .filter(|(_, c)| *c)
        .filter_map(|(m, _)| by_msg_id.remove(&m.msg_id).map(|id| (id, m)))
        .collect();
    out.sort_by_key(|(id, _)| *id);
    Ok(out)
}

impl Store {
    /// Up to `limit` unpublished outbox messages, oldest first, with their
    /// row ids; a message claimed by the scheduler that committed it is
    /// left out until its claim ends.
    pub async fn outbox_pending(
        &self,
        limit: i64,
    ) -> Result<Vec<(i64, OutboxMessage)>, StoreError> {
        let rows: Vec<(i64, String, String, Value)> = sqlx::query_as(
            "SELECT id, subject, msg_id, payload FROM outbox WHERE published_at IS NULL \
             AND (claimed_until IS NULL OR claimed_until <= now()) ORDER BY id LIMIT $1",
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
