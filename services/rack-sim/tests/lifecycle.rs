//! The lifecycle (decommission) API.

mod common;

use std::time::{Duration, Instant};

use common::*;
use flow_rack_sim::{CommandKind, FaultKind, FaultSpec, InitialPower};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

fn url(sim: &flow_rack_sim::Simulator, component: &str) -> String {
    format!(
        "{}/lifecycle/v1/racks/rack-01/components/{component}",
        sim.admin_url()
    )
}

async fn lifecycle_state(http: &Client, url: &str) -> String {
    let (status, body) = get(http, url, "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["state"].as_str().expect("state").to_owned()
}

/// Records each distinct state until `last` shows up.
async fn states_until(http: &Client, url: &str, last: &str) -> Vec<String> {
    let deadline = Instant::now() + WAIT;
    let mut seen: Vec<String> = Vec::new();
    loop {
        let state = lifecycle_state(http, url).await;
        if seen.last() != Some(&state) {
            seen.push(state.clone());
        }
        if state == last {
            return seen;
        }
        assert!(Instant::now() < deadline, "never reached {last}: {seen:?}");
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test]
async fn decommission_runs_through_its_phases() {
    let mut config = small(InitialPower::On, 0.01);
    // 10 s × 0.01 = 100 ms per phase, many polls per phase.
    config.timings.decommission_phase = Duration::from_secs(10);
    let sim = start(config).await;
    let http = client();
    let tray = url(&sim, "compute-02");

    let (status, body) = get(&http, &tray, "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["rack"], json!("rack-01"));
    assert_eq!(body["component"], json!("compute-02"));
    assert_eq!(body["state"], json!("Ready"));
    assert!(body["updated_at"].is_string());

    let (status, body) = post(&http, &tray, "/decommission", Value::Null).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["state"], json!("Decommissioning/Draining"));
    let (status, _) = post(&http, &tray, "/decommission", Value::Null).await;
    assert_eq!(status, StatusCode::OK, "a second request is idempotent");

    let seen = states_until(&http, &tray, "Decommissioned").await;
    assert_eq!(
        seen,
        [
            "Decommissioning/Draining",
            "Decommissioning/Wiping",
            "Decommissioning/Releasing",
            "Decommissioned"
        ]
    );
    let (status, _) = post(&http, &tray, "/decommission", Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    let state = sim.state();
    let c = state.component("rack-01", "compute-02").expect("tray");
    assert_eq!(c.lifecycle, "Decommissioned");
    assert_eq!(c.command_count(CommandKind::Decommission), 1);

    let (_, body) = post(&http, &tray, "/maintenance", json!({"reason": "fan swap"})).await;
    assert_eq!(body["state"], json!("Maintenance(fan swap)"));
    let (status, body) = post(&http, &tray, "/maintenance", json!({})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], json!("BadRequest"));
    let (_, body) = post(&http, &tray, "/ready", Value::Null).await;
    assert_eq!(body["state"], json!("Ready"));
    sim.shutdown().await;
}

#[tokio::test]
async fn unknown_components_and_missing_credentials_are_refused() {
    let sim = start(small(InitialPower::Off, 0.01)).await;
    let http = client();
    let (status, body) = get(&http, &url(&sim, "compute-99"), "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], json!("NotFound"));
    assert!(body["error"]["message"].is_string());
    let response = http.get(url(&sim, "compute-01")).send().await.expect("GET");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let response = http
        .post(format!("{}/decommission", url(&sim, "compute-01")))
        .basic_auth(USER, Some("nope"))
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    // Decommissioning does not need the BMC: the rack is unpowered here.
    let (status, _) = post(
        &http,
        &url(&sim, "compute-01"),
        "/decommission",
        Value::Null,
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_stall_fault_holds_wiping_until_cleared() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    let fault = sim
        .set_fault(FaultSpec {
            target: "rack-01/nvswitch-*".into(),
            kind: FaultKind::DecommissionStalls {},
        })
        .expect("fault");
    let http = client();
    let switch = url(&sim, "nvswitch-01");
    let (status, _) = post(&http, &switch, "/decommission", Value::Null).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    states_until(&http, &switch, "Decommissioning/Wiping").await;
    // Watch it for ten phase lengths (10 × 50 ms): it must not move on.
    let watch_until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < watch_until {
        assert_eq!(
            lifecycle_state(&http, &switch).await,
            "Decommissioning/Wiping"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sim.remove_fault(fault.id).expect("remove");
    // Wiping has lasted long enough: it moves on at once.
    let seen = states_until(&http, &switch, "Decommissioned").await;
    assert!(
        seen.iter()
            .all(|s| s == "Decommissioning/Releasing" || s == "Decommissioned"),
        "{seen:?}"
    );
    sim.shutdown().await;
}
