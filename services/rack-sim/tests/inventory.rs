//! The rack documents, port allocation and the binary.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use common::*;
use flow_protocol::rack::RackSpec;
use flow_rack_sim::{InitialPower, SimError};
use reqwest::StatusCode;

#[tokio::test]
async fn inventory_is_a_valid_rack_document() {
    let sim = start(small(InitialPower::Off, 0.01)).await;
    let racks = sim.inventory();
    assert_eq!(racks.len(), 1);
    let rack = &racks[0];
    assert_eq!(rack.validate(), Vec::<String>::new());
    assert_eq!(rack.name, "rack-01");
    assert_eq!(rack.manufacturer, "NVIDIA");
    assert_eq!(rack.model, "GB200 NVL72");
    assert_eq!(rack.serial, "SIM-rack-01");
    assert_eq!(rack.location, "sim");
    let summary: Vec<_> = rack
        .components
        .iter()
        .map(|c| {
            (
                c.component_type.as_str(),
                c.name.as_str(),
                c.slot,
                c.firmware_version.as_str(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("PowerShelf", "powershelf-01", Some(1), "r1.3.9"),
            ("PowerShelf", "powershelf-02", Some(2), "r1.3.9"),
            ("NVSwitch", "nvswitch-01", Some(1), "25.02.2141"),
            ("Compute", "compute-01", Some(1), "25.06-2"),
            ("Compute", "compute-02", Some(2), "25.06-2"),
        ]
    );
    for c in &rack.components {
        assert_eq!(c.credential_ref, "sim-bmc");
        assert_eq!(c.serial, format!("SIM-rack-01-{}", c.name));
        assert_eq!(
            sim.bmc_url("rack-01", &c.name).as_deref(),
            Some(c.bmc_url.as_str())
        );
        assert!(c.bmc_url.starts_with("http://127.0.0.1:"), "{}", c.bmc_url);
    }
    assert_eq!(rack.components[0].manufacturer, "LITE-ON TECHNOLOGY CORP.");
    assert_eq!(rack.components[0].model, "PF-1333-7R");
    // The JSON uses exactly the rack document's field names.
    let json = serde_json::to_value(rack).expect("json");
    let back: RackSpec = serde_json::from_value(json.clone()).expect("round trip");
    assert_eq!(&back, rack);
    assert_eq!(json["components"][0]["type"], "PowerShelf");
    sim.shutdown().await;
}

#[tokio::test]
async fn base_port_gives_consecutive_ports_in_inventory_order() {
    // Try a few random bases until one has 10 free ports.
    for attempt in 0..20u16 {
        let base = 20000 + (std::process::id() as u16 % 1000) * 10 + attempt * 211 % 9000;
        let mut config = small(InitialPower::On, 0.01);
        config.racks = 2;
        config.bmc_base_port = base;
        let sim = match flow_rack_sim::start(config).await {
            Ok(sim) => sim,
            Err(SimError::Bind { .. }) => continue,
            Err(e) => panic!("start: {e}"),
        };
        let racks = sim.inventory();
        assert_eq!(racks.len(), 2);
        assert_eq!(racks[1].name, "rack-02");
        let ports: Vec<u16> = racks
            .iter()
            .flat_map(|r| r.components.iter())
            .map(|c| {
                c.bmc_url
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .expect("port")
            })
            .collect();
        let expected: Vec<u16> = (base..base + 10).collect();
        assert_eq!(ports, expected);
        let http = client();
        let (status, _) = get(
            &http,
            &sim.bmc_url("rack-02", "compute-02").expect("url"),
            SYSTEM,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        sim.shutdown().await;
        return;
    }
    panic!("no free range of 10 ports found");
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let path = std::env::temp_dir().join(
            format!(
                "flow-rack-sim-{tag}-{}-{:?}",
                std::process::id(),
                Instant::now()
            )
            .replace([' ', '{', '}', ':', ','], ""),
        );
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The binary, killed on drop.
struct Sim(Child);

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the binary and waits (bounded) for its ready line; returns the
/// child and the admin URL.
fn run_binary(args: &[&str]) -> (Sim, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_flow-rack-sim"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn flow-rack-sim");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let sim = Sim(child);
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("no ready line from flow-rack-sim: {e}"));
        if let Some(rest) = line.strip_prefix("flow-rack-sim ready: admin ") {
            let (url, bmcs) = rest.split_once(", ").expect("ready line shape");
            assert!(bmcs.ends_with(" BMCs"), "{line}");
            return (sim, url.to_owned());
        }
    }
}

#[test]
fn the_binary_writes_its_inventory_and_announces_readiness() {
    let dir = TempDir::new("bin");
    let out = dir.0.join("r.json");
    let faults = dir.0.join("faults.json");
    std::fs::write(
        &faults,
        r#"[{"target": "rack-01/compute-02", "kind": {"unreachable": {}}}]"#,
    )
    .expect("faults file");
    let (_sim, admin) = run_binary(&[
        "--faults",
        faults.to_str().expect("utf-8 path"),
        "--admin-port",
        "0",
        "--time-scale",
        "0.01",
        "--compute",
        "2",
        "--nvswitch",
        "1",
        "--powershelf",
        "1",
        "--timing",
        "bmc_boot=1s",
        "--inventory-out",
        out.to_str().expect("utf-8 path"),
    ]);
    assert!(admin.starts_with("http://127.0.0.1:"), "{admin}");
    let text = std::fs::read_to_string(&out).expect("inventory file");
    let rack: RackSpec = serde_json::from_str(&text).expect("a rack document");
    assert_eq!(rack.validate(), Vec::<String>::new());
    assert_eq!(rack.components.len(), 4);
    let port: u16 = admin
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let (status, body) = flow_tests::http_get(port, "/admin/v1/state").expect("GET state");
    assert_eq!(status, 200, "{body}");
    let state: flow_rack_sim::SimState = serde_json::from_str(&body).expect("state");
    assert_eq!(state.racks[0].components.len(), 4);
    let (status, body) = flow_tests::http_get(port, "/admin/v1/faults").expect("GET faults");
    assert_eq!(status, 200, "{body}");
    let faults: Vec<flow_rack_sim::Fault> = serde_json::from_str(&body).expect("faults");
    assert_eq!(faults.len(), 1);
    assert_eq!(faults[0].target, "rack-01/compute-02");
}

#[test]
fn several_racks_go_to_a_directory_or_to_stdout() {
    let dir = TempDir::new("dir");
    let out = dir.0.join("racks");
    let common = [
        "--admin-port",
        "0",
        "--racks",
        "2",
        "--compute",
        "1",
        "--nvswitch",
        "1",
        "--powershelf",
        "1",
    ];
    let mut args = common.to_vec();
    args.extend(["--inventory-out", out.to_str().expect("utf-8 path")]);
    let (sim, _) = run_binary(&args);
    for name in ["rack-01", "rack-02"] {
        let text = std::fs::read_to_string(out.join(format!("{name}.json"))).expect("rack file");
        let rack: RackSpec = serde_json::from_str(&text).expect("rack document");
        assert_eq!(rack.name, name);
    }
    drop(sim);

    let (mut sim, _) = run_binary(&common);
    let _ = sim.0.kill();
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut sim.0.stdout.take().expect("stdout"), &mut stdout)
        .expect("read stdout");
    let racks: Vec<RackSpec> = serde_json::Deserializer::from_str(&stdout)
        .into_iter()
        .collect::<Result<_, _>>()
        .expect("rack documents on stdout");
    assert_eq!(racks.len(), 2);
    assert_eq!(racks[1].name, "rack-02");
    assert!(racks.iter().all(|r| r.validate().is_empty()));
}
