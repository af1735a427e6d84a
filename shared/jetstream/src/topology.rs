//! Flow's streams, consumers and bucket, created idempotently at start-up
//! (by every scheduler; the first creates, the others find them).

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use flow_protocol::jobs::{
    BUCKET_JOB_STATE, CONSUMER_SCHEDULER, CONSUMER_SUBMIT, CONSUMER_WORKERS, PARKED_MAX_AGE,
    STREAM_EVENTS, STREAM_JOBS, STREAM_PARKED, STREAM_RESULTS, STREAM_TASKS, SUBJECT_SUBMIT,
};

/// How long JetStream remembers a `Nats-Msg-Id` on the work queues (a
/// repeat within it is dropped).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// How long task events and job checkpoints are kept.
pub const EVENTS_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Jobs held by workers at once, across all workers.
pub const JOBS_MAX_ACK_PENDING: i64 = 1024;
/// How long the scheduler's consumers wait for an ack before redelivering.
pub const SCHEDULER_ACK_WAIT: Duration = Duration::from_secs(30);

/// The subjects of the job stream (`flow.jobs.<type>`).
pub const JOB_SUBJECTS: &str = "flow.jobs.>";
/// The subjects of the result stream (`flow.results.<task>`).
pub const RESULT_SUBJECTS: &str = "flow.results.>";
/// The subjects of the event stream (`flow.events.task.<task>`,
/// `flow.events.submit.<request>`).
pub const EVENT_SUBJECTS: &str = "flow.events.>";
/// The subjects of the parked stream (`flow.parked.<stream>`).
pub const PARKED_SUBJECTS: &str = "flow.parked.>";

/// What the topology is made of that a deployment chooses.
#[derive(Debug, Clone, Copy)]
pub struct Topology {
    /// How long a job may go without an ack or progress before another
    /// worker gets it.
    pub job_ack_wait: Duration,
}

/// A durable pull consumer that never gives up on a message (naks with a
/// delay count as deliveries; deadlines, not delivery counts, end work).
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

/// Creates the streams, consumers and bucket, or finds them.
pub async fn ensure(js: &jetstream::Context, topology: Topology) -> Result<(), async_nats::Error> {
    let tasks = js
        .get_or_create_stream(work_queue(STREAM_TASKS, SUBJECT_SUBMIT))
        .await?;
    tasks
        .get_or_create_consumer(
            CONSUMER_SUBMIT,
            durable(CONSUMER_SUBMIT, SCHEDULER_ACK_WAIT),
        )
        .await?;
    let jobs = js
        .get_or_create_stream(work_queue(STREAM_JOBS, JOB_SUBJECTS))
        .await?;
    let results = js
        .get_or_create_stream(work_queue(STREAM_RESULTS, RESULT_SUBJECTS))
        .await?;
    js.get_or_create_stream(limits(STREAM_EVENTS, EVENT_SUBJECTS, EVENTS_MAX_AGE))
        .await?;
    js.get_or_create_stream(limits(STREAM_PARKED, PARKED_SUBJECTS, PARKED_MAX_AGE))
        .await?;
    jobs.get_or_create_consumer(
        CONSUMER_WORKERS,
        consumer::pull::Config {
            max_ack_pending: JOBS_MAX_ACK_PENDING,
            ..durable(CONSUMER_WORKERS, topology.job_ack_wait)
        },
    )
    .await?;
    results
        .get_or_create_consumer(
            CONSUMER_SCHEDULER,
            durable(CONSUMER_SCHEDULER, SCHEDULER_ACK_WAIT),
        )
        .await?;
    js.get_or_create_stream(work_queue(
        flow_protocol::event::STREAM_HARDWARE,
        flow_protocol::event::HARDWARE_SUBJECTS,
    ))
    .await?
    .get_or_create_consumer(
        flow_protocol::event::CONSUMER_HARDWARE,
        durable(flow_protocol::event::CONSUMER_HARDWARE, SCHEDULER_ACK_WAIT),
    )
    .await?;
    js.create_key_value(jetstream::kv::Config {
        bucket: BUCKET_JOB_STATE.to_owned(),
        history: 1,
        max_age: EVENTS_MAX_AGE,
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await?;
    Ok(())
}
