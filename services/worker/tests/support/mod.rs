#![allow(dead_code)] // each test crate that includes it uses part of it
//! What the worker's process tests share: a `flow-worker` binary started
//! with metrics on a free port and JSON logs, its log lines, and calls on
//! `flow.api`.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flow_protocol::api::decode_reply;
use serde_json::Value;
use tokio::io::AsyncBufReadExt;

/// A running `flow-worker` and what it logged so far.
pub struct Worker {
    pub child: tokio::process::Child,
    pub lines: Arc<Mutex<Vec<String>>>,
    /// Where its `/metrics` listens.
    pub metrics_addr: String,
}

/// Starts the `flow-worker` binary against `nats_url` for the simulator's
/// BMCs (credentials written under `dir`, the password in `password_env`),
/// with JSON logs and metrics on a free port, and waits for its metrics
/// address.
pub async fn start_worker(nats_url: &str, dir: &Path, password_env: &str) -> Worker {
    start_worker_with(nats_url, dir, password_env, &[]).await
}

/// As [`start_worker`], with more arguments (`--watch`, …).
pub async fn start_worker_with(
    nats_url: &str,
    dir: &Path,
    password_env: &str,
    extra: &[&str],
) -> Worker {
    std::fs::create_dir_all(dir).unwrap();
    let credentials = dir.join("credentials.yaml");
    std::fs::write(
        &credentials,
        format!(
            "{}: {{user: root, password_env: {password_env}}}\n",
            flow_rack_sim::CREDENTIAL_REF
        ),
    )
    .unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_flow-worker"))
        .env_remove("FLOW_CONFIG")
        .env("FLOW_NATS_URL", nats_url)
        .env("FLOW_LOG", "info")
        .env("FLOW_LOG_FORMAT", "json")
        .env(password_env, "0penBmc")
        .arg("--credentials-file")
        .arg(&credentials)
        .args(["--metrics-listen", "127.0.0.1:0"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn flow-worker");
    let lines = collect_lines(child.stderr.take().unwrap());
    let metrics_addr = metrics_addr(&lines).await;
    Worker {
        child,
        lines,
        metrics_addr,
    }
}

/// Lines a child writes to stderr, collected as they come.
fn collect_lines(stderr: tokio::process::ChildStderr) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&lines);
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

/// Waits (bounded) for a JSON log line with a `metrics_addr` field.
async fn metrics_addr(lines: &Mutex<Vec<String>>) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = lines.lock().unwrap().iter().find_map(|l| {
            serde_json::from_str::<Value>(l).ok()?["fields"]["metrics_addr"]
                .as_str()
                .map(str::to_owned)
        });
        if let Some(addr) = found {
            return addr;
        }
        assert!(
            Instant::now() < deadline,
            "no metrics_addr logged: {:?}",
            lines.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One `flow.api` call, its result (panics on an error reply).
pub async fn call(client: &async_nats::Client, endpoint: &str, body: Value) -> Value {
    let reply = flow_client::Client::new(client.clone(), "test")
        .request_raw(
            endpoint,
            body.to_string().into_bytes(),
            Duration::from_secs(10),
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("{endpoint}: no reply within 10 s: {e}"));
    decode_reply(&reply).unwrap_or_else(|e| panic!("{endpoint}: {e}"))
}
