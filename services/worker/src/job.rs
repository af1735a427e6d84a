//! One delivered job: decode it (or park it), resume its checkpoint, run
//! the step with the engine until it waits or ends, save the checkpoint,
//! and hand it back for a durable wait or publish its result.

use std::time::Duration;

use async_nats::jetstream::{self, Message, kv};
use flow_executor::checkpoint::ComponentStatus;
use flow_executor::{Checkpoint, Clock, Effects, Progress, SystemClock, advance};
use flow_hardware::ManagerRegistry;
use flow_jetstream::park;
use flow_protocol::ComponentOutcome;
use flow_protocol::jobs::{
    ComponentResult, JobMessage, ResultMessage, STREAM_JOBS, StepOutcome, result_subject,
};
use flow_telemetry::ErrorChain;
use tracing::Instrument;

use crate::ack::{Disposition, dispose};
use crate::cancel_marks::CancelMarks;
use crate::metrics::{OutcomeLabels, WorkerMetrics};
use crate::progress::{self, KeepAlive};
use crate::stored::Stored;
use crate::{EVENT_WAIT, INLINE_WAIT, MAX_NAK_DELAY, checkpoint};

/// How much earlier than its time a durable wait's job comes back, to
/// wait the rest in-process (under `INLINE_WAIT`).
const DURABLE_EARLY: Duration = Duration::from_millis(250);

/// The longest wait for a power reservation held in the worker (longer
/// ones are durable waits that come back early: [`DURABLE_EARLY`]).
const RESERVATION_WAIT: Duration = Duration::from_secs(30);

/// Whether a component of the step holds a power reservation not yet sent
/// (it must go by its send-by, `shared/executor/src/command.rs`).
fn holds_reservation(cp: &Checkpoint) -> bool {
    cp.components.values().any(|c| c.send_by_ms.is_some())
}

/// How often a worker whose checkpoint (or result) could not be saved tries
/// again while it keeps the job in-process instead of handing it back.
const UNSAVED_RETRY: Duration = Duration::from_secs(1);

/// What a job's handling needs from its worker.
pub(crate) struct Job<'a> {
    pub js: jetstream::Context,
    pub kv: kv::Store,
    /// How often to send a progress ack while a call runs.
    pub keep_alive: Duration,
    pub registry: &'a ManagerRegistry,
    pub cancelled: &'a CancelMarks,
    pub stopping: &'a std::sync::atomic::AtomicBool,
    pub metrics: &'a WorkerMetrics,
    /// Waits held for events (`services/worker/src/hold.rs`).
    pub holds: &'a crate::hold::Holds,
    /// Where firmware images are verified and served from.
    pub images: &'a dyn flow_executor::images::ImageSource,
}

/// What one run of a job knows of its components' event streams: which
/// were opened before its commands went out (`Listening`), and the wake of
/// its last wait, reused by the next (`shared/executor/src/wake.rs`).
#[derive(Default)]
struct Hearing {
    listening: flow_executor::wake::Listening,
    wake: Option<flow_executor::wake::Wake>,
}

/// What to do at a wait the step reached.
enum AtWait {
    /// Short: sleep here until the wait's time and go on.
    Inline,
    /// A power reservation's time: sleep here (the job kept alive) until
    /// it and go on — handed back, the job would come back at the
    /// redelivery's pace, seconds late on a busy worker, past the
    /// reservation's send-by, and ask again for ever.
    Reserved,
    /// The checkpoint is not saved: handing the job back now would let its
    /// next delivery start from an older checkpoint and repeat every call
    /// made since. Keep it (alive), wait a little, save again.
    KeepUnsaved(Duration),
    /// Hand it back.
    Dispose(Disposition),
}

impl Job<'_> {
    /// Decodes a delivered job and runs it in a span naming its task, rack,
    /// stage, step and component type.
    pub async fn handle(self, message: Message) {
        let delivered = message.info().map_or(0, |i| i.delivered);
        if delivered > 1 {
            self.metrics.job_redeliveries.inc();
        }
        let job: JobMessage = match flow_protocol::decode::message(&message.payload) {
            Ok(j) => j,
            Err(error) => {
                // Malformed or another schema: kept on FLOW_PARKED with the
                // reason, never a crash.
                if park(&self.js, STREAM_JOBS, &message, &error.to_string()).await {
                    self.metrics.jobs_parked.inc();
                }
                return;
            }
        };
        let span = span(&job);
        async {
            tracing::debug!(delivered, "job received");
            self.run(message, job).await;
        }
        .instrument(span)
        .await;
    }

    async fn run(self, message: Message, job: JobMessage) {
        let key = checkpoint::key(&job.id);
        let (loaded, revision) = match checkpoint::load(&self.kv, &key, self.metrics).await {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), key = %key, "checkpoint not readable now; job handed back");
                dispose(&message, Disposition::Retry, self.metrics).await;
                return;
            }
        };
        let stored = Stored::new(self.kv.clone(), key.clone(), self.metrics);
        // The result's ID follows the job's epoch (`shared/protocol/src/restore.rs`).
        let result_id = flow_protocol::restore::result_msg_id(
            &job.id,
            message
                .headers
                .as_ref()
                .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
                .map(|v| v.as_str()),
        );
        let loaded = match loaded {
            checkpoint::Loaded::Unreadable(why) => {
                // What the step sent is not known: it is not run blind.
                let cp = Checkpoint::default();
                let now = SystemClock.now_ms();
                let outcome = StepOutcome::Failed {
                    action: "resume".to_owned(),
                    message: format!(
                        "the step's checkpoint {key} is unreadable ({why}): what it already sent is not known, so it is not run again"
                    ),
                };
                let result = result(&job, &cp, outcome, now, now);
                // Its checkpoint is left as it is: a redelivery (should the
                // result not go out) finds it unreadable again.
                let disposition = if self.publish(&result, &result_id).await {
                    Disposition::Finished
                } else {
                    Disposition::Retry
                };
                dispose(&message, disposition, self.metrics).await;
                return;
            }
            checkpoint::Loaded::Some(cp) => Some(*cp),
            checkpoint::Loaded::None => None,
        };
        stored.set(loaded.clone(), revision);
        let mut cp = loaded.unwrap_or_default();
        let clock = SystemClock;
        let started_ms = cp
            .finished
            .first()
            .map(|a| a.started_ms)
            // Still in its first action (a poll, a wait): when that began.
            .or(cp.action_started_ms)
            .unwrap_or_else(|| clock.now_ms());
        let task = job.id.task;
        let is_cancelled = || self.cancelled.contains(task);
        let gate = crate::admit::NatsGate {
            nats: self.js.client(),
            task,
        };
        let observer = crate::observer::Published::new(self.js.client());
        let mut last_report = None;
        // The last held wait's signals, kept while the step goes on here,
        // and those taken before its commands went.
        let mut hearing = Hearing::default();
        loop {
            let progress = {
                // Keeps the job alive while a long call runs.
                let _alive = KeepAlive::start(&message, self.keep_alive);
                let effects = Effects {
                    hardware: self.registry,
                    clock: &clock,
                    gate: &gate,
                    images: self.images,
                    journal: &stored,
                    observer: &observer,
                    cancelled: &is_cancelled,
                    listening: &hearing.listening,
                };
                advance(&job.job, &mut cp, &effects).await
            };
            observer.flush().await;
            if self.superseded(&message, &stored) {
                return;
            }
            progress::report(&self.js, &job, &cp, &mut last_report).await;
            let outcome = match progress {
                Progress::WaitUntil(at) => {
                    let delay = Duration::from_millis(at.saturating_sub(clock.now_ms()));
                    if self
                        .wait_for_events(&message, &job, &mut cp, &stored, delay, &mut hearing)
                        .await
                    {
                        continue;
                    }
                    let reserved = holds_reservation(&cp);
                    let inline = (delay <= INLINE_WAIT || (reserved && delay <= RESERVATION_WAIT))
                        && !self.stopping.load(std::sync::atomic::Ordering::SeqCst);
                    // A job that leaves this worker takes everything with
                    // it; one that waits here need only keep its commands.
                    let saved = if inline {
                        stored.keep_commands(&cp).await
                    } else {
                        stored.save(&cp).await
                    };
                    if self.superseded(&message, &stored) {
                        return;
                    }
                    match self.at_wait(delay, saved, reserved) {
                        // Until the time itself: the report and the save
                        // above took some of the delay (a reserved power-on
                        // sent that late lands closer to the next one).
                        AtWait::Inline => {
                            let left = at.saturating_sub(clock.now_ms());
                            tokio::time::sleep(Duration::from_millis(left)).await;
                        }
                        AtWait::Reserved => {
                            let _alive = KeepAlive::start(&message, self.keep_alive);
                            let left = at.saturating_sub(clock.now_ms());
                            tracing::debug!(wait_ms = left, "waiting here for a power reservation");
                            tokio::time::sleep(Duration::from_millis(left)).await;
                        }
                        AtWait::KeepUnsaved(d) => {
                            dispose(&message, Disposition::StillWorking, self.metrics).await;
                            tokio::time::sleep(d).await;
                        }
                        AtWait::Dispose(disposition) => {
                            if let Disposition::WaitFor(d) = disposition {
                                tracing::debug!(delay_ms = d.as_millis() as u64, "durable wait");
                            }
                            dispose(&message, disposition, self.metrics).await;
                            return;
                        }
                    }
                    continue;
                }
                Progress::Done => StepOutcome::Completed,
                Progress::Failed(f) => StepOutcome::Failed {
                    action: f.action,
                    message: f.message,
                },
                Progress::Cancelled => StepOutcome::Cancelled,
            };
            // Commands since the last save are saved before the result
            // goes out: should this worker die before its ack, the
            // redelivery repeats reads, never a command.
            let saved = stored.keep_commands(&cp).await;
            if self.superseded(&message, &stored) {
                return;
            }
            let result = result(&job, &cp, outcome, started_ms, clock.now_ms());
            self.finish(&message, &cp, &result, &result_id, saved, &stored)
                .await;
            return;
        }
    }

    /// A verification's wait held here, ended by an event from the
    /// components' BMCs or by its time (see `services/worker/src/hold.rs`);
    /// `false` (nothing waited) when the wait is too long, nobody's event
    /// stream is open, no hold is free, the worker is stopping or the
    /// commands made so far could not be saved.
    async fn wait_for_events(
        &self,
        message: &Message,
        job: &JobMessage,
        cp: &mut Checkpoint,
        stored: &Stored<'_>,
        delay: Duration,
        hearing: &mut Hearing,
    ) -> bool {
        let previous = hearing.wake.take();
        if delay.is_zero()
            || delay > EVENT_WAIT
            || self.stopping.load(std::sync::atomic::Ordering::SeqCst)
        {
            return false;
        }
        let Some(mut wake) = flow_executor::wake::wake_for(
            &job.job,
            cp,
            self.registry,
            &hearing.listening,
            previous,
        ) else {
            return false;
        };
        let Some(_hold) = self.holds.take() else {
            return false;
        };
        if !stored.keep_commands(cp).await {
            return false;
        }
        self.metrics.event_waits.inc();
        let _alive = KeepAlive::start(message, self.keep_alive);
        match crate::hold::wait(&mut wake, delay, self.stopping).await {
            flow_executor::wake::Woken::Poll(names) => {
                self.metrics.event_wakes.inc();
                tracing::debug!(components = names.len(), "event: polling now");
                flow_executor::wake::poll_now(cp, &names, SystemClock.now_ms());
            }
            // No event will come: the step is looked at again, and the
            // rest of its wait is a durable one.
            flow_executor::wake::Woken::NoFeed | flow_executor::wake::Woken::TimedOut => {}
        }
        hearing.wake = Some(wake);
        true
    }

    /// Whether another delivery of this job wrote its checkpoint since this
    /// one read it: then this one stops here, sending nothing more and
    /// publishing no result, and leaves its message alone (an ack would
    /// end the other delivery's message when both are one message
    /// redelivered; a separate copy comes back after the ack wait and
    /// resumes from the newest checkpoint).
    fn superseded(&self, message: &Message, stored: &Stored<'_>) -> bool {
        if !stored.is_superseded() {
            return false;
        }
        self.metrics.jobs_superseded.inc();
        let delivered = message.info().map_or(0, |i| i.delivered);
        tracing::warn!(
            delivered,
            "another delivery of this job wrote its checkpoint: this one stops and leaves the step to it"
        );
        true
    }

    fn at_wait(&self, delay: Duration, saved: bool, reserved: bool) -> AtWait {
        if self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            AtWait::Dispose(Disposition::HandBack)
        } else if delay <= INLINE_WAIT {
            AtWait::Inline
        } else if reserved && delay <= RESERVATION_WAIT {
            AtWait::Reserved
        } else if !saved {
            AtWait::KeepUnsaved(delay.min(UNSAVED_RETRY))
        } else {
            // Back a little early: the rest is waited here, to the
            // millisecond, not at the redelivery's own pace.
            let early = delay.saturating_sub(DURABLE_EARLY);
            AtWait::Dispose(Disposition::WaitFor(early.min(MAX_NAK_DELAY)))
        }
    }

    /// Publishes the result (deduplicated by `result/<job>`), then acks the
    /// job. Its checkpoint, when one was stored, stays until the bucket's
    /// age limit (7 days, `shared/jetstream/src/topology.rs`): a delete was
    /// one more JetStream write per job (`docs/benchmarks.md`, "The physical
    /// ideal and the cost of an operation"), and a redelivery after a lost ack then
    /// resumes from it instead of repeating the step's commands. A result
    /// JetStream did not take is retried: by redelivery once the checkpoint
    /// is saved (no call is repeated), in place otherwise (a redelivery
    /// would run the step again), saving the checkpoint again meanwhile.
    async fn finish(
        &self,
        message: &Message,
        cp: &Checkpoint,
        result: &ResultMessage,
        result_id: &str,
        saved: bool,
        stored: &Stored<'_>,
    ) {
        let Some(body) = encode(result) else {
            return;
        };
        let mut saved = saved;
        loop {
            if self.publish_body(result, result_id, &body).await {
                tracing::info!(outcome = ?result.outcome, calls = result.calls, "step finished");
                let outcome = match result.outcome {
                    StepOutcome::Completed => "completed",
                    StepOutcome::Failed { .. } => "failed",
                    StepOutcome::Cancelled => "cancelled",
                };
                self.metrics
                    .jobs_finished
                    .get_or_create(&OutcomeLabels { outcome })
                    .inc();
                dispose(message, Disposition::Finished, self.metrics).await;
                return;
            }
            // Handing the job back now would let its redelivery resume from
            // the stored checkpoint: save the final one first.
            if saved && !stored.holds(cp) {
                saved = stored.save(cp).await;
            }
            if self.superseded(message, stored) {
                return;
            }
            if saved {
                tracing::warn!("result not published; job will be redelivered");
                dispose(message, Disposition::Retry, self.metrics).await;
                return;
            }
            tracing::warn!("result and checkpoint not saved; retrying here");
            dispose(message, Disposition::StillWorking, self.metrics).await;
            tokio::time::sleep(UNSAVED_RETRY).await;
            saved = stored.save(cp).await;
            if self.superseded(message, stored) {
                return;
            }
        }
    }
}

impl Job<'_> {
    /// Publishes a result (deduplicated by `result_id`: `result/<job>`,
    /// and the job's epoch); whether JetStream took it.
    async fn publish(&self, result: &ResultMessage, result_id: &str) -> bool {
        match encode(result) {
            Some(body) => self.publish_body(result, result_id, &body).await,
            None => false,
        }
    }

    async fn publish_body(&self, result: &ResultMessage, result_id: &str, body: &[u8]) -> bool {
        let publish = self
            .js
            .send_publish(
                result_subject(result.id.task),
                jetstream::message::PublishMessage::build()
                    .payload(body.to_vec().into())
                    .message_id(result_id),
            )
            .await;
        match publish {
            Ok(ack) => ack.await.is_ok(),
            Err(_) => false,
        }
    }
}

fn encode(result: &ResultMessage) -> Option<Vec<u8>> {
    match serde_json::to_vec(result) {
        Ok(body) => Some(body),
        Err(error) => {
            tracing::error!(error = %ErrorChain(&error), "result not encodable");
            None
        }
    }
}

/// The step's result as published: its outcome, each component's last
/// result, attempts and error, the calls made and when it ran.
fn result(
    job: &JobMessage,
    cp: &Checkpoint,
    outcome: StepOutcome,
    started_ms: u64,
    finished_ms: u64,
) -> ResultMessage {
    ResultMessage {
        schema: flow_protocol::api::SCHEMA,
        id: job.id,
        outcome,
        components: cp
            .components
            .iter()
            .map(|(name, s)| {
                let status = match s.status {
                    ComponentStatus::Done => ComponentOutcome::Done,
                    ComponentStatus::Failed => ComponentOutcome::Failed,
                    ComponentStatus::Pending | ComponentStatus::Active => ComponentOutcome::Pending,
                };
                let actions = cp.history.get(name).cloned().unwrap_or_default();
                (
                    name.clone(),
                    ComponentResult {
                        status,
                        result: cp.results.get(name).cloned().unwrap_or_default(),
                        calls: actions.iter().map(|a| a.attempts).sum(),
                        error: s
                            .last_error
                            .clone()
                            .or_else(|| actions.iter().rev().find_map(|a| a.error.clone())),
                        actions,
                        installed_version: cp.installed.get(name).cloned(),
                    },
                )
            })
            .collect(),
        calls: cp.calls,
        started_ms,
        finished_ms,
    }
}

/// The span every line about a job is logged in.
fn span(job: &JobMessage) -> tracing::Span {
    let rack = job.job.components.first().map_or("", |c| c.rack.as_str());
    tracing::info_span!(
        "job",
        task = %job.id.task,
        rack,
        stage = job.stage,
        step = job.id.step_index,
        component = %job.job.step.component_type,
        generation = job.id.generation,
    )
}
