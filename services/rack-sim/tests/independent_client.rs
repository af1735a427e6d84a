//! The simulator checked by an independent Redfish client: DMTF's Python
//! `redfish` library (installed by `scripts/lib/python.sh`), running
//! `tests/redfish_client_check.py` against a compute and a switch tray.

mod common;

use std::path::Path;
use std::process::Stdio;

use common::*;
use flow_rack_sim::InitialPower;

/// Where `ensure_python_redfish` puts the library.
const PY_REDFISH_PATH_ENV: &str = "FLOW_PY_REDFISH_PATH";

async fn check(base_url: &str) {
    let library = match std::env::var(PY_REDFISH_PATH_ENV) {
        Ok(path) if !path.is_empty() => path,
        _ => panic!(
            "{PY_REDFISH_PATH_ENV} is not set: run through scripts/test, which installs DMTF's \
             Python redfish library and exports it (or `source scripts/lib/python.sh && \
             ensure_python_redfish`)"
        ),
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/redfish_client_check.py");
    let run = tokio::process::Command::new("python3")
        .arg(&script)
        .args([base_url, USER, PASSWORD])
        .env("PYTHONPATH", &library)
        .env("PYTHONNOUSERSITE", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(WAIT * 4, run)
        .await
        .expect("the Python check finishes in time")
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the independent Redfish client failed against {base_url} ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    assert_eq!(stdout.trim(), "ok", "stderr:\n{stderr}");
}

#[tokio::test]
async fn dmtf_python_redfish_client_agrees() {
    // The script's image is on no origin: the update API alone.
    let sim = start(flow_rack_sim::SimConfig {
        fetch_images: false,
        ..small(InitialPower::On, 0.01)
    })
    .await;
    check(&bmc(&sim, "compute-01")).await;
    check(&bmc(&sim, "nvswitch-01")).await;
    sim.shutdown().await;
}
