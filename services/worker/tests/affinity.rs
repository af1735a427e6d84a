//! Rack affinity with a real NATS server, Postgres and the simulator: two
//! workers divide the job partitions between them (each partition pulled
//! by one), and every job of a rack runs on the worker that owns the
//! rack's partition, so each BMC sees one login however many tasks and
//! steps touch it (`services/worker/src/members.rs`).

use std::time::Duration;

use flow_protocol::partition::JOB_PARTITIONS;
use flow_rack_sim::{InitialPower, SimConfig};
use flow_testenv::Stack;
use serde_json::json;

const RACKS: usize = 6;
const BMCS_PER_RACK: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_racks_jobs_stay_on_one_worker_so_each_bmc_sees_one_login() {
    let mut env = Stack::builder()
        .simulator(SimConfig {
            racks: RACKS,
            time_scale: 0.01,
            initial_power: InitialPower::On,
            compute: 2,
            nvswitch: 1,
            powershelf: 1,
            ..SimConfig::default()
        })
        .workers(2)
        .without_rack()
        .start()
        .await;
    for rack in env.sim().inventory() {
        let doc = serde_json::to_value(rack).unwrap();
        env.ok("rack.create", json!({ "rack": doc })).await;
    }
    // The division has settled when both workers are members and every
    // partition has one worker's pull waiting on it — and still does a
    // whole fetch later (a pull given up on lasts until its fetch ends).
    let settled_since = std::sync::Mutex::new(None);
    let settled =
        flow_tests::eventually(Duration::from_secs(30), Duration::from_millis(250), || {
            let (env, since) = (&env, &settled_since);
            async move {
                let (members, waiting) =
                    flow_jetstream::topology::partition_division(&env.js).await?;
                let mut since = since.lock().unwrap();
                if members == 2 && waiting.iter().all(|&w| w == 1) {
                    let at = *since.get_or_insert_with(tokio::time::Instant::now);
                    (at.elapsed() > flow_worker::PULL_EXPIRES + Duration::from_millis(500))
                        .then_some(waiting.len())
                } else {
                    *since = None;
                    None
                }
            }
        })
        .await;
    let last = flow_jetstream::topology::partition_division(&env.js).await;
    assert_eq!(
        settled
            .unwrap_or_else(|e| panic!("the workers never divided the partitions: {e}; {last:?}")),
        usize::from(JOB_PARTITIONS)
    );

    // A rule that only reads (powering a shelf off would reboot its trays'
    // BMCs, and a rebooted BMC asks for a new login): one step per type.
    let verify = |t: &str, stage: u32| {
        json!({"component_type": t, "stage": stage,
               "main_operation": {"name": "VerifyPowerStatus", "timeout": "10s",
                                  "poll_interval": "100ms",
                                  "parameters": {"expected_status": "on"}}})
    };
    env.ok(
        "rule.create",
        json!({"name": "read only", "operation_type": "power_control", "operation": "power_on",
               "is_default": true,
               "definition": {"version": "v1", "steps": [
                   verify("powershelf", 1), verify("nvswitch", 2), verify("compute", 3)]}}),
    )
    .await;
    // Every rack twice: six jobs per rack, three types, touching its four
    // BMCs twice each.
    let logins_before = env.sim().state().logins_total;
    for round in ["first", "second"] {
        let racks: Vec<String> = env
            .sim()
            .inventory()
            .iter()
            .map(|r| r.name.clone())
            .collect();
        let results = env
            .ok(
                "task.submit",
                json!({"request_id": round, "operation": "power_on", "racks": racks}),
            )
            .await;
        let results = results["results"].as_array().unwrap().clone();
        assert_eq!(results.len(), RACKS, "{results:?}");
        for r in &results {
            let id = r["task_id"]
                .as_str()
                .unwrap_or_else(|| panic!("not accepted: {r}"));
            let task = env.finish(id).await;
            assert_eq!(task["status"], "completed", "{task:#}");
        }
    }
    let logins = env.sim().state().logins_total - logins_before;
    assert_eq!(
        logins,
        (RACKS * BMCS_PER_RACK) as u64,
        "one login per BMC: a rack's jobs all ran on one worker"
    );
    assert!(env.stop_workers().await, "the workers stopped in time");
}
