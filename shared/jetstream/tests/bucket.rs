//! [`flow_jetstream::open_bucket`] against a real `nats-server` that dies
//! while a service is opening its bucket: the service keeps asking and gets
//! the bucket once the server is back, instead of ending with a timeout
//! (the worker did, in a clean-clone CI run of
//! `services/scheduler/tests/tasks.rs`'s NATS-restart test).

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use flow_jetstream::open_bucket;
use flow_tests::NatsServer;
use tokio_util::sync::CancellationToken;

/// How long one JetStream request may go unanswered here.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(300);

/// How long the server stays down: several request timeouts.
const OUTAGE: Duration = Duration::from_secs(2);

async fn context(server: &NatsServer) -> jetstream::Context {
    let client = async_nats::connect(server.url()).await.expect("connect");
    jetstream::ContextBuilder::new()
        .timeout(REQUEST_TIMEOUT)
        .build(client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_opened_while_nats_restarts_is_opened_when_it_is_back() {
    let mut server = NatsServer::start();
    let js = context(&server).await;
    js.create_key_value(kv::Config {
        bucket: "held".into(),
        ..Default::default()
    })
    .await
    .expect("create the bucket");
    server.kill();
    let stop = CancellationToken::new();
    let opening = tokio::spawn({
        let (js, stop) = (js.clone(), stop.clone());
        async move { open_bucket(&js, "held", Duration::from_millis(100), &stop).await }
    });
    // The outage outlasts several requests: each one times out.
    tokio::time::sleep(OUTAGE).await;
    assert!(
        !opening.is_finished(),
        "open_bucket gave up while the server was down: {:?}",
        opening.await
    );
    tokio::task::block_in_place(|| server.start_again());
    let bucket = tokio::time::timeout(Duration::from_secs(20), opening)
        .await
        .expect("the bucket opens once the server is back")
        .expect("the task")
        .expect("no error")
        .expect("not stopped");
    assert_eq!(bucket.name, "held");
}

#[tokio::test]
async fn a_bucket_that_does_not_exist_is_an_error_at_once() {
    let server = NatsServer::start();
    let js = context(&server).await;
    let stop = CancellationToken::new();
    let opened = tokio::time::timeout(
        Duration::from_secs(10),
        open_bucket(&js, "missing", Duration::from_millis(100), &stop),
    )
    .await
    .expect("answered");
    let error = opened.expect_err("no such bucket");
    assert!(
        !flow_jetstream::topology::timed_out(&error),
        "a refusal, not a timeout: {error}"
    );
}

#[tokio::test]
async fn a_stop_ends_the_wait_for_a_server_that_is_down() {
    let mut server = NatsServer::start();
    let js = context(&server).await;
    server.kill();
    let stop = CancellationToken::new();
    let opening = tokio::spawn({
        let (js, stop) = (js.clone(), stop.clone());
        async move { open_bucket(&js, "held", Duration::from_millis(100), &stop).await }
    });
    stop.cancel();
    let opened = tokio::time::timeout(Duration::from_secs(5), opening)
        .await
        .expect("the stop ends it")
        .expect("the task")
        .expect("no error");
    assert!(opened.is_none());
}
