//! Pulling jobs from the durable consumers: the partitions this worker
//! owns ([`crate::members`]) and the unpartitioned one; bounded fetches,
//! never more jobs held than slots, and nothing stranded on a worker that
//! stops or gives a partition up.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv};
use flow_hardware::ManagerRegistry;
use flow_protocol::jobs::{CONSUMER_WORKERS, STREAM_JOBS};
use flow_protocol::partition::Partition;
use flow_telemetry::ErrorChain;
use futures::StreamExt;
use tokio::sync::{Semaphore, watch};
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
/// How often a worker looks again for the jobs consumers the scheduler
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
    /// Where firmware images are verified and served from.
    pub images: Arc<dyn flow_executor::images::ImageSource>,
}

/// The jobs consumers: the unpartitioned one, which every worker pulls,
/// and one per partition, pulled by the worker that owns it
/// ([`crate::members`]).
pub(crate) struct Consumers {
    pub unpartitioned: consumer::PullConsumer,
    pub partitions: BTreeMap<Partition, consumer::PullConsumer>,
}

/// Waits until the scheduler has created the jobs consumers (`None`: the
/// worker was stopped first). The scheduler creates the last partition's
/// last of all (`flow_jetstream::topology::ensure`).
pub(crate) async fn wait_for_consumers(
    js: &jetstream::Context,
    stop: &CancellationToken,
) -> Option<Consumers> {
    loop {
        if let Some(found) = consumers(js).await {
            return Some(found);
        }
        tracing::info!("waiting for the scheduler to create the consumers of {STREAM_JOBS}");
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(CONSUMER_POLL) => {}
        }
    }
}

async fn consumers(js: &jetstream::Context) -> Option<Consumers> {
    let stream = js.get_stream(STREAM_JOBS).await.ok()?;
    let get = |name: String| {
        let stream = &stream;
        async move {
            stream
                .get_consumer::<consumer::pull::Config>(&name)
                .await
                .ok()
        }
    };
    let last = Partition::all().last()?;
    let last_consumer = get(last.consumer()).await?;
    let mut partitions = BTreeMap::new();
    for partition in Partition::all().filter(|p| *p != last) {
        partitions.insert(partition, get(partition.consumer()).await?);
    }
    partitions.insert(last, last_consumer);
    Some(Consumers {
        unpartitioned: get(CONSUMER_WORKERS.to_owned()).await?,
        partitions,
    })
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

/// Pulls and runs jobs until `stop`, at most `max_jobs` at once: from
/// the unpartitioned consumer and from each partition `owned` names while
/// it names it. Then lets the jobs in flight reach their next checkpoint
/// and hand back.
pub(crate) async fn run(
    consumers: Consumers,
    mut owned: watch::Receiver<BTreeSet<Partition>>,
    max_jobs: usize,
    shared: Shared,
    stop: CancellationToken,
) {
    let puller = Arc::new(Puller {
        permits: Arc::new(Semaphore::new(max_jobs.max(1))),
        pulling: AtomicUsize::new(1),
        jobs: Mutex::new(tokio::task::JoinSet::new()),
        shared: Arc::new(shared),
        stop: stop.clone(),
    });
    let mut loops = tokio::task::JoinSet::new();
    loops.spawn(Arc::clone(&puller).pull(consumers.unpartitioned.clone(), stop.child_token()));
    let mut running: BTreeMap<Partition, CancellationToken> = BTreeMap::new();
    loop {
        let want = owned.borrow_and_update().clone();
        running.retain(|partition, token| {
            let keep = want.contains(partition);
            if !keep {
                // Its fetch ends within PULL_EXPIRES; its jobs run on.
                token.cancel();
            }
            keep
        });
        for partition in want {
            if let (Some(consumer), std::collections::btree_map::Entry::Vacant(slot)) = (
                consumers.partitions.get(&partition),
                running.entry(partition),
            ) {
                let token = stop.child_token();
                loops.spawn(Arc::clone(&puller).pull(consumer.clone(), token.clone()));
                slot.insert(token);
            }
        }
        puller.pulling.store(running.len() + 1, Ordering::Relaxed);
        puller
            .shared
            .metrics
            .job_partitions
            .set(i64::try_from(running.len()).unwrap_or(i64::MAX));
        while loops.try_join_next().is_some() {}
        tokio::select! {
            () = stop.cancelled() => break,
            changed = owned.changed() => if changed.is_err() {
                stop.cancelled().await;
                break;
            },
        }
    }
    while loops.join_next().await.is_some() {}
    puller.shared.stopping.store(true, Ordering::SeqCst);
    let mut jobs = std::mem::take(&mut *puller.jobs.lock().unwrap_or_else(|e| e.into_inner()));
    while jobs.join_next().await.is_some() {}
}

/// What every pull loop of a worker shares.
struct Puller {
    /// One per job held: never more jobs than `max_jobs`.
    permits: Arc<Semaphore>,
    /// Consumers pulled now: a fetch asks for at most its share of the
    /// free slots.
    pulling: AtomicUsize,
    /// The jobs running: aborted with the worker's future (a crash, in
    /// the tests' terms), awaited when it stops.
    jobs: Mutex<tokio::task::JoinSet<()>>,
    shared: Arc<Shared>,
    /// The worker's stop: what arrives after it is handed back.
    stop: CancellationToken,
}

impl Puller {
    /// Pulls one consumer until `done` (the worker stops, or gives the
    /// partition up): one bounded pull request at a time, when a slot is
    /// free, for this consumer's share of the free slots (an idle request
    /// holds no slot: a busy partition is never kept waiting by idle
    /// ones). The request stays open until its share has come or
    /// [`PULL_EXPIRES`] has passed, not only until the stream is empty: a
    /// partition whose jobs arrive one by one costs one request per share,
    /// not one per job. When
    /// the loop ends, no pull request of its outlives the current fetch
    /// (at most [`PULL_EXPIRES`]), so no job is stranded on a worker that
    /// no longer pulls it until its ack wait runs out. What the last fetch
    /// of a partition given up still brings is run here; handing it back
    /// would only bring it back to this same fetch until the fetch ends.
    async fn pull(self: Arc<Self>, consumer: consumer::PullConsumer, done: CancellationToken) {
        loop {
            // Wait for a free slot first.
            let first = tokio::select! {
                () = done.cancelled() => return,
                p = Arc::clone(&self.permits).acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => return,
                },
            };
            let free = self.permits.available_permits() + 1;
            drop(first);
            let share = (free / self.pulling.load(Ordering::Relaxed).max(1)).max(1);
            let batch = consumer
                .batch()
                .max_messages(share)
                .expires(PULL_EXPIRES)
                .messages()
                .await;
            let batch = match batch {
                Ok(b) => b,
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&error), "fetch failed; retrying");
                    tokio::select! {
                        () = done.cancelled() => return,
                        () = tokio::time::sleep(FETCH_RETRY) => continue,
                    }
                }
            };
            self.take(batch).await;
            if done.is_cancelled() {
                return;
            }
        }
    }

    /// Runs each job of one fetch on a free slot; one that finds none (the
    /// other loops took them meanwhile) goes back for a moment
    /// ([`NO_SLOT_DELAY`](crate::ack::NO_SLOT_DELAY)); after the worker's stop, every one goes back.
    async fn take(&self, mut batch: consumer::pull::Batch) {
        let shared = &self.shared;
        let stop = &self.stop;
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
                return;
            };
            let Some(message) = next else { return };
            let message = match message {
                Ok(m) => m,
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&*error), "job fetch error");
                    continue;
                }
            };
            if stop.is_cancelled() {
                // Another worker takes it, at once.
                dispose(&message, Disposition::HandBack, &shared.metrics).await;
                continue;
            }
            let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
                // Not straight back: this same fetch would take it again.
                dispose(&message, Disposition::NoSlot, &shared.metrics).await;
                continue;
            };
            let shared = Arc::clone(shared);
            let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
            while jobs.try_join_next().is_some() {}
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
                    images: shared.images.as_ref(),
                };
                job.handle(message).await;
                shared.metrics.jobs_in_flight.dec();
                drop(permit);
            });
        }
    }
}
