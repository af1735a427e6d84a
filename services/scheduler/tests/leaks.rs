//! Leak containment with a real NATS server, Postgres and the simulator
//! over HTTP (`docs/leak-containment.md`): a leak's force power-off goes
//! first — a long task on the tray is cancelled, its record names the
//! event (as does one waiting behind it), and the tray is off within
//! seconds as the simulator sees it; a leaking tray is locked until an
//! operator clears the event with a reason; two leaking trays power the
//! whole rack off, shelves last, and lock it, and a rollout that reaches
//! the rack skips it.

use std::time::{Duration, Instant};

use flow_rack_sim::{CommandKind, InitialPower, PowerState, SimConfig};
use flow_testenv::{POLL, Stack};
use flow_worker::watch::WatchConfig;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

/// What the test asks of the leak's power-off: from the leak raised in the
/// simulator to the tray powered off.
const CUT_WITHIN: Duration = Duration::from_secs(10);

async fn env(workers: usize) -> Stack {
    Stack::builder()
        .simulator(SimConfig {
            time_scale: 0.01,
            initial_power: InitialPower::On,
            compute: 4,
            nvswitch: 2,
            powershelf: 2,
            ..SimConfig::default()
        })
        .workers(workers)
        .start()
        .await
}

/// A power-on rule for compute trays whose step lasts `sleep` after the
/// command (the default for power_on from now on).
async fn power_on_rule(env: &Stack, name: &str, sleep: &str) {
    let definition = json!({"version": "v1", "steps": [
        {"component_type": "compute", "stage": 1, "timeout": "10m",
         "main_operation": {"name": "PowerControl"},
         "post_operation": [{"name": "Sleep", "parameters": {"duration": sleep}}]}
    ]});
    env.ok(
        "rule.create",
        json!({"name": name, "operation_type": "power_control", "operation": "power_on",
               "definition": definition, "is_default": true}),
    )
    .await;
}

/// Raises a condition through the simulator's admin API (HTTP).
async fn raise(env: &Stack, component: &str, kind: &str) {
    let url = format!(
        "{}/admin/v1/racks/rack-01/components/{component}/conditions",
        env.sim().admin_url()
    );
    let response = reqwest::Client::new()
        .post(url)
        .json(&json!({ "kind": kind }))
        .send()
        .await
        .expect("the admin API");
    assert!(response.status().is_success(), "{}", response.status());
}

/// The simulator's power state of a component of rack-01.
fn power(env: &Stack, component: &str) -> PowerState {
    env.sim()
        .state()
        .component("rack-01", component)
        .unwrap_or_else(|| panic!("no {component} in the simulator"))
        .power_state
}

/// A leak as a watcher hands it in.
fn leak(key: &str, component: &str) -> Value {
    json!({"source": "test", "key": key, "event_type": "hardware.leak.detected",
           "severity": "critical", "rack": "rack-01", "component": component,
           "message": "drip", "observed_at": "2026-12-05T00:00:00Z"})
}

/// Waits until every execution of the event ended; the event then.
async fn settled(env: &Stack, id: &Value) -> Value {
    let found = flow_tests::eventually(WAIT, POLL, || async {
        let event = env.ok("event.get", json!({ "id": id })).await;
        let done = event["executions"].as_array().is_some_and(|x| {
            x.iter().all(|x| {
                ["completed", "failed", "skipped"].contains(&x["status"].as_str().unwrap_or(""))
            })
        });
        done.then_some(event)
    })
    .await;
    found.unwrap_or_else(|e| panic!("event {id} settled: {e}"))
}

/// The one execution of `event` named `action`.
fn execution<'a>(event: &'a Value, action: &str) -> &'a Value {
    event["executions"]
        .as_array()
        .and_then(|x| x.iter().find(|x| x["action"] == action))
        .unwrap_or_else(|| panic!("no execution {action}: {event}"))
}

/// Submits a task (under a request ID of its own unless it has one) and
/// returns the single rack's outcome.
async fn submit(env: &Stack, mut body: Value) -> Value {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    if body["request_id"].is_null() {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        body["request_id"] = json!(format!("leaks-{n}"));
    }
    env.ok("task.submit", body).await["results"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leak_during_a_two_minute_task_cuts_the_trays_power_within_10_s() {
    let mut env = env(1).await;
    env.start_watcher(WatchConfig {
        poll_every: Duration::from_millis(200),
        inventory_every: Duration::from_millis(500),
        ..WatchConfig::default()
    });
    // A two-minute task on the compute trays: the command, then a 2 min
    // wait (real time: the worker's Sleep is not scaled).
    power_on_rule(&env, "slow on", "2m").await;
    let outcome = submit(
        &env,
        json!({"request_id": "long", "racks": ["rack-01"], "operation": "power_on",
               "component_types": ["compute"]}),
    )
    .await;
    let long = outcome["task_id"].as_str().expect("created").to_owned();
    // Its step runs (the trays are on already: the command changes
    // nothing, then the wait).
    env.until_task(&long, "the long task's step runs", WAIT, |t| {
        t["status"] == "running" && t["steps"][0]["status"] == "running"
    })
    .await;
    assert_eq!(env.task(&long).await["status"], "running");
    assert_eq!(power(&env, "compute-03"), PowerState::On);
    // A second one waits behind it.
    let queued = submit(
        &env,
        json!({"racks": ["rack-01"], "operation": "power_on", "component_types": ["compute"],
               "conflict": {"strategy": "queue", "timeout_seconds": 600}}),
    )
    .await;
    assert_eq!(queued["queued"], true, "{queued}");
    let queued = queued["task_id"].as_str().expect("queued").to_owned();

    let raised = Instant::now();
    raise(&env, "compute-03", "leak").await;
    let cut = flow_tests::eventually(CUT_WITHIN, Duration::from_millis(20), || async {
        (power(&env, "compute-03") == PowerState::Off).then(|| raised.elapsed())
    })
    .await
    .unwrap_or_else(|e| panic!("compute-03 still on {CUT_WITHIN:?} after the leak: {e}"));
    eprintln!("leak raised → compute-03 off: {cut:?}");
    assert!(cut < CUT_WITHIN, "{cut:?}");

    // The long task is cancelled (at its next action boundary: the worker
    // sees the cancel mark within its longest nak), naming the event.
    let events = env.ok("event.list", json!({"rack": "rack-01"})).await["events"].clone();
    let event_id = events[0]["id"].clone();
    let task = env
        .until_task(&long, "the long task was not cancelled", WAIT, |t| {
            t["status"] == "terminated"
        })
        .await;
    assert_eq!(task["preempted_by"], event_id, "{task}");
    // The waiting one ended at once, naming the event too: it must not
    // start once the long one let go.
    let waiting = env.task(&queued).await;
    assert_eq!(waiting["status"], "terminated", "{waiting}");
    assert_eq!(waiting["preempted_by"], event_id, "{waiting}");
    assert!(
        raised.elapsed() < Duration::from_secs(60),
        "cancelled well before its two minutes"
    );
    let event = settled(&env, &event_id).await;
    let affected = execution(&event, "force_power_off_affected");
    assert_eq!(affected["status"], "completed", "{event}");
    assert_eq!(
        execution(&event, "force_power_off_rack")["status"],
        "skipped",
        "{event}"
    );
    let off = env
        .finish(affected["tasks"][0].as_str().expect("a task"))
        .await;
    assert_eq!(off["status"], "completed", "{off}");
    assert_eq!(off["event_id"], event_id);
    for tray in ["compute-03", "compute-02", "compute-01"] {
        assert_eq!(power(&env, tray), PowerState::Off, "{tray}");
    }
    assert_eq!(power(&env, "compute-04"), PowerState::On);
    // The leaking tray is locked, the trays below it are not.
    let locks: Vec<&str> = event["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["component"].as_str().unwrap())
        .collect();
    assert_eq!(locks, ["compute-03"]);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_locked_tray_refuses_power_on_until_cleared_with_a_reason() {
    let env = env(1).await;
    power_on_rule(&env, "quick on", "1s").await;
    let id = env.ok("event.publish", leak("1", "compute-02")).await["id"].clone();
    let event = settled(&env, &id).await;
    assert_eq!(
        event["locks"][0]["component"], "compute-02",
        "the leaking tray is locked: {event}"
    );
    let off = execution(&event, "force_power_off_affected")["tasks"][0]
        .as_str()
        .expect("a task")
        .to_owned();
    assert_eq!(env.finish(&off).await["status"], "completed");

    // Power-on and reset are refused, naming the component and the event.
    for operation in ["power_on", "restart", "force_restart"] {
        let refused = submit(
            &env,
            json!({"racks": ["rack-01"], "operation": operation,
                   "component_types": ["compute"], "override_readiness": true,
                   "reason": "leak test: the lock, not readiness, is under test"}),
        )
        .await;
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("rack-01/compute-02")
                && message.contains(id.as_str().unwrap())
                && message.contains("flow event clear"),
            "{operation}: {refused}"
        );
        assert_eq!(refused["error"]["code"], "conflict", "{refused}");
    }
    // A power-off is what a leaking tray needs: allowed.
    let allowed = submit(
        &env,
        json!({"components": ["compute-02"], "operation": "force_power_off"}),
    )
    .await;
    assert!(allowed["task_id"].is_string(), "{allowed}");
    env.finish(allowed["task_id"].as_str().unwrap()).await;

    // Clearing needs a reason: missing, then blank.
    let e = env.err("event.clear", json!({ "id": id })).await;
    assert!(e.message.contains("missing field `reason`"), "{e}");
    let e = env
        .err("event.clear", json!({ "id": id, "reason": "  " }))
        .await;
    assert!(e.message.contains("reason: required"), "{e}");
    assert_eq!(
        env.ok("event.get", json!({ "id": id })).await["locks"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "a refused clear changes nothing"
    );
    let cleared = env
        .ok(
            "event.clear",
            json!({ "id": id, "reason": "tray dried and inspected", "by": "ops" }),
        )
        .await;
    assert_eq!(cleared["locks"], json!([]), "{cleared}");
    assert_eq!(cleared["cleared_reason"], "tray dried and inspected");
    assert_eq!(cleared["cleared_by"], "ops");
    assert!(cleared["cleared_at"].is_string(), "{cleared}");
    let again = env
        .err("event.clear", json!({ "id": id, "reason": "again" }))
        .await;
    assert!(again.message.contains("cleared already"), "{again}");

    // Now the power-on goes through and the tray is on again.
    let on = submit(
        &env,
        json!({"components": ["compute-02"], "operation": "power_on",
               "override_readiness": true, "reason": "leak cleared, tray checked"}),
    )
    .await;
    let on = on["task_id"].as_str().expect("created").to_owned();
    assert_eq!(env.finish(&on).await["status"], "completed");
    assert_eq!(power(&env, "compute-02"), PowerState::On);

    // The audit log: each refused clear once, the clear with its reason,
    // each refused submission once (and no task for them).
    let clears = env
        .ok("audit.list", json!({"endpoint": "event.clear"}))
        .await["records"]
        .clone();
    let outcomes: Vec<(&str, Option<&str>)> = clears
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["outcome"].as_str().unwrap(), r["reason"].as_str()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("refused", Some("again")),
            ("ok", Some("tray dried and inspected")),
            ("refused", Some("  ")),
            ("refused", None),
        ],
        "{clears}"
    );
    let refused = env
        .ok(
            "audit.list",
            json!({"endpoint": "task.submit", "outcome": "refused"}),
        )
        .await["records"]
        .clone();
    let refused = refused.as_array().unwrap();
    assert_eq!(
        refused.len(),
        3,
        "the three locked submissions: {refused:?}"
    );
    for r in refused {
        assert!(r["task_ids"].as_array().unwrap().is_empty(), "{r}");
        assert!(
            r["message"].as_str().unwrap().contains("flow event clear"),
            "{r}"
        );
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_leaking_trays_power_the_whole_rack_off_and_lock_it() {
    let env = env(1).await;
    let first = env.ok("event.publish", leak("1", "compute-03")).await["id"].clone();
    let first = settled(&env, &first).await;
    assert_eq!(
        execution(&first, "force_power_off_rack")["status"],
        "skipped"
    );
    let second = env.ok("event.publish", leak("2", "nvswitch-01")).await["id"].clone();
    let event = settled(&env, &second).await;
    assert_eq!(
        execution(&event, "force_power_off_affected")["status"],
        "skipped",
        "{event}"
    );
    let rack = execution(&event, "force_power_off_rack");
    assert_eq!(rack["status"], "completed", "{event}");
    assert_eq!(rack["targets"].as_array().map(Vec::len), Some(8));
    let task = env.finish(rack["tasks"][0].as_str().expect("a task")).await;
    assert_eq!(task["status"], "completed", "{task}");

    // Everything is off, each type verified before the next, and the
    // shelves were commanded last.
    let state = env.sim().state();
    let parse = |at: &str| {
        time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339)
            .unwrap_or_else(|e| panic!("{at}: {e}"))
    };
    let mut trays_last = time::OffsetDateTime::UNIX_EPOCH;
    let mut shelves_first = time::OffsetDateTime::now_utc() + Duration::from_secs(3600);
    for c in &state.racks[0].components {
        assert_eq!(c.power_state, PowerState::Off, "{}", c.name);
        let at = c
            .commands
            .iter()
            .filter(|x| x.kind == CommandKind::Reset && x.value == "ForceOff")
            .map(|x| parse(&x.at))
            .max()
            .unwrap_or_else(|| panic!("{} was never forced off", c.name));
        if c.name.starts_with("powershelf") {
            shelves_first = shelves_first.min(at);
        } else {
            trays_last = trays_last.max(at);
        }
    }
    assert!(
        trays_last < shelves_first,
        "the shelves go last: trays until {trays_last}, shelves from {shelves_first}"
    );
    let steps: Vec<(&str, &str)> = task["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["component_type"].as_str().unwrap(),
                s["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("Compute", "completed"),
            ("NVSwitch", "completed"),
            ("PowerShelf", "completed")
        ]
    );

    // The whole rack is locked by the second event.
    let locked: Vec<&str> = event["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["component"].as_str().unwrap())
        .collect();
    assert_eq!(locked.len(), 8, "{event}");
    assert!(locked.contains(&"powershelf-01"), "{locked:?}");
    let refused = submit(
        &env,
        json!({"components": ["powershelf-01"], "operation": "power_on"}),
    )
    .await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("rack-01/powershelf-01") && message.contains(second.as_str().unwrap()),
        "{refused}"
    );

    // A rollout that reaches the rack skips it with that message.
    env.ok(
        "run.create",
        json!({"name": "on again", "task": {"racks": ["rack-01"], "operation": "power_on"},
               "phases": {"counts": [1]}, "max_concurrent": 1,
               "gates": [{"kind": "failure_count", "count": 1}]}),
    )
    .await;
    let found = flow_tests::eventually(WAIT, POLL, || async {
        let targets = env.ok("run.targets", json!({"run": "on again"})).await["targets"].clone();
        (targets[0]["status"] == "skipped").then_some(targets)
    })
    .await
    .expect("the run skips the locked rack");
    let message = found[0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("locked by hardware event"), "{found}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leak_during_a_restart_cuts_the_trays_power_within_10_s_and_it_stays_off() {
    // Half of real time: a graceful restart is 5 s down, then 2.5 s up.
    let mut env = Stack::builder()
        .simulator(SimConfig {
            time_scale: 0.5,
            initial_power: InitialPower::On,
            compute: 4,
            nvswitch: 2,
            powershelf: 2,
            ..SimConfig::default()
        })
        .workers(1)
        .start()
        .await;
    env.start_watcher(WatchConfig {
        poll_every: Duration::from_millis(200),
        inventory_every: Duration::from_millis(500),
        ..WatchConfig::default()
    });
    env.ok(
        "rule.create",
        json!({"name": "restart, verified", "operation_type": "power_control", "operation": "restart",
               "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"},
             "post_operation": [{"name": "VerifyPowerStatus", "timeout": "2m", "poll_interval": "5s",
                                 "parameters": {"expected_status": "on"}}]}]}}),
    )
    .await;
    let outcome = submit(
        &env,
        json!({"racks": ["rack-01"], "operation": "restart", "component_types": ["compute"]}),
    )
    .await;
    let restart = outcome["task_id"].as_str().expect("created").to_owned();
    let restarted = flow_tests::eventually(WAIT, Duration::from_millis(20), || async {
        (env.sim()
            .state()
            .component("rack-01", "compute-03")
            .unwrap()
            .command_count(CommandKind::Reset)
            > 0)
        .then(Instant::now)
    })
    .await
    .expect("the restart reached compute-03");
    // 0.3 s into the restart, a leak on compute-03.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(power(&env, "compute-03"), PowerState::PoweringOff);
    let raised = Instant::now();
    raise(&env, "compute-03", "leak").await;
    let cut = flow_tests::eventually(CUT_WITHIN, Duration::from_millis(20), || async {
        let log = env.sim().state();
        let tray = log.component("rack-01", "compute-03").unwrap();
        tray.commands
            .iter()
            .any(|c| c.value == "ForceOff")
            .then(|| raised.elapsed())
    })
    .await
    .unwrap_or_else(|e| panic!("no ForceOff at compute-03 {CUT_WITHIN:?} after the leak: {e}"));
    eprintln!("leak raised → ForceOff at compute-03: {cut:?}");
    // Past the restart's own end (7.5 s after it began), the leaking tray
    // and the ones below it stay off.
    flow_tests::eventually(WAIT, Duration::from_millis(20), || async {
        (power(&env, "compute-03") == PowerState::Off).then_some(())
    })
    .await
    .expect("compute-03 off");
    while restarted.elapsed() < Duration::from_secs(9) {
        for tray in ["compute-03", "compute-02", "compute-01"] {
            let p = power(&env, tray);
            assert!(
                matches!(p, PowerState::Off | PowerState::PoweringOff),
                "{tray} {p:?} after the leak"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for tray in ["compute-03", "compute-02", "compute-01"] {
        assert_eq!(power(&env, tray), PowerState::Off, "{tray}");
        let log: Vec<String> = env
            .sim()
            .state()
            .component("rack-01", tray)
            .unwrap()
            .commands
            .iter()
            .map(|c| c.value.clone())
            .collect();
        assert_eq!(log, ["GracefulRestart", "ForceOff"], "{tray}");
    }
    // The leak's task recorded what it sent, and the restart was cancelled.
    let events = env.ok("event.list", json!({"rack": "rack-01"})).await["events"].clone();
    let event = settled(&env, &events[0]["id"]).await;
    let affected = execution(&event, "force_power_off_affected");
    let off = env
        .finish(affected["tasks"][0].as_str().expect("a task"))
        .await;
    assert_eq!(off["status"], "completed", "{off:#}");
    let record = &off["steps"][0]["results"]["compute-03"];
    assert_eq!(
        record["actions"][0]["attempts"], 1,
        "sent at once, unread: {record:#}"
    );
    let task = env.task(&restart).await;
    assert_eq!(task["status"], "terminated", "{task:#}");
    env.stop().await;
}
