//! `task.plan` against the real stack (NATS, Postgres, the scheduler, a
//! worker, the rack simulator over HTTP): the preview of a request is what
//! submitting it then does, and it names every reason a rack would be
//! refused or held.

use std::time::Duration;

use flow_rack_sim::{InitialPower, SimConfig};
use flow_testenv::Stack;
use serde_json::{Value, json};

const RACKS: usize = 3;
const POLL: Duration = Duration::from_millis(50);

async fn env(initial_power: InitialPower) -> Stack {
    env_with(initial_power, |_| {}).await
}

/// The stack, with each rack document after the first (created by the
/// stack) changed by `edit` before it is created.
async fn env_with(initial_power: InitialPower, edit: impl Fn(&mut Value)) -> Stack {
    let env = Stack::builder()
        .simulator(SimConfig {
            time_scale: 0.05,
            initial_power,
            racks: RACKS,
            compute: 3,
            nvswitch: 1,
            powershelf: 1,
            ..SimConfig::default()
        })
        .start()
        .await;
    for rack in &env.sim().inventory()[1..] {
        let mut rack = serde_json::to_value(rack).unwrap();
        edit(&mut rack);
        env.ok("rack.create", json!({ "rack": rack })).await;
    }
    env
}

fn quick(order: &[&str], expected: &str, sleep: &str) -> Value {
    let steps: Vec<Value> = order
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({"component_type": t, "stage": i + 1, "timeout": "2m",
                   "pre_operation": [{"name": "Sleep", "parameters": {"duration": sleep}}],
                   "main_operation": {"name": "PowerControl"},
                   "post_operation": [{"name": "VerifyPowerStatus", "timeout": "30s",
                       "poll_interval": "100ms", "parameters": {"expected_status": expected}}]})
        })
        .collect();
    json!({"version": "v1", "steps": steps})
}

fn rack_names() -> Vec<String> {
    (1..=RACKS).map(|i| format!("rack-{i:02}")).collect()
}

/// The preview's steps as (index, stage, type, components, skipped,
/// budget) and the task record's, compared.
fn steps_of_plan(plan: &Value) -> Vec<(u64, u64, String, usize, bool, u64)> {
    let mut out = Vec::new();
    for stage in plan["stages"].as_array().unwrap() {
        for s in stage["steps"].as_array().unwrap() {
            out.push((
                s["step_index"].as_u64().unwrap(),
                stage["stage"].as_u64().unwrap(),
                s["component_type"].as_str().unwrap().to_owned(),
                s["components"].as_array().unwrap().len(),
                s["skipped"].as_bool().unwrap(),
                s["budget_ms"].as_u64().unwrap(),
            ));
        }
    }
    out.sort();
    out
}

fn steps_of_task(task: &Value) -> Vec<(u64, u64, String, usize, bool, u64)> {
    let mut out: Vec<_> = task["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["step_index"].as_u64().unwrap(),
                s["stage"].as_u64().unwrap(),
                s["component_type"].as_str().unwrap().to_owned(),
                s["components"].as_u64().unwrap() as usize,
                s["status"] == "skipped",
                s["budget_ms"].as_u64().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_preview_is_what_its_submission_then_creates() {
    // Powered on already: rack-02's compute-only rule reaches its trays.
    let env = env(InitialPower::On).await;
    env.ok(
        "rule.create",
        json!({"name": "quick on", "operation_type": "power_control", "operation": "power_on",
               "is_default": true,
               "definition": quick(&["powershelf", "nvswitch", "compute"], "on", "10ms")}),
    )
    .await;
    // rack-02 has a rule of its own: compute trays only.
    let own = env
        .ok(
            "rule.create",
            json!({"name": "rack-02 on", "operation_type": "power_control", "operation": "power_on",
                   "definition": quick(&["compute"], "on", "1s")}),
        )
        .await;
    env.ok(
        "rule.associate",
        json!({"rack": "rack-02", "rule_id": own["id"]}),
    )
    .await;
    let request = json!({"racks": rack_names(), "operation": "power_on"});
    let preview = env.ok("task.plan", request.clone()).await;
    let plans = preview["results"].as_array().unwrap().clone();
    assert_eq!(plans.len(), RACKS, "{preview}");
    for p in &plans {
        assert_eq!(p["outcome"], "create", "{p}");
        assert!(p.get("problems").is_none(), "{p}");
    }
    assert_eq!(plans[0]["rule"]["name"], "quick on");
    assert_eq!(plans[0]["rule"]["resolved"]["source"], "default");
    assert_eq!(plans[1]["rule"]["name"], "rack-02 on");
    assert_eq!(plans[1]["rule"]["resolved"]["source"], "rack_association");
    // The least time: rack-02's 1 s sleep and one 100 ms poll; the others
    // three stages of 10 ms + 100 ms.
    assert_eq!(plans[1]["expected_ms"], 1_100, "{}", plans[1]);
    assert_eq!(plans[0]["expected_ms"], 330, "{}", plans[0]);
    // Nothing was created.
    let listed = env.ok("task.list", json!({})).await;
    assert_eq!(listed, json!([]), "nothing was created: {listed}");

    // The same request submitted: the tasks are the preview's.
    let mut submit = request.clone();
    submit["request_id"] = json!("after-preview");
    let reply = env.ok("task.submit", submit).await;
    for (p, r) in plans.iter().zip(reply["results"].as_array().unwrap()) {
        assert_eq!(p["rack"], r["rack"]);
        let id = r["task_id"]
            .as_str()
            .unwrap_or_else(|| panic!("not created: {r}"));
        let task = env.finish(id).await;
        assert_eq!(task["status"], "completed", "{task}");
        assert_eq!(task["rule_name"], p["rule"]["name"], "{task}");
        assert_eq!(task["rule_source"], p["rule"]["resolved"]["source"]);
        assert_eq!(
            task["rule_revision"], p["rule"]["resolved"]["revision"],
            "{task}"
        );
        assert_eq!(task["rule_id"], p["rule"]["resolved"]["rule_id"]);
        assert_eq!(steps_of_task(&task), steps_of_plan(p), "{task}\n{p}");
        // Each step acted on exactly the components the preview named.
        for stage in p["stages"].as_array().unwrap() {
            for s in stage["steps"].as_array().unwrap() {
                let step = task["steps"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|t| t["step_index"] == s["step_index"])
                    .unwrap();
                let mut acted: Vec<&String> = step["results"]
                    .as_object()
                    .map(|r| r.keys().collect())
                    .unwrap_or_default();
                acted.sort();
                let mut named: Vec<String> = s["components"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_str().unwrap().to_owned())
                    .collect();
                named.sort();
                assert_eq!(acted, named.iter().collect::<Vec<_>>(), "{step}");
            }
        }
    }
    let listed = env.ok("task.list", json!({})).await;
    assert_eq!(listed.as_array().map(Vec::len), Some(RACKS), "{listed}");
    // Previewed again under the submission's request ID: duplicates.
    let mut again = request;
    again["request_id"] = json!("after-preview");
    let preview = env.ok("task.plan", again).await;
    for (p, r) in preview["results"]
        .as_array()
        .unwrap()
        .iter()
        .zip(reply["results"].as_array().unwrap())
    {
        assert_eq!(p["outcome"], "duplicate", "{p}");
        assert_eq!(p["task_id"], r["task_id"]);
    }
}

/// The problems of one previewed rack, as "code: message".
fn problems(p: &Value) -> Vec<String> {
    p["problems"]
        .as_array()
        .map(|v| {
            v.iter()
                .map(|e| {
                    format!(
                        "{}: {}",
                        e["code"].as_str().unwrap(),
                        e["message"].as_str().unwrap()
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn holds(p: &Value) -> Vec<String> {
    p["holds"]
        .as_array()
        .map(|v| v.iter().map(|h| h.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_preview_names_every_reason_a_rack_would_be_refused_or_held() {
    let env = env(InitialPower::Off).await;
    env.ok(
        "rule.create",
        json!({"name": "slow on", "operation_type": "power_control", "operation": "power_on",
               "is_default": true,
               "definition": quick(&["powershelf", "nvswitch", "compute"], "on", "60s")}),
    )
    .await;
    env.ok(
        "rule.create",
        json!({"name": "fw up", "operation_type": "firmware_control", "operation": "upgrade",
               "is_default": true, "definition": {"version": "v1", "steps": [
                {"component_type": "compute", "stage": 1,
                 "main_operation": {"name": "FirmwareControl",
                     "parameters": {"poll_interval": "100ms", "poll_timeout": "20s"}}}]}}),
    )
    .await;

    // An unknown rack: refused, naming it; the others are previewed.
    let p = env
        .ok(
            "task.plan",
            json!({"racks": ["rack-01", "rack-99"], "operation": "power_on"}),
        )
        .await;
    assert_eq!(p["results"][0]["outcome"], "create");
    assert_eq!(p["results"][1]["outcome"], "refused");
    assert_eq!(p["results"][1]["rack"], "rack-99");
    assert!(
        problems(&p["results"][1])[0].starts_with("not_found: rack"),
        "{p}"
    );

    // A conflict with an open task, named; with the queue strategy, a
    // queued task naming what it waits behind.
    let busy = env
        .ok(
            "task.submit",
            json!({"request_id": "busy", "racks": ["rack-01"], "operation": "power_on"}),
        )
        .await["results"][0]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let p = env
        .ok(
            "task.plan",
            json!({"racks": ["rack-01"], "operation": "power_on"}),
        )
        .await;
    let refused = &p["results"][0];
    assert_eq!(refused["outcome"], "refused", "{p}");
    let text = problems(refused).join("\n");
    assert!(
        text.starts_with("conflict: rack rack-01 already has a conflicting task"),
        "{text}"
    );
    assert!(text.contains(&busy), "the open task is named: {text}");
    let p = env
        .ok(
            "task.plan",
            json!({"racks": ["rack-01"], "operation": "power_on",
                   "conflict": {"strategy": "queue", "timeout_seconds": 600}}),
        )
        .await;
    assert_eq!(p["results"][0]["outcome"], "queue", "{p}");
    assert!(holds(&p["results"][0])[0].contains(&busy), "{p}");
    env.ok("task.cancel", json!({"id": busy})).await;

    // Versions: an "upgrade" older than installed is refused naming each
    // tray and its current → new version; a missing image is named too.
    let rack = env.ok("rack.get", json!({"rack": "rack-02"})).await;
    let installed = rack["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Compute")
        .unwrap()["firmware_version"]
        .as_str()
        .unwrap()
        .to_owned();
    let p = env
        .ok(
            "task.plan",
            json!({"racks": ["rack-02"], "operation": "upgrade", "component_types": ["Compute"],
                   "firmware": {"Compute": {"image_uri": "http://images.local/old.bin", "version": "0.1",
                                            "digest": "sha256:0000000000000000000000000000000000000000000000000000000000000000"}}}),
        )
        .await;
    let plan = &p["results"][0];
    assert_eq!(plan["outcome"], "refused", "{p}");
    assert_eq!(
        problems(plan),
        ["invalid: the images would move components' firmware the wrong way"],
        "{p}"
    );
    let versions = plan["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 3, "{p}");
    assert_eq!(versions[0]["installed"], installed.as_str());
    assert_eq!(versions[0]["target"], "0.1");
    assert_eq!(versions[0]["direction"], "down");
    assert_eq!(versions[0]["wrong_way"], true);
    let p = env
        .ok(
            "task.plan",
            json!({"racks": ["rack-02"], "operation": "upgrade", "component_types": ["Compute"]}),
        )
        .await;
    assert_eq!(
        problems(&p["results"][0]),
        ["invalid: the task's firmware images do not match what its rule flashes"],
        "{p}"
    );

    // Readiness, a window, and a power budget that can never fit: holds
    // of a task that would be created.
    env.ok(
        "rack.component_status",
        json!({"components": ["rack-03/compute-02"], "status": "maintenance"}),
    )
    .await;
    env.ok(
        "rack.power_domains",
        json!({"rack": "rack-03", "domains": ["row=A"]}),
    )
    .await;
    env.ok(
        "power_domain.set",
        json!({"name": "row=A", "budget_kw": 1.0}),
    )
    .await;
    let p = env
        .ok(
            "task.plan",
            json!({"racks": ["rack-03"], "operation": "power_on",
                   "not_before": "2099-01-01T00:00:00Z"}),
        )
        .await;
    let plan = &p["results"][0];
    // Before its window a task waits without holding the rack: queued.
    assert_eq!(plan["outcome"], "queue", "{p}");
    let h = holds(plan).join("\n");
    assert!(
        h.contains("waits for its window: not before 2099-01-01T00:00:00"),
        "{h}"
    );
    assert!(
        h.contains("waits up to 1800 s for components to be ready: compute-02 (maintenance)"),
        "{h}"
    );
    // Its shelves fit a 1 kW budget only if the rest of the row is off,
    // which nothing has read yet: they would wait to know; its trays never
    // fit.
    assert!(
        h.contains("PowerShelf power_on would wait now: waiting for power budget in row=A: ")
            && h.contains("components whose power is not known"),
        "{h}"
    );
    assert!(
        h.contains("Compute power_on would fail at its first command: power admission refused: power budget of row=A is 1 kW: the draw known on there (0 kW) and this power-on (5.4 kW steady, 9 kW inrush) would pass it"),
        "{h}"
    );
    assert_eq!(plan["not_ready"][0]["component"], "compute-02", "{p}");

    // A lock from a leak: refused naming the event, as a submission is.
    let event = env
        .ok(
            "event.publish",
            json!({"source": "test", "key": "1", "event_type": "hardware.leak.detected",
                   "severity": "critical", "rack": "rack-02", "component": "compute-01",
                   "message": "drip", "observed_at": "2026-12-05T00:00:00Z"}),
        )
        .await;
    let id = event["id"].as_str().unwrap().to_owned();
    flow_tests::eventually(Duration::from_secs(60), POLL, || async {
        let e = env.ok("event.get", json!({ "id": id })).await;
        (!e["locks"].as_array().is_none_or(Vec::is_empty)).then_some(())
    })
    .await
    .expect("the leaking tray is locked");
    let request = json!({"racks": ["rack-02"], "operation": "power_on", "request_id": "locked"});
    let p = env.ok("task.plan", request.clone()).await;
    let text = problems(&p["results"][0]).join("\n");
    assert!(
        text.starts_with(&format!(
            "conflict: rack-02/compute-01 is locked by hardware event {id}"
        )),
        "{text}"
    );
    let submitted = env.ok("task.submit", request).await;
    assert_eq!(
        submitted["results"][0]["error"]["message"], p["results"][0]["problems"][0]["message"],
        "the submission refuses with the preview's first problem: {submitted}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_preview_shows_its_phases_and_each_racks_conflict_or_downgrade_as_created() {
    // rack-03's compute trays run a newer firmware than the others.
    let env = env_with(InitialPower::On, |rack| {
        if rack["name"] == "rack-03" {
            for c in rack["components"].as_array_mut().unwrap() {
                if c["type"] == "Compute" {
                    c["firmware_version"] = json!("999.0");
                }
            }
        }
    })
    .await;
    env.ok(
        "rule.create",
        json!({"name": "fw up", "operation_type": "firmware_control", "operation": "upgrade",
               "is_default": true, "definition": {"version": "v1", "steps": [
                {"component_type": "compute", "stage": 1,
                 "main_operation": {"name": "FirmwareControl",
                     "parameters": {"poll_interval": "100ms", "poll_timeout": "20s"}}}]}}),
    )
    .await;
    env.ok(
        "rule.create",
        json!({"name": "slow off", "operation_type": "power_control", "operation": "power_off",
               "is_default": true,
               "definition": quick(&["compute"], "off", "60s")}),
    )
    .await;
    let busy = env
        .ok(
            "task.submit",
            json!({"request_id": "busy", "racks": ["rack-01"], "operation": "power_off"}),
        )
        .await["results"][0]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let firmware = env
        .served_images(
            json!({"Compute": {"image_uri": "http://images.local/fw-500.bin",
                                          "version": "500.0"}}),
        )
        .await;
    let run = json!({"name": "fw-500", "phases": {"counts": [1]}, "max_concurrent": 2,
        "gates": [{"kind": "failure_count", "count": 1}],
        "ordering": {"kind": "random", "seed": 7},
        "task": {"racks": rack_names(), "operation": "upgrade", "component_types": ["Compute"],
                 "firmware": firmware}});
    let plan = env.ok("run.plan", run.clone()).await;
    assert_eq!(plan["phases"].as_array().unwrap().len(), 2, "{plan}");
    assert_eq!(plan["phases"][0]["phase"], 1);
    assert_eq!(plan["phases"][0]["racks"].as_array().unwrap().len(), 1);
    assert_eq!(plan["phases"][1]["racks"].as_array().unwrap().len(), 2);
    let order: Vec<Value> = plan["phases"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["racks"].as_array().unwrap().clone())
        .collect();
    let racks = plan["racks"].as_array().unwrap();
    assert_eq!(
        racks.iter().map(|r| r["rack"].clone()).collect::<Vec<_>>(),
        order,
        "each rack's plan in the run's order"
    );
    let of = |name: &str| racks.iter().find(|r| r["rack"] == name).unwrap();
    assert_eq!(of("rack-01")["outcome"], "refused");
    assert!(
        problems(of("rack-01"))[0].contains(&busy),
        "the conflicting task is named: {}",
        of("rack-01")
    );
    assert_eq!(of("rack-02")["outcome"], "create", "{}", of("rack-02"));
    assert_eq!(of("rack-02")["versions"][0]["direction"], "up");
    assert_eq!(of("rack-03")["outcome"], "refused");
    assert_eq!(of("rack-03")["versions"][0]["installed"], "999.0");
    assert_eq!(of("rack-03")["versions"][0]["direction"], "down");
    assert_eq!(
        problems(of("rack-03")),
        ["invalid: the images would move components' firmware the wrong way"]
    );
    assert_eq!(
        env.ok("run.list", json!({})).await["runs"],
        json!([]),
        "nothing was created"
    );
    // Created with the same seed: the same targets in the same phases.
    let created = env.ok("run.create", run).await;
    let targets = env.ok("run.targets", json!({"run": created["id"]})).await["targets"]
        .as_array()
        .unwrap()
        .clone();
    let created_order: Vec<Value> = targets.iter().map(|t| t["rack"].clone()).collect();
    assert_eq!(created_order, order);
    let phases: Vec<u64> = targets
        .iter()
        .map(|t| t["phase"].as_u64().unwrap())
        .collect();
    assert_eq!(phases, [1, 2, 2]);
    env.ok("run.cancel", json!({"run": created["id"]})).await;
    env.ok("task.cancel", json!({"id": busy})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_schedule_preview_shows_its_next_five_firings_in_its_zone_and_their_windows() {
    let env = env(InitialPower::On).await;
    let schedule = json!({"name": "nightly", "spec": {"kind": "cron", "expression": "0 2 * * *"},
        "timezone": "Europe/Berlin",
        "windows": [{"cron": "30 1 * * *", "duration": "2h"}],
        "task": {"racks": ["rack-01"], "operation": "power_on"}});
    let plan = env.ok("schedule.plan", schedule.clone()).await;
    let firings = plan["firings"].as_array().unwrap();
    assert_eq!(firings.len(), 5, "{plan}");
    for f in firings {
        let local = f["local"].as_str().unwrap();
        assert!(local.contains("T02:00:00+01:00[Europe/Berlin]"), "{f}");
        assert_eq!(f["window"]["open_at_firing"], true, "{f}");
    }
    assert_eq!(plan["racks"][0]["rack"], "rack-01");
    assert_eq!(plan["racks"][0]["outcome"], "create", "{plan}");
    assert_eq!(
        env.ok("schedule.list", json!({})).await["schedules"],
        json!([]),
        "nothing was created"
    );
    let created = env.ok("schedule.create", schedule).await;
    assert_eq!(created["next_run_at"], firings[0]["at"], "{created}");
}
