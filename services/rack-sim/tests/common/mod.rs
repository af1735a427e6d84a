//! Helpers shared by the integration tests: a small simulator, an HTTP
//! client, and bounded polling (never a bare sleep).

#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use flow_rack_sim::{InitialPower, SimConfig, Simulator};
use reqwest::{Client, Method, StatusCode};
use serde_json::Value;

/// BMC user of every test simulator.
pub const USER: &str = "root";
/// BMC password of every test simulator.
pub const PASSWORD: &str = "0penBmc";
/// Upper bound on any wait in these tests.
pub const WAIT: Duration = Duration::from_secs(15);
/// Interval between polls.
pub const POLL: Duration = Duration::from_millis(5);

/// A one-rack simulator with 2 shelves, 1 switch tray and 2 compute trays
/// on OS-chosen ports, durations scaled by `time_scale`.
pub fn small(initial_power: InitialPower, time_scale: f64) -> SimConfig {
    SimConfig {
        admin_port: 0,
        compute: 2,
        nvswitch: 1,
        powershelf: 2,
        time_scale,
        initial_power,
        ..SimConfig::default()
    }
}

/// Starts a simulator or panics.
pub async fn start(config: SimConfig) -> Simulator {
    flow_rack_sim::start(config)
        .await
        .expect("the simulator starts")
}

/// A client without connection reuse, so a BMC that closed its listener is
/// seen at once.
pub fn client() -> Client {
    Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .expect("reqwest client")
}

/// A BMC's base URL or a panic.
pub fn bmc(sim: &Simulator, component: &str) -> String {
    sim.bmc_url("rack-01", component)
        .unwrap_or_else(|| panic!("no BMC for rack-01/{component}"))
}

/// One authenticated request; the body is parsed as JSON when there is one.
pub async fn call(
    client: &Client,
    method: Method,
    url: &str,
    body: Option<Value>,
) -> Result<(StatusCode, Value), reqwest::Error> {
    let mut request = client.request(method, url).basic_auth(USER, Some(PASSWORD));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await?;
    let status = response.status();
    let text = response.text().await?;
    let json = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    Ok((status, json))
}

/// Authenticated GET of `<base><path>`, panicking on a transport error.
pub async fn get(client: &Client, base: &str, path: &str) -> (StatusCode, Value) {
    call(client, Method::GET, &format!("{base}{path}"), None)
        .await
        .unwrap_or_else(|e| panic!("GET {base}{path}: {e}"))
}

/// Authenticated POST of JSON to `<base><path>`.
pub async fn post(client: &Client, base: &str, path: &str, body: Value) -> (StatusCode, Value) {
    call(client, Method::POST, &format!("{base}{path}"), Some(body))
        .await
        .unwrap_or_else(|e| panic!("POST {base}{path}: {e}"))
}

/// Polls `probe` every [`POLL`] until it yields `Some`, for at most [`WAIT`].
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The power state a BMC reports for its system (trays) or chassis (shelves).
pub async fn power_state(client: &Client, base: &str, resource: &str) -> String {
    let (status, body) = get(client, base, resource).await;
    assert_eq!(status, StatusCode::OK, "{resource}: {body}");
    body["PowerState"]
        .as_str()
        .unwrap_or_else(|| panic!("{resource} has no PowerState: {body}"))
        .to_owned()
}

/// Whether a request to `base` fails to connect.
pub async fn refused(client: &Client, base: &str) -> bool {
    match client.get(format!("{base}/redfish/v1")).send().await {
        Ok(_) => false,
        Err(e) => e.is_connect() || e.is_request(),
    }
}

/// The MessageId of a Redfish error body.
pub fn message_id(body: &Value) -> &str {
    body["error"]["@Message.ExtendedInfo"][0]["MessageId"]
        .as_str()
        .unwrap_or_default()
}

/// `System_0` path on a tray.
pub const SYSTEM: &str = "/redfish/v1/Systems/System_0";
/// Reset action on a tray.
pub const SYSTEM_RESET: &str = "/redfish/v1/Systems/System_0/Actions/ComputerSystem.Reset";
/// A shelf's chassis.
pub const SHELF: &str = "/redfish/v1/Chassis/powershelf";
/// Reset action on a shelf.
pub const SHELF_RESET: &str = "/redfish/v1/Chassis/powershelf/Actions/Chassis.Reset";
