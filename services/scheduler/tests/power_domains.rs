//! Power domains against the real stack — NATS, Postgres, schedulers and
//! workers in process, the rack simulator over HTTP — with the simulator's
//! own record as the judge (`GET /admin/v1/power`: each domain's peak draw,
//! breaker trips, power-on command times and shelves off):
//!
//! * a budget holds while three racks power on at once under two schedulers
//!   and four workers, one of them killed mid-stage (and without the
//!   budget the same power-on trips the domain's breaker);
//! * `--min-spacing` keeps the gap between power-on commands;
//! * `--max-shelves-off` holds shelves on until the cap is raised.

use std::time::Duration;

use flow_rack_sim::{InitialPower, SimConfig};
use flow_testenv::Stack;
use serde_json::{Value, json};

const RACKS: usize = 3;
const COMPUTE: usize = 6;
const NVSWITCH: usize = 2;
const SHELVES: usize = 2;
const POLL: Duration = Duration::from_millis(50);

/// Draw models as the simulator's defaults (W): (inrush, steady).
const COMPUTE_W: (f64, f64) = (9000.0, 5400.0);
const NVSWITCH_W: (f64, f64) = (1500.0, 900.0);
const SHELF_W: (f64, f64) = (400.0, 200.0);

/// Every component of the racks at steady draw, kW.
fn steady_kw(racks: usize) -> f64 {
    racks as f64
        * (COMPUTE as f64 * COMPUTE_W.1
            + NVSWITCH as f64 * NVSWITCH_W.1
            + SHELVES as f64 * SHELF_W.1)
        / 1000.0
}

/// Room for two compute trays' inrush at once above the steady draw.
fn budget_kw(racks: usize) -> f64 {
    steady_kw(racks) + 2.0 * (COMPUTE_W.0 - COMPUTE_W.1) / 1000.0 + 0.3
}

async fn env(racks: usize, workers: usize, initial: InitialPower) -> Stack {
    let env = Stack::builder()
        .simulator(sim(racks, initial))
        .workers(workers)
        .start()
        .await;
    prepare(&env).await;
    env
}

fn sim(racks: usize, initial: InitialPower) -> SimConfig {
    SimConfig {
        time_scale: 0.05,
        initial_power: initial,
        racks,
        compute: COMPUTE,
        nvswitch: NVSWITCH,
        powershelf: SHELVES,
        ..SimConfig::default()
    }
}

/// The simulator's other racks, Flow's draw models and quick rules.
async fn prepare(env: &Stack) {
    for rack in &env.sim().inventory()[1..] {
        env.ok("rack.create", json!({ "rack": rack })).await;
    }
    // Flow's settle times: at least the simulator's (2 s and 1 s scaled
    // by 0.05), short enough for a quick test.
    for t in ["Compute", "NVSwitch", "PowerShelf"] {
        let (inrush, steady) = match t {
            "Compute" => COMPUTE_W,
            "NVSwitch" => NVSWITCH_W,
            _ => SHELF_W,
        };
        env.ok(
            "power_model.set",
            json!({"component_type": t, "inrush_w": inrush as u32, "steady_w": steady as u32,
                   "settle_ms": 200}),
        )
        .await;
    }
    let verify = |expected: &str| {
        json!([{"name": "VerifyPowerStatus", "timeout": "30s", "poll_interval": "100ms",
                "parameters": {"expected_status": expected}}])
    };
    let retry =
        json!({"max_attempts": 20, "initial_interval": "200ms", "backoff_coefficient": 1.0});
    for (op, order) in [
        ("power_on", ["powershelf", "nvswitch", "compute"]),
        ("power_off", ["compute", "nvswitch", "powershelf"]),
    ] {
        let expected = if op == "power_on" { "on" } else { "off" };
        let steps: Vec<Value> = order
            .iter()
            .enumerate()
            .map(|(i, t)| {
                json!({"component_type": t, "stage": i + 1, "timeout": "2m", "retry": retry,
                       "main_operation": {"name": "PowerControl"},
                       "post_operation": verify(expected)})
            })
            .collect();
        env.ok(
            "rule.create",
            json!({"name": format!("quick {op}"), "operation_type": "power_control",
                   "operation": op, "is_default": true,
                   "definition": {"version": "v1", "steps": steps}}),
        )
        .await;
    }
}

fn rack_names(racks: usize) -> Vec<String> {
    (1..=racks).map(|i| format!("rack-{i:02}")).collect()
}

/// Puts every rack in `row=A` (Flow and the simulator) with the
/// simulator's breaker at `breaker_kw`.
async fn domain(env: &Stack, racks: usize, breaker_kw: f64) {
    for rack in rack_names(racks) {
        env.ok(
            "rack.power_domains",
            json!({"rack": rack, "domains": ["row=A"]}),
        )
        .await;
    }
    let r = reqwest::Client::new()
        .put(format!(
            "{}/admin/v1/power/domains/row=A",
            env.sim().admin_url()
        ))
        .json(&json!({"racks": rack_names(racks), "breaker_kw": breaker_kw}))
        .send()
        .await
        .expect("the simulator's admin API");
    assert!(
        r.status().is_success(),
        "{}",
        r.text().await.unwrap_or_default()
    );
}

/// The simulator's record of `row=A`.
async fn record(env: &Stack) -> Value {
    let report: Value = reqwest::get(format!("{}/admin/v1/power", env.sim().admin_url()))
        .await
        .expect("the simulator's admin API")
        .json()
        .await
        .expect("a power report");
    report["domains"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["name"] == "row=A"))
        .cloned()
        .unwrap_or_else(|| panic!("no row=A in {report}"))
}

async fn submit(env: &Stack, request_id: &str, op: &str, racks: usize) -> Vec<String> {
    let reply = env
        .ok(
            "task.submit",
            json!({"request_id": request_id, "racks": rack_names(racks), "operation": op}),
        )
        .await;
    reply["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["task_id"]
                .as_str()
                .unwrap_or_else(|| panic!("not accepted: {r}"))
                .to_owned()
        })
        .collect()
}

async fn all_completed(env: &Stack, tasks: &[String]) {
    for id in tasks {
        let t = env.finish(id).await;
        assert_eq!(t["status"], "completed", "{t}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_holds_across_schedulers_and_workers_with_a_kill() {
    let mut env = env(RACKS, 4, InitialPower::Off).await;
    env.start_scheduler().await;
    let budget = budget_kw(RACKS);
    domain(&env, RACKS, budget).await;
    let set = env
        .ok(
            "power_domain.set",
            json!({"name": "row=A", "budget_kw": budget}),
        )
        .await;
    assert_eq!(set["racks"], json!(rack_names(RACKS)), "{set}");
    let tasks = submit(&env, "budget", "power_on", RACKS).await;
    // Mid-stage: compute trays powering on, admission holding some.
    let held = flow_tests::eventually(Duration::from_secs(60), POLL, || async {
        let d = env.ok("power_domain.get", json!({"name": "row=A"})).await;
        (d["waiting"].as_u64().unwrap_or(0) > 0).then_some(d)
    })
    .await
    .expect("commands held for the budget");
    assert!(
        held["inrush_kw"].as_f64().unwrap() > 0.0,
        "inrush counted while commands wait: {held}"
    );
    // A task shows why it waits.
    let reasons = flow_tests::eventually(Duration::from_secs(30), POLL, || async {
        for id in &tasks {
            let t = env.task(id).await;
            if let Some(w) = t["power_waits"].as_array().and_then(|w| w.first()) {
                return Some(w["reason"].as_str().unwrap_or_default().to_owned());
            }
        }
        None
    })
    .await
    .expect("a task shows its held commands");
    assert!(
        reasons.starts_with("waiting for power budget in row=A: ")
            || reasons.starts_with("waiting for power-on spacing in row=A"),
        "{reasons}"
    );
    env.kill_worker(0).await;
    all_completed(&env, &tasks).await;
    let row = record(&env).await;
    let peak = row["peak_kw"].as_f64().unwrap();
    eprintln!(
        "row=A: peak {peak:.1} kW, budget {budget:.1} kW, all-on steady {:.1} kW",
        steady_kw(RACKS)
    );
    assert!(
        peak <= budget,
        "the simulator's peak {peak} kW is over the budget {budget} kW: {row}"
    );
    assert_eq!(row["trips"], json!([]), "no breaker trip: {row}");
    // Every component came on, under the budget, and near it: the last
    // trays' inrush on top of every other component's steady draw.
    let ons = row["power_ons"].as_array().unwrap().len();
    assert!(
        ons >= RACKS * (COMPUTE + NVSWITCH + SHELVES),
        "{ons} power-ons: {row}"
    );
    assert!(peak > steady_kw(RACKS), "peak {peak} kW: {row}");
    let d = env.ok("power_domain.get", json!({"name": "row=A"})).await;
    assert_eq!(d["waiting"], 0, "nothing waits once done: {d}");
    // The budget and the racks' domains left one audit record each;
    // admissions (a worker's bookkeeping) none.
    let set = env
        .ok("audit.list", json!({"endpoint": "power_domain.set"}))
        .await["records"]
        .clone();
    assert_eq!(set.as_array().map(Vec::len), Some(1), "{set}");
    assert_eq!(set[0]["outcome"], "ok", "{set}");
    assert_eq!(set[0]["request"]["budget_kw"], budget, "{set}");
    let assigned = env
        .ok("audit.list", json!({"endpoint": "rack.power_domains"}))
        .await["records"]
        .clone();
    assert_eq!(assigned.as_array().map(Vec::len), Some(RACKS), "{assigned}");
    let admitted = env
        .ok("audit.list", json!({"endpoint": "power.admit"}))
        .await["records"]
        .clone();
    assert_eq!(admitted, json!([]), "{admitted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_a_budget_the_site_power_on_trips_the_breaker() {
    let env = env(RACKS, 2, InitialPower::Off).await;
    domain(&env, RACKS, budget_kw(RACKS)).await;
    // The domain exists in Flow with no budget: nothing is held.
    env.ok("power_domain.set", json!({"name": "row=A"})).await;
    let tasks = submit(&env, "unbudgeted", "power_on", RACKS).await;
    let tripped = flow_tests::eventually(Duration::from_secs(60), POLL, || async {
        let row = record(&env).await;
        (!row["trips"].as_array().unwrap().is_empty()).then_some(row)
    })
    .await
    .expect("the breaker trips without a budget");
    assert!(
        tripped["peak_kw"].as_f64().unwrap() > budget_kw(RACKS),
        "{tripped}"
    );
    for id in &tasks {
        env.ok("task.cancel", json!({"id": id})).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn power_ons_keep_the_domain_spacing() {
    let env = env(1, 2, InitialPower::Off).await;
    domain(&env, 1, 1000.0).await;
    let spacing = 300;
    env.ok(
        "power_domain.set",
        json!({"name": "row=A", "min_spacing_ms": spacing}),
    )
    .await;
    let tasks = submit(&env, "spaced", "power_on", 1).await;
    all_completed(&env, &tasks).await;
    let row = record(&env).await;
    let mut at: Vec<u64> = row["power_ons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["at_ms"].as_u64().unwrap())
        .collect();
    at.sort_unstable();
    assert!(at.len() >= COMPUTE + NVSWITCH + SHELVES, "{row}");
    let gaps: Vec<u64> = at.windows(2).map(|w| w[1] - w[0]).collect();
    let least = *gaps.iter().min().unwrap();
    eprintln!("power-on commands at least {least} ms apart (spacing {spacing} ms)");
    // Admission spaces the grants by 300 ms; each command then crosses
    // loopback HTTP to its BMC, whose transit (a few ms) may differ.
    assert!(
        least + 20 >= spacing,
        "power-on commands {least} ms apart, spacing {spacing} ms: {gaps:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_shelves_off_cap_holds_shelves_on_until_it_is_raised() {
    let env = env(1, 2, InitialPower::On).await;
    domain(&env, 1, 1000.0).await;
    env.ok(
        "power_domain.set",
        json!({"name": "row=A", "max_shelves_off": 1}),
    )
    .await;
    let tasks = submit(&env, "shelves", "power_off", 1).await;
    // One shelf goes off; the other waits, and the task says why.
    let task = env
        .until_task(
            &tasks[0],
            "a shelf held by the cap",
            Duration::from_secs(60),
            |t| t["power_waits"].as_array().is_some_and(|w| !w.is_empty()),
        )
        .await;
    let reason = task["power_waits"][0]["reason"].as_str().unwrap();
    assert_eq!(
        reason,
        "waiting for the shelves-off cap in row=A: 1 of 1 power shelves off"
    );
    // The admitted shelf goes off (its transition takes simulated time);
    // the held one stays on.
    let row = flow_tests::eventually(Duration::from_secs(30), POLL, || async {
        let row = record(&env).await;
        (row["shelves_off"] == 1).then_some(row)
    })
    .await
    .expect("one shelf off");
    assert_eq!(row["shelves_off_peak"], 1, "{row}");
    // Still held a while later: the cap, not a slow command.
    let task = env.task(&tasks[0]).await;
    assert!(
        !task["power_waits"].as_array().unwrap().is_empty(),
        "{task}"
    );
    assert_eq!(record(&env).await["shelves_off_peak"], 1);
    // Raising the cap lets it finish.
    env.ok(
        "power_domain.set",
        json!({"name": "row=A", "max_shelves_off": SHELVES}),
    )
    .await;
    all_completed(&env, &tasks).await;
    let row = record(&env).await;
    assert_eq!(row["shelves_off"], SHELVES, "{row}");
    assert_eq!(row["shelves_off_peak"], SHELVES, "{row}");
    let d = env.ok("power_domain.get", json!({"name": "row=A"})).await;
    assert_eq!(d["shelves_off"], SHELVES, "{d}");
}

/// Turns a compute tray on straight at its BMC, as a person or another
/// tool would, outside Flow; whether the BMC took it.
async fn on_outside_flow(env: &Stack, rack: &str, tray: &str) -> bool {
    let base = env.sim().bmc_url(rack, tray).expect("the tray's BMC");
    let r = reqwest::Client::new()
        .post(format!(
            "{base}/redfish/v1/Systems/System_0/Actions/ComputerSystem.Reset"
        ))
        .basic_auth(
            flow_rack_sim::DEFAULT_USER,
            Some(flow_rack_sim::DEFAULT_PASSWORD),
        )
        .json(&json!({"ResetType": "On"}))
        .send()
        .await
        .expect("the tray's BMC answers");
    r.status().is_success()
}

/// Installs a fault in the simulator.
async fn fault(env: &Stack, spec: Value) {
    reqwest::Client::new()
        .post(format!("{}/admin/v1/faults", env.sim().admin_url()))
        .json(&spec)
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap();
}

/// How Flow counts `component` of `rack` now (`rack.power`).
async fn counted(env: &Stack, rack: &str, component: &str) -> Value {
    let reply = env.ok("rack.power", json!({ "rack": rack })).await;
    reply["components"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["component"] == component))
        .cloned()
        .unwrap_or_else(|| panic!("no {component} in {reply}"))
}

/// A watcher reading every BMC's power often.
fn quick_watcher() -> flow_worker::watch::WatchConfig {
    flow_worker::watch::WatchConfig {
        poll_every: Duration::from_secs(1),
        inventory_every: Duration::from_millis(500),
        power_every: Duration::from_millis(300),
        ..flow_worker::watch::WatchConfig::default()
    }
}

/// The racks' switch and compute trays off, their shelves on (so the trays'
/// BMCs answer), as Flow's own power-off leaves them.
async fn trays_off(env: &Stack, racks: usize) {
    let reply = env
        .ok(
            "task.submit",
            json!({"request_id": "trays off", "racks": rack_names(racks), "operation": "power_off",
                   "component_types": ["Compute", "NVSwitch"]}),
        )
        .await;
    for r in reply["results"].as_array().unwrap() {
        let id = r["task_id"].as_str().expect("accepted");
        assert_eq!(env.finish(id).await["status"], "completed");
    }
}

/// Waits until `rack.power` counts the component as `counted`.
async fn until_counted(env: &Stack, rack: &str, component: &str, want: &str) -> Value {
    flow_tests::eventually(Duration::from_secs(30), POLL, || async {
        let c = counted(env, rack, component).await;
        (c["counted"] == want).then_some(c)
    })
    .await
    .unwrap_or_else(|e| panic!("{rack}/{component} never counted {want}: {e}"))
}

/// Trays on, components switched on outside Flow, and a BMC that stops
/// answering: a budget at the racks' all-on draw plus room for two trays'
/// inrush holds only if Flow counts every one of them as it is. Counted
/// off, the trays turned on outside Flow (or the one whose BMC went
/// silent after) would let the last power-ons overlap past the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_counts_what_was_turned_on_outside_flow_and_what_stopped_answering() {
    // A compute tray's inrush lasts 0.6 s here (12 s at 5 %), so Flow's
    // last power-ons would overlap past the budget if it counted less than
    // is on.
    let mut config = sim(RACKS, InitialPower::On);
    config.draw.compute.settle = Duration::from_secs(12);
    let mut env = Stack::builder().simulator(config).workers(2).start().await;
    prepare(&env).await;
    env.ok(
        "power_model.set",
        json!({"component_type": "Compute", "inrush_w": COMPUTE_W.0 as u32,
               "steady_w": COMPUTE_W.1 as u32, "settle_ms": 650}),
    )
    .await;
    env.start_watcher(quick_watcher());
    trays_off(&env, RACKS).await;
    let budget = budget_kw(RACKS);
    domain(&env, RACKS, budget).await;
    env.ok(
        "power_domain.set",
        json!({"name": "row=A", "budget_kw": budget}),
    )
    .await;
    // Known off first: read by the watcher.
    for tray in ["compute-01", "compute-02"] {
        until_counted(&env, "rack-02", tray, "off").await;
    }
    until_counted(&env, "rack-03", "compute-03", "off").await;
    // Two trays of rack-02 on, outside Flow: seen by the watcher (its
    // event, or its next read) and counted on.
    for tray in ["compute-01", "compute-02"] {
        assert!(on_outside_flow(&env, "rack-02", tray).await, "{tray}");
    }
    for tray in ["compute-01", "compute-02"] {
        let c = until_counted(&env, "rack-02", tray, "on").await;
        assert_eq!(c["counted_w"], COMPUTE_W.1 as u64, "{c}");
    }
    // rack-03's compute-03: on outside Flow with its events dropped, then
    // its BMC stops answering. Whatever was last read of it, it is not
    // known now: counted at its steady draw.
    fault(
        &env,
        json!({"target": "rack-03/compute-03", "kind": {"drop_events": {}}}),
    )
    .await;
    assert!(on_outside_flow(&env, "rack-03", "compute-03").await);
    fault(
        &env,
        json!({"target": "rack-03/compute-03", "kind": {"unreachable": {}}}),
    )
    .await;
    let c = until_counted(&env, "rack-03", "compute-03", "unknown").await;
    assert_eq!(c["reachable"], false, "{c}");
    assert_eq!(c["counted_w"], COMPUTE_W.1 as u64, "{c}");
    // The budgeted power-on of every rack's trays.
    let reply = env
        .ok(
            "task.submit",
            json!({"request_id": "trays on", "racks": rack_names(RACKS), "operation": "power_on",
                   "component_types": ["Compute", "NVSwitch"]}),
        )
        .await;
    let tasks: Vec<String> = reply["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["task_id"].as_str().expect("accepted").to_owned())
        .collect();
    for (i, id) in tasks.iter().enumerate() {
        let t = env.finish(id).await;
        if i == 2 {
            // rack-03's silent tray cannot be commanded: its step fails,
            // naming it.
            assert_eq!(t["status"], "failed", "{t}");
            assert!(t.to_string().contains("compute-03"), "{t}");
        } else {
            assert_eq!(t["status"], "completed", "{t}");
        }
    }
    let row = record(&env).await;
    let peak = row["peak_kw"].as_f64().unwrap();
    eprintln!("row=A: peak {peak:.1} kW, budget {budget:.1} kW");
    assert!(
        peak <= budget,
        "peak {peak} kW over the budget {budget} kW: {row}"
    );
    assert_eq!(row["trips"], json!([]), "no breaker trip: {row}");
    // The trays turned on outside Flow were not commanded by it.
    for tray in ["compute-01", "compute-02"] {
        let log = env.sim().state();
        let c = log.component("rack-02", tray).unwrap();
        assert_eq!(c.commands.len(), 2, "the off and the outside on: {tray}");
    }
    env.stop().await;
}

/// Trays switched on outside Flow while a budgeted power-on runs, under two
/// schedulers and four workers with one killed mid-stage and the watcher
/// killed too (what it last saw goes stale and counts at steady draw).
/// Racks 1 and 2 power on through Flow; rack-03's trays come on outside
/// Flow while Flow's compute step sleeps before its commands, so Flow's
/// last power-ons overlap only if it counts rack-03's trays as off.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_holds_with_power_ons_outside_flow_during_the_run_and_the_watcher_killed() {
    let known_for = Duration::from_secs(10);
    // A compute tray's inrush lasts 0.6 s here (12 s at 5 %), so Flow's
    // power-ons of two racks' trays sent together would overlap.
    let mut config = sim(RACKS, InitialPower::On);
    config.draw.compute.settle = Duration::from_secs(12);
    let mut env = Stack::builder()
        .power_known_for(known_for)
        .simulator(config)
        .workers(0)
        .start()
        .await;
    prepare(&env).await;
    env.ok(
        "power_model.set",
        json!({"component_type": "Compute", "inrush_w": COMPUTE_W.0 as u32,
               "steady_w": COMPUTE_W.1 as u32, "settle_ms": 650}),
    )
    .await;
    for _ in 0..4 {
        env.start_worker().await;
    }
    env.start_scheduler().await;
    env.start_watcher(quick_watcher());
    trays_off(&env, RACKS).await;
    let verify = json!([{"name": "VerifyPowerStatus", "timeout": "30s", "poll_interval": "100ms",
                         "parameters": {"expected_status": "on"}}]);
    let rule = env
        .ok(
            "rule.create",
            json!({"name": "trays on, after a pause", "operation_type": "power_control",
               "operation": "power_on", "definition": {"version": "v1", "steps": [
            {"component_type": "nvswitch", "stage": 1, "main_operation": {"name": "PowerControl"},
             "post_operation": verify},
            {"component_type": "compute", "stage": 2, "timeout": "2m",
             "retry": {"max_attempts": 20, "initial_interval": "200ms", "backoff_coefficient": 1.0},
             "pre_operation": [{"name": "Sleep", "parameters": {"duration": "6s"}}],
             "main_operation": {"name": "PowerControl"}, "post_operation": verify}]}}),
        )
        .await;
    let rule_id = rule["id"].as_str().expect("a rule id").to_owned();
    // Room for two of Flow's inrushes, and for one tray switched on
    // outside Flow before Flow has learnt of it (its inrush and its steady
    // draw: from its command to its watcher's read reaching the
    // schedulers); they are switched on one after another.
    let budget = budget_kw(RACKS) + COMPUTE_W.0 / 1000.0;
    domain(&env, RACKS, budget).await;
    env.ok(
        "power_domain.set",
        json!({"name": "row=A", "budget_kw": budget}),
    )
    .await;
    let reply = env
        .ok(
            "task.submit",
            json!({"request_id": "trays on", "racks": ["rack-01", "rack-02"], "operation": "power_on",
                   "rule_id": rule_id}),
        )
        .await;
    let tasks: Vec<String> = reply["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["task_id"].as_str().expect("accepted").to_owned())
        .collect();
    // Flow's compute steps sleep: rack-03's trays come on outside Flow.
    for id in &tasks {
        env.until_task(id, "the compute step runs", Duration::from_secs(60), |t| {
            t["steps"][1]["status"] == "running"
        })
        .await;
    }
    for i in 1..=COMPUTE {
        let tray = format!("compute-{i:02}");
        assert!(on_outside_flow(&env, "rack-03", &tray).await, "{tray}");
        // Learnt of: counted on before the next.
        until_counted(&env, "rack-03", &tray, "on").await;
    }
    assert!(
        env.task(&tasks[0]).await["steps"][1]["results"]["compute-01"]["actions"]
            .as_array()
            .is_none_or(|a| a.len() <= 1),
        "the outside power-ons came before Flow's commands"
    );
    env.kill_watchers().await;
    // Mid-stage: the first of Flow's compute power-ons sent.
    flow_tests::eventually(
        Duration::from_secs(60),
        Duration::from_millis(10),
        || async {
            let row = record(&env).await;
            row["power_ons"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| {
                    p["component"].as_str().unwrap().starts_with("compute")
                        && p["rack"] != "rack-03"
                })
                .then_some(())
        },
    )
    .await
    .expect("Flow's compute power-ons");
    env.kill_worker(0).await;
    for id in &tasks {
        let t = env.finish(id).await;
        assert_eq!(t["status"], "completed", "{t}");
    }
    let row = record(&env).await;
    let peak = row["peak_kw"].as_f64().unwrap();
    eprintln!("row=A: peak {peak:.1} kW, budget {budget:.1} kW");
    assert!(
        peak <= budget,
        "peak {peak} kW over the budget {budget} kW: {row}"
    );
    assert_eq!(row["trips"], json!([]), "no breaker trip: {row}");
    // With the watcher gone, nothing it read stays known: rack-03's trays
    // count at steady draw once the window has passed.
    let c = until_counted(&env, "rack-03", "compute-06", "unknown").await;
    assert_eq!(c["counted_w"], COMPUTE_W.1 as u64, "{c}");
    env.stop().await;
}

/// A row budgeted for two of its three racks (all on, and one tray's
/// inrush): the two power on under it; the third rack's trays are refused,
/// naming the budget and the draw known on, instead of waiting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_below_the_all_on_draw_powers_on_what_fits_and_refuses_the_rest_naming_the_figures()
 {
    let mut env = env(RACKS, 2, InitialPower::Off).await;
    env.start_watcher(quick_watcher());
    let budget = steady_kw(2) + (COMPUTE_W.0 - COMPUTE_W.1) / 1000.0 + 0.3;
    domain(&env, RACKS, budget).await;
    env.ok(
        "power_domain.set",
        json!({"name": "row=A", "budget_kw": budget}),
    )
    .await;
    // Known: every shelf read off (so every tray unpowered).
    flow_tests::eventually(Duration::from_secs(30), POLL, || async {
        let d = env.ok("power_domain.get", json!({"name": "row=A"})).await;
        (d["unknown"] == 0).then_some(())
    })
    .await
    .expect("every component's power known");
    let two = env
        .ok(
            "task.submit",
            json!({"request_id": "two racks", "racks": ["rack-01", "rack-02"], "operation": "power_on"}),
        )
        .await;
    for r in two["results"].as_array().unwrap() {
        let t = env.finish(r["task_id"].as_str().expect("accepted")).await;
        assert_eq!(t["status"], "completed", "{t}");
    }
    let third = env
        .ok(
            "task.submit",
            json!({"request_id": "third rack", "racks": ["rack-03"], "operation": "power_on"}),
        )
        .await;
    let t = env
        .finish(third["results"][0]["task_id"].as_str().expect("accepted"))
        .await;
    assert_eq!(t["status"], "failed", "{t}");
    let why = t["message"].as_str().unwrap();
    assert!(
        why.contains(&format!(
            "power admission refused: power budget of row=A is {} kW: the draw known on there",
            flow_decisions::admission::kw((budget * 1000.0).round() as u64)
        )) && why.contains("(5.4 kW steady, 9 kW inrush) would pass it"),
        "{why}"
    );
    let row = record(&env).await;
    let peak = row["peak_kw"].as_f64().unwrap();
    eprintln!("row=A: peak {peak:.1} kW, budget {budget:.1} kW; the third rack: {why}");
    assert!(peak <= budget, "peak {peak} kW over {budget} kW: {row}");
    assert_eq!(row["trips"], json!([]), "no breaker trip: {row}");
    // Nothing of the third rack's trays was sent.
    for (name, n) in env.sim().state().racks[2]
        .components
        .iter()
        .map(|c| (c.name.clone(), c.commands.len()))
    {
        if name.starts_with("compute") {
            assert_eq!(n, 0, "{name} was commanded");
        }
    }
    env.stop().await;
}

/// A worker that comes after its reservation's send-by asks again naming
/// it (`replaces_ms`): that reservation is released, so the command holds
/// one share of the domain, not two — a late worker does not push every
/// later reservation back; one that asks again while its reservation holds
/// is told the same slot. Asked straight on `power.admit`, as workers do.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lapsed_reservation_asked_again_is_released_not_counted_twice() {
    let env = env(1, 0, InitialPower::On).await;
    // Room for one tray's inrush above the rack's steady draw, each held
    // for its 10 s settle (plus the 1 s send window): a second tray waits.
    env.ok(
        "power_model.set",
        json!({"component_type": "Compute", "inrush_w": COMPUTE_W.0 as u32,
               "steady_w": COMPUTE_W.1 as u32, "settle_ms": 10_000}),
    )
    .await;
    let budget = steady_kw(1) + (COMPUTE_W.0 - COMPUTE_W.1) / 1000.0 + 0.3;
    domain(&env, 1, budget).await;
    env.ok(
        "power_domain.set",
        json!({"name": "row=A", "budget_kw": budget}),
    )
    .await;
    let task = flow_protocol::TaskId::new().to_string();
    let ask = |tray: &str, replaces: Option<u64>| {
        let mut body = json!({"task": task, "rack": "rack-01", "component": tray,
                              "component_type": "Compute", "operation": "power_on",
                              "domains": ["row=A"]});
        if let Some(at) = replaces {
            body["replaces_ms"] = json!(at);
        }
        body
    };
    // Room now: a slot from now, to be sent within the send window (never
    // a bare "granted" an answer that came late could still be sent on).
    let first = env.ok("power.admit", ask("compute-01", None)).await;
    assert_eq!(first["decision"], "reserved", "{first}");
    assert_eq!(
        first["send_by_ms"].as_u64().unwrap() - first["at_ms"].as_u64().unwrap(),
        1_000,
        "{first}"
    );
    let reserved = |a: &Value| -> u64 {
        assert_eq!(a["decision"], "reserved", "{a}");
        a["at_ms"]
            .as_u64()
            .unwrap_or_else(|| panic!("not reserved: {a}"))
    };
    let b1 = reserved(&env.ok("power.admit", ask("compute-02", None)).await);
    // compute-02 came late and asks again, releasing its reservation: it is
    // given the same slot, not one behind its own lapsed grant.
    let b2 = reserved(&env.ok("power.admit", ask("compute-02", Some(b1))).await);
    assert_eq!(b2, b1, "the released reservation's slot is free again");
    // Its new reservation is counted: compute-03 goes after it.
    let c = reserved(&env.ok("power.admit", ask("compute-03", None)).await);
    assert!(c >= b1 + 11_000, "compute-03 at {c}, compute-02 at {b1}");
    // Asked again while its reservation still holds (an answer lost to a
    // timeout, a redelivered job): told the same slot, granted nothing more
    // — the next tray goes right behind compute-03, not behind copies.
    let b3 = reserved(&env.ok("power.admit", ask("compute-02", None)).await);
    assert_eq!(b3, b1, "compute-02 asked again");
    let c2 = reserved(&env.ok("power.admit", ask("compute-03", None)).await);
    assert_eq!(c2, c, "compute-03 asked again");
    let d = reserved(&env.ok("power.admit", ask("compute-04", None)).await);
    assert_eq!(d, c + 11_000, "compute-04 right behind compute-03");
    env.stop().await;
}
