//! The worker refuses settings it cannot use, naming the flag, before it
//! connects to anything.

use std::process::Command;

fn worker_with(idle: &str) -> std::process::Output {
    let credentials =
        std::env::temp_dir().join(format!("flow-worker-flags-{}.yaml", std::process::id()));
    std::fs::write(
        &credentials,
        "sim: {user: root, password_env: FLOW_TEST_BMC_PASSWORD}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_flow-worker"))
        .env_remove("FLOW_CONFIG")
        .env("FLOW_TEST_BMC_PASSWORD", "0penBmc")
        .env("FLOW_METRICS_LISTEN", "off")
        .arg("--credentials-file")
        .arg(&credentials)
        .arg(format!("--bmc-idle-seconds={idle}"))
        .output()
        .expect("run flow-worker");
    let _ = std::fs::remove_file(&credentials);
    out
}

#[test]
fn an_idle_limit_that_is_not_a_positive_duration_is_refused_by_name() {
    for bad in ["0", "-1", "1e30", "NaN"] {
        let out = worker_with(bad);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}: accepted; {stderr}");
        assert!(
            stderr.contains(
                "--bmc-idle-seconds (FLOW_BMC_IDLE_SECONDS): a positive number of seconds"
            ),
            "{bad}: {stderr}"
        );
    }
}
