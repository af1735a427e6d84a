//! Pulling jobs from the shared durable consumer: bounded fetches, never
//! more jobs held than free slots, and nothing stranded on a worker that
//! stops.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv};
use flow_hardware::ManagerRegistry;
use flow_protocol::jobs::{CONSUMER_WORKERS, STREAM_JOBS};
use flow_telemetry::ErrorChain;
use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::ack::{Disposition, dispose};
use crate::cancel_marks::CancelMarks;
use crate::job::Job;
use crate::metrics::WorkerMetrics;

/// Lifetime of one fetch (pull request): the longest a stopping worker
/// keeps receiving (and handing back) jobs, and how often an idle worker
/// asks again.
pub const PULL_EXPIRES: Duration = Duration::from_secs(2);
/// How long past [`PULL_EXPIRES`] a worker waits for the server to end a
/// fetch before it fetches again (the pull request died with a server
/// restart; the client alone would wait 5 s more).
const PULL_GRACE: Duration = Duration::from_millis(500);
/// The pause after a fetch that could not be made.
const FETCH_RETRY: Duration = Duration::from_secs(1);
/// How often a worker looks again for the jobs consumer the scheduler
/// creates.
const CONSUMER_POLL: Duration = Duration::from_secs(1);

/// What every job of a worker shares.
pub(crate) struct Shared {
    pub js: jetstream::Context,
    pub kv: kv::Store,
    pub keep_alive: Duration,
    pub registry: Arc<ManagerRegistry>,
    pub cancelled: CancelMarks,
    pub stopping: Arc<AtomicBool>,
    pub metrics: WorkerMetrics,
    pub event_holds: crate::hold::Holds,
}

/// Waits until the scheduler has created the jobs consumer (`None`: the
/// worker was stopped first).
pub(crate) async fn wait_for_consumer(
    js: &jetstream::Context,
    stop: &CancellationToken,
) -> Option<consumer::PullConsumer> {
    loop {
        let found = match js.get_stream(STREAM_JOBS).await {
            Ok(stream) => stream
                .get_consumer::<consumer::pull::Config>(CONSUMER_WORKERS)
                .await
                .ok(),
            Err(_) => None,
        };
        if found.is_some() {
            return found;
        }
        tracing::info!("waiting for the scheduler to create {STREAM_JOBS}/{CONSUMER_WORKERS}");
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(CONSUMER_POLL) => {}
        }
    }
}

/// How long a fetch given up on is still read for jobs to hand back.
const LATE_JOBS_FOR: Duration = Duration::from_secs(10);

/// Hands back every job that still arrives on a fetch given up on, until
/// the server ends it or [`LATE_JOBS_FOR`] has passed.
async fn hand_back_late(mut batch: consumer::pull::Batch, metrics: WorkerMetrics) {
    let until = tokio::time::Instant::now() + LATE_JOBS_FOR;
    while let Ok(Some(message)) = tokio::time::timeout_at(until, batch.next()).await {
        if let Ok(message) = message {
            tracing::debug!("a job arrived on a fetch given up on; handed back");
            dispose(&message, Disposition::HandBack, &metrics).await;
        }
    }
}

/// Pulls and runs jobs until `stop`, at most `max_jobs` at once; then lets
/// the jobs in flight reach their next checkpoint and hand back.
///
/// One bounded fetch at a time, for as many jobs as there are free slots:
/// when the worker stops, no pull request of its outlives the current
/// fetch (at most [`PULL_EXPIRES`]), so no job is stranded on a worker that
/// is gone until its ack wait runs out.
pub(crate) async fn run(
    consumer: consumer::PullConsumer,
    max_jobs: usize,
    shared: Shared,
    stop: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(max_jobs.max(1)));
    let shared = Arc::new(shared);
    let mut jobs = tokio::task::JoinSet::new();
    'pull: loop {
        // Wait for a free slot first: never hold more jobs than slots.
        let first = tokio::select! {
            () = stop.cancelled() => break 'pull,
            p = Arc::clone(&permits).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break 'pull,
            },
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
                tracing::warn!(error = %ErrorChain(&error), "fetch failed; retrying");
                tokio::time::sleep(FETCH_RETRY).await;
                continue;
            }
        };
        // The server ends a fetch at PULL_EXPIRES; if it went away, the
        // request went with it and the client would wait 5 s more: this
        // worker gives up on the fetch a little after PULL_EXPIRES instead.
        let fetch_ends = tokio::time::Instant::now() + PULL_EXPIRES + PULL_GRACE;
        loop {
            // Cancel-safe: an unyielded message stays in the batch, and a
            // message already received is returned before the deadline is
            // looked at; the token only waits.
            let next = if stop.is_cancelled() {
                tokio::time::timeout_at(fetch_ends, batch.next()).await
            } else {
                tokio::select! {
                    () = stop.cancelled() => continue,
                    m = tokio::time::timeout_at(fetch_ends, batch.next()) => m,
                }
            };
            let Ok(next) = next else {
                tracing::debug!("fetch not ended by the server in time; fetching again");
                // A loaded server may still deliver to this pull request:
                // what arrives goes back at once rather than waiting out
                // its ack wait on a worker that no longer reads it.
                tokio::spawn(hand_back_late(batch, shared.metrics.clone()));
                break;
            };
            let Some(message) = next else { break };
            let message = match message {
                Ok(m) => m,
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&*error), "job fetch error");
                    continue;
                }
            };
            // Still arriving after a stop, or more than the slots: another
            // worker takes it, at once.
            let permit = match Arc::clone(&permits).try_acquire_owned() {
                Ok(p) if !stop.is_cancelled() => p,
                _ => {
                    dispose(&message, Disposition::HandBack, &shared.metrics).await;
                    continue;
                }
            };
            let shared = Arc::clone(&shared);
            jobs.spawn(async move {
                shared.metrics.jobs_in_flight.inc();
                let job = Job {
                    js: shared.js.clone(),
                    kv: shared.kv.clone(),
                    keep_alive: shared.keep_alive,
                    registry: &shared.registry,
                    cancelled: &shared.cancelled,
                    stopping: &shared.stopping,
                    metrics: &shared.metrics,
                    holds: &shared.event_holds,
                };
                job.handle(message).await;
                shared.metrics.jobs_in_flight.dec();
                drop(permit);
            });
            while jobs.try_join_next().is_some() {}
        }
        if stop.is_cancelled() {
            break 'pull;
        }
    }
    shared
        .stopping
        .store(true, std::sync::atomic::Ordering::SeqCst);
    while jobs.join_next().await.is_some() {}
}
