//! Step results: consumed from `FLOW_RESULTS`, applied one transaction
//! each (several at once), counted, and acknowledged.

use std::time::Duration;

use async_nats::jetstream;
use flow_jetstream::{Source, consume, park};
use flow_protocol::jobs::{CONSUMER_SCHEDULER, ResultMessage, STREAM_RESULTS};
use flow_telemetry::ErrorChain;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::service::TaskService;

/// Step results applied at once by one scheduler. The benchmark showed one
/// at a time as the bottleneck at 50 racks: each result is a transaction
/// and a commit, and workers were idle waiting for the next stage.
pub const RESULTS_IN_FLIGHT: usize = 16;

/// How long a result that could not be applied (the database failed) waits
/// before it is delivered again.
const RESULT_RETRY: Duration = Duration::from_secs(1);

impl TaskService {
    /// Consumes step results until `stop`: each is applied in one
    /// transaction, then acknowledged; up to [`RESULTS_IN_FLIGHT`] at once
    /// (results of one task serialise on its row lock).
    pub async fn run_results(self, stop: CancellationToken) {
        let metrics = self.metrics.clone();
        consume(
            &self.js.clone(),
            Source {
                stream: STREAM_RESULTS,
                consumer: CONSUMER_SCHEDULER,
                concurrency: RESULTS_IN_FLIGHT,
            },
            stop,
            flow_protocol::decode::message,
            &|stream| metrics.parked(stream),
            |result: ResultMessage, message| {
                let this = self.clone();
                async move { this.apply_one(result, message).await }
            },
        )
        .await;
    }

    /// Applies one result in a `result` span naming its task, rack, stage,
    /// step and component type, counts it, and acknowledges it (or hands it
    /// back when the database failed, or parks it when it can never apply).
    async fn apply_one(&self, result: ResultMessage, message: jetstream::Message) {
        let span = tracing::info_span!(
            "result",
            task = %result.id.task,
            rack = tracing::field::Empty,
            stage = tracing::field::Empty,
            step = result.id.step_index,
            component = tracing::field::Empty,
            generation = result.id.generation,
        );
        async {
            let applied = match self.apply_result(&result).await {
                Ok(applied) => applied,
                Err(error) if error.is_refused_input() => {
                    // The same result would fail the same way forever.
                    let reason = format!("the result cannot be applied: {}", ErrorChain(&error));
                    if park(&self.js, STREAM_RESULTS, &message, &reason).await {
                        self.metrics.parked(STREAM_RESULTS);
                    }
                    return;
                }
                Err(error) => {
                    self.metrics.result_error();
                    tracing::warn!(error = %ErrorChain(&error), "result not applied; redelivery will retry");
                    let _ = message
                        .ack_with(jetstream::AckKind::Nak(Some(RESULT_RETRY)))
                        .await;
                    return;
                }
            };
            // The outbox publisher goes first: the next stage's jobs are
            // committed; the figures below are not on the critical path.
            self.poke();
            // Read after the commit, for the log fields and the durations.
            let timing = match self
                .store
                .step_timing(result.id.task, result.id.step_index)
                .await
            {
                Ok(timing) => timing,
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&error), "step timing not read");
                    None
                }
            };
            if let Some(t) = &timing {
                let span = tracing::Span::current();
                span.record("rack", t.rack.as_str());
                span.record("stage", t.stage);
                span.record("component", t.component_type.as_str());
            }
            self.metrics.result(applied, timing.as_ref());
            tracing::info!(applied = ?applied, "result applied");
            let _ = message.ack().await;
        }
        .instrument(span)
        .await
    }
}
