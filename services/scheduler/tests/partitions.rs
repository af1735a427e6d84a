//! The jobs' partitions at start-up, with a real NATS server: a scheduler
//! creates one consumer per partition, and an older topology's
//! `flow-workers` — which took every job subject and would overlap them on
//! the work queue — is narrowed to the old subjects with what it holds
//! kept (`shared/jetstream/src/topology.rs`, `job_consumers`).

use async_nats::jetstream;
use flow_protocol::jobs::{CONSUMER_WORKERS, STREAM_JOBS};
use flow_protocol::partition::{JOB_PARTITIONS, Partition, UNPARTITIONED_FILTER};
use flow_testenv::Stack;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_jobs_consumer_is_narrowed_and_every_partition_gets_one() {
    let mut stack = Stack::builder().without_scheduler().start().await;
    // An installation from before partitions: one consumer for every job.
    let stream = stack
        .js
        .create_stream(jetstream::stream::Config {
            name: STREAM_JOBS.to_owned(),
            subjects: vec!["flow.jobs.>".to_owned()],
            retention: jetstream::stream::RetentionPolicy::WorkQueue,
            ..Default::default()
        })
        .await
        .unwrap();
    stream
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some(CONSUMER_WORKERS.to_owned()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .unwrap();
    stack
        .js
        .publish("flow.jobs.compute", "an old job".into())
        .await
        .unwrap()
        .await
        .unwrap();

    stack.start_scheduler().await;

    let stream = stack.js.get_stream(STREAM_JOBS).await.unwrap();
    let mut old = stream
        .get_consumer::<jetstream::consumer::pull::Config>(CONSUMER_WORKERS)
        .await
        .unwrap();
    let info = old.info().await.unwrap();
    assert_eq!(info.config.filter_subject, UNPARTITIONED_FILTER);
    assert_eq!(info.num_pending, 1, "the old job is still there: {info:?}");
    let mut partitions = 0;
    for partition in Partition::all() {
        let mut consumer = stream
            .get_consumer::<jetstream::consumer::pull::Config>(&partition.consumer())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", partition.consumer()));
        let info = consumer.info().await.unwrap();
        assert_eq!(info.config.filter_subject, partition.filter());
        assert_eq!(info.num_pending, 0);
        partitions += 1;
    }
    assert_eq!(partitions, usize::from(JOB_PARTITIONS));
    // A second scheduler finds them all as they are.
    stack.start_scheduler().await;
    let info = old.info().await.unwrap();
    assert_eq!(info.config.filter_subject, UNPARTITIONED_FILTER);
    assert_eq!(info.num_pending, 1);
    stack.stop_schedulers().await;
}
