//! Flow's streams, consumers and bucket, created idempotently at start-up
//! (by every scheduler; the first creates, the others find them), each with
//! the configured replica count and placement. An existing stream with
//! another replica count (R1 where R3 is wanted) is reported and updated;
//! JetStream moves its data, and a refusal (a single server cannot hold R3)
//! is an error naming the stream.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use flow_protocol::jobs::{
    BUCKET_JOB_STATE, CONSUMER_SCHEDULER, CONSUMER_SUBMIT, CONSUMER_WORKERS, PARKED_MAX_AGE,
    PARKED_MAX_BYTES, PARKED_MAX_MESSAGES, STREAM_EVENTS, STREAM_JOBS, STREAM_PARKED,
    STREAM_RESULTS, STREAM_TASKS, SUBJECT_SUBMIT,
};
use flow_protocol::partition::{BUCKET_WORKERS, Partition, UNPARTITIONED_FILTER};
use flow_protocol::state::{STATE_SUBJECTS, STREAM_STATE};

/// How long JetStream remembers a `Nats-Msg-Id` on the work queues (a
/// repeat within it is dropped).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// How long task events and job checkpoints are kept.
pub const EVENTS_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Jobs held by workers at once, on each jobs consumer (a partition's, or
/// the unpartitioned one).
pub const JOBS_MAX_ACK_PENDING: i64 = 1024;
/// How long the scheduler's consumers wait for an ack before redelivering.
pub const SCHEDULER_ACK_WAIT: Duration = Duration::from_secs(30);

/// The subjects of the job stream (`flow.jobs.<partition>.<type>`;
/// `flow.jobs.<type>` before partitions).
pub const JOB_SUBJECTS: &str = "flow.jobs.>";
/// The subjects of the result stream (`flow.results.<task>`).
pub const RESULT_SUBJECTS: &str = "flow.results.>";
/// The subjects of the event stream (`flow.events.task.<task>`,
/// `flow.events.submit.<request>`).
pub const EVENT_SUBJECTS: &str = "flow.events.>";
/// The subjects of the parked stream (`flow.parked.<stream>`).
pub const PARKED_SUBJECTS: &str = "flow.parked.>";

/// The stream behind a KV bucket.
fn bucket_stream(bucket: &str) -> String {
    format!("KV_{bucket}")
}

/// What the topology is made of that a deployment chooses.
#[derive(Debug, Clone)]
pub struct Topology {
    /// How long a job may go without an ack or progress before another
    /// worker gets it.
    pub job_ack_wait: Duration,
    /// Replicas of every stream and the bucket (consumers follow their
    /// stream).
    pub replicas: usize,
    /// Placement tags (empty: anywhere).
    pub placement_tags: Vec<String>,
}

impl Topology {
    /// One replica, anywhere: a single server.
    pub fn single(job_ack_wait: Duration) -> Topology {
        Topology {
            job_ack_wait,
            replicas: 1,
            placement_tags: Vec::new(),
        }
    }

    fn placement(&self) -> Option<stream::Placement> {
        (!self.placement_tags.is_empty()).then(|| stream::Placement {
            cluster: None,
            tags: self.placement_tags.clone(),
        })
    }

    fn place(&self, config: stream::Config) -> stream::Config {
        stream::Config {
            num_replicas: self.replicas,
            placement: self.placement(),
            ..config
        }
    }
}

/// Why the topology could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// A stream, consumer or bucket could not be created or read.
    #[error("cannot create or read {what}")]
    Create {
        /// Which (`stream FLOW_JOBS`, `consumer FLOW_JOBS/workers`).
        what: String,
        /// Why.
        #[source]
        source: async_nats::Error,
    },
    /// An existing stream has other replicas or placement than configured
    /// and JetStream refused to change it.
    #[error(
        "stream {stream} has {have} replica(s), {want} wanted (FLOW_JETSTREAM_REPLICAS), \
         and JetStream refused the update"
    )]
    Replicas {
        /// The stream.
        stream: String,
        /// Its replica count.
        have: usize,
        /// The configured count.
        want: usize,
        /// JetStream's answer.
        #[source]
        source: async_nats::Error,
    },
}

impl TopologyError {
    /// Whether trying again may succeed: JetStream did not answer in time,
    /// or it could not place a stream's replicas because a peer is offline
    /// now ([`no_peers_now`]) — a node restarting, or a cluster just formed
    /// whose meta leader has not yet heard from every node. A cluster too
    /// small for the replicas gets the same answer every time: the
    /// caller's attempts are bounded.
    pub fn is_transient(&self) -> bool {
        timed_out(self) || no_peers_now(self)
    }
}

/// Whether `error`, or any error beneath it, is JetStream refusing to
/// create a stream because no peers could hold its replicas (error code
/// 10005, "no suitable peers for placement").
pub fn no_peers_now(error: &(dyn std::error::Error + 'static)) -> bool {
    use async_nats::jetstream::context::{CreateStreamError, CreateStreamErrorKind};
    let mut source = Some(error);
    while let Some(e) = source {
        let api = e
            .downcast_ref::<CreateStreamError>()
            .and_then(|c| match c.kind() {
                CreateStreamErrorKind::JetStream(api) => Some(api),
                _ => None,
            });
        if api.is_some_and(|api| {
            api.error_code() == async_nats::jetstream::ErrorCode::CLUSTER_NO_PEERS
        }) {
            return true;
        }
        source = e.source();
    }
    false
}

/// Whether `error`, or any error beneath it, says that JetStream (or the
/// connection to it) did not answer in time — during a server restart or a
/// leader election — rather than refusing the request.
pub fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(e) = source {
        if e.to_string().contains("timed out") {
            return true;
        }
        source = e.source();
    }
    false
}

fn create(what: impl Into<String>) -> impl FnOnce(async_nats::Error) -> TopologyError {
    let what = what.into();
    move |source| TopologyError::Create { what, source }
}

/// A durable pull consumer that never gives up on a message (naks with a
/// delay count as deliveries; deadlines, not delivery counts, end work).
/// Its replicas follow its stream's (0).
fn durable(name: &str, ack_wait: Duration) -> consumer::pull::Config {
    consumer::pull::Config {
        durable_name: Some(name.to_owned()),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait,
        max_deliver: -1,
        ..Default::default()
    }
}

fn work_queue(name: &str, subjects: &str) -> stream::Config {
    stream::Config {
        name: name.to_owned(),
        subjects: vec![subjects.to_owned()],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        duplicate_window: DUPLICATE_WINDOW,
        ..Default::default()
    }
}

fn limits(name: &str, subjects: &str, max_age: Duration) -> stream::Config {
    stream::Config {
        name: name.to_owned(),
        subjects: vec![subjects.to_owned()],
        max_age,
        storage: stream::StorageType::File,
        ..Default::default()
    }
}

/// The bound on [`STREAM_PARKED`]: at most this many bytes and messages,
/// the oldest discarded first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParkedBound {
    /// Bytes.
    pub max_bytes: i64,
    /// Messages.
    pub max_messages: i64,
}

impl ParkedBound {
    /// Flow's bound ([`PARKED_MAX_BYTES`], [`PARKED_MAX_MESSAGES`]).
    pub const DEFAULT: ParkedBound = ParkedBound {
        max_bytes: PARKED_MAX_BYTES,
        max_messages: PARKED_MAX_MESSAGES,
    };
}

/// The parked stream: kept [`PARKED_MAX_AGE`] and within `bound`, the
/// oldest messages discarded first.
fn parked(bound: ParkedBound) -> stream::Config {
    stream::Config {
        max_bytes: bound.max_bytes,
        max_messages: bound.max_messages,
        discard: stream::DiscardPolicy::Old,
        ..limits(STREAM_PARKED, PARKED_SUBJECTS, PARKED_MAX_AGE)
    }
}

/// Creates [`STREAM_PARKED`] within `bound`, or brings an existing one to
/// it (one created before the bound was unbounded).
pub async fn ensure_parked(
    js: &jetstream::Context,
    topology: &Topology,
    bound: ParkedBound,
) -> Result<stream::Stream, TopologyError> {
    stream(js, topology, parked(bound)).await
}

/// The stream as configured: created when missing; when it exists with
/// other replicas, placement or limits, updated to them ([`reconcile`]).
async fn stream(
    js: &jetstream::Context,
    topology: &Topology,
    config: stream::Config,
) -> Result<stream::Stream, TopologyError> {
    let name = config.name.clone();
    let wanted = topology.place(config);
    let found = js
        .get_or_create_stream(wanted.clone())
        .await
        .map_err(|e| create(format!("stream {name}"))(e.into()))?;
    reconcile(js, topology, found, &wanted).await
}

/// Whether `have` lacks a limit `want` sets (limits `want` leaves unset
/// are not compared: the server reports its own defaults for them).
fn limits_differ(have: &stream::Config, want: &stream::Config) -> bool {
    (want.max_bytes > 0 && have.max_bytes != want.max_bytes)
        || (want.max_messages > 0 && have.max_messages != want.max_messages)
        || (!want.max_age.is_zero() && have.max_age != want.max_age)
}

/// An existing stream brought to the configured replicas, placement and
/// limits (with a warning), from the info it was fetched with.
async fn reconcile(
    js: &jetstream::Context,
    topology: &Topology,
    found: stream::Stream,
    wanted: &stream::Config,
) -> Result<stream::Stream, TopologyError> {
    let info = found.cached_info();
    let name = info.config.name.clone();
    let have = info.config.num_replicas.max(1);
    let placement = info
        .config
        .placement
        .as_ref()
        .filter(|p| !p.tags.is_empty());
    let want_placement = topology.placement();
    let same_placement = placement.map(|p| &p.tags) == want_placement.as_ref().map(|p| &p.tags);
    let limits = limits_differ(&info.config, wanted);
    if have == topology.replicas && same_placement && !limits {
        return Ok(found);
    }
    tracing::warn!(
        stream = %name,
        have,
        want = topology.replicas,
        placement = ?want_placement.as_ref().map(|p| &p.tags),
        max_bytes = wanted.max_bytes,
        max_messages = wanted.max_messages,
        "stream's replicas, placement or limits differ from the configuration: updating it"
    );
    let mut update = stream::Config {
        num_replicas: topology.replicas,
        placement: want_placement,
        ..info.config.clone()
    };
    if limits {
        update.max_bytes = wanted.max_bytes;
        update.max_messages = wanted.max_messages;
        update.max_age = wanted.max_age;
        update.discard = wanted.discard;
    }
    js.update_stream(update)
        .await
        .map_err(|e| TopologyError::Replicas {
            stream: name.clone(),
            have,
            want: topology.replicas,
            source: e.into(),
        })?;
    tracing::info!(stream = %name, replicas = topology.replicas, "stream updated");
    Ok(found)
}

async fn durable_on(
    stream: &stream::Stream,
    name: &str,
    config: consumer::pull::Config,
) -> Result<(), TopologyError> {
    stream
        .get_or_create_consumer(name, config)
        .await
        .map(drop)
        .map_err(|e| create(format!("consumer {name}"))(e.into()))
}

/// Creates the streams, consumers and bucket, or finds them (and brings
/// their replicas and placement to the configured ones).
pub async fn ensure(js: &jetstream::Context, topology: &Topology) -> Result<(), TopologyError> {
    let tasks = stream(js, topology, work_queue(STREAM_TASKS, SUBJECT_SUBMIT)).await?;
    durable_on(
        &tasks,
        CONSUMER_SUBMIT,
        durable(CONSUMER_SUBMIT, SCHEDULER_ACK_WAIT),
    )
    .await?;
    let jobs = stream(js, topology, work_queue(STREAM_JOBS, JOB_SUBJECTS)).await?;
    let results = stream(js, topology, work_queue(STREAM_RESULTS, RESULT_SUBJECTS)).await?;
    stream(
        js,
        topology,
        limits(STREAM_EVENTS, EVENT_SUBJECTS, EVENTS_MAX_AGE),
    )
    .await?;
    ensure_parked(js, topology, ParkedBound::DEFAULT).await?;
    durable_on(
        &results,
        CONSUMER_SCHEDULER,
        durable(CONSUMER_SCHEDULER, SCHEDULER_ACK_WAIT),
    )
    .await?;
    let hardware = stream(
        js,
        topology,
        work_queue(
            flow_protocol::event::STREAM_HARDWARE,
            flow_protocol::event::HARDWARE_SUBJECTS,
        ),
    )
    .await?;
    durable_on(
        &hardware,
        flow_protocol::event::CONSUMER_HARDWARE,
        durable(flow_protocol::event::CONSUMER_HARDWARE, SCHEDULER_ACK_WAIT),
    )
    .await?;
    stream(js, topology, last_per_subject(STREAM_STATE, STATE_SUBJECTS)).await?;
    bucket(js, topology, job_state_bucket(topology)).await?;
    bucket(js, topology, workers_bucket(topology)).await?;
    // Last: a worker starts when it finds these, and everything else
    // exists by then.
    job_consumers(&jobs, topology).await
}

/// The jobs' consumers: the unpartitioned one first (an older topology's
/// `flow-workers` took every job subject; its filter is narrowed to
/// `flow.jobs.<type>` so that it overlaps no partition's, and what it
/// holds is still pulled), then one per partition. Workers wait for the
/// last partition's consumer, so every other exists when they start.
async fn job_consumers(jobs: &stream::Stream, topology: &Topology) -> Result<(), TopologyError> {
    let config = |name: &str, filter: String| consumer::pull::Config {
        max_ack_pending: JOBS_MAX_ACK_PENDING,
        filter_subject: filter,
        ..durable(name, topology.job_ack_wait)
    };
    let unpartitioned = config(CONSUMER_WORKERS, UNPARTITIONED_FILTER.to_owned());
    match jobs
        .get_consumer::<consumer::pull::Config>(CONSUMER_WORKERS)
        .await
    {
        Ok(existing) if existing.cached_info().config.filter_subject != UNPARTITIONED_FILTER => {
            tracing::warn!(
                consumer = CONSUMER_WORKERS,
                filter = UNPARTITIONED_FILTER,
                "the jobs consumer of an older topology takes every job subject: narrowing it"
            );
            jobs.update_consumer(unpartitioned)
                .await
                .map(drop)
                .map_err(|e| create(format!("consumer {CONSUMER_WORKERS}"))(e.into()))?;
        }
        _ => durable_on(jobs, CONSUMER_WORKERS, unpartitioned).await?,
    }
    for partition in Partition::all() {
        let name = partition.consumer();
        durable_on(jobs, &name, config(&name, partition.filter())).await?;
    }
    Ok(())
}

/// The job-state bucket: checkpoints and cancel marks, kept a week.
fn job_state_bucket(topology: &Topology) -> jetstream::kv::Config {
    jetstream::kv::Config {
        bucket: BUCKET_JOB_STATE.to_owned(),
        history: 1,
        max_age: EVENTS_MAX_AGE,
        storage: stream::StorageType::File,
        num_replicas: topology.replicas,
        placement: topology.placement(),
        ..Default::default()
    }
}

/// How long a worker's key in [`BUCKET_WORKERS`] outlives its last
/// refresh (workers decide liveness sooner, from when they last saw it:
/// `flow_worker::members`).
pub const WORKERS_MAX_AGE: Duration = Duration::from_secs(30);

/// The workers' membership bucket: one short-lived key per running worker.
fn workers_bucket(topology: &Topology) -> jetstream::kv::Config {
    jetstream::kv::Config {
        bucket: BUCKET_WORKERS.to_owned(),
        history: 1,
        max_age: WORKERS_MAX_AGE,
        storage: stream::StorageType::File,
        num_replicas: topology.replicas,
        placement: topology.placement(),
        ..Default::default()
    }
}

/// A stream that keeps the last message of each subject, for as long as
/// there is one (the state of each component: a reader learns all of it
/// from the stream, however long ago a component last changed).
fn last_per_subject(name: &str, subjects: &str) -> stream::Config {
    stream::Config {
        name: name.to_owned(),
        subjects: vec![subjects.to_owned()],
        max_messages_per_subject: 1,
        storage: stream::StorageType::File,
        ..Default::default()
    }
}

/// A bucket: created when missing; when its stream exists, checked like
/// the others.
async fn bucket(
    js: &jetstream::Context,
    topology: &Topology,
    config: jetstream::kv::Config,
) -> Result<(), TopologyError> {
    let name = bucket_stream(&config.bucket);
    let what = format!("bucket {}", config.bucket);
    match js.get_stream(&name).await {
        Ok(existing) => {
            // A bucket's limits are its own: only replicas and placement
            // are brought to the configuration.
            let own = existing.cached_info().config.clone();
            reconcile(js, topology, existing, &own).await.map(drop)
        }
        Err(e)
            if matches!(
                e.kind(),
                jetstream::context::GetStreamErrorKind::JetStream(ref j)
                    if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
            ) =>
        {
            js.create_key_value(config)
                .await
                .map(drop)
                .map_err(|e| create(what)(e.into()))
        }
        Err(e) => Err(create(what)(e.into())),
    }
}

/// How the workers have divided the job partitions, as JetStream shows it:
/// the workers' keys in the `flow_workers` bucket and the pulls waiting on each
/// partition's consumer, in partition order (`None`: not readable now).
/// Settled when every partition has one waiting pull from its one owner.
pub async fn partition_division(js: &jetstream::Context) -> Option<(usize, Vec<usize>)> {
    use futures::StreamExt;
    let bucket = js.get_key_value(BUCKET_WORKERS).await.ok()?;
    let keys = bucket
        .keys()
        .await
        .ok()?
        .filter(|k| {
            std::future::ready(
                k.as_ref()
                    .is_ok_and(|k| k.starts_with(flow_protocol::partition::WORKER_KEY_PREFIX)),
            )
        })
        .count()
        .await;
    let stream = js.get_stream(STREAM_JOBS).await.ok()?;
    let mut waiting = Vec::new();
    for partition in Partition::all() {
        let mut consumer = stream
            .get_consumer::<consumer::pull::Config>(&partition.consumer())
            .await
            .ok()?;
        waiting.push(consumer.info().await.ok()?.num_waiting);
    }
    Some((keys, waiting))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_anywhere_in_the_chain_is_worth_another_try_and_a_refusal_is_not() {
        let timed_out = TopologyError::Create {
            what: "stream FLOW_TASKS".into(),
            source: Box::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "jetstream request timed out",
            )),
        };
        assert!(timed_out.is_transient());
        let refused = TopologyError::Create {
            what: "stream FLOW_TASKS".into(),
            source: Box::new(std::io::Error::other(
                "replicas > 1 not supported in non-clustered mode",
            )),
        };
        assert!(!refused.is_transient());
    }

    fn refusal(code: usize, err_code: u64, description: &str) -> TopologyError {
        use async_nats::jetstream::context::{CreateStreamError, CreateStreamErrorKind};
        let api: async_nats::jetstream::Error = serde_json::from_value(serde_json::json!({
            "code": code,
            "err_code": err_code,
            "description": description,
        }))
        .expect("a JetStream API error");
        TopologyError::Create {
            what: "stream FLOW_STATE".into(),
            source: Box::new(CreateStreamError::new(CreateStreamErrorKind::JetStream(
                api,
            ))),
        }
    }

    #[test]
    fn no_peers_for_placement_is_worth_another_try_and_other_refusals_are_not() {
        let offline = refusal(400, 10005, "no suitable peers for placement, peer offline");
        assert!(offline.is_transient());
        assert!(!timed_out(&offline));
        let exists = refusal(
            400,
            10058,
            "stream name already in use with a different configuration",
        );
        assert!(!exists.is_transient());
    }
}
