//! `flow-bench` end to end on the debug binaries: the smoke scenario
//! measures something real, the short fault drill passes, and a small
//! `watch-1000` loses and duplicates no leak across a watcher's kill. Both start
//! their own NATS server, database, simulator, scheduler and workers as
//! processes (`scripts/test` builds every binary before the tests run).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn bench(args: &[&str], json: &PathBuf) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_flow-bench"))
        .args(args)
        .arg("--json")
        .arg(json)
        .env("FLOW_NATS_SERVER", flow_tests::nats_server_binary())
        .env("FLOW_TEST_DATABASE_URL", flow_tests::database_url())
        .output()
        .expect("flow-bench runs");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn report(path: &PathBuf) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("the JSON report is written"))
        .expect("the report is JSON")
}

fn temp_json(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{name}-{}.json", std::process::id()))
}

#[test]
fn the_smoke_scenario_reports_real_measurements() {
    let json = temp_json("flow-bench-smoke");
    let (ok, output) = bench(&["run", "smoke"], &json);
    assert!(ok, "flow-bench run smoke failed:\n{output}");
    let r = &report(&json)[0];
    assert_eq!(r["tasks"], 2, "{r:#}");
    assert_eq!(r["statuses"]["completed"], 2, "{r:#}");
    // 2 racks × 3 steps, each a real job with real Redfish calls:
    // PowerControl + VerifyPowerStatus per component at least.
    assert_eq!(r["step_jobs"], 6, "{r:#}");
    assert!(r["hardware_calls"].as_u64().unwrap() >= 2 * 35 * 2, "{r:#}");
    assert!(r["redfish_requests"].as_u64().unwrap() >= r["hardware_calls"].as_u64().unwrap());
    assert!(r["peak_requests_per_bmc"].as_u64().unwrap() >= 1, "{r:#}");
    let makespan = r["makespan_s"].as_f64().unwrap();
    let ideal = r["ideal_s"].as_f64().unwrap();
    assert!(makespan > 0.0 && ideal > 0.0, "{r:#}");
    assert!(makespan >= ideal, "nothing beats the ideal: {r:#}");
    // Two stage boundaries per task.
    assert_eq!(r["stage_advance"]["count"], 4, "{r:#}");
    assert!(r["raw_jetstream"]["per_second"].as_f64().unwrap() > 0.0);
    // Acks are counted on the consumers that take them: the results'
    // (one per step job at least), never a watch such as the workers'
    // membership (an ordered consumer, acknowledged by no one).
    let delivered = r["writes"]["delivered"].as_object().expect("delivered");
    assert!(
        delivered["FLOW_RESULTS/flow-scheduler"].as_u64().unwrap() >= 6,
        "{r:#}"
    );
    assert!(
        delivered.keys().all(|k| !k.starts_with("KV_")),
        "a watch counted as acks: {delivered:?}"
    );
    for p in ["scheduler", "simulator", "nats_server"] {
        assert!(
            r["usage"][p]["peak_rss_mib"].as_f64().unwrap() > 1.0,
            "{p}: {r:#}"
        );
    }
    assert!(
        output.contains("| smoke"),
        "the table is printed:\n{output}"
    );
    let _ = std::fs::remove_file(json);
}

/// Each phase of a 3-rack drill: every task completed, every component in
/// its state and counted.
fn every_phase_completed_on_three_racks(r: &Value) {
    for phase in r["phases"].as_array().unwrap() {
        assert_eq!(phase["statuses"]["completed"], 3, "{phase:#}");
        assert_eq!(phase["wrong_state"].as_array().unwrap().len(), 0);
        let total: u64 = phase["commands_per_component"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(total, 3 * 35, "every component counted: {phase:#}");
    }
}

#[test]
fn a_small_watch_1000_loses_no_leak_across_a_watcher_kill() {
    let json = temp_json("flow-bench-watch");
    let (ok, output) = bench(
        &[
            "watch-1000",
            "--racks",
            "20",
            "--workers",
            "2",
            "--watchers",
            "2",
            "--leaks",
            "10",
            "--poll-seconds",
            "5",
        ],
        &json,
    );
    assert!(ok, "flow-bench watch-1000 failed:\n{output}");
    let r = report(&json);
    assert_eq!(r["bmcs"], 20 * 35, "{r:#}");
    assert_eq!(r["raised"], 10, "{r:#}");
    assert_eq!(r["lost"], 0, "{r:#}");
    assert_eq!(r["duplicated"], 0, "{r:#}");
    // Every leak's event was timed, the first after the kill among them.
    assert_eq!(r["to_event"]["n"], 10, "{r:#}");
    assert!(
        r["after_kill"]["n"]
            .as_u64()
            .is_some_and(|n| (1..=5).contains(&n)),
        "{r:#}"
    );
    assert!(r["takeover_s"].as_f64().is_some_and(|s| s > 0.0), "{r:#}");
    let watchers = r["watchers"].as_array().unwrap();
    assert_eq!(watchers.len(), 2, "{r:#}");
    assert!(watchers[1]["killed"].as_bool().unwrap(), "{r:#}");
    for w in watchers {
        assert!(w["peak_rss_mib"].as_f64().unwrap() > 0.0, "{w:#}");
        assert!(w["peak_sockets"].as_u64().unwrap() > 0, "{w:#}");
    }
    let _ = std::fs::remove_file(json);
}

#[test]
fn the_short_drill_survives_every_fault() {
    let json = temp_json("flow-bench-drill");
    let (ok, output) = bench(&["drill", "--short"], &json);
    assert!(ok, "flow-bench drill --short failed:\n{output}");
    let r = report(&json);
    assert_eq!(r["problems"].as_array().unwrap().len(), 0, "{r:#}");
    // Every one-off fault hit each phase while tasks ran, and work resumed.
    let faults = r["faults"].as_array().unwrap();
    assert_eq!(faults.len(), 6, "3 faults × 2 phases: {r:#}");
    for f in faults {
        assert!(f["resumed_after_ms"].is_number(), "{f:#}");
    }
    assert!(r["worker_kills"].as_u64().unwrap() >= 4, "{r:#}");
    every_phase_completed_on_three_racks(&r);
    let _ = std::fs::remove_file(json);
}

#[test]
fn the_short_restore_drill_loses_the_database_mid_phase_and_commands_each_component_once() {
    let json = temp_json("flow-bench-drill-restore");
    let (ok, output) = bench(&["drill", "restore", "--short"], &json);
    assert!(ok, "flow-bench drill restore --short failed:\n{output}");
    let r = report(&json);
    assert_eq!(r["problems"].as_array().unwrap().len(), 0, "{r:#}");
    // In each phase the database was backed up, lost and restored while
    // the tasks ran, and work resumed.
    let faults = r["faults"].as_array().unwrap();
    assert_eq!(faults.len(), 2, "one restore per phase: {r:#}");
    for f in faults {
        assert_eq!(f["fault"], "database-restore", "{f:#}");
        assert!(f["resumed_after_ms"].is_number(), "{f:#}");
    }
    assert_eq!(r["worker_kills"], 0, "{r:#}");
    every_phase_completed_on_three_racks(&r);
    // Nothing commanded twice across the restore.
    for phase in r["phases"].as_array().unwrap() {
        assert_eq!(
            phase["commands_per_component"],
            serde_json::json!({"1": 3 * 35}),
            "{phase:#}"
        );
    }
    let _ = std::fs::remove_file(json);
}

#[test]
fn the_short_cluster_drill_survives_node_kills_and_a_partition() {
    let json = temp_json("flow-bench-drill-cluster");
    let (ok, output) = bench(&["drill", "--short", "--cluster"], &json);
    assert!(ok, "flow-bench drill --short --cluster failed:\n{output}");
    let r = report(&json);
    assert_eq!(r["problems"].as_array().unwrap().len(), 0, "{r:#}");
    assert_eq!(r["spec"]["nats_nodes"], 3, "{r:#}");
    assert_eq!(r["spec"]["schedulers"], 3, "{r:#}");
    let faults: Vec<&str> = r["faults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            assert!(f["resumed_after_ms"].is_number(), "{f:#}");
            assert!(f["node"].is_string(), "{f:#}");
            f["fault"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        faults,
        ["jobs-leader-kill", "results-leader-kill", "node-partition"],
        "{r:#}"
    );
    // Task requests JetStream acknowledged during the faults were all
    // found again.
    let acked = r["submissions_acked"].as_u64().unwrap();
    assert!(acked >= 3, "{r:#}");
    assert_eq!(r["submissions_found"].as_u64().unwrap(), acked, "{r:#}");
    every_phase_completed_on_three_racks(&r);
    let _ = std::fs::remove_file(json);
}
