//! Shelf power drives tray BMC reachability and host power.

mod common;

use std::time::Duration;

use common::*;
use flow_rack_sim::{InitialPower, PowerState};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn trays_follow_shelf_power() {
    let mut config = small(InitialPower::Off, 0.01);
    // 100 s × 0.01 = 1 s of boot, long enough to observe.
    config.timings.bmc_boot = Duration::from_secs(100);
    let sim = start(config).await;
    let http = client();
    let tray = bmc(&sim, "compute-01");
    let switch = bmc(&sim, "nvswitch-01");
    let shelves = [bmc(&sim, "powershelf-01"), bmc(&sim, "powershelf-02")];

    assert!(
        refused(&http, &tray).await,
        "tray BMC must refuse connections while unpowered"
    );
    assert!(refused(&http, &switch).await);
    let (status, _) = get(&http, &shelves[0], SHELF).await;
    assert_eq!(status, StatusCode::OK, "shelf BMCs run on standby power");

    let (status, _) = post(&http, &shelves[0], SHELF_RESET, json!({"ResetType": "On"})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    eventually("shelf On", || async {
        (power_state(&http, &shelves[0], SHELF).await == "On").then_some(())
    })
    .await;
    assert!(refused(&http, &tray).await, "tray BMC still booting");
    eventually("tray BMC up", || async {
        (!refused(&http, &tray).await).then_some(())
    })
    .await;
    assert_eq!(
        power_state(&http, &tray, SYSTEM).await,
        "Off",
        "hosts stay off"
    );
    eventually("switch BMC up", || async {
        (!refused(&http, &switch).await).then_some(())
    })
    .await;
    assert_eq!(
        sim.bmc_url("rack-01", "compute-01").as_deref(),
        Some(tray.as_str())
    );

    let (status, _) = post(&http, &tray, SYSTEM_RESET, json!({"ResetType": "On"})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    eventually("host On", || async {
        (power_state(&http, &tray, SYSTEM).await == "On").then_some(())
    })
    .await;

    // A second shelf on, then both off: power is lost only with the last.
    let (status, _) = post(&http, &shelves[1], SHELF_RESET, json!({"ResetType": "On"})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    eventually("second shelf On", || async {
        (power_state(&http, &shelves[1], SHELF).await == "On").then_some(())
    })
    .await;
    let (status, _) = post(
        &http,
        &shelves[0],
        SHELF_RESET,
        json!({"ResetType": "ForceOff"}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    eventually("first shelf Off", || async {
        (power_state(&http, &shelves[0], SHELF).await == "Off").then_some(())
    })
    .await;
    assert!(
        !refused(&http, &tray).await,
        "one shelf still powers the trays"
    );
    assert_eq!(power_state(&http, &tray, SYSTEM).await, "On");

    let (status, _) = post(
        &http,
        &shelves[1],
        SHELF_RESET,
        json!({"ResetType": "ForceOff"}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    eventually("tray BMC down", || async {
        refused(&http, &tray).await.then_some(())
    })
    .await;
    eventually("switch BMC down", || async {
        refused(&http, &switch).await.then_some(())
    })
    .await;
    let state = sim.state();
    for name in ["compute-01", "compute-02", "nvswitch-01"] {
        let c = state.component("rack-01", name).expect("tray");
        assert_eq!(c.power_state, PowerState::Off, "{name}");
        assert!(!c.reachable, "{name}");
    }
    assert!(
        state
            .component("rack-01", "powershelf-01")
            .expect("shelf")
            .reachable
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn an_open_connection_is_dropped_when_power_goes() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    // A client that keeps its connection alive.
    let http = reqwest::Client::new();
    let tray = bmc(&sim, "compute-01");
    let (status, _) = get(&http, &tray, SYSTEM).await;
    assert_eq!(status, StatusCode::OK);
    let fresh = client();
    for shelf in ["powershelf-01", "powershelf-02"] {
        let (status, _) = post(
            &fresh,
            &bmc(&sim, shelf),
            SHELF_RESET,
            json!({"ResetType": "ForceOff"}),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
    }
    eventually("tray BMC down", || async {
        refused(&fresh, &tray).await.then_some(())
    })
    .await;
    let reused = http
        .get(format!("{tray}{SYSTEM}"))
        .basic_auth(USER, Some(PASSWORD))
        .send()
        .await;
    assert!(
        reused.is_err(),
        "the kept-alive connection must be gone: {reused:?}"
    );
    sim.shutdown().await;
}

/// A down BMC keeps its port: the OS does not hand it to another process
/// (a port it chose was seen taken by another test's server, which then
/// answered the BMC's requests), yet connections are refused; once up it
/// serves on the same address.
#[tokio::test]
async fn a_down_bmc_holds_its_port_and_refuses_connections() {
    let sim = start(small(InitialPower::Off, 0.01)).await;
    let http = client();
    let tray = bmc(&sim, "compute-01");
    let addr: std::net::SocketAddr = tray
        .trim_start_matches("http://")
        .parse()
        .expect("the BMC URL is an address");
    assert!(refused(&http, &tray).await, "down: refused");
    // A socket without SO_REUSEADDR conflicts with any bound one; the OS
    // likewise never hands a held port to a bind to port 0.
    let other = tokio::net::TcpSocket::new_v4().expect("a socket");
    assert!(
        other.bind(addr).is_err(),
        "another socket could bind the down BMC's port {addr}"
    );
    drop(other);
    let shelf = bmc(&sim, "powershelf-01");
    let (status, _) = post(&http, &shelf, SHELF_RESET, json!({"ResetType": "On"})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    eventually("tray BMC up on its port", || async {
        (!refused(&http, &tray).await).then_some(())
    })
    .await;
}
