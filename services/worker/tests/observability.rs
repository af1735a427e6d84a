//! Observability end to end: the `flow-worker` binary (JSON logs, metrics on
//! a free port) and an in-process scheduler serving its own metrics run one
//! small power-on against the rack simulator; then both `/metrics` pages
//! show the counters moved, and the worker's log lines are JSON with the
//! job fields (`task`, `rack`, `stage`, `step`, `component`).

use std::time::{Duration, Instant};

use flow_metrics::MetricsRegistry;
use flow_rack_sim::{InitialPower, SimConfig};
use flow_scheduler::metrics::SchedulerMetrics;
use flow_testenv::Stack;
use serde_json::{Value, json};
use support::call;

mod support;

const BMC_PASSWORD_ENV: &str = "FLOW_OBS_TEST_BMC_PASSWORD";

/// The value of the sample `name{labels…}` in a text exposition page.
fn sample(page: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            let (series, _) = l.rsplit_once(' ').unwrap_or((l, ""));
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            metric == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

async fn scrape(addr: &str) -> String {
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_moves_the_worker_and_scheduler_metrics_and_logs_carry_job_fields() {
    let mut registry = MetricsRegistry::new();
    let metrics = SchedulerMetrics::register(&mut registry);
    let scheduler_metrics = flow_metrics::serve("127.0.0.1:0".parse().unwrap(), registry)
        .await
        .unwrap();
    // The scheduler in-process (with its metrics), the worker as a binary.
    let stack = Stack::builder()
        .scheduler_metrics(metrics)
        .simulator(SimConfig {
            time_scale: 0.01,
            initial_power: InitialPower::Off,
            compute: 1,
            nvswitch: 1,
            powershelf: 1,
            ..SimConfig::default()
        })
        .workers(0)
        .start()
        .await;
    let (client, nats) = (&stack.client, &stack.nats);
    // Shelves on, then (after a 1.5 s Sleep: a durable wait, so a nak and a
    // redelivery) the compute tray.
    let verify = json!({"name": "VerifyPowerStatus", "timeout": "20s", "poll_interval": "50ms",
                        "parameters": {"expected_status": "on"}});
    call(
        client,
        "rule.create",
        json!({"name": "obs on", "operation_type": "power_control",
        "operation": "power_on", "is_default": true, "definition": {"version": "v1", "steps": [
            {"component_type": "powershelf", "stage": 1, "main_operation": {"name": "PowerControl"},
             "post_operation": [verify]},
            {"component_type": "compute", "stage": 2,
             "pre_operation": [{"name": "Sleep", "parameters": {"duration": "1500ms"}}],
             "main_operation": {"name": "PowerControl"}, "post_operation": [verify]}]}}),
    )
    .await;

    let dir = std::env::temp_dir().join(format!(
        "flow-obs-{}-{}",
        std::process::id(),
        nats.url().rsplit(':').next().unwrap_or("0")
    ));
    let support::Worker {
        child: mut worker,
        lines,
        metrics_addr: worker_metrics,
    } = support::start_worker(&nats.url(), &dir, BMC_PASSWORD_ENV).await;

    let submitted = call(
        client,
        "task.submit",
        json!({"request_id": "obs-1", "racks": ["rack-01"], "operation": "power_on"}),
    )
    .await;
    let task = submitted["results"][0]["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("not created: {submitted}"))
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    let t = loop {
        let t = call(client, "task.get", json!({"id": task})).await;
        if ["completed", "failed", "terminated"].contains(&t["status"].as_str().unwrap()) {
            break t;
        }
        assert!(Instant::now() < deadline, "task never finished: {t}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(t["status"], "completed", "{t:#}");

    // The worker: jobs, the durable wait, checkpoints, hardware calls.
    let page = scrape(&worker_metrics).await;
    let at_least = |name: &str, labels: &[(&str, &str)], min: f64| {
        let v = sample(&page, name, labels);
        assert!(
            v.is_some_and(|v| v >= min),
            "{name}{labels:?} = {v:?}, want >= {min}:\n{page}"
        );
    };
    at_least("flow_jobs_started_total", &[], 2.0);
    at_least("flow_jobs_resumed_total", &[], 1.0);
    at_least("flow_jobs_finished_total", &[("outcome", "completed")], 2.0);
    at_least("flow_job_naks_total", &[("reason", "wait")], 1.0);
    at_least("flow_job_redeliveries_total", &[], 1.0);
    at_least("flow_checkpoints_written_total", &[], 2.0);
    for component_type in ["PowerShelf", "Compute"] {
        at_least(
            "flow_hardware_calls_total",
            &[
                ("component_type", component_type),
                ("action", "power_control"),
                ("outcome", "ok"),
            ],
            1.0,
        );
        at_least(
            "flow_hardware_call_duration_seconds_count",
            &[
                ("component_type", component_type),
                ("action", "power_status"),
            ],
            1.0,
        );
    }
    assert_eq!(
        sample(&page, "flow_jobs_in_flight", &[]),
        Some(0.0),
        "{page}"
    );
    // Alone, it pulls every job partition.
    assert_eq!(
        sample(&page, "flow_job_partitions", &[]),
        Some(f64::from(flow_protocol::partition::JOB_PARTITIONS)),
        "{page}"
    );
    assert_eq!(sample(&page, "flow_workers_seen", &[]), Some(1.0), "{page}");

    // The scheduler: the task counted completed once the gauges refresh.
    let addr = scheduler_metrics.local_addr().to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    let page = loop {
        let page = scrape(&addr).await;
        if sample(&page, "flow_tasks", &[("status", "completed")]) == Some(1.0)
            && sample(&page, "flow_outbox_pending", &[]) == Some(0.0)
        {
            break page;
        }
        assert!(Instant::now() < deadline, "gauges never refreshed:\n{page}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let exactly = |name: &str, labels: &[(&str, &str)], want: f64| {
        assert_eq!(
            sample(&page, name, labels),
            Some(want),
            "{name}{labels:?}:\n{page}"
        );
    };
    exactly("flow_tasks", &[("status", "running")], 0.0);
    exactly("flow_queue_depth", &[], 0.0);
    exactly("flow_submissions_total", &[("outcome", "accepted")], 1.0);
    exactly("flow_results_total", &[("outcome", "applied")], 2.0);
    exactly("flow_tasks_finished_total", &[("status", "completed")], 1.0);
    exactly(
        "flow_step_duration_seconds_count",
        &[("component_type", "PowerShelf"), ("status", "completed")],
        1.0,
    );
    exactly(
        "flow_step_duration_seconds_count",
        &[("component_type", "Compute"), ("status", "completed")],
        1.0,
    );
    exactly(
        "flow_stage_duration_seconds_count",
        &[("status", "completed")],
        2.0,
    );
    let stages = sample(
        &page,
        "flow_stage_duration_seconds_sum",
        &[("status", "completed")],
    );
    assert!(
        stages.is_some_and(|s| s >= 1.5),
        "the Sleep counts: {stages:?}"
    );
    assert!(
        sample(&page, "flow_outbox_published_total", &[]).is_some_and(|n| n >= 2.0),
        "{page}"
    );

    // The worker stops on SIGTERM; every line it wrote is JSON, and the
    // step lines carry the job's fields.
    let pid = worker.id().expect("pid").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(15), worker.wait())
        .await
        .expect("stops within 15 s of SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let lines = lines.lock().unwrap().clone();
    let logs: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let finished: Vec<&Value> = logs
        .iter()
        .filter(|l| l["fields"]["message"] == "step finished")
        .collect();
    assert_eq!(finished.len(), 2, "{lines:#?}");
    for line in finished {
        let span = &line["span"];
        assert_eq!(span["name"], "job", "{line}");
        assert_eq!(span["task"], task.as_str(), "{line}");
        assert_eq!(span["rack"], "rack-01", "{line}");
        assert!(span["stage"].is_u64() && span["step"].is_u64(), "{line}");
        assert!(
            ["PowerShelf", "Compute"].contains(&span["component"].as_str().unwrap_or("")),
            "{line}"
        );
    }

    stack.stop().await;
    scheduler_metrics.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
