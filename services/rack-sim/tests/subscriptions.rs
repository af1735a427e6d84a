//! The EventService's `Subscriptions`: one EventDestination per open SSE
//! stream, listed from the moment the stream's answer arrives until the
//! stream ends (the client goes, or the BMC ends it); deleting it ends the
//! stream; no push subscriptions.

mod common;

use common::*;
use flow_rack_sim::{FaultKind, FaultSpec, InitialPower};
use reqwest::{Client, Method, StatusCode};
use serde_json::Value;

const SUBSCRIPTIONS: &str = "/redfish/v1/EventService/Subscriptions";
const SSE: &str = "/redfish/v1/EventService/SSE";

async fn members(http: &Client, base: &str) -> Vec<String> {
    let (status, body) = get(http, base, SUBSCRIPTIONS).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["@odata.type"],
        "#EventDestinationCollection.EventDestinationCollection"
    );
    body["Members"]
        .as_array()
        .expect("Members")
        .iter()
        .map(|m| m["@odata.id"].as_str().expect("member link").to_owned())
        .collect()
}

async fn open_stream(http: &Client, base: &str) -> reqwest::Response {
    let response = http
        .get(format!("{base}{SSE}"))
        .basic_auth(USER, Some(PASSWORD))
        .header("Accept", "text/event-stream")
        .send()
        .await
        .expect("open the stream");
    assert_eq!(response.status(), StatusCode::OK);
    response
}

#[tokio::test]
async fn an_open_event_stream_is_an_event_destination_until_it_closes() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    let http = client();
    let base = bmc(&sim, "compute-01");
    assert!(members(&http, &base).await.is_empty());

    let stream = open_stream(&http, &base).await;
    // Listed as soon as the stream's answer arrived.
    let listed = members(&http, &base).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let (status, destination) = get(&http, &base, &listed[0]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        destination["@odata.type"],
        "#EventDestination.v1_15_0.EventDestination"
    );
    assert_eq!(destination["@odata.id"], listed[0].as_str());
    assert_eq!(destination["SubscriptionType"], "SSE");
    assert_eq!(destination["Protocol"], "Redfish");
    assert!(
        destination["Context"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{destination}"
    );
    let peer = destination["Destination"].as_str().unwrap_or_default();
    assert!(
        peer.starts_with("redfish-sse://127.0.0.1:"),
        "{destination}"
    );
    // Another BMC's list is its own.
    assert!(members(&http, &bmc(&sim, "compute-02")).await.is_empty());

    // A second stream is a second destination.
    let second = open_stream(&http, &base).await;
    assert_eq!(members(&http, &base).await.len(), 2);
    drop(second);
    drop(stream);
    eventually("both destinations gone", || async {
        members(&http, &base).await.is_empty().then_some(())
    })
    .await;
    let (status, _) = get(&http, &base, &listed[0]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_stream_the_bmc_ends_is_no_longer_listed() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    let http = client();
    let base = bmc(&sim, "compute-02");
    let stream = open_stream(&http, &base).await;
    assert_eq!(members(&http, &base).await.len(), 1);
    sim.set_fault(FaultSpec {
        target: "rack-01/compute-02".to_owned(),
        kind: FaultKind::EventsDown {},
    })
    .expect("fault");
    // The stream ends (the client reads its end) and its destination goes.
    let end = tokio::time::timeout(WAIT, stream.bytes())
        .await
        .expect("the stream ends in time");
    assert!(end.is_ok(), "{end:?}");
    eventually("the destination gone", || async {
        members(&http, &base).await.is_empty().then_some(())
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test]
async fn deleting_the_event_destination_closes_its_stream() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    let http = client();
    let base = bmc(&sim, "compute-01");
    let stream = open_stream(&http, &base).await;
    let kept = open_stream(&http, &base).await;
    let listed = members(&http, &base).await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    let (status, _) = call(&http, Method::DELETE, &format!("{base}{}", listed[0]), None)
        .await
        .expect("DELETE");
    assert_eq!(status, StatusCode::NO_CONTENT);
    let end = tokio::time::timeout(WAIT, stream.bytes())
        .await
        .expect("the deleted destination's stream ends in time");
    assert!(end.is_ok(), "{end:?}");
    // The other stream stays open and listed.
    assert_eq!(members(&http, &base).await, [listed[1].clone()]);
    let (status, _) = call(&http, Method::DELETE, &format!("{base}{}", listed[0]), None)
        .await
        .expect("DELETE");
    assert_eq!(status, StatusCode::NOT_FOUND);
    drop(kept);
    sim.shutdown().await;
}

#[tokio::test]
async fn subscriptions_take_no_push_subscriptions_and_exist_only_with_an_event_service() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    let http = client();
    let base = bmc(&sim, "compute-01");
    let (_, service) = get(&http, &base, "/redfish/v1/EventService").await;
    assert_eq!(service["Subscriptions"]["@odata.id"], SUBSCRIPTIONS);
    let response = http
        .post(format!("{base}{SUBSCRIPTIONS}"))
        .basic_auth(USER, Some(PASSWORD))
        .json(&serde_json::json!({
            "Destination": "https://127.0.0.1:9/events",
            "Protocol": "Redfish",
        }))
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(response.headers()["allow"], "GET");
    let body: Value = response.json().await.expect("error body");
    assert_eq!(message_id(&body), "Base.1.15.0.OperationNotAllowed");
    assert!(members(&http, &base).await.is_empty());

    let (status, _) = get(&http, &bmc(&sim, "nvswitch-01"), SUBSCRIPTIONS).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a switch tray's BMC has an EventService"
    );
    let (status, _) = get(&http, &bmc(&sim, "powershelf-01"), SUBSCRIPTIONS).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a power shelf has none");
    sim.shutdown().await;
}
