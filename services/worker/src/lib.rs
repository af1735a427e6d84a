//! `flow-worker`: a stateless worker. It pulls step jobs from the durable
//! consumers of the job partitions it owns — the workers divide them among
//! themselves, so that a rack's jobs run on one worker ([`members`]) — and
//! from the unpartitioned `flow-workers` ([`pull`]), runs each with the engine
//! against the hardware ([`job`]), keeps the step's checkpoint in the
//! `flow_job_state` KV bucket ([`checkpoint`]), and turns every wait longer
//! than a second into a nak with that delay, so its slot is free and any
//! worker resumes the step later ([`ack`] maps every outcome to its
//! acknowledgement). A worker that dies loses at most the call in flight.
//! Firmware images are verified and served to BMCs from [`images`].
//! Results go to `flow.results.<task>`; cancel marks are watched in the
//! bucket ([`cancel_marks`]).
//!
//! Every job is handled in a `job` span with the fields `task`, `rack`,
//! `stage`, `step` and `component` (the step's component type); hardware
//! calls log in a `hardware_call` span naming the component. The worker's
//! Prometheus metrics are in [`metrics`]; [`instrument`] wraps the managers
//! to count and time hardware calls.

pub mod ack;
mod admit;
pub mod cancel_marks;
pub mod checkpoint;
mod hold;
pub mod images;
pub mod instrument;
mod job;
pub mod members;
pub mod metrics;
pub mod observe;
mod observer;
pub mod progress;
mod pull;
mod stored;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use flow_hardware::ManagerRegistry;
use std::collections::BTreeSet;

use flow_protocol::jobs::BUCKET_JOB_STATE;
use flow_protocol::partition::BUCKET_WORKERS;
use tokio_util::sync::CancellationToken;

use crate::cancel_marks::CancelMarks;
use crate::metrics::WorkerMetrics;

pub use progress::{PROGRESS_EVERY, progress_every};
pub use pull::PULL_EXPIRES;

/// Waits up to this long are slept in place; longer ones become a nak with
/// a delay (`docs/architecture.md`, "Durable waits": "any wait longer than
/// about a second").
pub const INLINE_WAIT: Duration = Duration::from_secs(1);

/// A verification's wait up to this long is held in the worker when its
/// components' BMCs have an open event stream, so that an event ends it
/// (`flow_executor::wake`); longer ones, and waits without a stream, are
/// durable waits as before.
pub const EVENT_WAIT: Duration = Duration::from_secs(30);

/// The longest delay of one nak: a longer wait comes back several times
/// (cheaply: load the checkpoint, see the time has not come), so a cancel
/// mark is seen within this bound even in the middle of a long Sleep.
pub const MAX_NAK_DELAY: Duration = Duration::from_secs(5);

/// Jobs a worker holds at once when nothing says otherwise. A job holds
/// no slot through a durable wait, and its hardware calls are bounded by
/// the per-BMC and whole-worker request caps (`flow_redfish::RequestCap`),
/// so this only bounds memory and how many jobs one worker takes ahead of
/// the others (`docs/architecture.md`, "Worker capacity").
pub const DEFAULT_MAX_JOBS: usize = 256;

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Jobs in flight at once.
    pub max_jobs: usize,
    /// Where firmware images are verified and served to BMCs from; none:
    /// this worker refuses every firmware update, naming the setting.
    pub images: Option<Arc<images::ImageStore>>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            max_jobs: DEFAULT_MAX_JOBS,
            images: None,
        }
    }
}

/// Why the worker stopped.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The job-state bucket could not be opened.
    #[error("cannot open the JetStream bucket {BUCKET_JOB_STATE}")]
    Bucket(#[source] jetstream::context::KeyValueError),
    /// The workers' membership bucket could not be opened.
    #[error("cannot open the JetStream bucket {BUCKET_WORKERS}")]
    MembersBucket(#[source] jetstream::context::KeyValueError),
}

/// Runs until `stop` is cancelled: then stops pulling and lets jobs in
/// flight reach their next checkpoint.
pub async fn run(
    client: async_nats::Client,
    registry: ManagerRegistry,
    config: WorkerConfig,
    stop: CancellationToken,
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
    stop: CancellationToken,
    metrics: WorkerMetrics,
) -> Result<(), WorkerError> {
    let js = jetstream::new(client);
    let Some(mut consumers) = pull::wait_for_consumers(&js, &stop).await else {
        return Ok(());
    };
    let ack_wait = match consumers.unpartitioned.info().await {
        Ok(info) => info.config.ack_wait,
        Err(_) => consumers.unpartitioned.cached_info().config.ack_wait,
    };
    let keep_alive = progress_every(ack_wait);
    tracing::info!(
        ack_wait_ms = ack_wait.as_millis() as u64,
        progress_ms = keep_alive.as_millis() as u64,
        "jobs consumer found"
    );
    let Some(kv) = flow_jetstream::open_bucket(&js, BUCKET_JOB_STATE, BUCKET_RETRY, &stop)
        .await
        .map_err(WorkerError::Bucket)?
    else {
        return Ok(());
    };
    let Some(members) = flow_jetstream::open_bucket(&js, BUCKET_WORKERS, BUCKET_RETRY, &stop)
        .await
        .map_err(WorkerError::MembersBucket)?
    else {
        return Ok(());
    };
    let me = uuid::Uuid::new_v4().simple().to_string();
    let (owned, owned_rx) = tokio::sync::watch::channel(BTreeSet::new());
    // Dropped with this future: a worker that dies stops refreshing its key.
    let membership = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(members::run(
        members,
        members::Group::Workers,
        me,
        owned,
        metrics.workers_seen.clone(),
        stop.clone(),
    )));
    let cancelled = CancelMarks::default();
    let watcher = tokio::spawn(cancelled.clone().watch(kv.clone()));
    let shared = pull::Shared {
        js,
        kv,
        keep_alive,
        registry: Arc::new(instrument::instrument(&registry, &metrics)),
        cancelled,
        stopping: Arc::default(),
        metrics,
        event_holds: hold::Holds::new(config.max_jobs / 2),
        images: match config.images {
            Some(store) => store as Arc<dyn flow_executor::images::ImageSource>,
            None => Arc::new(images::store::NoStore),
        },
    };
    pull::run(consumers, owned_rx, config.max_jobs, shared, stop).await;
    watcher.abort();
    // Its key was deleted when the stop came (the others took its
    // partitions then); this only waits for the delete to be sent.
    let _ = membership.await;
    // Every job has ended or been handed back: log out of the BMCs.
    registry.close_all().await;
    Ok(())
}

/// The pause before a bucket that did not answer in time is asked for again.
const BUCKET_RETRY: Duration = Duration::from_secs(1);
