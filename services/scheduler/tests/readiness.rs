//! The readiness gate with a real NATS server, Postgres and the simulator:
//! components carry an operator-set status; a power task on a component
//! that is not ready waits (nothing is commanded), starts when it becomes
//! ready, fails naming it when the wait is over, and runs at once with
//! `override_readiness`; a held task cancels at once.

use std::time::Duration;

use flow_rack_sim::{InitialPower, SimConfig};
use flow_testenv::Stack;
use serde_json::{Value, json};

async fn env() -> Stack {
    let env = Stack::builder()
        .simulator(SimConfig {
            time_scale: 0.01,
            initial_power: InitialPower::On,
            compute: 4,
            nvswitch: 2,
            powershelf: 2,
            ..SimConfig::default()
        })
        .start()
        .await;
    // A quick power-off rule: one PowerControl per type, no verification.
    env.ok(
        "rule.create",
        json!({"name": "quick off", "operation_type": "power_control", "operation": "power_off",
               "is_default": true, "definition": {"version": "v1", "steps": [
            {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}},
            {"component_type": "nvswitch", "stage": 2, "main_operation": {"name": "PowerControl"}},
            {"component_type": "powershelf", "stage": 3, "main_operation": {"name": "PowerControl"}}
        ]}}),
    )
    .await;
    env
}

async fn set_status(env: &Stack, component: &str, status: &str) -> Value {
    env.ok(
        "rack.component_status",
        json!({"components": [component], "status": status}),
    )
    .await
}

async fn power_off(env: &Stack, request_id: &str, extra: Value) -> String {
    let mut body =
        json!({"request_id": request_id, "racks": ["rack-01"], "operation": "power_off"});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let outcome = env.ok("task.submit", body).await["results"][0].clone();
    outcome["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{request_id} not accepted: {outcome}"))
        .to_owned()
}

fn commands(env: &Stack) -> usize {
    let state = serde_json::to_value(env.sim().state()).unwrap();
    state["racks"][0]["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["commands"].as_array().map_or(0, Vec::len))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_waits_for_components_that_are_not_ready_then_runs() {
    let env = env().await;
    let reply = set_status(&env, "rack-01/compute-01", "maintenance").await;
    assert_eq!(
        reply["components"],
        json!([{"rack": "rack-01", "component": "compute-01", "status": "maintenance"}])
    );
    let rack = env.ok("rack.get", json!({"rack": "rack-01"})).await;
    let statuses: Vec<&str> = rack["components"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] != "ready")
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["compute-01"]);

    let task = power_off(&env, "held", json!({})).await;
    let held = env.task(&task).await;
    assert_eq!(held["status"], "running", "{held:#}");
    assert_eq!(
        held["message"],
        "waiting for components to be ready: compute-01 (maintenance)"
    );
    assert_eq!(
        held["steps"][0]["status"], "pending",
        "nothing started: {held:#}"
    );
    // A second tray goes into use: the next sweep names both and the task
    // still holds, with nothing commanded.
    set_status(&env, "rack-01/compute-02", "in-use").await;
    env.until_task(
        &task,
        "no sweep named the second tray",
        Duration::from_secs(15),
        |t| {
            t["message"]
                == "waiting for components to be ready: compute-01 (maintenance), compute-02 (in_use)"
        },
    )
    .await;
    assert_eq!(env.task(&task).await["status"], "running");
    assert_eq!(commands(&env), 0);

    set_status(&env, "compute-01", "ready").await;
    set_status(&env, "compute-02", "ready").await;
    let done = env.finish(&task).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(done["message"], "");
    assert!(commands(&env) > 0);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_wait_ends_naming_the_components_and_an_override_runs_at_once() {
    let env = env().await;
    set_status(&env, "rack-01/compute-02", "in-use").await;
    let task = power_off(&env, "short", json!({"readiness_timeout_seconds": 1})).await;
    let failed = env.finish(&task).await;
    assert_eq!(failed["status"], "failed", "{failed:#}");
    assert_eq!(
        failed["message"],
        "components not ready after 1s: compute-02 (in_use)"
    );
    assert_eq!(commands(&env), 0, "nothing was commanded");

    // Held, then cancelled: terminated at once.
    let task = power_off(&env, "cancel", json!({})).await;
    let reply = env.ok("task.cancel", json!({"id": task})).await;
    assert_eq!(
        (reply["outcome"].as_str(), reply["status"].as_str()),
        (Some("cancelled_before_start"), Some("terminated")),
        "{reply}"
    );

    let task = power_off(
        &env,
        "override",
        json!({"override_readiness": true, "reason": "tray checked by hand"}),
    )
    .await;
    let done = env.finish(&task).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    assert!(commands(&env) > 0);
    env.stop().await;
}
