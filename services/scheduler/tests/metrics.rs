//! The `flow-scheduler` binary serves `GET /metrics` on `--metrics-listen`
//! (port 0: a free port, logged as `metrics_addr`), in the Prometheus text
//! format, with the task gauges read from the database; a bad listen value
//! stops it with a message naming the flag.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flow_tests::{NatsServer, TestDb};
use serde_json::Value;
use tokio::io::AsyncBufReadExt;

fn scheduler() -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_flow-scheduler"));
    cmd.env_remove("FLOW_CONFIG")
        .env_remove("FLOW_METRICS_LISTEN")
        .env("FLOW_LOG", "info")
        .env("FLOW_LOG_FORMAT", "json")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_metrics_on_the_logged_address() {
    let nats = NatsServer::start();
    let db = TestDb::create().await;
    let mut child = scheduler()
        .env("FLOW_NATS_URL", nats.url())
        .env("FLOW_DATABASE_URL", db.url())
        .args(["--metrics-listen", "127.0.0.1:0"])
        .spawn()
        .expect("spawn flow-scheduler");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    {
        let sink = Arc::clone(&lines);
        let stderr = child.stderr.take().unwrap();
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                sink.lock().unwrap().push(line);
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let addr = loop {
        let found = lines.lock().unwrap().iter().find_map(|l| {
            serde_json::from_str::<Value>(l).ok()?["fields"]["metrics_addr"]
                .as_str()
                .map(str::to_owned)
        });
        if let Some(addr) = found {
            break addr;
        }
        assert!(
            Instant::now() < deadline,
            "no metrics_addr logged: {:?}",
            lines.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The gauges appear once the scheduler is up and has read the database.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (content_type, page) = loop {
        let reply = reqwest::get(format!("http://{addr}/metrics"))
            .await
            .expect("GET /metrics");
        assert_eq!(reply.status(), 200);
        let content_type = reply.headers()["content-type"].to_str().unwrap().to_owned();
        let page = reply.text().await.unwrap();
        if page.contains("\nflow_tasks{status=\"completed\"} 0\n") {
            break (content_type, page);
        }
        assert!(Instant::now() < deadline, "no task gauges:\n{page}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    for expected in [
        "# TYPE flow_tasks gauge",
        "\nflow_queue_depth 0\n",
        "\nflow_outbox_pending 0\n",
        "\nflow_steps_overdue 0\n",
        "\nflow_outbox_published_total 0\n",
        "\nflow_deadline_failures_total 0\n",
        "\nflow_results_total{outcome=\"ignored\"} 0\n",
        "\nflow_submissions_total{outcome=\"rejected\"} 0\n",
        "\nflow_tasks_finished_total{status=\"failed\"} 0\n",
        "\nflow_tasks_stuck{status=\"running\"} 0\n",
        "\nflow_tasks_over_budget 0\n",
        "\nflow_runs_gate_paused 0\n",
        "\nflow_leaks_unacted 0\n",
        "\nflow_results_backlog 0\n",
        "\nflow_jobs_backlog 0\n",
    ] {
        assert!(page.contains(expected), "{expected:?} missing:\n{page}");
    }
    // A power domain's gauges follow it within a refresh.
    let client = async_nats::connect(nats.url()).await.expect("connect");
    let reply = client
        .request(
            "flow.api.power_domain.set",
            r#"{"name": "row=B", "budget_kw": 1200, "max_shelves_off": 4}"#.into(),
        )
        .await
        .expect("power_domain.set");
    assert!(
        String::from_utf8_lossy(&reply.payload).contains("\"result\""),
        "{}",
        String::from_utf8_lossy(&reply.payload)
    );
    until_page(
        &addr,
        &[
            "\nflow_power_budget_kw{domain=\"row=B\"} 1200.0\n",
            "\nflow_power_in_use_kw{domain=\"row=B\"} 0.0\n",
            "\nflow_power_waiting{domain=\"row=B\"} 0\n",
            "\nflow_power_shelves_off{domain=\"row=B\"} 0\n",
        ],
    )
    .await;
    // A malformed submission is parked; FLOW_PARKED's size follows.
    until_page(&addr, &["\nflow_parked_messages 0\n"]).await;
    let js = async_nats::jetstream::new(client.clone());
    js.publish("flow.tasks.submit", "not json".into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    let page = until_page(&addr, &["\nflow_parked_messages 1\n"]).await;
    assert!(!page.contains("\nflow_parked_bytes 0\n"), "{page}");

    let pid = child.id().expect("pid").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("stops within 15 s of SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

/// Waits (bounded) until the metrics page at `addr` holds every line of
/// `wanted`; the page then.
async fn until_page(addr: &str, wanted: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = reqwest::get(format!("http://{addr}/metrics"))
            .await
            .expect("GET /metrics")
            .text()
            .await
            .unwrap();
        if wanted.iter().all(|w| page.contains(w)) {
            return page;
        }
        assert!(
            Instant::now() < deadline,
            "{wanted:?} not on the page:\n{page}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_bad_metrics_listen_value_is_refused_by_name() {
    let out = tokio::time::timeout(
        Duration::from_secs(15),
        scheduler()
            .env("FLOW_NATS_URL", "nats://127.0.0.1:1")
            .env("FLOW_METRICS_LISTEN", "localhost:9450")
            .output(),
    )
    .await
    .expect("exits promptly")
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--metrics-listen") && err.contains("is not a metrics listen address"),
        "{err}"
    );
}
