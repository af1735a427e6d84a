//! The shipped Prometheus configuration against real processes
//! (`deploy/prometheus/`): `promtool` checks the scrape configuration and
//! the alert rules and runs their unit tests (`alerts_test.yml`); then a
//! real Prometheus, started with the shipped configuration pointed at this
//! test's ports, scrapes a scheduler (in process, its metrics served) and a
//! `flow-worker --watch` binary while a power-on runs — every target is up, the
//! alert rules are loaded, and the task counters moved, read through
//! Prometheus's HTTP API.
//!
//! `FLOW_PROMETHEUS` and `FLOW_PROMTOOL` name the binaries (scripts/test
//! installs Debian's `prometheus` when missing:
//! `scripts/lib/prometheus.sh`), else they are looked up on the PATH.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use flow_metrics::MetricsRegistry;
use flow_rack_sim::{InitialPower, SimConfig};
use flow_scheduler::metrics::SchedulerMetrics;
use flow_testenv::Stack;
use serde_json::{Value, json};
use support::call;

mod support;

const BMC_PASSWORD_ENV: &str = "FLOW_PROM_TEST_BMC_PASSWORD";

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus")
}

fn tool(env: &str, name: &str) -> String {
    std::env::var(env).unwrap_or_else(|_| name.to_owned())
}

fn run(program: &str, args: &[&str], dir: &Path) -> String {
    let out = std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("{program} does not run ({e}): install Debian's prometheus or set FLOW_PROMTOOL")
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{program} {args:?} failed:\n{text}");
    text
}

#[test]
fn promtool_checks_the_config_and_rules_and_their_unit_tests_pass() {
    let promtool = tool("FLOW_PROMTOOL", "promtool");
    let dir = deploy();
    let config = run(&promtool, &["check", "config", "prometheus.yml"], &dir);
    assert!(config.contains("SUCCESS"), "{config}");
    let rules = run(&promtool, &["check", "rules", "alerts.yml"], &dir);
    assert!(rules.contains("SUCCESS: 20 rules found"), "{rules}");
    let tests = run(&promtool, &["test", "rules", "alerts_test.yml"], &dir);
    assert!(tests.contains("SUCCESS"), "{tests}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An instant query through Prometheus's HTTP API: the result vector.
async fn query(base: &str, promql: &str) -> Vec<Value> {
    let r: Value = reqwest::Client::new()
        .get(format!("{base}/api/v1/query"))
        .query(&[("query", promql)])
        .send()
        .await
        .expect("query")
        .json()
        .await
        .expect("JSON");
    assert_eq!(r["status"], "success", "{promql}: {r}");
    r["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// Waits (bounded) until `promql` returns a sample whose value passes `ok`.
async fn until(base: &str, promql: &str, ok: impl Fn(f64) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let result = query(base, promql).await;
        let values: Vec<f64> = result
            .iter()
            .filter_map(|s| s["value"][1].as_str()?.parse().ok())
            .collect();
        if !values.is_empty() && values.iter().all(|v| ok(*v)) {
            return result;
        }
        assert!(Instant::now() < deadline, "{promql} never held: {result:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prometheus_scrapes_the_stack_with_the_shipped_config_and_sees_the_task() {
    let mut registry = MetricsRegistry::new();
    let metrics = SchedulerMetrics::register(&mut registry);
    let scheduler_metrics = flow_metrics::serve("127.0.0.1:0".parse().unwrap(), registry)
        .await
        .unwrap();
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
    let dir = std::env::temp_dir().join(format!(
        "flow-prom-{}-{}",
        std::process::id(),
        nats.url().rsplit(':').next().unwrap_or("0")
    ));
    let support::Worker {
        child: mut worker,
        metrics_addr: worker_addr,
        ..
    } = support::start_worker_with(&nats.url(), &dir, BMC_PASSWORD_ENV, &["--watch"]).await;
    let scheduler_addr = scheduler_metrics.local_addr().to_string();

    // The shipped configuration, pointed at this test's ports and scraping
    // every second; its rule file beside it.
    let shipped = std::fs::read_to_string(deploy().join("prometheus.yml")).unwrap();
    assert!(shipped.contains("\"127.0.0.1:9450\"") && shipped.contains("\"127.0.0.1:9451\""));
    let config = shipped
        .replace("\"127.0.0.1:9450\"", &format!("\"{scheduler_addr}\""))
        .replace("\"127.0.0.1:9451\"", &format!("\"{worker_addr}\""))
        .replace("scrape_interval: 15s", "scrape_interval: 1s")
        .replace("evaluation_interval: 15s", "evaluation_interval: 1s");
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    std::fs::copy(deploy().join("alerts.yml"), dir.join("alerts.yml")).unwrap();
    let port = free_port();
    let mut prometheus = tokio::process::Command::new(tool("FLOW_PROMETHEUS", "prometheus"))
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn prometheus: install Debian's prometheus or set FLOW_PROMETHEUS");
    let base = format!("http://127.0.0.1:{port}");
    // Ready once it has loaded its configuration and opened its store.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = reqwest::get(format!("{base}/-/ready"))
            .await
            .is_ok_and(|r| r.status().is_success());
        if ready {
            break;
        }
        if let Ok(Some(status)) = prometheus.try_wait() {
            panic!("prometheus exited ({status}) with {}", dir.display());
        }
        assert!(Instant::now() < deadline, "prometheus never became ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Every target up, under the job names the rules use.
    until(&base, "up{job=\"flow-scheduler\"}", |v| v == 1.0).await;
    until(&base, "up{job=\"flow-worker\"}", |v| v == 1.0).await;
    let rules: Value = reqwest::get(format!("{base}/api/v1/rules"))
        .await
        .expect("rules")
        .json()
        .await
        .expect("JSON");
    let loaded = rules["data"]["groups"][0]["rules"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(loaded, 20, "the shipped alert rules are loaded: {rules}");
    let before = query(&base, "sum(flow_jobs_finished_total)").await;
    assert!(
        before.is_empty() || before[0]["value"][1] == "0",
        "nothing ran yet: {before:?}"
    );

    // One power-on, then its counters through Prometheus.
    call(
        client,
        "rule.create",
        json!({"name": "prom on", "operation_type": "power_control",
        "operation": "power_on", "is_default": true, "definition": {"version": "v1", "steps": [
            {"component_type": "powershelf", "stage": 1, "main_operation": {"name": "PowerControl"}},
            {"component_type": "compute", "stage": 2, "main_operation": {"name": "PowerControl"}}]}}),
    )
    .await;
    let submitted = call(
        client,
        "task.submit",
        json!({"request_id": "prom-1", "racks": ["rack-01"], "operation": "power_on"}),
    )
    .await;
    assert!(
        submitted["results"][0]["task_id"].is_string(),
        "{submitted}"
    );
    until(
        &base,
        "sum(flow_tasks_finished_total{status=\"completed\"})",
        |v| v >= 1.0,
    )
    .await;
    until(
        &base,
        "sum(flow_jobs_finished_total{outcome=\"completed\"})",
        |v| v >= 2.0,
    )
    .await;
    until(
        &base,
        "sum(flow_submissions_total{outcome=\"accepted\"})",
        |v| v >= 1.0,
    )
    .await;
    // A power domain and a hardware event, so that their families have
    // samples too; then every dashboard query runs, and reads only
    // metrics Prometheus scraped from the services.
    call(
        client,
        "power_domain.set",
        json!({"name": "row=A", "budget_kw": 1000}),
    )
    .await;
    call(
        client,
        "event.publish",
        json!({"source": "test", "key": "1", "event_type": "hardware.leak.detected",
               "severity": "critical", "rack": "rack-01", "component": "compute-01",
               "message": "drip", "observed_at": "2026-12-05T00:00:00Z"}),
    )
    .await;
    until(&base, "count(flow_power_budget_kw)", |v| v >= 1.0).await;
    until(&base, "sum(flow_event_executions_total)", |v| v >= 1.0).await;
    let names: Value = reqwest::get(format!("{base}/api/v1/label/__name__/values"))
        .await
        .expect("names")
        .json()
        .await
        .expect("JSON");
    let scraped: Vec<&str> = names["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut unknown = Vec::new();
    for (title, expr) in dashboard() {
        for name in metrics_in(&expr) {
            if !scraped.contains(&name.as_str()) {
                unknown.push(format!("{title}: {name}"));
            }
        }
        let r: Value = reqwest::Client::new()
            .get(format!("{base}/api/v1/query"))
            .query(&[("query", expr.as_str())])
            .send()
            .await
            .expect("query")
            .json()
            .await
            .expect("JSON");
        assert_eq!(r["status"], "success", "{title}: {expr}: {r}");
    }
    assert!(
        unknown.is_empty(),
        "dashboard queries of metrics the services do not export: {unknown:#?}\nscraped: {scraped:?}"
    );

    // No Flow alert fires on a healthy stack.
    let firing = query(&base, "ALERTS{alertstate=\"firing\"}").await;
    assert!(firing.is_empty(), "{firing:?}");

    let _ = prometheus.kill().await;
    let _ = worker.kill().await;
    scheduler_metrics.stop().await;
    stack.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The metric names a PromQL expression reads (Flow's, and `up`).
fn metrics_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &expr[start..i];
            // A label name is followed by `=`, `!` or `~`; a metric by `{`,
            // `[`, `)` or a space.
            let next = expr[i..].trim_start().chars().next();
            let label = matches!(next, Some('=' | '!' | '~'));
            if !label && (word.starts_with("flow_") || word == "up") {
                out.push(word.to_owned());
            }
        } else {
            i += 1;
        }
    }
    out
}

fn dashboard() -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/flow.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .expect("the dashboard is JSON");
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push((
                panel["title"].as_str().unwrap_or_default().to_owned(),
                target["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    out
}

#[test]
fn the_dashboards_queries_are_read_for_their_metrics() {
    let queries = dashboard();
    assert!(queries.len() >= 20, "{} queries", queries.len());
    for (title, expr) in &queries {
        assert!(
            !metrics_in(expr).is_empty(),
            "{title}: {expr} reads no metric"
        );
    }
    assert_eq!(
        metrics_in("rate(flow_jobs_startd_total{job=\"x\"}[1m])"),
        ["flow_jobs_startd_total"]
    );
    // Label names and functions are not metrics.
    assert_eq!(
        metrics_in(
            "sum by (component_type) (rate(flow_hardware_calls_total{outcome!=\"ok\"}[5m]))"
        ),
        ["flow_hardware_calls_total"]
    );
}
