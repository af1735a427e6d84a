//! Step results: consumed from `FLOW_RESULTS`, applied in batches (the
//! results that arrived while the previous batch was being applied, one
//! transaction and one commit for all), counted, and acknowledged.

use std::time::Duration;

use async_nats::jetstream;
use flow_jetstream::{Source, consume, park};
use flow_protocol::TaskId;
use flow_protocol::jobs::{CONSUMER_SCHEDULER, ResultMessage, STREAM_RESULTS};
use flow_telemetry::ErrorChain;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use flow_decisions::lifecycle::Applied;
use flow_store::stats::StepTiming;

use crate::error::SchedulerError;
use crate::service::TaskService;

/// Step results one scheduler holds at once (received, not yet acked):
/// they wait for the applier, which takes every one that is waiting into
/// its next batch. The benchmark showed one transaction per result as the
/// bottleneck when 250 racks finish a stage at once
/// (`services/bench/results/JOURNAL.md`, "Site scale (2026-12-02)").
pub const RESULTS_IN_FLIGHT: usize = 512;

/// The most results one transaction applies.
pub const RESULTS_PER_BATCH: usize = 128;

/// Batches one scheduler applies at once (each on its own connection):
/// a batch is a run of round trips on one connection, so one applier alone
/// leaves the database mostly idle while a stage's results queue.
pub const APPLIERS: usize = 4;

/// What the applier answers for one result: its outcome and, once
/// applied, the step's timing read after the commit (for the metrics).
type Answer = (Result<Applied, SchedulerError>, Option<StepTiming>);

/// A result handed to the applier, and where its answer goes.
type Pending = (ResultMessage, tokio::sync::oneshot::Sender<Answer>);

/// How long a result that could not be applied (the database failed) waits
/// before it is delivered again.
const RESULT_RETRY: Duration = Duration::from_secs(1);

impl TaskService {
    /// Consumes step results until `stop`: each is applied in one
    /// transaction, then acknowledged; up to [`RESULTS_IN_FLIGHT`] at once
    /// (results of one task serialise on its row lock).
    pub async fn run_results(self, stop: CancellationToken) {
        let metrics = self.metrics.clone();
        let (to_applier, from_handlers) = tokio::sync::mpsc::channel(RESULTS_IN_FLIGHT);
        let this = self.clone();
        let consuming = async move {
            consume(
                &this.js.clone(),
                Source {
                    stream: STREAM_RESULTS,
                    consumer: CONSUMER_SCHEDULER,
                    concurrency: RESULTS_IN_FLIGHT,
                },
                stop,
                flow_protocol::decode::message,
                &|stream| metrics.parked(stream),
                |result: ResultMessage, message| {
                    let this = this.clone();
                    let to_applier = to_applier.clone();
                    async move { this.apply_one(result, message, to_applier).await }
                },
            )
            .await;
            // The last sender: the applier ends once its batch is answered.
            drop(to_applier);
        };
        // In this task, not spawned: a scheduler stopped or killed stops
        // them all.
        let from_handlers = tokio::sync::Mutex::new(from_handlers);
        let appliers =
            futures::future::join_all((0..APPLIERS).map(|_| self.run_applier(&from_handlers)));
        tokio::join!(consuming, appliers);
    }

    /// Applies the results handed to it: waits for one, takes every other
    /// one already waiting (up to [`RESULTS_PER_BATCH`]), applies them
    /// together, publishes the next stages' jobs they committed, pokes the
    /// outbox publisher (for the rest: events), reads the applied steps'
    /// timings in one query and answers each. Several run at once, taking
    /// turns at the queue.
    async fn run_applier(
        &self,
        from_handlers: &tokio::sync::Mutex<tokio::sync::mpsc::Receiver<Pending>>,
    ) {
        let mut batch: Vec<Pending> = Vec::with_capacity(RESULTS_PER_BATCH);
        loop {
            let taken = from_handlers
                .lock()
                .await
                .recv_many(&mut batch, RESULTS_PER_BATCH)
                .await;
            if taken == 0 {
                return;
            }
            let (results, replies): (Vec<_>, Vec<_>) = batch.drain(..).unzip();
            let started = std::time::Instant::now();
            let (outcomes, claimed) = self.apply_results(&results).await;
            tracing::debug!(
                results = results.len(),
                elapsed_us = started.elapsed().as_micros() as u64,
                "results applied together"
            );
            let applied: Vec<(TaskId, u32)> = results
                .iter()
                .zip(&outcomes)
                .filter(|(_, outcome)| outcome.is_ok())
                .map(|(r, _)| (r.id.task, r.id.step_index))
                .collect();
            if !applied.is_empty() {
                for (task, step) in &applied {
                    tracing::debug!(task_id = %task, step, "result committed");
                }
                // The next stages' jobs first, from here: the outbox
                // publisher's round (a read of the outbox, the events of
                // other batches) is not on their path. What fails here
                // goes out when the claim ends.
                if !claimed.is_empty() {
                    let jobs = claimed.len();
                    if let Err(error) = self.publish(claimed).await {
                        tracing::warn!(jobs, error = %ErrorChain(&error), "step jobs not published at once; the outbox publisher sends them when their claim ends");
                    }
                }
                // Their events.
                self.poke();
            }
            let mut timings = self.timings(&applied).await.into_iter();
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let timing = if outcome.is_ok() {
                    timings.next().flatten()
                } else {
                    None
                };
                let _ = reply.send((outcome, timing));
            }
        }
    }

    /// The timings of applied steps, for the metrics (not on the critical
    /// path: the outbox was poked before); all `None` when they cannot be
    /// read now.
    async fn timings(&self, steps: &[(TaskId, u32)]) -> Vec<Option<StepTiming>> {
        match self.store.step_timings(steps).await {
            Ok(timings) => timings,
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), steps = steps.len(), "step timings not read");
                vec![None; steps.len()]
            }
        }
    }

    /// Applies one result in a `result` span naming its task, rack, stage,
    /// step and component type, counts it, and acknowledges it (or hands it
    /// back when the database failed, or parks it when it can never apply).
    async fn apply_one(
        &self,
        result: ResultMessage,
        message: jetstream::Message,
        applier: tokio::sync::mpsc::Sender<Pending>,
    ) {
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
            tracing::debug!("result received");
            let (reply, answer) = tokio::sync::oneshot::channel();
            let (applied, timing) = if applier.send((result.clone(), reply)).await.is_ok() {
                answer
                    .await
                    .unwrap_or_else(|_| (Err(SchedulerError::Stopped), None))
            } else {
                (Err(SchedulerError::Stopped), None)
            };
            let applied = match applied {
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
