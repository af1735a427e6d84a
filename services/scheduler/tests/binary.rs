//! The `flow-scheduler` binary as operators run it: settings from `FLOW_*`,
//! migrations applied to an empty database at start-up, NATS with
//! user/password, a clean stop on SIGTERM, and clear refusals of bad
//! settings.

use std::process::Stdio;
use std::time::{Duration, Instant};

use flow_protocol::api::decode_reply;
use flow_protocol::subjects::api_subject;
use flow_tests::{NatsServer, TestDb};
use serde_json::Value;
use tokio::io::AsyncReadExt;

const PASSWORD: &str = "s3cret-planted-password";

fn scheduler() -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_flow-scheduler"));
    cmd.env_remove("FLOW_CONFIG")
        .env("FLOW_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_migrates_serves_with_nats_auth_and_stops_on_sigterm() {
    let nats = NatsServer::start_with_config(&format!(
        "authorization {{ user: flow, password: \"{PASSWORD}\" }}"
    ));
    let db = TestDb::create().await;
    let mut child = scheduler()
        .env("FLOW_NATS_URL", nats.url())
        .env("FLOW_NATS_USER", "flow")
        .env("FLOW_NATS_PASSWORD", PASSWORD)
        .env("FLOW_DATABASE_URL", db.url())
        .spawn()
        .expect("spawn flow-scheduler");
    // Read as it is written: debug logs fill a pipe's buffer in seconds and
    // a scheduler blocked on writing them answers nothing.
    let mut stderr = child.stderr.take().expect("piped stderr");
    let logs = tokio::spawn(async move {
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text).await;
        String::from_utf8_lossy(&text).into_owned()
    });

    let client = async_nats::ConnectOptions::with_user_and_password("flow".into(), PASSWORD.into())
        .connect(nats.url())
        .await
        .expect("connect with credentials");
    // Bounded wait for the service to answer.
    let deadline = Instant::now() + Duration::from_secs(30);
    let list = loop {
        match client.request(api_subject("rule.list"), "{}".into()).await {
            Ok(msg) => break decode_reply::<Value>(&msg.payload).expect("rule.list reply"),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                let _ = child.start_kill();
                panic!(
                    "flow-scheduler never answered: {e}; its log:\n{}",
                    logs.await.unwrap_or_default()
                );
            }
        }
    };
    assert_eq!(list["total"], 0, "migrations made the tables");

    // The server really demands the credentials the scheduler was given.
    let denied = async_nats::ConnectOptions::new().connect(nats.url()).await;
    assert!(
        denied.is_err(),
        "nats-server accepted a client without credentials"
    );

    let pid = child.id().expect("pid").to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("stops within 15 s of SIGTERM")
        .unwrap();
    let logs = logs.await.expect("the log reader");
    assert!(status.success(), "exit {status:?}: {logs}");
    assert!(
        logs.contains("migrations applied") && logs.contains("shutting down"),
        "{logs}"
    );
    assert!(
        !logs.contains(PASSWORD),
        "the NATS password leaked into the logs"
    );
}

#[tokio::test]
async fn bad_settings_stop_the_binary_with_a_message_naming_the_setting() {
    let cases = [
        (
            "FLOW_DATABASE_URL",
            "mysql://x",
            "FLOW_DATABASE_URL: must be a postgres:// URL",
        ),
        (
            "FLOW_NATS_URL",
            "http://x",
            "FLOW_NATS_URL: \"http://x\" is not a NATS URL",
        ),
        ("FLOW_NATS_TOKEN", "t", ""),
        (
            "FLOW_NATS_CREDS_FILE",
            "/nonexistent.creds",
            "FLOW_NATS_CREDS_FILE: /nonexistent.creds is not a readable file",
        ),
    ];
    for (var, value, expected) in cases {
        let mut cmd = scheduler();
        cmd.env("FLOW_NATS_URL", "nats://127.0.0.1:1")
            .env(var, value);
        if var == "FLOW_NATS_TOKEN" {
            // Two authentication methods at once.
            cmd.env("FLOW_NATS_USER", "u")
                .env("FLOW_NATS_PASSWORD", "p");
        }
        let out = tokio::time::timeout(Duration::from_secs(15), cmd.output())
            .await
            .expect("exits promptly")
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{var}={value} was accepted");
        let expected = if expected.is_empty() {
            "choose one authentication method"
        } else {
            expected
        };
        assert!(err.contains(expected), "{var}={value}: {err}");
    }
    // A database that does not answer is named too.
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        scheduler()
            .env("FLOW_NATS_URL", "nats://127.0.0.1:1")
            .env("FLOW_DATABASE_URL", "postgres://postgres@127.0.0.1:1/flow")
            .output(),
    )
    .await
    .expect("exits")
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot connect to Postgres (FLOW_DATABASE_URL)"),
        "{err}"
    );
}
