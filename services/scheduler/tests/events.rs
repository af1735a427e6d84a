//! Hardware events and event rules with a real NATS server, Postgres and
//! the simulator: a leak raised through the simulator's admin API is seen
//! by the watcher (on the compute tray's SSE stream, on the switch tray by
//! polling its chassis), stored once, and the built-in rule force-powers-
//! off the leaking tray and the trays of its type below it, each commanded
//! once; rules bound to the site and to a rack, disabled rules, stale
//! updates and bad events.

use std::time::Duration;

use flow_rack_sim::{InitialPower, SimConfig};
use flow_testenv::{POLL, Stack};
use flow_worker::watch::WatchConfig;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

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

/// Raises a condition through the simulator's admin API (HTTP).
async fn raise(env: &Stack, component: &str, kind: &str) -> Value {
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
    response.json().await.expect("a condition")
}

/// The reset commands each component of rack-01 was sent, by name.
fn resets(env: &Stack) -> Vec<(String, Vec<String>)> {
    let state = env.sim().state();
    state.racks[0]
        .components
        .iter()
        .map(|c| {
            let values = c
                .commands
                .iter()
                .filter(|x| x.kind == flow_rack_sim::CommandKind::Reset)
                .map(|x| x.value.clone())
                .collect();
            (c.name.clone(), values)
        })
        .collect()
}

/// Waits until rack-01 has `n` events whose executions all ended; returns
/// them, newest first.
async fn until_events(env: &Stack, n: usize) -> Vec<Value> {
    let found = flow_tests::eventually(WAIT, POLL, || async {
        let events = env.ok("event.list", json!({"rack": "rack-01"})).await["events"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let settled = events.len() == n
            && events.iter().all(|e| {
                e["executions"].as_array().is_some_and(|x| {
                    x.iter().all(|x| {
                        ["completed", "failed", "skipped"]
                            .contains(&x["status"].as_str().unwrap_or(""))
                    })
                })
            });
        settled.then_some(events)
    })
    .await;
    found.unwrap_or_else(|e| panic!("{n} settled events: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leak_force_powers_off_the_tray_and_the_trays_below_it_once() {
    let mut env = env(1).await;
    env.start_watcher(WatchConfig {
        poll_every: Duration::from_millis(200),
        inventory_every: Duration::from_millis(500),
        ..WatchConfig::default()
    });
    // A compute tray: its BMC has an event stream.
    let condition = raise(&env, "compute-03", "leak").await;
    let events = until_events(&env, 1).await;
    let event = &events[0];
    assert_eq!(event["event"]["event_type"], "hardware.leak.detected");
    assert_eq!(event["event"]["component"], "compute-03");
    assert_eq!(event["event"]["source"], "redfish");
    assert_eq!(event["rule"], "builtin:hardware.leak.detected");
    let execution = &event["executions"][0];
    assert_eq!(execution["status"], "completed", "{execution}");
    assert_eq!(
        execution["targets"],
        json!([
            "rack-01/compute-03",
            "rack-01/compute-02",
            "rack-01/compute-01"
        ])
    );
    let task_id = execution["tasks"][0].as_str().expect("a task").to_owned();
    let task = env.finish(&task_id).await;
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["operation"], "force_power_off", "{task}");
    assert_eq!(task["event_id"], event["id"]);

    // The watcher goes on seeing the condition (every poll, and on the
    // stream it reopens): still one event, and handing the same
    // observation in again creates nothing.
    let again = env.ok("event.publish", event["event"].clone()).await;
    assert_eq!(again, json!({"id": event["id"], "created": false}));
    // A poll after the task ended has seen it (the simulator counts the
    // watcher's chassis reads): wait for two more, then count.
    let reads = |env: &Stack| env.sim().state().requests_total;
    let before = reads(&env);
    flow_tests::eventually(WAIT, POLL, || async {
        (reads(&env) > before + 10).then_some(())
    })
    .await
    .expect("the watcher keeps reading");
    assert_eq!(until_events(&env, 1).await.len(), 1);
    let sent = resets(&env);
    for (name, values) in &sent {
        let expected: &[&str] = match name.as_str() {
            "compute-01" | "compute-02" | "compute-03" => &["ForceOff"],
            _ => &[],
        };
        assert_eq!(values, expected, "{name}: {sent:?}");
    }
    assert!(condition["since"].is_string(), "{condition}");

    // The first leak is dealt with: cleared, so that the next one is the
    // rack's only leaking tray again (two would power the whole rack off:
    // tests/leaks.rs).
    env.ok(
        "event.clear",
        json!({"id": event["id"], "reason": "tray dried and inspected"}),
    )
    .await;
    // A switch tray: no event stream, the watcher reads its chassis.
    raise(&env, "nvswitch-02", "leak").await;
    let events = until_events(&env, 2).await;
    let switch = &events[0];
    assert_eq!(switch["event"]["component"], "nvswitch-02");
    assert_eq!(
        switch["executions"][0]["targets"],
        json!(["rack-01/nvswitch-02", "rack-01/nvswitch-01"])
    );
    let task_id = switch["executions"][0]["tasks"][0]
        .as_str()
        .expect("a task")
        .to_owned();
    assert_eq!(env.finish(&task_id).await["status"], "completed");
    let sent = resets(&env);
    for (name, values) in &sent {
        let expected: &[&str] = match name.as_str() {
            "compute-01" | "compute-02" | "compute-03" | "nvswitch-01" | "nvswitch-02" => {
                &["ForceOff"]
            }
            _ => &[],
        };
        assert_eq!(values, expected, "{name}: {sent:?}");
    }
    env.stop().await;
}

fn leak(key: &str, component: &str) -> Value {
    json!({"source": "test", "key": key, "event_type": "hardware.leak.detected",
           "severity": "critical", "rack": "rack-01", "component": component,
           "message": "drip", "observed_at": "2026-12-01T00:00:00Z"})
}

fn rule(name: &str, action: Value) -> Value {
    json!({"name": name, "event_type": "hardware.leak.detected",
           "actions": [{"name": "act", "do": action}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rack_binding_wins_over_the_site_and_disabled_rules_are_passed_over() {
    let env = env(0).await;
    // Created disabled by default; bound at the site.
    let alert = env
        .ok(
            "event_rule.create",
            json!({"spec": rule("page", json!({"kind": "alert", "severity": "warning", "message": "leak"}))}),
        )
        .await;
    assert_eq!(alert["enabled"], false);
    let bound = env
        .ok("event_rule.bind", json!({"rule": "page", "scope": "site"}))
        .await;
    assert_eq!(bound["scope"], "site");
    // Disabled: the built-in applies (its task waits: no worker here).
    let first = env.ok("event.publish", leak("1", "compute-02")).await;
    assert_eq!(first["created"], true);
    let event = env.ok("event.get", json!({"id": first["id"]})).await;
    assert_eq!(event["rule"], "builtin:hardware.leak.detected");
    assert_eq!(
        event["executions"][0]["targets"],
        json!(["rack-01/compute-02", "rack-01/compute-01"])
    );

    // Enabled: the site's rule.
    let enabled = env
        .ok(
            "event_rule.enable",
            json!({"rule": "page", "enabled": true}),
        )
        .await;
    assert_eq!(enabled["revision"], 2);
    let second = env.ok("event.publish", leak("2", "compute-04")).await;
    let event = env.ok("event.get", json!({"id": second["id"]})).await;
    assert_eq!(event["rule"], "page");
    // A rack binding wins over it.
    env.ok(
        "event_rule.create",
        json!({"spec": rule("ignore here", json!({"kind": "noop"})), "enabled": true}),
    )
    .await;
    env.ok(
        "event_rule.bind",
        json!({"rule": "ignore here", "scope": {"rack": "rack-01"}}),
    )
    .await;
    let third = env.ok("event.publish", leak("3", "compute-04")).await;
    let event = env.ok("event.get", json!({"id": third["id"]})).await;
    assert_eq!(event["rule"], "ignore here");
    let bindings = env.ok("event_rule.bindings", json!({})).await["bindings"].clone();
    assert_eq!(bindings.as_array().map(Vec::len), Some(2), "{bindings}");
    // The alert and the noop run; their executions complete.
    let events = until_events(&env, 3).await;
    for e in &events[..2] {
        assert_eq!(e["executions"][0]["status"], "completed", "{e}");
    }

    // A stale update is refused; the current revision goes through.
    let stale = env
        .err(
            "event_rule.update",
            json!({"rule": "page", "revision": 1, "spec": rule("page", json!({"kind": "noop"}))}),
        )
        .await;
    assert!(stale.message.contains("not 1"), "{stale}");
    let updated = env
        .ok(
            "event_rule.update",
            json!({"rule": "page", "revision": 2, "spec": rule("page", json!({"kind": "noop"}))}),
        )
        .await;
    assert_eq!(updated["revision"], 3);
    // Built-ins are read-only; bad rules and events are named.
    let e = env
        .err(
            "event_rule.delete",
            json!({"rule": "builtin:hardware.leak.detected"}),
        )
        .await;
    assert!(e.message.contains("built-in"), "{e}");
    let e = env
        .err(
            "event_rule.create",
            json!({"spec": {"name": "x", "event_type": "hardware.leak.detected", "actions": [
                {"name": "Bad Name", "do": {"kind": "submit_task", "target": "component",
                 "task": {"operation": "power_off", "racks": ["rack-01"]}}}]}}),
        )
        .await;
    assert_eq!(
        e.details,
        [
            "actions[0].name: \"Bad Name\" is not lower_snake_case",
            "actions[0].do.task: names targets; the action's `target` chooses them"
        ],
        "{e}"
    );
    let e = env.err("event.publish", leak("4", "compute-09")).await;
    assert_eq!(e.message, "rack rack-01 has no component \"compute-09\"");
    let e = env.err("event.publish", leak("", "compute-01")).await;
    assert_eq!(e.details, ["key: must not be empty"], "{e}");
    // Deleting a rule removes its bindings.
    let deleted = env.ok("event_rule.delete", json!({"rule": "page"})).await;
    assert_eq!(deleted["bindings_removed"], 1);
    env.stop().await;
}
