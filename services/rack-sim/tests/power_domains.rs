//! Power draw, power domains and breakers over HTTP: components powered on
//! through Redfish, the domains read from `GET /admin/v1/power`.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::*;
use flow_rack_sim::{InitialPower, SimConfig};
use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

/// Racks rack-01 and rack-02 of 2 shelves, 1 switch tray and 2 compute
/// trays, at 1/20 of real time: settles of 100 ms (trays) and 50 ms
/// (shelves), a 1 s BMC boot, a 250 ms power-on, a 50 ms forced restart.
fn config() -> SimConfig {
    SimConfig {
        racks: 2,
        ..small(InitialPower::Off, 0.05)
    }
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("fits")
}

async fn power(http: &Client, admin: &str) -> Value {
    let (status, body) = get(http, admin, "/admin/v1/power").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

fn domain<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["domains"]
        .as_array()
        .expect("domains")
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no domain {name} in {report}"))
}

fn kw(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("{value} is not kW"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

async fn put_domain(http: &Client, admin: &str, name: &str, body: Value) -> (StatusCode, Value) {
    call(
        http,
        Method::PUT,
        &format!("{admin}/admin/v1/power/domains/{name}"),
        Some(body),
    )
    .await
    .expect("PUT domain")
}

/// Waits until domain `name` draws `want` kW (everything settled).
async fn settled(http: &Client, admin: &str, name: &str, want: f64) {
    eventually(&format!("{name} drawing {want} kW"), || async {
        let report = power(http, admin).await;
        close(kw(&domain(&report, name)["draw_kw"]), want).then_some(())
    })
    .await;
}

async fn reset(http: &Client, base: &str, path: &str, value: &str) {
    let (status, body) = post(http, base, path, json!({ "ResetType": value })).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{value} at {base}: {body}");
}

#[tokio::test]
async fn bad_domains_are_refused_naming_the_field_or_rack() {
    let sim = start(config()).await;
    let http = client();
    let admin = sim.admin_url();
    for (body, status, names) in [
        (json!({}), StatusCode::BAD_REQUEST, "racks: missing"),
        (
            json!([]),
            StatusCode::BAD_REQUEST,
            "body: must be an object",
        ),
        (
            json!({"racks": "rack-01"}),
            StatusCode::BAD_REQUEST,
            "racks: must be an array",
        ),
        (
            json!({"racks": [1]}),
            StatusCode::BAD_REQUEST,
            "racks: 1 is not a rack name",
        ),
        (
            json!({"racks": []}),
            StatusCode::BAD_REQUEST,
            "racks: must name at least one rack",
        ),
        (
            json!({"racks": ["rack-01", "rack-01"]}),
            StatusCode::BAD_REQUEST,
            "racks: names \"rack-01\" twice",
        ),
        (
            json!({"racks": ["rack-01"], "breaker_kw": "120"}),
            StatusCode::BAD_REQUEST,
            "breaker_kw: must be a number",
        ),
        (
            json!({"racks": ["rack-01"], "breaker_kw": -5}),
            StatusCode::BAD_REQUEST,
            "breaker_kw: must be a positive number",
        ),
        (
            json!({"racks": ["rack-01"], "budget_kw": 5}),
            StatusCode::BAD_REQUEST,
            "budget_kw: unknown field",
        ),
        (
            json!({"racks": ["rack-01", "rack-99"]}),
            StatusCode::NOT_FOUND,
            "no rack \"rack-99\"",
        ),
    ] {
        let (got, error) = put_domain(&http, &admin, "row", body.clone()).await;
        assert_eq!(got, status, "{body}: {error}");
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{body}: {message}");
    }
    let report = power(&http, &admin).await;
    assert_eq!(report["domains"], json!([]), "nothing was created");
    let (status, error) = call(
        &http,
        Method::DELETE,
        &format!("{admin}/admin/v1/power/domains/row"),
        None,
    )
    .await
    .expect("DELETE");
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("\"row\"")
    );
    let (status, _) = get(&http, &admin, "/admin/v1/power/domains/row").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    sim.shutdown().await;
}

#[tokio::test]
async fn peaks_power_ons_shelves_off_and_a_breaker_trip() {
    let sim = start(config()).await;
    let http = client();
    let admin = sim.admin_url();
    let started_ms = now_ms();

    // A row of both racks without a breaker, a PDU of rack-01 at 15 kW.
    let (status, row) = put_domain(
        &http,
        &admin,
        "row=A",
        json!({"racks": ["rack-02", "rack-01"], "breaker_kw": null}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{row}");
    assert_eq!(row["racks"], json!(["rack-01", "rack-02"]));
    assert_eq!(row["breaker_kw"], Value::Null);
    assert_eq!(kw(&row["peak_kw"]), 0.0, "everything is off");
    assert_eq!(row["shelves_off"], 4);
    assert_eq!(row["shelves_off_peak"], 4);
    let (status, pdu) = put_domain(
        &http,
        &admin,
        "pdu-1",
        json!({"racks": ["rack-01"], "breaker_kw": 15.0}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{pdu}");
    assert_eq!(kw(&pdu["breaker_kw"]), 15.0);

    // Both shelves of rack-01 on; the trays' BMCs boot.
    for shelf in ["powershelf-01", "powershelf-02"] {
        reset(&http, &bmc(&sim, shelf), SHELF_RESET, "On").await;
    }
    settled(&http, &admin, "pdu-1", 0.4).await;
    for tray in ["compute-01", "compute-02", "nvswitch-01"] {
        let base = bmc(&sim, tray);
        eventually(&format!("{tray}'s BMC up"), || async {
            (!refused(&http, &base).await).then_some(())
        })
        .await;
    }

    // compute-01 on: the shelves have settled (200 W each), the tray draws
    // its 9 kW inrush at the power-on instant.
    let compute_01 = bmc(&sim, "compute-01");
    reset(&http, &compute_01, SYSTEM_RESET, "On").await;
    settled(&http, &admin, "pdu-1", 0.4 + 5.4).await;
    let report = power(&http, &admin).await;
    assert!(
        close(kw(&domain(&report, "pdu-1")["peak_kw"]), 9.4),
        "{report}"
    );

    // compute-02 on once compute-01 has settled: 0.4 + 5.4 + 9.0.
    reset(&http, &bmc(&sim, "compute-02"), SYSTEM_RESET, "On").await;
    settled(&http, &admin, "pdu-1", 0.4 + 5.4 + 5.4).await;
    reset(&http, &bmc(&sim, "nvswitch-01"), SYSTEM_RESET, "On").await;
    settled(&http, &admin, "pdu-1", 0.4 + 5.4 + 5.4 + 0.9).await;
    let report = power(&http, &admin).await;
    let pdu = domain(&report, "pdu-1");
    assert!(close(kw(&pdu["peak_kw"]), 14.8), "{report}");
    assert_eq!(pdu["trips"], json!([]), "14.8 kW is under 15");
    assert_eq!(pdu["shelves_off"], 0);
    assert_eq!(
        pdu["shelves_off_peak"], 2,
        "both off when the domain was set"
    );
    eventually("compute-01 On", || async {
        (power_state(&http, &compute_01, SYSTEM).await == "On").then_some(())
    })
    .await;

    // A forced restart of compute-01: still drawing through PoweringOff,
    // then its "on" half draws the inrush again: 0.4 + 9.0 + 5.4 + 0.9 =
    // 15.7 kW, over the breaker: rack-01 loses power.
    let restart_ms = now_ms();
    reset(&http, &compute_01, SYSTEM_RESET, "ForceRestart").await;
    let report = eventually("a trip of pdu-1", || async {
        let report = power(&http, &admin).await;
        (!domain(&report, "pdu-1")["trips"]
            .as_array()
            .expect("trips")
            .is_empty())
        .then_some(report)
    })
    .await;
    let pdu = domain(&report, "pdu-1");
    let trips = pdu["trips"].as_array().expect("trips");
    assert_eq!(trips.len(), 1, "{report}");
    assert!(close(kw(&trips[0]["draw_kw"]), 15.7), "{report}");
    assert_eq!(trips[0]["rack"], "rack-01");
    assert_eq!(trips[0]["component"], "compute-01");
    let trip_ms = trips[0]["at_ms"].as_i64().expect("at_ms");
    // The "on" half starts 50 ms after the command.
    assert!(
        trip_ms >= restart_ms + 49 && trip_ms <= now_ms(),
        "{report}"
    );
    assert!(
        close(kw(&pdu["peak_kw"]), 15.7),
        "the peak counts the tripping total"
    );
    assert_eq!(pdu["peak_at_ms"], trips[0]["at_ms"]);
    assert_eq!(kw(&pdu["draw_kw"]), 0.0, "{report}");
    assert_eq!(pdu["shelves_off"], 2);
    assert_eq!(pdu["shelves_off_peak"], 2);

    // Every accepted power-on or reset, in order, with its receipt time.
    let ons: Vec<(String, i64)> = pdu["power_ons"]
        .as_array()
        .expect("power_ons")
        .iter()
        .map(|p| {
            assert_eq!(p["rack"], "rack-01");
            (
                p["component"].as_str().expect("component").to_owned(),
                p["at_ms"].as_i64().expect("at_ms"),
            )
        })
        .collect();
    let components: Vec<&str> = ons.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(
        components,
        [
            "powershelf-01",
            "powershelf-02",
            "compute-01",
            "compute-02",
            "nvswitch-01",
            "compute-01"
        ]
    );
    assert!(ons.windows(2).all(|w| w[0].1 <= w[1].1), "{ons:?}");
    assert!(ons[0].1 >= started_ms && ons[5].1 >= restart_ms && ons[5].1 <= trip_ms);
    // compute-02 was powered on only once compute-01 had settled (100 ms).
    assert!(ons[3].1 - ons[2].1 >= 100, "{ons:?}");

    // The row saw the same total (rack-02 is off) and has no breaker.
    let row = domain(&report, "row=A");
    assert!(close(kw(&row["peak_kw"]), 15.7), "{report}");
    assert_eq!(row["trips"], json!([]));
    assert_eq!(row["power_ons"], pdu["power_ons"]);
    assert_eq!(row["shelves_off"], 4);
    assert_eq!(row["shelves_off_peak"], 4);

    // The trip is real: the shelves report Off, the trays' BMCs are gone.
    for shelf in ["powershelf-01", "powershelf-02"] {
        assert_eq!(power_state(&http, &bmc(&sim, shelf), SHELF).await, "Off");
    }
    eventually("compute-01's BMC down", || async {
        refused(&http, &compute_01).await.then_some(())
    })
    .await;
    let state = sim.state();
    let rack = state
        .racks
        .iter()
        .find(|r| r.name == "rack-01")
        .expect("rack");
    assert!(
        rack.components
            .iter()
            .all(|c| c.power_state == flow_rack_sim::PowerState::Off),
        "{rack:?}"
    );

    // One domain by name; a reset starts every record again; a delete.
    let (status, one) = get(&http, &admin, "/admin/v1/power/domains/pdu-1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(one["trips"], pdu["trips"]);
    let (status, _) = post(&http, &admin, "/admin/v1/reset", json!({})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let report = power(&http, &admin).await;
    let pdu = domain(&report, "pdu-1");
    assert_eq!(pdu["trips"], json!([]));
    assert_eq!(pdu["power_ons"], json!([]));
    assert_eq!(kw(&pdu["peak_kw"]), 0.0);
    assert_eq!(pdu["shelves_off_peak"], 2);
    let (status, _) = call(
        &http,
        Method::DELETE,
        &format!("{admin}/admin/v1/power/domains/pdu-1"),
        None,
    )
    .await
    .expect("DELETE");
    assert_eq!(status, StatusCode::NO_CONTENT);
    let report = power(&http, &admin).await;
    let names: Vec<&str> = report["domains"]
        .as_array()
        .expect("domains")
        .iter()
        .map(|d| d["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["row=A"]);
    sim.shutdown().await;
}
