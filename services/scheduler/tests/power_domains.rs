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
        .simulator(SimConfig {
            time_scale: 0.05,
            initial_power: initial,
            racks,
            compute: COMPUTE,
            nvswitch: NVSWITCH,
            powershelf: SHELVES,
            ..SimConfig::default()
        })
        .workers(workers)
        .start()
        .await;
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
    env
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
