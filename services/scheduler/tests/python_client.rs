//! A client that is not Flow's: `examples/python/submit_and_follow.py`, on
//! PyPI's `nats-py`, submits a power-on on `flow.tasks.submit` and follows
//! the task on `flow.events.task.<id>` against the real stack (NATS,
//! Postgres, the scheduler, a worker, the rack simulator over HTTP).
//! `FLOW_PY_NATS_PATH` is where scripts/test installed nats-py
//! (`scripts/lib/python.sh`, `ensure_python_nats`).

use std::path::Path;

use flow_rack_sim::{InitialPower, SimConfig};
use flow_testenv::Stack;
use serde_json::json;

fn example() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/python/submit_and_follow.py")
}

async fn run(nats_url: &str, args: &[&str]) -> (i32, String, String) {
    let nats_py = std::env::var("FLOW_PY_NATS_PATH").expect(
        "FLOW_PY_NATS_PATH: where nats-py is installed (scripts/test sets it: scripts/lib/python.sh)",
    );
    let out = tokio::process::Command::new("python3")
        .arg(example())
        .args(args)
        .env("PYTHONPATH", nats_py)
        .env("PYTHONNOUSERSITE", "1")
        .env("FLOW_NATS_URL", nats_url)
        .env("FLOW_EXAMPLE_TIMEOUT", "60")
        .output()
        .await
        .expect("python3 runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_python_example_submits_a_task_and_follows_it_to_its_end() {
    let env = Stack::builder()
        .simulator(SimConfig {
            time_scale: 0.01,
            initial_power: InitialPower::Off,
            compute: 2,
            nvswitch: 1,
            powershelf: 1,
            ..SimConfig::default()
        })
        .start()
        .await;
    let verify = json!([{"name": "VerifyPowerStatus", "timeout": "20s", "poll_interval": "50ms",
                         "parameters": {"expected_status": "on"}}]);
    env.ok(
        "rule.create",
        json!({"name": "py on", "operation_type": "power_control", "operation": "power_on",
               "is_default": true, "definition": {"version": "v1", "steps": [
                {"component_type": "powershelf", "stage": 1, "main_operation": {"name": "PowerControl"},
                 "post_operation": verify},
                {"component_type": "compute", "stage": 2, "main_operation": {"name": "PowerControl"},
                 "post_operation": verify}]}}),
    )
    .await;
    let url = env.nats.url();
    let (code, stdout, stderr) = run(&url, &["rack-01", "power_on"]).await;
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    eprintln!("{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    let task = lines[0]
        .strip_prefix("rack-01: task ")
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        lines
            .iter()
            .any(|l| *l == format!("{task} stage 1 started (steps [0])")),
        "{stdout}"
    );
    assert_eq!(
        lines.last().copied(),
        Some(format!("{task} task_finished completed").as_str()),
        "{stdout}"
    );
    // What the client saw is what Flow recorded.
    let record = env.task(task).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(
        record["request_id"].as_str().map(|r| r.starts_with("py-")),
        Some(true)
    );

    // A refusal is an exit of 1 with the reason.
    let (code, _, stderr) = run(&url, &["rack-99", "power_on"]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("rack-99"), "{stderr}");
}
