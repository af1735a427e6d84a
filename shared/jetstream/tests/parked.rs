//! `FLOW_PARKED` is bounded against a real `nats-server`: a flood of
//! garbage past the bound keeps the newest messages and discards the
//! oldest, and a stream created unbounded (before the bound) is brought to
//! it when the topology is ensured again.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use flow_jetstream::Topology;
use flow_jetstream::topology::{ParkedBound, ensure_parked};
use flow_protocol::jobs::{PARKED_MAX_AGE, STREAM_PARKED};
use flow_tests::NatsServer;

const BOUND: ParkedBound = ParkedBound {
    max_bytes: 64 * 1024,
    max_messages: 10,
};

async fn context(server: &NatsServer) -> jetstream::Context {
    let client = async_nats::connect(server.url()).await.expect("connect");
    jetstream::new(client)
}

async fn flood(js: &jetstream::Context, n: usize) {
    for i in 0..n {
        js.publish("flow.parked.flow_jobs", format!("garbage {i}").into())
            .await
            .expect("publish")
            .await
            .expect("stored");
    }
}

#[tokio::test]
async fn a_flood_past_the_bound_keeps_the_newest_parked_messages() {
    let server = NatsServer::start();
    let js = context(&server).await;
    let topology = Topology::single(Duration::from_secs(30));
    let mut parked = ensure_parked(&js, &topology, BOUND).await.expect("ensure");
    flood(&js, 25).await;
    let info = parked.info().await.expect("info");
    assert_eq!(info.state.messages, 10, "{:?}", info.state);
    // The oldest went: the 16th to the 25th remain.
    assert_eq!(info.state.first_sequence, 16, "{:?}", info.state);
    assert_eq!(info.state.last_sequence, 25);
    let last = parked.get_raw_message(25).await.expect("the newest");
    assert_eq!(&last.payload[..], b"garbage 24");
}

#[tokio::test]
async fn an_unbounded_parked_stream_is_bounded_when_the_topology_is_ensured() {
    let server = NatsServer::start();
    let js = context(&server).await;
    // As an earlier Flow created it: only an age.
    js.create_stream(stream::Config {
        name: STREAM_PARKED.to_owned(),
        subjects: vec!["flow.parked.>".to_owned()],
        max_age: PARKED_MAX_AGE,
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .expect("create the old stream");
    flood(&js, 15).await;
    let topology = Topology::single(Duration::from_secs(30));
    let mut parked = ensure_parked(&js, &topology, BOUND).await.expect("ensure");
    let info = parked.info().await.expect("info");
    assert_eq!(info.config.max_messages, 10, "{:?}", info.config);
    assert_eq!(info.config.max_bytes, 64 * 1024);
    assert_eq!(info.config.discard, stream::DiscardPolicy::Old);
    assert_eq!(info.config.max_age, PARKED_MAX_AGE, "the age stays");
    assert_eq!(
        info.state.messages, 10,
        "trimmed to the bound: {:?}",
        info.state
    );
    flood(&js, 5).await;
    assert_eq!(parked.info().await.expect("info").state.messages, 10);
}
