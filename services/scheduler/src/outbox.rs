//! The outbox publisher and the sweeps: messages committed with the state
//! that justifies them are published with their `Nats-Msg-Id` (a repeat is
//! dropped), at once when poked and every [`SWEEP_INTERVAL`] regardless; the
//! queue and deadline sweeps run on the tick.

use std::time::Duration;

use async_nats::jetstream;
use flow_store::tasks::Claimed;
use flow_telemetry::ErrorChain;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::background::{Driver, Next, Period, Wake};
use crate::error::SchedulerError;
use crate::service::TaskService;

/// How often the outbox and the deadlines are swept even when nothing pokes
/// them (covers a scheduler that died between commit and publish).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// How often tasks held by their readiness gate look at their components
/// again (the reference's `DefaultPollInterval`).
pub const READINESS_POLL: Duration = Duration::from_secs(5);

/// Outbox messages read and published per round.
const OUTBOX_BATCH: i64 = 500;

impl TaskService {
    /// Publishes the outbox: every message committed with the state that
    /// justifies it, with a `Nats-Msg-Id` so a repeat is dropped (step jobs
    /// another applier has claimed are left to it until its claim ends).
    async fn publish_outbox(&self) -> Result<usize, SchedulerError> {
        let mut total = 0;
        loop {
            let mut batch = self.store.outbox_pending(OUTBOX_BATCH).await?;
            if batch.is_empty() {
                return Ok(total);
            }
            // Step jobs first: a worker starts on a job as soon as JetStream
            // has stored it, and each publish is a write to disk; the events
            // keep their order among themselves (a stable sort), and nothing
            // reads jobs and events in one order.
            batch.sort_by_key(|(_, m)| !m.is_job());
            total += self.publish(batch).await?;
        }
    }

    /// Publishes committed outbox messages in order (their IDs in this
    /// scheduler's restore epoch, `shared/protocol/src/restore.rs`) and
    /// marks those JetStream stored as published: the whole batch is sent, then the
    /// acks collected (one round of server syncs for the batch instead of
    /// one per message). Order is kept (one connection); a failure leaves
    /// the rest pending, and their Nats-Msg-Id drops any repeat later.
    pub(crate) async fn publish(&self, batch: Claimed) -> Result<usize, SchedulerError> {
        let mut sent = Vec::with_capacity(batch.len());
        let epoch = self.epoch();
        for (id, message) in batch {
            let body = serde_json::to_vec(&message.payload)
                .map_err(|e| SchedulerError::Publish(e.into()))?;
            let ack = self
                .js
                .send_publish(
                    message.subject,
                    jetstream::message::PublishMessage::build()
                        .payload(body.into())
                        .message_id(flow_protocol::restore::in_epoch(&message.msg_id, epoch)),
                )
                .await
                .map_err(|e| SchedulerError::Publish(e.into()))?;
            sent.push((id, ack));
        }
        let mut done = Vec::with_capacity(sent.len());
        let mut failed = None;
        for (id, ack) in sent {
            match ack.await {
                Ok(_) => done.push(id),
                Err(error) => {
                    failed.get_or_insert(error);
                }
            }
        }
        tracing::debug!(messages = done.len(), "outbox published");
        self.metrics
            .outbox_published
            .inc_by(u64::try_from(done.len()).unwrap_or(u64::MAX));
        self.store.outbox_published(&done).await?;
        if let Some(error) = failed {
            return Err(SchedulerError::Publish(error.into()));
        }
        Ok(done.len())
    }

    /// Runs the outbox publisher and the queue and deadline sweeps until
    /// `stop`: a poke (new outbox rows) publishes at once; the sweeps of
    /// queues and deadlines run on the [`SWEEP_INTERVAL`] clock only, not
    /// once per result.
    pub async fn run_sweeps(self, stop: CancellationToken) {
        let this = &self;
        let mut last_readiness_check = Instant::now();
        let driver = Driver {
            name: "outbox",
            period: Period::Clock(SWEEP_INTERVAL),
            poke: Some(&self.poke),
        };
        driver
            .drive(&stop, |wake| {
                let readiness =
                    wake == Wake::Tick && last_readiness_check.elapsed() >= READINESS_POLL;
                if readiness {
                    last_readiness_check = Instant::now();
                }
                async move {
                    if wake == Wake::Tick {
                        this.sweep(readiness).await;
                    }
                    // After the sweeps: what they queued (promoted tasks'
                    // jobs, cancel marks) goes out in this round.
                    this.publish_outbox().await.map(|_| Next::Wait)
                }
            })
            .await;
    }

    /// The queue and deadline sweeps, and the readiness sweep when
    /// `readiness` (each logs its own failure and the others go on); what
    /// they write to the outbox is published right after them.
    async fn sweep(&self, readiness: bool) {
        if let Err(error) = self.sweep_queues().await {
            tracing::warn!(error = %ErrorChain(&error), "queue sweep failed");
        }
        if readiness && let Err(error) = self.check_readiness().await {
            tracing::warn!(error = %ErrorChain(&error), "readiness sweep failed");
        }
        match self.fail_overdue().await {
            Ok(failed) => {
                self.metrics
                    .deadline_failures
                    .inc_by(u64::try_from(failed.len()).unwrap_or(u64::MAX));
                for task in &failed {
                    tracing::warn!(task_id = %task, "step past its deadline: task failed");
                }
            }
            Err(error) => tracing::warn!(error = %ErrorChain(&error), "deadline sweep failed"),
        }
    }
}
