//! Host and shelf power: transitions, state rules, value checks.

mod common;

use std::time::Duration;

use common::*;
use flow_rack_sim::{CommandKind, InitialPower};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn on_goes_through_powering_on() {
    let mut config = small(InitialPower::On, 0.02);
    // 50 s × 0.02 = 1 s of PoweringOn: ample time to observe it.
    config.timings.power_on = Duration::from_secs(50);
    let sim = start(config).await;
    let http = client();
    let base = bmc(&sim, "compute-01");
    let (status, body) = post(&http, &base, SYSTEM_RESET, json!({"ResetType": "ForceOff"})).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(body, serde_json::Value::Null, "204 has no body");
    eventually("compute-01 Off", || async {
        (power_state(&http, &base, SYSTEM).await == "Off").then_some(())
    })
    .await;

    let (status, _) = post(&http, &base, SYSTEM_RESET, json!({"ResetType": "On"})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(power_state(&http, &base, SYSTEM).await, "PoweringOn");
    eventually("compute-01 On", || async {
        (power_state(&http, &base, SYSTEM).await == "On").then_some(())
    })
    .await;
    let state = sim.state();
    let tray = state.component("rack-01", "compute-01").expect("tray");
    assert_eq!(tray.command_count(CommandKind::Reset), 2);
    sim.shutdown().await;
}

#[tokio::test]
async fn bad_values_are_400_and_impossible_resets_409() {
    let sim = start(small(InitialPower::On, 0.02)).await;
    let http = client();
    let base = bmc(&sim, "compute-01");
    for body in [
        json!({"ResetType": "Nmi"}),
        json!({"ResetType": "FullPowerCycle"}),
        json!({"ResetType": 3}),
    ] {
        let (status, error) = post(&http, &base, SYSTEM_RESET, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(
            message_id(&error),
            "Base.1.15.0.ActionParameterValueNotInList",
            "{error}"
        );
        assert_eq!(
            error["error"]["code"],
            json!("Base.1.15.0.ActionParameterValueNotInList")
        );
    }
    let (status, error) = post(&http, &base, SYSTEM_RESET, json!({})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(message_id(&error), "Base.1.15.0.ActionParameterMissing");

    let (status, error) = post(&http, &base, SYSTEM_RESET, json!({"ResetType": "On"})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(message_id(&error), "Base.1.15.0.ResourceInUse");
    let (status, _) = post(&http, &base, SYSTEM_RESET, json!({"ResetType": "ForceOn"})).await;
    assert_eq!(status, StatusCode::CONFLICT);

    let (status, _) = post(
        &http,
        &base,
        SYSTEM_RESET,
        json!({"ResetType": "GracefulShutdown"}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // Any reset during the transition is refused but a forced power-off,
    // which cuts it short (a BMC cuts the power whatever the host does).
    for value in ["On", "GracefulShutdown", "GracefulRestart", "ForceRestart"] {
        let (status, error) = post(&http, &base, SYSTEM_RESET, json!({"ResetType": value})).await;
        assert_eq!(
            status,
            StatusCode::CONFLICT,
            "{value} mid-transition: {error}"
        );
    }
    let (status, error) = post(&http, &base, SYSTEM_RESET, json!({"ResetType": "ForceOff"})).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{error}");
    eventually("compute-01 Off", || async {
        (power_state(&http, &base, SYSTEM).await == "Off").then_some(())
    })
    .await;
    for value in [
        "ForceOff",
        "GracefulShutdown",
        "GracefulRestart",
        "ForceRestart",
    ] {
        let (status, _) = post(&http, &base, SYSTEM_RESET, json!({"ResetType": value})).await;
        assert_eq!(status, StatusCode::CONFLICT, "{value} while Off");
    }
    // PowerCycle while Off turns the host on.
    let (status, _) = post(
        &http,
        &base,
        SYSTEM_RESET,
        json!({"ResetType": "PowerCycle"}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    eventually("compute-01 On after PowerCycle", || async {
        (power_state(&http, &base, SYSTEM).await == "On").then_some(())
    })
    .await;

    // Only accepted resets are logged.
    let state = sim.state();
    let values: Vec<_> = state
        .component("rack-01", "compute-01")
        .expect("tray")
        .commands
        .iter()
        .map(|c| c.value.as_str())
        .collect();
    assert_eq!(values, ["GracefulShutdown", "ForceOff", "PowerCycle"]);
    sim.shutdown().await;
}

#[tokio::test]
async fn graceful_shutdown_is_slower_than_force_off() {
    let mut config = small(InitialPower::On, 0.02);
    // 1 s × 0.02 = 20 ms against 100 s × 0.02 = 2 s.
    config.timings.graceful_shutdown = Duration::from_secs(100);
    let sim = start(config).await;
    let http = client();
    let graceful = bmc(&sim, "compute-01");
    let forced = bmc(&sim, "compute-02");
    let (status, _) = post(
        &http,
        &graceful,
        SYSTEM_RESET,
        json!({"ResetType": "GracefulShutdown"}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = post(
        &http,
        &forced,
        SYSTEM_RESET,
        json!({"ResetType": "ForceOff"}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // ForceOff reaches Off while GracefulShutdown is still powering off.
    eventually("compute-02 Off", || async {
        (power_state(&http, &forced, SYSTEM).await == "Off").then_some(())
    })
    .await;
    assert_eq!(power_state(&http, &graceful, SYSTEM).await, "PoweringOff");
    eventually("compute-01 Off", || async {
        (power_state(&http, &graceful, SYSTEM).await == "Off").then_some(())
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test]
async fn restart_goes_off_then_on() {
    let sim = start(small(InitialPower::On, 0.02)).await;
    let http = client();
    let base = bmc(&sim, "nvswitch-01");
    let (status, _) = post(
        &http,
        &base,
        SYSTEM_RESET,
        json!({"ResetType": "GracefulRestart"}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let deadline = std::time::Instant::now() + WAIT;
    let mut seen = vec![power_state(&http, &base, SYSTEM).await];
    while seen.last().map(String::as_str) != Some("On") {
        assert!(
            std::time::Instant::now() < deadline,
            "no On after restart: {seen:?}"
        );
        tokio::time::sleep(POLL).await;
        let state = power_state(&http, &base, SYSTEM).await;
        if seen.last() != Some(&state) {
            seen.push(state);
        }
    }
    assert_eq!(seen, ["PoweringOff", "PoweringOn", "On"]);
    sim.shutdown().await;
}

#[tokio::test]
async fn shelves_take_on_and_force_off_only() {
    let mut config = small(InitialPower::Off, 0.02);
    config.timings.shelf_on = Duration::from_secs(50);
    let sim = start(config).await;
    let http = client();
    let base = bmc(&sim, "powershelf-01");
    let (status, error) = post(
        &http,
        &base,
        SHELF_RESET,
        json!({"ResetType": "PowerCycle"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        message_id(&error),
        "Base.1.15.0.ActionParameterValueNotInList"
    );
    let (status, _) = post(&http, &base, SHELF_RESET, json!({"ResetType": "ForceOff"})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = post(&http, &base, SHELF_RESET, json!({"ResetType": "On"})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(power_state(&http, &base, SHELF).await, "PoweringOn");
    eventually("shelf On", || async {
        (power_state(&http, &base, SHELF).await == "On").then_some(())
    })
    .await;
    let (_, psu) = get(
        &http,
        &base,
        &format!("{SHELF}/PowerSubsystem/PowerSupplies/0"),
    )
    .await;
    assert_eq!(psu["Status"]["State"], json!("Enabled"));
    sim.shutdown().await;
}
