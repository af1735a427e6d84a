//! Targets and task options through `flow.api` with a real NATS server,
//! Postgres and the simulator: racks by label, single components by ID,
//! `<rack>/<name>` or name, the conflict table at component granularity,
//! descriptions and forced power codes.

use std::time::Duration;

use flow_rack_sim::{InitialPower, SimConfig};
use flow_testenv::Stack;
use serde_json::{Value, json};

/// Two racks (`rack-01` row=A, `rack-02` row=B) of 4 compute trays, 2
/// switch trays and 2 shelves, powered on, with a slow power-off rule: the
/// compute step sleeps 3 s before commanding, so tasks overlap.
async fn two_racks() -> Stack {
    let env = Stack::builder()
        .simulator(SimConfig {
            racks: 2,
            time_scale: 0.01,
            initial_power: InitialPower::On,
            compute: 4,
            nvswitch: 2,
            powershelf: 2,
            ..SimConfig::default()
        })
        .without_rack()
        .start()
        .await;
    for (rack, row) in env.sim().inventory().iter().zip(["A", "B"]) {
        let mut doc = serde_json::to_value(rack).unwrap();
        doc["labels"] = json!({"row": row, "site": "lab"});
        env.ok("rack.create", json!({ "rack": doc })).await;
    }
    let verify = json!({"name": "VerifyPowerStatus", "timeout": "20s", "poll_interval": "50ms",
                        "parameters": {"expected_status": "off"}});
    for operation in ["power_off", "force_power_off"] {
        env.ok(
            "rule.create",
            json!({"name": format!("slow {operation}"), "operation_type": "power_control",
                   "operation": operation, "is_default": true,
                   "definition": {"version": "v1", "steps": [
                {"component_type": "compute", "stage": 1,
                 "pre_operation": [{"name": "Sleep", "parameters": {"duration": "3s"}}],
                 "main_operation": {"name": "PowerControl"}, "post_operation": [verify]},
                {"component_type": "nvswitch", "stage": 2, "main_operation": {"name": "PowerControl"}},
                {"component_type": "powershelf", "stage": 3, "main_operation": {"name": "PowerControl"}}
            ]}}),
        )
        .await;
    }
    env
}

/// Power commands the simulator accepted, per (rack, component).
fn commanded(env: &Stack) -> Vec<(String, String)> {
    let state = serde_json::to_value(env.sim().state()).unwrap();
    let mut out = Vec::new();
    for rack in state["racks"].as_array().unwrap() {
        for c in rack["components"].as_array().unwrap() {
            if c["commands"].as_array().is_some_and(|a| !a.is_empty()) {
                out.push((
                    rack["name"].as_str().unwrap().to_owned(),
                    c["name"].as_str().unwrap().to_owned(),
                ));
            }
        }
    }
    out
}

async fn submit(env: &Stack, body: Value) -> Vec<Value> {
    let mut body = body;
    body["operation"] = body.get("operation").cloned().unwrap_or(json!("power_off"));
    env.ok("task.submit", body).await["results"]
        .as_array()
        .unwrap()
        .clone()
}

fn task_of(outcome: &Value) -> String {
    outcome["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("not accepted: {outcome}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_components_are_targeted_by_id_rack_and_name_or_unique_name() {
    let env = two_racks().await;
    let rack = env.ok("rack.get", json!({"rack": "rack-02"})).await;
    let id_of = |name: &str| {
        rack["components"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    // One task per rack: rack-01 for compute-01, rack-02 for compute-02
    // (by ID) and compute-03 (by rack and name).
    let results = submit(
        &env,
        json!({"request_id": "one", "description": "swap two trays",
               "components": ["rack-01/compute-01", id_of("compute-02"), "rack-02/compute-03"]}),
    )
    .await;
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(
        (results[0]["rack"].as_str(), results[1]["rack"].as_str()),
        (Some("rack-01"), Some("rack-02"))
    );
    for r in &results {
        let t = env.finish(&task_of(r)).await;
        assert_eq!(t["status"], "completed", "{t:#}");
        assert_eq!(t["description"], "swap two trays");
        // Only the compute step had components; the others were skipped.
        assert_eq!(t["steps"][1]["status"], "skipped", "{t:#}");
    }
    let mut done = commanded(&env);
    done.sort();
    assert_eq!(
        done,
        [
            ("rack-01".to_owned(), "compute-01".to_owned()),
            ("rack-02".to_owned(), "compute-02".to_owned()),
            ("rack-02".to_owned(), "compute-03".to_owned()),
        ]
    );
    let listed = env.ok("task.list", json!({})).await;
    assert_eq!(listed[0]["description"], "swap two trays", "{listed}");

    // A name two racks have is ambiguous; a component nobody has is named;
    // nothing is created by a request with either.
    let e = env
        .err(
            "task.submit",
            json!({"request_id": "two", "operation": "power_off",
                                   "components": ["compute-04", "nope"]}),
        )
        .await;
    assert_eq!(e.details.len(), 2, "{e:?}");
    assert!(
        e.details[0]
            .starts_with("components[0]: \"compute-04\" is in several racks (rack-01, rack-02)"),
        "{e:?}"
    );
    assert_eq!(
        e.details[1],
        "components[1]: no component \"nope\" (by ID, <rack>/<name> or name)"
    );
    assert_eq!(
        env.ok("task.list", json!({}))
            .await
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // Types narrow component targets too, and a target left empty says so.
    let refused = submit(
        &env,
        json!({"request_id": "three", "components": ["rack-01/compute-04"], "component_types": ["nvswitch"]}),
    )
    .await;
    assert_eq!(
        refused[0]["error"]["message"],
        "rack rack-01: none of the components named (compute-04) is of the requested types"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racks_are_labelled_and_targeted_by_label() {
    let env = two_racks().await;
    let listed = env.ok("rack.list", json!({"labels": {"row": "B"}})).await;
    let names: Vec<&str> = listed["racks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["rack-02"]);
    // Set and remove in one call; the record shows the result.
    let r = env
        .ok(
            "rack.label",
            json!({"rack": "rack-01", "set": {"row": "B", "pod": "7"}, "remove": ["site"]}),
        )
        .await;
    assert_eq!(r["labels"], json!({"row": "B", "pod": "7"}));
    let e = env
        .err(
            "rack.label",
            json!({"rack": "rack-01", "set": {"bad key": "x"}}),
        )
        .await;
    assert!(
        e.details[0].starts_with("set: label key \"bad key\""),
        "{e:?}"
    );
    // Both racks are in row B now; pod=7 narrows to one. A label no rack
    // carries is an error naming it, and creates nothing.
    let results = submit(
        &env,
        json!({"request_id": "row-b", "labels": {"row": "B"}, "component_types": ["powershelf"]}),
    )
    .await;
    assert_eq!(
        results
            .iter()
            .map(|r| r["rack"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["rack-01", "rack-02"]
    );
    for r in &results {
        assert_eq!(env.finish(&task_of(r)).await["status"], "completed");
    }
    let results = submit(&env, json!({"request_id": "pod", "labels": {"row": "B", "pod": "7"}, "component_types": ["powershelf"]})).await;
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["rack"], "rack-01");
    let e = env
        .err(
            "task.submit",
            json!({"request_id": "none", "operation": "power_off", "labels": {"row": "Z"}}),
        )
        .await;
    assert_eq!(e.message, "labels: no rack carries row=Z");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_on_other_components_run_together_and_overlapping_ones_conflict() {
    let env = two_racks().await;
    let first = task_of(
        &submit(
            &env,
            json!({"request_id": "c1", "components": ["rack-01/compute-01"]}),
        )
        .await[0],
    );
    env.until_task(
        &first,
        "the compute step never ran",
        Duration::from_secs(20),
        |t| t["steps"][0]["status"] == "running",
    )
    .await;
    // Another tray of the same rack: runs beside it.
    let second = task_of(
        &submit(
            &env,
            json!({"request_id": "c2", "components": ["rack-01/compute-02"]}),
        )
        .await[0],
    );
    // The same tray, or anything touching the shelves (rack-wide), is
    // refused with the rule that makes them conflict.
    let same = submit(&env, json!({"request_id": "c1-again", "components": ["rack-01/compute-01"], "operation": "force_power_off"})).await;
    let message = same[0]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("already has a conflicting task {first}"))
            && message.contains("power_control on Compute conflicts with power_control on Compute on shared components"),
        "{message}"
    );
    let whole = submit(&env, json!({"request_id": "whole", "racks": ["rack-01"]})).await;
    assert!(
        whole[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("power_control on PowerShelf conflicts with any power_control rack-wide"),
        "{whole:?}"
    );
    // Queued instead, the rack-wide task waits for both and then runs.
    let queued = submit(
        &env,
        json!({"request_id": "whole-q", "racks": ["rack-01"], "conflict": {"strategy": "queue", "timeout_seconds": 120}}),
    )
    .await;
    assert_eq!(
        (
            queued[0]["queued"].as_bool(),
            queued[0]["queue_position"].as_u64()
        ),
        (Some(true), Some(1)),
        "{queued:?}"
    );
    let waiting = task_of(&queued[0]);
    // Both compute tasks were running at the same time.
    let a = env.finish(&first).await;
    let b = env.finish(&second).await;
    assert_eq!(
        (a["status"].as_str(), b["status"].as_str()),
        (Some("completed"), Some("completed"))
    );
    assert!(
        b["started_at"].as_str().unwrap() < a["finished_at"].as_str().unwrap(),
        "the second started before the first ended: {a:#} {b:#}"
    );
    let w = env.finish(&waiting).await;
    assert_eq!(w["status"], "completed", "{w:#}");
    assert!(w["started_at"].as_str().unwrap() >= b["finished_at"].as_str().unwrap());
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forced_runs_the_force_code_and_is_refused_where_there_is_none() {
    let env = two_racks().await;
    let t = task_of(&submit(&env, json!({"request_id": "f", "racks": ["rack-02"], "forced": true, "component_types": ["powershelf"]})).await[0]);
    let record = env.finish(&t).await;
    assert_eq!(record["operation"], "force_power_off", "{record:#}");
    assert_eq!(record["rule_name"], "slow force_power_off");
    let e = env
        .err("task.submit", json!({"request_id": "g", "racks": ["rack-02"], "operation": "power_on", "forced": true}))
        .await;
    assert_eq!(
        e.message,
        "forced: only power_off and restart have a forced variant (force_power_off, force_restart), not power_on"
    );
    env.stop().await;
}

/// Now plus `ms`, as an RFC 3339 time.
fn at(ms: i64) -> String {
    flow_protocol::task::timestamp::format(
        time::OffsetDateTime::now_utc() + time::Duration::milliseconds(ms),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_starts_in_its_window_without_holding_anything_before_and_fails_when_it_ends() {
    let env = two_racks().await;
    // compute-01 is held (3 s of Sleep) past a short window on it: the
    // window ends before it can start.
    let holder = task_of(
        &submit(
            &env,
            json!({"request_id": "hold", "components": ["rack-01/compute-01"]}),
        )
        .await[0],
    );
    let short = submit(
        &env,
        json!({"request_id": "short", "components": ["rack-01/compute-01"],
               "not_before": at(500), "not_after": at(1500)}),
    )
    .await;
    assert_eq!(short[0]["queued"], true, "a window task waits: {short:?}");
    let short = task_of(&short[0]);
    let ended = env.finish(&short).await;
    assert_eq!(
        (ended["status"].as_str(), ended["message"].as_str()),
        (
            Some("failed"),
            Some("its window ended before it could start")
        ),
        "{ended:#}"
    );

    // A window opening in 2 s on compute-02: until then it holds nothing,
    // so a task on compute-02 starts at once; the window task starts once
    // its window is open and compute-02 is free.
    let opens = at(2000);
    let windowed = task_of(
        &submit(
            &env,
            json!({"request_id": "win", "components": ["rack-01/compute-02"],
                   "not_before": opens, "not_after": at(60_000)}),
        )
        .await[0],
    );
    let w = env.task(&windowed).await;
    assert_eq!(
        (w["status"].as_str(), w["message"].as_str()),
        (Some("waiting"), Some("waiting for its window to open"))
    );
    let meanwhile = task_of(
        &submit(
            &env,
            json!({"request_id": "meanwhile", "components": ["rack-01/compute-02"]}),
        )
        .await[0],
    );
    let m = env.finish(&meanwhile).await;
    assert_eq!(m["status"], "completed", "{m:#}");
    let w = env.finish(&windowed).await;
    assert_eq!(w["status"], "completed", "{w:#}");
    let started = w["started_at"].as_str().unwrap();
    assert!(
        started >= opens.as_str(),
        "started {started}, window opened {opens}"
    );
    assert!(started >= m["finished_at"].as_str().unwrap(), "{w:#} {m:#}");
    assert_eq!(env.finish(&holder).await["status"], "completed");

    // An end already past is refused; so is an end before the start.
    let past = submit(
        &env,
        json!({"request_id": "past", "racks": ["rack-02"], "not_after": at(-1000)}),
    )
    .await;
    assert!(
        past[0]["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("has passed"),
        "{past:?}"
    );
    let e = env
        .err(
            "task.submit",
            json!({"request_id": "backwards", "operation": "power_off", "racks": ["rack-02"],
                                   "not_before": at(5000), "not_after": at(1000)}),
        )
        .await;
    assert!(
        e.message
            .starts_with("not_after: must be later than not_before"),
        "{e:?}"
    );
    env.stop().await;
}
