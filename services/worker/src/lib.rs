//! `flow-worker`: a stateless worker. It pulls step jobs from the shared
//! durable consumer `flow-workers`, runs each with the engine against the
//! hardware, keeps the step's checkpoint in the `flow_job_state` KV bucket,
//! and turns every wait longer than a second into a nak with that delay, so
//! its slot is free and any worker resumes the step later. A worker that dies
//! loses at most the call in flight. Results go to `flow.results.<task>`.
//!
//! Every job is handled in a `job` span with the fields `task`, `rack`,
//! `stage`, `step` and `component` (the step's component type); hardware
//! calls log in a `hardware_call` span naming the component. The worker's
//! Prometheus metrics are in [`metrics`]; [`instrument`] wraps the managers
//! to count and time hardware calls.

pub mod instrument;
pub mod metrics;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer, kv};
use flow_engine::checkpoint::ComponentStatus;
use flow_engine::{Checkpoint, Clock, Progress, SystemClock, advance};
use flow_hardware::ManagerRegistry;
use flow_jetstream::park;
use flow_protocol::TaskId;
use flow_protocol::jobs::{
    BUCKET_JOB_STATE, CONSUMER_WORKERS, ComponentResult, JobMessage, ResultMessage, STREAM_JOBS,
    StepOutcome, result_subject,
};
use futures::StreamExt;
use tokio::sync::{Notify, Semaphore};
use tracing::Instrument;

use crate::metrics::{OutcomeLabels, WorkerMetrics};

/// Waits up to this long are slept in place; longer ones become a nak with
/// a delay (design §3: "any wait longer than about a second").
pub const INLINE_WAIT: Duration = Duration::from_secs(1);

/// The longest delay of one nak: a longer wait comes back several times
/// (cheaply: load the checkpoint, see the time has not come), so a cancel
/// mark is seen within this bound even in the middle of a long Sleep.
pub const MAX_NAK_DELAY: Duration = Duration::from_secs(5);
/// How often a worker whose checkpoint could not be saved tries again
/// while it waits in-process instead of handing the job back.
const UNSAVED_RETRY: Duration = Duration::from_secs(1);

/// Lifetime of one fetch (pull request): the longest a stopping worker
/// keeps receiving (and handing back) jobs, and how often an idle worker
/// asks again.
pub const PULL_EXPIRES: Duration = Duration::from_secs(2);
/// How long past [`PULL_EXPIRES`] a worker waits for the server to end a
/// fetch before it fetches again (the pull request died with a server
/// restart; the client alone would wait 5 s more).
const PULL_GRACE: Duration = Duration::from_millis(500);

/// How often a worker tells JetStream it is still working on a job, at
/// most (well inside the consumer's default 30 s ack wait). A shorter ack
/// wait (`FLOW_JOB_ACK_WAIT`) shortens it: see [`progress_every`].
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// A spawned task that is aborted when this handle is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The progress-ack interval for a consumer whose ack wait is `ack_wait`:
/// a third of it (so two acks may be lost before JetStream gives the job to
/// another worker), at most [`PROGRESS_EVERY`], at least 100 ms.
pub fn progress_every(ack_wait: Duration) -> Duration {
    (ack_wait / 3).clamp(Duration::from_millis(100), PROGRESS_EVERY)
}

/// First pause before watching cancel marks again after the watch failed
/// (doubling up to [`CANCEL_WATCH_RETRY_MAX`]).
const CANCEL_WATCH_RETRY_MIN: Duration = Duration::from_millis(250);
/// Longest pause between attempts to watch cancel marks again.
const CANCEL_WATCH_RETRY_MAX: Duration = Duration::from_secs(5);

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Jobs in flight at once.
    pub max_jobs: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig { max_jobs: 8 }
    }
}

/// Why the worker stopped.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// JetStream was not usable.
    #[error("JetStream: {0}")]
    JetStream(String),
}

fn js_err(e: impl std::fmt::Display) -> WorkerError {
    WorkerError::JetStream(e.to_string())
}

/// Runs until `stop` is notified: then stops pulling and lets jobs in
/// flight reach their next checkpoint.
pub async fn run(
    client: async_nats::Client,
    registry: ManagerRegistry,
    config: WorkerConfig,
    stop: Arc<Notify>,
) -> Result<(), WorkerError> {
    run_with_metrics(
        client,
        registry,
        config,
        stop,
        WorkerMetrics::unregistered(),
    )
    .await
}

/// [`run`], counting in `metrics` (registered by the caller, who serves
/// them). Every manager of `registry` is wrapped to count its calls.
pub async fn run_with_metrics(
    client: async_nats::Client,
    registry: ManagerRegistry,
    config: WorkerConfig,
    stop: Arc<Notify>,
    metrics: WorkerMetrics,
) -> Result<(), WorkerError> {
    // `stop` may be signalled with notify_waiters while this loop is busy
    // (a fetch, a spawn): latch it into a notification that keeps a permit.
    let stop = {
        let latched = Arc::new(Notify::new());
        let (outer, inner) = (stop, Arc::clone(&latched));
        tokio::spawn(async move {
            outer.notified().await;
            inner.notify_one();
        });
        latched
    };
    let js = jetstream::new(client);
    let consumer = wait_for_consumer(&js, &stop).await?;
    let Some(mut consumer) = consumer else {
        return Ok(());
    };
    let ack_wait = match consumer.info().await {
        Ok(info) => info.config.ack_wait,
        Err(_) => consumer.cached_info().config.ack_wait,
    };
    let progress = progress_every(ack_wait);
    tracing::info!(
        ack_wait_ms = ack_wait.as_millis() as u64,
        progress_ms = progress.as_millis() as u64,
        "jobs consumer found"
    );
    let kv = js.get_key_value(BUCKET_JOB_STATE).await.map_err(js_err)?;
    let cancelled: Arc<Mutex<HashSet<TaskId>>> = Arc::default();
    let watcher = tokio::spawn(watch_cancels(kv.clone(), Arc::clone(&cancelled)));
    let permits = Arc::new(Semaphore::new(config.max_jobs.max(1)));
    let registry = Arc::new(instrument::instrument(&registry, &metrics));
    let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut jobs = tokio::task::JoinSet::new();
    // One bounded fetch at a time, for as many jobs as there are free slots:
    // when the worker stops, no pull request of its outlives the current
    // fetch (at most PULL_EXPIRES), so no job is stranded on a worker that
    // is gone until its ack wait runs out.
    'pull: loop {
        // Wait for a free slot first: never hold more jobs than slots.
        let first = tokio::select! {
            _ = stop.notified() => break 'pull,
            p = Arc::clone(&permits).acquire_owned() => p.map_err(js_err)?,
        };
        let free = permits.available_permits() + 1;
        drop(first);
        let batch = consumer
            .fetch()
            .max_messages(free)
            .expires(PULL_EXPIRES)
            .messages()
            .await;
        let mut batch = match batch {
            Ok(b) => b,
            Err(error) => {
                tracing::warn!(error = %error, "fetch failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        // The server ends a fetch at PULL_EXPIRES; if it went away, the
        // request went with it and the client would wait 5 s more: this
        // worker gives up on the fetch a little after PULL_EXPIRES instead.
        let fetch_ends = tokio::time::Instant::now() + PULL_EXPIRES + PULL_GRACE;
        let mut stop_seen = false;
        loop {
            // Cancel-safe: an unyielded message stays in the batch, and a
            // message already received is returned before the deadline is
            // looked at.
            let next = if stop_seen {
                tokio::time::timeout_at(fetch_ends, batch.next()).await
            } else {
                tokio::select! {
                    _ = stop.notified() => {
                        stop_seen = true;
                        continue;
                    }
                    m = tokio::time::timeout_at(fetch_ends, batch.next()) => m,
                }
            };
            let Ok(next) = next else {
                tracing::debug!("fetch not ended by the server in time; fetching again");
                break;
            };
            let Some(message) = next else { break };
            let message = match message {
                Ok(m) => m,
                Err(error) => {
                    tracing::warn!(error = %error, "job fetch error");
                    continue;
                }
            };
            if stop_seen {
                // Still arriving after a stop: hand it back at once.
                metrics.nak("handback");
                let _ = message.ack_with(AckKind::Nak(None)).await;
                continue;
            }
            let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                metrics.nak("handback");
                let _ = message.ack_with(AckKind::Nak(None)).await;
                continue;
            };
            let (js, kv, registry, cancelled, stopping, metrics) = (
                js.clone(),
                kv.clone(),
                Arc::clone(&registry),
                Arc::clone(&cancelled),
                Arc::clone(&stopping),
                metrics.clone(),
            );
            jobs.spawn(async move {
                metrics.jobs_in_flight.inc();
                let worker = Worker {
                    js,
                    kv,
                    progress,
                    registry: &registry,
                    cancelled: &cancelled,
                    stopping: &stopping,
                    metrics: &metrics,
                };
                worker.handle(message).await;
                metrics.jobs_in_flight.dec();
                drop(permit);
            });
            while jobs.try_join_next().is_some() {}
        }
        if stop_seen {
            break 'pull;
        }
    }
    stopping.store(true, std::sync::atomic::Ordering::SeqCst);
    while jobs.join_next().await.is_some() {}
    watcher.abort();
    Ok(())
}

async fn wait_for_consumer(
    js: &jetstream::Context,
    stop: &Notify,
) -> Result<Option<consumer::PullConsumer>, WorkerError> {
    loop {
        let found = match js.get_stream(STREAM_JOBS).await {
            Ok(stream) => stream
                .get_consumer::<consumer::pull::Config>(CONSUMER_WORKERS)
                .await
                .ok(),
            Err(_) => None,
        };
        if let Some(c) = found {
            return Ok(Some(c));
        }
        tracing::info!("waiting for the scheduler to create {STREAM_JOBS}/{CONSUMER_WORKERS}");
        tokio::select! {
            _ = stop.notified() => return Ok(None),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Keeps the set of cancelled tasks from the `cancel.<task>` marks in the
/// job-state bucket, for as long as the worker runs: a watch that fails or
/// ends (the server restarted) is started again, and as it replays every
/// mark no cancel is missed. A worker that stopped watching would run a
/// cancelled task's power commands.
async fn watch_cancels(kv: kv::Store, cancelled: Arc<Mutex<HashSet<TaskId>>>) {
    let mut pause = CANCEL_WATCH_RETRY_MIN;
    loop {
        match kv.watch_with_history("cancel.>").await {
            Ok(mut watch) => loop {
                match watch.next().await {
                    Some(Ok(entry)) => {
                        pause = CANCEL_WATCH_RETRY_MIN;
                        if let Some(id) = entry
                            .key
                            .strip_prefix("cancel.")
                            .and_then(|k| k.parse().ok())
                        {
                            cancelled
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .insert(id);
                        }
                    }
                    Some(Err(error)) => {
                        tracing::warn!(error = %error, "cancel-mark watch failed; watching again");
                        break;
                    }
                    None => {
                        tracing::warn!("cancel-mark watch ended; watching again");
                        break;
                    }
                }
            },
            Err(error) => {
                tracing::warn!(error = %error, "cannot watch cancel marks; retrying");
            }
        }
        // Watching again replays every mark (with history): none is missed.
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(CANCEL_WATCH_RETRY_MAX);
    }
}

/// Publishes a `step_progress` event when the current action or the count
/// of finished components changed (best effort: progress is for watchers;
/// the outcome travels as a result).
async fn report_progress(
    js: &jetstream::Context,
    job: &JobMessage,
    cp: &Checkpoint,
    last: &mut Option<(usize, usize, usize)>,
) {
    let done = cp
        .components
        .values()
        .filter(|c| c.status == ComponentStatus::Done)
        .count();
    let failed = cp
        .components
        .values()
        .filter(|c| c.status == ComponentStatus::Failed)
        .count();
    let now = (cp.action, done, failed);
    if *last == Some(now) {
        return;
    }
    *last = Some(now);
    let event = serde_json::json!({
        "schema": 1, "task_id": job.id.task, "kind": "step_progress", "stage": job.stage,
        "step_index": job.id.step_index, "component_type": job.job.step.component_type,
        "action": flow_engine::exec::action_label(&job.job, cp.action).unwrap_or_else(|| "done".to_owned()),
        "done": done, "failed": failed, "total": job.job.components.len(),
        "at_ms": SystemClock.now_ms(),
    });
    if let Ok(body) = serde_json::to_vec(&event) {
        let _ = js
            .client()
            .publish(flow_protocol::jobs::event_subject(job.id.task), body.into())
            .await;
    }
}

fn checkpoint_key(message: &JobMessage) -> String {
    format!("job.{}", message.id)
}

/// What a job's handling needs from the worker.
struct Worker<'a> {
    js: jetstream::Context,
    kv: kv::Store,
    /// How often to send a progress ack while a call runs.
    progress: Duration,
    registry: &'a ManagerRegistry,
    cancelled: &'a Mutex<HashSet<TaskId>>,
    stopping: &'a std::sync::atomic::AtomicBool,
    metrics: &'a WorkerMetrics,
}

impl Worker<'_> {
    /// Decodes a delivered job and runs it in a span naming its task, rack,
    /// stage, step and component type.
    async fn handle(self, message: jetstream::Message) {
        if message.info().is_ok_and(|i| i.delivered > 1) {
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
        let span = job_span(&job);
        self.run_job(message, job).instrument(span).await;
    }

    async fn run_job(self, message: jetstream::Message, job: JobMessage) {
        let Worker {
            js,
            kv,
            progress: ack_every,
            registry,
            cancelled,
            stopping,
            metrics,
        } = self;
        let key = checkpoint_key(&job);
        let mut cp: Checkpoint = match kv.get(&key).await {
            Ok(None) => {
                metrics.jobs_started.inc();
                Checkpoint::default()
            }
            Ok(Some(bytes)) => match serde_json::from_slice(&bytes) {
                Ok(cp) => {
                    metrics.jobs_resumed.inc();
                    cp
                }
                Err(error) => {
                    // A checkpoint this worker cannot read (another version?):
                    // starting over repeats only idempotent calls, so go on.
                    tracing::warn!(error = %error, key = %key, "unreadable checkpoint: starting the step over");
                    Checkpoint::default()
                }
            },
            Err(error) => {
                // Do not run blind: the checkpoint may exist. Try again soon.
                tracing::warn!(error = %error, key = %key, "checkpoint not readable now; job handed back");
                metrics.nak("retry");
                let _ = message
                    .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                    .await;
                return;
            }
        };
        let clock = SystemClock;
        let started_ms = cp
            .finished
            .first()
            .map(|a| a.started_ms)
            // Still in its first action (a poll, a wait): when that began.
            .or(cp.action_started_ms)
            .unwrap_or_else(|| clock.now_ms());
        let task = job.id.task;
        let is_cancelled = || {
            cancelled
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&task)
        };
        let mut last_report = None;
        loop {
            // Keep the job alive while a long call runs.
            // Aborted when dropped: if this job's future is dropped (its task
            // aborted, a panic), no orphan keeps acking a job nobody runs.
            let ticker = AbortOnDrop({
                let message = message.clone();
                let every = ack_every;
                tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(every).await;
                        if message.ack_with(AckKind::Progress).await.is_err() {
                            return;
                        }
                    }
                })
            });
            let progress = advance(&job.job, &mut cp, registry, &clock, &is_cancelled).await;
            drop(ticker);
            report_progress(&js, &job, &cp, &mut last_report).await;
            let saved = match serde_json::to_vec(&cp) {
                Ok(bytes) => match kv.put(&key, bytes.into()).await {
                    Ok(_) => {
                        metrics.checkpoints_written.inc();
                        true
                    }
                    Err(error) => {
                        metrics.checkpoint_errors.inc();
                        tracing::warn!(error = %error, "checkpoint not saved");
                        false
                    }
                },
                Err(error) => {
                    metrics.checkpoint_errors.inc();
                    tracing::error!(error = %error, "checkpoint not encodable");
                    false
                }
            };
            let outcome = match progress {
                Progress::WaitUntil(at) => {
                    let delay = Duration::from_millis(at.saturating_sub(clock.now_ms()));
                    if stopping.load(std::sync::atomic::Ordering::SeqCst) {
                        metrics.nak("handback");
                        let _ = message.ack_with(AckKind::Nak(None)).await;
                        return;
                    }
                    if delay <= INLINE_WAIT {
                        tokio::time::sleep(delay).await;
                        continue;
                    }
                    if !saved {
                        // Handing the job back now would let its next
                        // delivery start from an older checkpoint and repeat
                        // every call made since: keep it, wait here (alive),
                        // and save again before handing it back.
                        let _ = message.ack_with(AckKind::Progress).await;
                        tokio::time::sleep(delay.min(UNSAVED_RETRY)).await;
                        continue;
                    }
                    let delay = delay.min(MAX_NAK_DELAY);
                    tracing::debug!(delay_ms = delay.as_millis() as u64, "durable wait");
                    metrics.nak("wait");
                    let _ = message.ack_with(AckKind::Nak(Some(delay))).await;
                    return;
                }
                Progress::Done => StepOutcome::Completed,
                Progress::Failed(f) => StepOutcome::Failed {
                    action: f.action,
                    message: f.message,
                },
                Progress::Cancelled => StepOutcome::Cancelled,
            };
            let result = ResultMessage {
                schema: 1,
                id: job.id,
                outcome,
                components: cp
                    .components
                    .iter()
                    .map(|(name, s)| {
                        let status = match s.status {
                            ComponentStatus::Done => "done",
                            ComponentStatus::Failed => "failed",
                            _ => "pending",
                        };
                        (
                            name.clone(),
                            ComponentResult {
                                status: status.to_owned(),
                                result: cp.results.get(name).cloned().unwrap_or_default(),
                                attempts: s.attempts,
                                error: s.last_error.clone(),
                            },
                        )
                    })
                    .collect(),
                calls: cp.calls,
                started_ms,
                finished_ms: clock.now_ms(),
            };
            let body = match serde_json::to_vec(&result) {
                Ok(body) => body,
                Err(error) => {
                    tracing::error!(error = %error, "result not encodable");
                    return;
                }
            };
            let mut saved = saved;
            loop {
                let publish = js
                    .send_publish(
                        result_subject(task),
                        jetstream::message::PublishMessage::build()
                            .payload(body.clone().into())
                            .message_id(format!("result/{}", job.id)),
                    )
                    .await;
                let acked = match publish {
                    Ok(ack) => ack.await.is_ok(),
                    Err(_) => false,
                };
                if acked {
                    tracing::info!(outcome = ?result.outcome, calls = result.calls, "step finished");
                    let outcome = match result.outcome {
                        StepOutcome::Completed => "completed",
                        StepOutcome::Failed { .. } => "failed",
                        StepOutcome::Cancelled => "cancelled",
                    };
                    metrics
                        .jobs_finished
                        .get_or_create(&OutcomeLabels { outcome })
                        .inc();
                    let _ = message.ack().await;
                    let _ = kv.delete(&key).await;
                    return;
                }
                if saved {
                    // Not acknowledged by JetStream: redeliver the job; the
                    // saved checkpoint makes the retry cheap (no call is
                    // repeated) and the msg id dedups.
                    tracing::warn!("result not published; job will be redelivered");
                    metrics.nak("retry");
                    let _ = message
                        .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                        .await;
                    return;
                }
                // Neither the result nor the checkpoint reached NATS: a
                // redelivery would run the step again. Keep it and retry.
                tracing::warn!("result and checkpoint not saved; retrying here");
                let _ = message.ack_with(AckKind::Progress).await;
                tokio::time::sleep(UNSAVED_RETRY).await;
                if let Ok(bytes) = serde_json::to_vec(&cp) {
                    saved = kv.put(&key, bytes.into()).await.is_ok();
                }
            }
        }
    }
}

/// The span every line about a job is logged in.
fn job_span(job: &JobMessage) -> tracing::Span {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_acks_come_three_times_per_ack_wait_at_most_every_ten_seconds() {
        let s = Duration::from_secs;
        assert_eq!(progress_every(s(30)), s(10));
        assert_eq!(progress_every(s(300)), s(10));
        assert_eq!(progress_every(s(6)), s(2));
        assert_eq!(
            progress_every(Duration::from_millis(90)),
            Duration::from_millis(100)
        );
    }
}
