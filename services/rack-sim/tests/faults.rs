//! Fault injection through the admin API and the library helpers.

mod common;

use std::time::{Duration, Instant};

use common::*;
use flow_rack_sim::{CommandKind, FaultKind, FaultSpec, InitialPower, PowerState};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn admin(
    http: &reqwest::Client,
    sim: &flow_rack_sim::Simulator,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    call(http, method, &format!("{}{path}", sim.admin_url()), body)
        .await
        .expect("admin request")
}

#[tokio::test]
async fn the_admin_api_installs_lists_and_removes_faults() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    let http = client();
    let (status, list) = admin(
        &http,
        &sim,
        Method::POST,
        "/admin/v1/faults",
        Some(json!({"target": "rack-01/*", "kind": {"latency": {"ms": 1}}})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        list,
        json!([{"id": 1, "target": "rack-01/*", "kind": {"latency": {"ms": 1}}}])
    );
    let (_, list) = admin(
        &http,
        &sim,
        Method::POST,
        "/admin/v1/faults",
        Some(json!({"target": "*/*", "kind": {"unreachable": {}}})),
    )
    .await;
    assert_eq!(list.as_array().map(Vec::len), Some(2));
    let (status, list) = admin(&http, &sim, Method::DELETE, "/admin/v1/faults/2", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    let (status, body) = admin(&http, &sim, Method::DELETE, "/admin/v1/faults/2", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], json!("NotFound"));
    let (status, body) = admin(
        &http,
        &sim,
        Method::POST,
        "/admin/v1/faults",
        Some(json!({"target": "*/*", "kind": {"error_rate": {"rate": 2.0, "status": 503}}})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, list) = admin(&http, &sim, Method::DELETE, "/admin/v1/faults", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list, json!([]));
    let (_, list) = admin(&http, &sim, Method::GET, "/admin/v1/faults", None).await;
    assert_eq!(list, json!([]));
    sim.shutdown().await;
}

#[tokio::test]
async fn latency_delays_every_reply() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    sim.set_fault(FaultSpec {
        target: "rack-01/compute-01".into(),
        kind: FaultKind::Latency { ms: 250 },
    })
    .expect("fault");
    let http = client();
    let started = Instant::now();
    let (status, _) = get(&http, &bmc(&sim, "compute-01"), SYSTEM).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn fail_next_fails_exactly_count_requests() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    sim.set_fault(FaultSpec {
        target: "rack-01/compute-01".into(),
        kind: FaultKind::FailNext {
            count: 3,
            status: 500,
        },
    })
    .expect("fault");
    let http = client();
    let base = bmc(&sim, "compute-01");
    for _ in 0..3 {
        let (status, body) = get(&http, &base, SYSTEM).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(message_id(&body), "Base.1.15.0.InternalError");
    }
    let (status, _) = get(&http, &base, SYSTEM).await;
    assert_eq!(status, StatusCode::OK);
    assert!(sim.faults().is_empty(), "the fault removed itself");
    // The state logs each failed request with its status (and no accepted
    // command): attempts can be counted from it.
    let state = sim.state();
    let c = state
        .component("rack-01", "compute-01")
        .expect("compute-01");
    let refused: Vec<(&str, &str, u16)> = c
        .refused
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str(), r.status))
        .collect();
    assert_eq!(refused, [("GET", SYSTEM, 500); 3]);
    assert!(c.commands.is_empty());
    sim.shutdown().await;
}

#[tokio::test]
async fn error_rate_one_fails_everything() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    sim.set_fault(FaultSpec {
        target: "*/nvswitch-01".into(),
        kind: FaultKind::ErrorRate {
            rate: 1.0,
            status: 503,
        },
    })
    .expect("fault");
    let http = client();
    let base = bmc(&sim, "nvswitch-01");
    for path in ["/redfish/v1", SYSTEM, "/redfish/v1/Managers/BMC_0"] {
        let (status, body) = get(&http, &base, path).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            message_id(&body),
            "Base.1.15.0.ServiceTemporarilyUnavailable"
        );
    }
    let (status, _) = get(&http, &bmc(&sim, "compute-01"), SYSTEM).await;
    assert_eq!(status, StatusCode::OK, "other BMCs are not targeted");
    sim.shutdown().await;
}

#[tokio::test]
async fn unreachable_closes_the_listener_until_cleared() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    let http = client();
    let shelf = bmc(&sim, "powershelf-01");
    // A kept-alive connection to the shelf's BMC, as a client would hold.
    assert!(!refused(&http, &shelf).await);
    let (_, list) = admin(
        &http,
        &sim,
        Method::POST,
        "/admin/v1/faults",
        Some(json!({"target": "rack-01/powershelf-01", "kind": {"unreachable": {}}})),
    )
    .await;
    assert_eq!(list[0]["id"], json!(1));
    // The admin API answers once the listener is closed and its
    // connections dropped: the very next call finds the BMC gone.
    assert!(
        refused(&http, &shelf).await,
        "the shelf BMC still answered after the fault was installed"
    );
    assert!(
        !sim.state()
            .component("rack-01", "powershelf-01")
            .expect("shelf")
            .reachable
    );
    let (status, _) = get(&http, &bmc(&sim, "compute-01"), SYSTEM).await;
    assert_eq!(status, StatusCode::OK, "trays keep their power");
    let (status, _) = admin(&http, &sim, Method::DELETE, "/admin/v1/faults/1", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !refused(&http, &shelf).await,
        "the shelf BMC was not back when the fault removal was answered"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn stuck_power_accepts_resets_and_changes_nothing() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    sim.set_fault(FaultSpec {
        target: "rack-01/compute-02".into(),
        kind: FaultKind::StuckPower {
            state: PowerState::On,
        },
    })
    .expect("fault");
    let http = client();
    let stuck = bmc(&sim, "compute-02");
    let healthy = bmc(&sim, "compute-01");
    let (status, _) = post(
        &http,
        &stuck,
        SYSTEM_RESET,
        json!({"ResetType": "ForceOff"}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = post(
        &http,
        &healthy,
        SYSTEM_RESET,
        json!({"ResetType": "ForceOff"}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // Once the healthy tray is Off, ForceOff has had all its time.
    eventually("compute-01 Off", || async {
        (power_state(&http, &healthy, SYSTEM).await == "Off").then_some(())
    })
    .await;
    assert_eq!(power_state(&http, &stuck, SYSTEM).await, "On");
    // Accepted even though On while "On".
    let (status, _) = post(&http, &stuck, SYSTEM_RESET, json!({"ResetType": "On"})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    let (status, state) = admin(&http, &sim, Method::GET, "/admin/v1/state", None).await;
    assert_eq!(status, StatusCode::OK);
    let tray = &state["racks"][0]["components"][4];
    assert_eq!(tray["name"], json!("compute-02"));
    assert_eq!(tray["type"], json!("Compute"));
    assert_eq!(tray["power_state"], json!("On"));
    assert_eq!(tray["reachable"], json!(true));
    assert_eq!(tray["lifecycle"], json!("Ready"));
    assert_eq!(
        tray["firmware"],
        json!({"FW_BMC_0": "25.06-2", "UEFI": "02.04.12"})
    );
    let commands = tray["commands"].as_array().expect("commands");
    assert_eq!(commands.len(), 2);
    assert_eq!(commands[0]["kind"], json!("reset"));
    assert_eq!(commands[0]["value"], json!("ForceOff"));
    assert!(commands[0]["at"].is_string());
    sim.shutdown().await;
}

#[tokio::test]
async fn reset_restores_the_initial_state_and_configured_faults() {
    let mut config = small(InitialPower::On, 0.01);
    config.faults = vec![FaultSpec {
        target: "rack-01/compute-01".into(),
        kind: FaultKind::Latency { ms: 1 },
    }];
    let sim = start(config).await;
    let http = client();
    let base = bmc(&sim, "compute-01");
    let (status, _) = post(&http, &base, SYSTEM_RESET, json!({"ResetType": "ForceOff"})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    sim.set_fault(FaultSpec {
        target: "*/*".into(),
        kind: FaultKind::DecommissionStalls {},
    })
    .expect("fault");
    assert_eq!(sim.faults().len(), 2);
    let (status, _) = admin(&http, &sim, Method::POST, "/admin/v1/reset", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(sim.faults().len(), 1);
    let state = sim.state();
    let tray = state.component("rack-01", "compute-01").expect("tray");
    assert_eq!(tray.power_state, PowerState::On);
    assert_eq!(tray.command_count(CommandKind::Reset), 0);
    sim.shutdown().await;
}
