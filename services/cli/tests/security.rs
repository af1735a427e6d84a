//! Security end to end.
//!
//! * `examples/nats/nats-server.conf`, as shipped, runs a real task: the
//!   scheduler as `scheduler`, a worker as `worker`, the `flow` CLI as
//!   `operator`; a `worker` connection can neither submit tasks nor call
//!   `flow.api` nor set cancel marks, and nothing comes of its attempts; a
//!   watcher as `worker` publishes component states that the console's
//!   follower reads as `operator`.
//! * A BMC password planted in the simulator and the worker's credentials
//!   never reaches a stream, a KV bucket, any NATS message, the database or
//!   the logs of the scheduler, the worker and the CLI.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use flow_config::{NatsSettings, Secret};
use flow_jetstream::{InitialConnect, connect_nats};
use flow_protocol::api::{ApiError, decode_reply};
use flow_protocol::jobs::{STREAM_PARKED, STREAM_TASKS, SUBJECT_SUBMIT};
use flow_protocol::subjects::api_subject;
use flow_rack_sim::{InitialPower, SimConfig};
use flow_redfish::CredentialStore;
use flow_redfish::RedfishSettings;
use flow_scheduler::Scheduler;
use flow_store::Store;
use flow_tests::{NatsServer, TestDb, wait_until, workspace_binary};
use futures::StreamExt;
use serde_json::{Value, json};

/// The roles file operators use, read from the repository.
const ROLES_FILE: &str = include_str!("../../../examples/nats/nats-server.conf");
/// The one line a test must change in it: where JetStream keeps its files.
const STORE_DIR_LINE: &str = "store_dir: \"/var/lib/nats\"";

/// Bound of every wait for a task or a message.
const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);
/// Bound of one `flow` command.
const CLI_TIMEOUT: Duration = Duration::from_secs(90);

fn unique(label: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{label}-{}-{nanos}", std::process::id())
}

/// A directory of its own, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        let dir = std::env::temp_dir().join(unique(&format!("flow-security-{label}")));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Logs and files stay for the post-mortem.
            eprintln!("kept {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn utf8(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Power on: shelves (stage 1), then trays (stage 2), each verified.
fn fast_power_on_rule() -> Value {
    let verify = json!({"name": "VerifyPowerStatus", "timeout": "20s", "poll_interval": "50ms",
                        "parameters": {"expected_status": "on"}});
    json!({"version": "v1", "steps": [
        {"component_type": "powershelf", "stage": 1, "main_operation": {"name": "PowerControl"},
         "post_operation": [verify]},
        {"component_type": "compute", "stage": 2, "main_operation": {"name": "PowerControl"},
         "post_operation": [verify]},
        {"component_type": "nvswitch", "stage": 2, "main_operation": {"name": "PowerControl"},
         "post_operation": [verify]}
    ]})
}

/// Power off that first waits a minute: long enough to cancel it.
fn slow_power_off_rule() -> Value {
    json!({"version": "v1", "steps": [
        {"component_type": "compute", "stage": 1,
         "pre_operation": [{"name": "Sleep", "parameters": {"duration": "60s"}}],
         "main_operation": {"name": "PowerControl"}}
    ]})
}

/// Runs the `flow` binary with these NATS settings in the environment,
/// for at most [`CLI_TIMEOUT`] (`--wait` waits as long as the task runs).
async fn flow(env: &[(&str, &str)], args: &[&str]) -> Output {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(args)
        .env_remove("FLOW_CONFIG")
        .envs(env.iter().copied())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(CLI_TIMEOUT, run)
        .await
        .unwrap_or_else(|_| panic!("flow {args:?} still running after {CLI_TIMEOUT:?}"))
        .expect("run flow")
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The task ID in `rack-01: task <id>`.
fn task_id(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("rack-01: task "))
        .map(|id| id.split_whitespace().next().unwrap_or_default().to_owned())
        .unwrap_or_else(|| panic!("no task ID: {}", text(out)))
}

async fn call(client: &async_nats::Client, endpoint: &str, body: Value) -> Result<Value, ApiError> {
    let request = async_nats::Request::new()
        .payload(serde_json::to_vec(&body).expect("json").into())
        .timeout(Some(Duration::from_secs(10)));
    let reply = client
        .send_request(api_subject(endpoint), request)
        .await
        .unwrap_or_else(|e| panic!("{endpoint}: {e}"));
    decode_reply(&reply.payload)
}

async fn ok(client: &async_nats::Client, endpoint: &str, body: Value) -> Value {
    call(client, endpoint, body)
        .await
        .unwrap_or_else(|e| panic!("{endpoint}: {e} {:?}", e.details))
}

/// Waits (bounded) until the task is in one of `statuses`.
async fn task_reaches(client: &async_nats::Client, id: &str, statuses: &[&str]) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let task = ok(client, "task.get", json!({"id": id})).await;
        if statuses.contains(&task["status"].as_str().unwrap_or_default()) {
            return task;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task never reached {statuses:?}: {task}"
        );
        tokio::time::sleep(POLL).await;
    }
}

// ---------------------------------------------------------------------------
// Roles
// ---------------------------------------------------------------------------

struct Roles {
    scheduler: String,
    worker: String,
    operator: String,
}

impl Roles {
    fn new() -> Roles {
        Roles {
            scheduler: unique("scheduler-pw"),
            worker: unique("worker-pw"),
            operator: unique("operator-pw"),
        }
    }

    /// A server running the shipped roles file; only the store directory
    /// differs (and the ports, which flags set).
    fn server(&self) -> NatsServer {
        assert!(
            ROLES_FILE.contains(STORE_DIR_LINE),
            "examples/nats/nats-server.conf no longer has {STORE_DIR_LINE}"
        );
        NatsServer::start_with_config_file(
            &|store| {
                ROLES_FILE.replace(
                    STORE_DIR_LINE,
                    &format!("store_dir: \"{}\"", store.display()),
                )
            },
            &[
                ("FLOW_NATS_SCHEDULER_PASSWORD", &self.scheduler),
                ("FLOW_NATS_WORKER_PASSWORD", &self.worker),
                ("FLOW_NATS_OPERATOR_PASSWORD", &self.operator),
            ],
        )
    }
}

fn settings(url: &str, user: &str, password: &str, inbox: Option<&str>) -> NatsSettings {
    NatsSettings {
        url: url.to_owned(),
        user: Some(user.to_owned()),
        password: Some(Secret::new(password)),
        inbox_prefix: inbox.map(str::to_owned),
        ..NatsSettings::default()
    }
}

/// A connection as `worker` that reports the server's errors (permission
/// violations) on a channel.
async fn probe(
    url: &str,
    password: &str,
) -> (
    async_nats::Client,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let client =
        async_nats::ConnectOptions::with_user_and_password("worker".into(), password.into())
            .name("security-probe")
            .custom_inbox_prefix("_INBOX_worker")
            .event_callback(move |event| {
                let tx = tx.clone();
                async move {
                    if let async_nats::Event::ServerError(error) = event {
                        let _ = tx.send(error.to_string());
                    }
                }
            })
            .connect(url)
            .await
            .expect("worker probe connects");
    (client, rx)
}

/// Waits (bounded) for the server to report a violation mentioning `subject`.
async fn violation(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>, subject: &str) -> String {
    let quoted = format!("\"{subject}\"");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(error)) if error.contains(&quoted) => return error,
            Ok(Some(_other)) => continue,
            _ => panic!("no permissions violation reported for {subject}"),
        }
    }
}

fn registry() -> flow_hardware::ManagerRegistry {
    let credentials = Arc::new(CredentialStore::single(
        flow_rack_sim::CREDENTIAL_REF,
        flow_rack_sim::DEFAULT_USER,
        flow_rack_sim::DEFAULT_PASSWORD,
    ));
    flow_redfish::registry(&RedfishSettings::default(), credentials, None).expect("registry")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_shipped_roles_file_runs_a_task_and_keeps_workers_from_submitting() {
    let roles = Roles::new();
    let nats = roles.server();
    let url = nats.url();
    let db = TestDb::create().await;
    let dir = TempDir::new("roles");

    // The scheduler as `scheduler`, with its own reply subjects.
    let store = Store::connect(db.url(), 5).await.expect("store");
    store.migrate().await.expect("migrate");
    let scheduler_client = connect_nats(
        &settings(
            &url,
            "scheduler",
            &roles.scheduler,
            Some("_INBOX_scheduler"),
        ),
        "flow-scheduler",
        InitialConnect::FailFast,
    )
    .await
    .expect("scheduler connects");
    let scheduler = Scheduler::start(scheduler_client, store)
        .await
        .expect("the scheduler sets up JetStream and flow.api under its role");

    // A worker as `worker`.
    let sim = flow_rack_sim::start(SimConfig {
        admin_port: 0,
        time_scale: 0.01,
        initial_power: InitialPower::Off,
        compute: 2,
        nvswitch: 1,
        powershelf: 1,
        ..SimConfig::default()
    })
    .await
    .expect("simulator");
    let worker_client = connect_nats(
        &settings(&url, "worker", &roles.worker, Some("_INBOX_worker")),
        "flow-worker",
        InitialConnect::FailFast,
    )
    .await
    .expect("worker connects");
    let worker_stop = tokio_util::sync::CancellationToken::new();
    let worker = {
        let (registry, stop) = (registry(), worker_stop.clone());
        tokio::spawn(async move {
            flow_worker::run(
                worker_client,
                registry,
                flow_worker::WorkerConfig::default(),
                stop,
            )
            .await
        })
    };

    // The operator, through the CLI.
    let operator_env = [
        ("FLOW_NATS_URL", url.as_str()),
        ("FLOW_NATS_USER", "operator"),
        ("FLOW_NATS_PASSWORD", roles.operator.as_str()),
    ];
    let rack = dir.write(
        "rack.json",
        &serde_json::to_string(&sim.inventory()[0]).expect("rack json"),
    );
    let out = flow(
        &operator_env,
        &["rack", "create", "--from-json", utf8(&rack)],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for (name, code, rule) in [
        ("Fast On", "power_on", fast_power_on_rule()),
        ("Slow Off", "power_off", slow_power_off_rule()),
    ] {
        let file = dir.write(&format!("{code}.json"), &rule.to_string());
        let out = flow(
            &operator_env,
            &[
                "rule",
                "create",
                "--name",
                name,
                "--operation-type",
                "power_control",
                "--operation",
                code,
                "--rule-file",
                utf8(&file),
                "--is-default",
            ],
        )
        .await;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    }
    let out = flow(
        &operator_env,
        &["power", "on", "--rack", "rack-01", "--wait"],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "the task runs end to end: {}",
        text(&out)
    );
    let on_task = task_id(&out);
    let out = flow(&operator_env, &["status"]).await;
    assert_eq!(out.status.code(), Some(0), "flow status: {}", text(&out));

    // Cancellation: the scheduler sets the mark, the worker's watch sees it.
    let operator = connect_nats(
        &settings(&url, "operator", &roles.operator, None),
        "flow-cli",
        InitialConnect::FailFast,
    )
    .await
    .expect("operator connects");

    // A watcher as `worker` publishes component states; the console's
    // follower, as `operator`, reads every one of them (all four on).
    let watcher_client = connect_nats(
        &settings(&url, "worker", &roles.worker, Some("_INBOX_worker")),
        "flow-worker-watch",
        InitialConnect::FailFast,
    )
    .await
    .expect("a watcher connects");
    let watch_stop = tokio_util::sync::CancellationToken::new();
    let watcher = {
        let credentials = Arc::new(CredentialStore::single(
            flow_rack_sim::CREDENTIAL_REF,
            flow_rack_sim::DEFAULT_USER,
            flow_rack_sim::DEFAULT_PASSWORD,
        ));
        let bmcs = flow_redfish::Connections::new(&RedfishSettings::default(), credentials)
            .expect("connections");
        let managers = Arc::new(
            flow_redfish::registry_with(&RedfishSettings::default(), &bmcs, None)
                .expect("managers"),
        );
        tokio::spawn(flow_worker::watch::run(
            watcher_client,
            bmcs,
            managers,
            flow_worker::watch::WatchConfig {
                poll_every: Duration::from_millis(200),
                inventory_every: Duration::from_millis(200),
                ..Default::default()
            },
            flow_worker::metrics::WatchMetrics::default(),
            watch_stop.clone(),
        ))
    };
    let states = Arc::new(flow_console::states::States::default());
    let follower = tokio::spawn({
        let (states, operator) = (Arc::clone(&states), operator.clone());
        async move { states.follow(operator).await }
    });
    let deadline = tokio::time::Instant::now() + WAIT;
    let names: Vec<String> = sim.inventory()[0]
        .components
        .iter()
        .map(|c| c.name.clone())
        .collect();
    loop {
        let on = names
            .iter()
            .filter(|n| {
                states
                    .get("rack-01", n)
                    .is_some_and(|s| s.reachable && s.power == flow_protocol::state::PowerState::On)
            })
            .count();
        if on == names.len() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{on} of {} component states read as operator",
            names.len()
        );
        tokio::time::sleep(POLL).await;
    }
    follower.abort();
    watch_stop.cancel();
    watcher.await.expect("the watcher stops");
    let out = flow(&operator_env, &["power", "off", "--rack", "rack-01"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let off_task = task_id(&out);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let task = ok(&operator, "task.get", json!({"id": off_task})).await;
        if task["steps"][0]["status"] == "running" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never ran: {task}");
        tokio::time::sleep(POLL).await;
    }
    let out = flow(&operator_env, &["task", "cancel", &off_task]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let cancelled =
        task_reaches(&operator, &off_task, &["terminated", "completed", "failed"]).await;
    assert_eq!(cancelled["status"], "terminated", "{cancelled}");

    // Refused messages are parked by whoever refuses them: a malformed job
    // by the worker, a malformed result by the scheduler.
    let as_scheduler = connect_nats(
        &settings(
            &url,
            "scheduler",
            &roles.scheduler,
            Some("_INBOX_scheduler"),
        ),
        "flow-scheduler-2",
        InitialConnect::FailFast,
    )
    .await
    .expect("a second scheduler connects");
    jetstream::new(as_scheduler)
        .publish("flow.jobs.compute", "not a job".into())
        .await
        .expect("job published")
        .await
        .expect("job stored");
    let as_worker = connect_nats(
        &settings(&url, "worker", &roles.worker, Some("_INBOX_worker")),
        "flow-worker-2",
        InitialConnect::FailFast,
    )
    .await
    .expect("a second worker connects");
    jetstream::new(as_worker)
        .publish(format!("flow.results.{on_task}"), "not a result".into())
        .await
        .expect("result published")
        .await
        .expect("result stored");
    let operator_js = jetstream::new(operator.clone());
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut parked = operator_js
            .get_stream(STREAM_PARKED)
            .await
            .expect("operator reads FLOW_PARKED");
        let messages = parked.info().await.expect("stream info").state.messages;
        if messages == 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{messages} of 2 refused messages parked"
        );
        tokio::time::sleep(POLL).await;
    }

    // A worker may not submit, call flow.api, set cancel marks, or read
    // events and others' replies.
    let rules = ok(&operator, "rule.list", json!({})).await;
    let a_rule = rules["rules"][0]["id"].clone();
    let (worker_probe, mut violations) = probe(&url, &roles.worker).await;
    let submission = json!({"request_id": "from-a-worker", "racks": ["rack-01"],
                            "operation": "power_on"});
    worker_probe
        .publish(SUBJECT_SUBMIT, submission.to_string().into())
        .await
        .expect("publish is sent");
    violation(&mut violations, SUBJECT_SUBMIT).await;
    let js = jetstream::ContextBuilder::new()
        .timeout(Duration::from_secs(2))
        .build(worker_probe.clone());
    let acked = match js
        .publish(SUBJECT_SUBMIT, submission.to_string().into())
        .await
    {
        Ok(ack) => ack.await.is_ok(),
        Err(_) => false,
    };
    assert!(!acked, "JetStream acknowledged a worker's submission");
    for (endpoint, body) in [
        (
            "rule.create",
            json!({"name": "worker-made", "operation_type": "power_control",
                   "operation": "power_on", "definition": fast_power_on_rule(), "is_default": true}),
        ),
        ("task.submit", submission.clone()),
        ("rule.delete", json!({"id": a_rule, "force": true})),
    ] {
        let request = async_nats::Request::new()
            .payload(body.to_string().into())
            .timeout(Some(Duration::from_secs(2)));
        let reply = worker_probe
            .send_request(api_subject(endpoint), request)
            .await;
        assert!(reply.is_err(), "a worker got an answer from {endpoint}");
        violation(&mut violations, &api_subject(endpoint)).await;
    }
    let mark = format!("$KV.flow_job_state.cancel.{on_task}");
    worker_probe
        .publish(mark.clone(), "cancelled".into())
        .await
        .expect("publish is sent");
    violation(&mut violations, &mark).await;
    for subject in ["flow.events.>", "_INBOX_scheduler.>", "_INBOX.>"] {
        let _sub = worker_probe.subscribe(subject).await.expect("sent");
        violation(&mut violations, subject).await;
    }

    // The operator's own stream submission is taken (an unknown rack: the
    // outcome is a refusal), so the path the worker was denied works.
    let mut outcome = operator
        .subscribe("flow.events.submit.operator-probe")
        .await
        .expect("operator subscribes to outcomes");
    operator_js
        .publish(
            SUBJECT_SUBMIT,
            json!({"request_id": "operator-probe", "racks": ["no-such-rack"],
                   "operation": "power_on"})
            .to_string()
            .into(),
        )
        .await
        .expect("operator publishes")
        .await
        .expect("JetStream acknowledges the operator's submission");
    let reply = tokio::time::timeout(WAIT, outcome.next())
        .await
        .expect("an outcome in time")
        .expect("subscription open");
    let reply: Value = serde_json::from_slice(&reply.payload).expect("outcome json");
    assert!(
        reply.to_string().contains("no-such-rack"),
        "refused for the unknown rack: {reply}"
    );

    // Nothing came of the worker's attempts.
    let tasks = ok(&operator, "task.list", json!({})).await;
    let ids: BTreeSet<&str> = tasks
        .as_array()
        .expect("task list")
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        BTreeSet::from([on_task.as_str(), off_task.as_str()]),
        "{tasks}"
    );
    let rules = ok(&operator, "rule.list", json!({})).await;
    assert_eq!(rules["total"], 2, "{rules}");
    let on = ok(&operator, "task.get", json!({"id": on_task})).await;
    assert_eq!(on["status"], "completed", "{on}");
    let info = operator_js
        .get_stream(STREAM_TASKS)
        .await
        .expect("operator reads stream info")
        .info()
        .await
        .expect("stream info")
        .clone();
    assert_eq!(
        info.state.last_sequence, 1,
        "only the operator's submission reached {STREAM_TASKS}"
    );

    // The real processes never hit a denied subject: every violation the
    // server logged is the probe's.
    let log = nats.log();
    let foreign: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Violation") && !l.contains("security-probe"))
        .collect();
    assert!(
        foreign.is_empty(),
        "permission violations outside the probe:\n{}",
        foreign.join("\n")
    );
    assert!(
        log.lines()
            .any(|l| l.contains("Violation") && l.contains("security-probe")),
        "the server logs violations (so the check above means something):\n{log}"
    );

    worker_stop.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(15), worker)
        .await
        .expect("worker stops");
    stopped.expect("worker task").expect("worker ran cleanly");
    scheduler.stop().await.expect("scheduler stops");
    sim.shutdown().await;
}

// ---------------------------------------------------------------------------
// Planted password
// ---------------------------------------------------------------------------

/// Standard base64 with padding (HTTP Basic auth's encoding).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// What must never appear, with a label for reports.
struct Needles(Vec<(String, String)>);

impl Needles {
    fn new(user: &str, passwords: &[&str]) -> Needles {
        let mut needles = Vec::new();
        for (i, pw) in passwords.iter().enumerate() {
            needles.push((format!("password {i}"), (*pw).to_owned()));
            needles.push((
                format!("password {i}, Basic auth"),
                base64(format!("{user}:{pw}").as_bytes()),
            ));
            needles.push((format!("password {i}, base64"), base64(pw.as_bytes())));
        }
        Needles(needles)
    }

    /// Records `place: label` for every needle found in `haystack`.
    fn search(&self, place: &str, haystack: &str, found: &mut Vec<String>) {
        for (label, needle) in &self.0 {
            if haystack.contains(needle.as_str()) {
                found.push(format!("{place}: {label}"));
            }
        }
    }
}

/// A child process killed (if still running) on drop.
struct Proc {
    child: Child,
    name: &'static str,
}

impl Proc {
    /// Sends SIGTERM and waits (bounded) for the exit.
    fn stop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let child = &mut self.child;
        let stopped = wait_until(Duration::from_secs(20), POLL, || {
            matches!(child.try_wait(), Ok(Some(_)))
        });
        assert!(stopped.is_ok(), "{} did not stop on SIGTERM", self.name);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(
    name: &'static str,
    binary: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    log: &Path,
) -> Proc {
    let file = std::fs::File::create(log).expect("log file");
    let child = Command::new(binary)
        .args(args)
        .env_remove("FLOW_CONFIG")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("log handle"))
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", binary.display()));
    Proc { child, name }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Every message on every subject of the account, as it passes.
fn wiretap(client: async_nats::Client) -> Arc<Mutex<Vec<String>>> {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&seen);
    tokio::spawn(async move {
        let Ok(mut all) = client.subscribe(">").await else {
            return;
        };
        while let Some(msg) = all.next().await {
            let headers = msg
                .headers
                .as_ref()
                .map(|h| {
                    h.iter()
                        .map(|(k, v)| format!("{k}: {v:?}"))
                        .collect::<Vec<_>>()
                        .join("; ")
                })
                .unwrap_or_default();
            sink.lock().unwrap_or_else(|e| e.into_inner()).push(format!(
                "{} {:?} [{headers}] {}",
                msg.subject,
                msg.reply,
                String::from_utf8_lossy(&msg.payload)
            ));
        }
    });
    seen
}

/// Every stored message of every stream (KV buckets are streams too), read
/// through the JetStream API: `(place, text)`.
async fn stream_contents(js: &jetstream::Context) -> Vec<(String, String)> {
    let mut names: Vec<String> = js
        .stream_names()
        .map(|n| n.expect("stream name"))
        .collect()
        .await;
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let mut stream = js.get_stream(&name).await.expect("stream");
        let state = stream.info().await.expect("stream info").state.clone();
        out.push((format!("stream {name}"), String::new()));
        if state.messages == 0 {
            continue;
        }
        for seq in state.first_sequence..=state.last_sequence {
            // Deleted (acknowledged work-queue) messages leave gaps.
            if let Ok(m) = stream.get_raw_message(seq).await {
                let headers = m
                    .headers
                    .iter()
                    .map(|(k, v)| format!("{k}: {v:?}"))
                    .collect::<Vec<_>>()
                    .join("; ");
                out.push((
                    format!("stream {name} seq {seq} ({})", m.subject),
                    format!(
                        "{} [{headers}] {}",
                        m.subject,
                        String::from_utf8_lossy(&m.payload)
                    ),
                ));
            }
        }
    }
    out
}

/// Every row of every table of the database, as JSON: `(table, row)`.
async fn database_rows(url: &str) -> Vec<(String, String)> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.expect("database");
    let tables: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_schema::text, table_name::text FROM information_schema.tables \
         WHERE table_type = 'BASE TABLE' \
           AND table_schema NOT IN ('pg_catalog', 'information_schema') \
         ORDER BY 1, 2",
    )
    .fetch_all(&mut conn)
    .await
    .expect("tables");
    let mut rows = Vec::new();
    for (schema, table) in tables {
        let query = format!(
            "SELECT row_to_json(t)::text FROM \"{}\".\"{}\" t",
            schema.replace('"', "\"\""),
            table.replace('"', "\"\"")
        );
        let found: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(query))
            .fetch_all(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("dumping {schema}.{table}: {e}"));
        rows.push((format!("table {schema}.{table}"), String::new()));
        rows.extend(
            found
                .into_iter()
                .map(|r| (format!("table {schema}.{table}"), r)),
        );
    }
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_planted_bmc_password_appears_in_no_stream_table_or_log() {
    let scheduler_bin = workspace_binary("flow-scheduler", "services/scheduler");
    let worker_bin = workspace_binary("flow-worker", "services/worker");
    let sim_bin = workspace_binary("flow-rack-sim", "services/rack-sim");
    let planted = unique("Planted-Bmc-Pw");
    let wrong = unique("Wrong-Bmc-Pw");
    let needles = Needles::new(flow_rack_sim::DEFAULT_USER, &[&planted, &wrong]);
    let dir = TempDir::new("planted");
    let nats = NatsServer::start();
    let url = nats.url();
    let db = TestDb::create().await;
    let tap_client = async_nats::connect(&url).await.expect("wiretap connects");
    let tapped = wiretap(tap_client.clone());
    tap_client.flush().await.expect("wiretap subscribed");

    // The simulator's BMCs accept only the planted password.
    let sim_log = dir.path("sim.log");
    let inventory = dir.path("rack.json");
    let mut sim = spawn(
        "flow-rack-sim",
        &sim_bin,
        &[
            "--admin-port",
            "0",
            "--time-scale",
            "0.01",
            "--compute",
            "2",
            "--nvswitch",
            "1",
            "--powershelf",
            "1",
            "--password",
            &planted,
            "--inventory-out",
            utf8(&inventory),
        ],
        &[],
        &sim_log,
    );
    let ready = wait_until(WAIT, POLL, || {
        read(&sim_log).contains("flow-rack-sim ready")
    });
    assert!(ready.is_ok(), "simulator not ready:\n{}", read(&sim_log));
    let admin = read(&sim_log)
        .lines()
        .find_map(|l| l.strip_prefix("flow-rack-sim ready: admin "))
        .and_then(|rest| rest.split(", ").next())
        .expect("admin URL")
        .to_owned();

    // The worker's credentials: the right password from the environment,
    // a wrong one from a file (for compute-02, so a call fails).
    let wrong_file = dir.write("wrong-password", &format!("{wrong}\n"));
    let credentials = dir.write(
        "credentials.yaml",
        &format!(
            "{}: {{user: {}, password_env: FLOW_TEST_BMC_PASSWORD}}\n\
             wrong-bmc: {{user: {}, password_file: {}}}\n",
            flow_rack_sim::CREDENTIAL_REF,
            flow_rack_sim::DEFAULT_USER,
            flow_rack_sim::DEFAULT_USER,
            utf8(&wrong_file)
        ),
    );
    let mut rack: Value =
        serde_json::from_str(&read(&inventory)).expect("the simulator's rack document");
    for component in rack["components"].as_array_mut().expect("components") {
        if component["name"] == "compute-02" {
            component["credential_ref"] = json!("wrong-bmc");
        }
    }
    let rack_file = dir.write("rack-for-flow.json", &rack.to_string());

    let scheduler_log = dir.path("scheduler.log");
    let mut scheduler = spawn(
        "flow-scheduler",
        &scheduler_bin,
        &[],
        &[
            ("FLOW_NATS_URL", &url),
            ("FLOW_DATABASE_URL", db.url()),
            ("FLOW_LOG", "debug"),
            ("FLOW_METRICS_LISTEN", "127.0.0.1:0"),
        ],
        &scheduler_log,
    );
    let worker_log = dir.path("worker.log");
    let lifecycle = format!("{admin}/lifecycle/v1");
    let mut worker = spawn(
        "flow-worker",
        &worker_bin,
        &[
            "--credentials-file",
            utf8(&credentials),
            "--lifecycle-url",
            &lifecycle,
            "--lifecycle-credential",
            flow_rack_sim::CREDENTIAL_REF,
        ],
        &[
            ("FLOW_NATS_URL", &url),
            ("FLOW_LOG", "debug"),
            ("FLOW_METRICS_LISTEN", "127.0.0.1:0"),
            ("FLOW_TEST_BMC_PASSWORD", &planted),
        ],
        &worker_log,
    );

    // The wiretap's `>` is interest in every subject, so a request sent
    // before the service is up waits for its timeout instead of failing
    // fast: wait until it serves.
    let serving = wait_until(WAIT, POLL, || {
        read(&scheduler_log).contains("serving flow.api")
    });
    assert!(
        serving.is_ok(),
        "flow-scheduler never served:\n{}",
        read(&scheduler_log)
    );

    let cli_env = [("FLOW_NATS_URL", url.as_str()), ("FLOW_LOG", "debug")];
    let mut cli_log = String::new();
    let mut run = async |args: &[&str]| {
        let out = flow(&cli_env, args).await;
        cli_log.push_str(&format!("$ flow {}\n{}\n", args.join(" "), text(&out)));
        out
    };
    let out = run(&["rack", "create", "--from-json", utf8(&rack_file)]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let rule = dir.write("on.json", &fast_power_on_rule().to_string());
    let out = run(&[
        "rule",
        "create",
        "--name",
        "Fast On",
        "--operation-type",
        "power_control",
        "--operation",
        "power_on",
        "--rule-file",
        utf8(&rule),
        "--is-default",
    ])
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = run(&[
        "power",
        "on",
        "--rack",
        "rack-01",
        "--type",
        "powershelf",
        "--wait",
    ])
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "the shelves power on with the planted password: {}",
        text(&out)
    );
    // compute-02's credential is wrong: its call fails, and so the task.
    let out = run(&[
        "power", "on", "--rack", "rack-01", "--type", "compute", "--wait",
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let failed = task_id(&out);
    // `task show` exits 1 for a failed task.
    let out = run(&["--json", "task", "show", &failed]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        shown.contains("\"failed\"") && shown.contains("compute-02") && shown.contains("401"),
        "compute-02 failed on its wrong password (HTTP 401): {shown}"
    );

    scheduler.stop();
    worker.stop();
    sim.stop();

    // Controls: the same search finds the passwords where they were put
    // on purpose, so finding nothing elsewhere means something.
    let control = format!(
        "control {planted} {}",
        base64(format!("{}:{planted}", flow_rack_sim::DEFAULT_USER).as_bytes())
    );
    let js = jetstream::new(tap_client.clone());
    js.publish("flow.events.control.leak-check", control.clone().into())
        .await
        .expect("control publish")
        .await
        .expect("control stored in FLOW_EVENTS");
    {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(db.url()).await.expect("db");
        sqlx::query("CREATE TABLE leak_control (v text)")
            .execute(&mut conn)
            .await
            .expect("control table");
        sqlx::query("INSERT INTO leak_control VALUES ($1)")
            .bind(&control)
            .execute(&mut conn)
            .await
            .expect("control row");
    }
    let tapped_control = wait_until(Duration::from_secs(10), POLL, || {
        tapped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|m| m.starts_with("flow.events.control.leak-check"))
    });
    assert!(tapped_control.is_ok(), "the wiretap saw the control");

    let mut found = Vec::new();
    let messages = tapped.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for (i, m) in messages.iter().enumerate() {
        let place = if m.starts_with("flow.events.control.") {
            format!("control message {i}")
        } else {
            format!("NATS message {i} ({})", m.split(' ').next().unwrap_or(""))
        };
        needles.search(&place, m, &mut found);
    }
    let stored = stream_contents(&js).await;
    for (place, content) in &stored {
        let place = if content.starts_with("flow.events.control.") {
            format!("control {place}")
        } else {
            place.clone()
        };
        needles.search(&place, content, &mut found);
    }
    let rows = database_rows(db.url()).await;
    for (place, row) in &rows {
        let place = if place.ends_with(".leak_control") {
            format!("control {place}")
        } else {
            place.clone()
        };
        needles.search(&place, row, &mut found);
    }
    let logs = [
        ("flow-scheduler log", read(&scheduler_log)),
        ("flow-worker log", read(&worker_log)),
        ("flow CLI output", cli_log.clone()),
    ];
    for (place, log) in &logs {
        needles.search(place, log, &mut found);
    }

    let (controls, leaks): (Vec<String>, Vec<String>) =
        found.into_iter().partition(|f| f.starts_with("control "));
    assert!(
        leaks.is_empty(),
        "the BMC password leaked:\n{}",
        leaks.join("\n")
    );
    for expected in [
        "control message",
        "control stream FLOW_EVENTS",
        "control table public.leak_control",
    ] {
        for label in ["password 0", "password 0, Basic auth"] {
            assert!(
                controls
                    .iter()
                    .any(|c| c.starts_with(expected) && c.ends_with(&format!(": {label}"))),
                "the search missed the control ({expected}: {label}): {controls:?}"
            );
        }
    }

    // And the places searched were not empty: the run is in them.
    assert!(
        messages.iter().any(|m| m.starts_with("flow.jobs."))
            && messages.iter().any(|m| m.starts_with("flow.results."))
            && messages
                .iter()
                .any(|m| m.starts_with("$KV.flow_job_state.")),
        "the wiretap saw jobs, results and checkpoints ({} messages)",
        messages.len()
    );
    let places: BTreeSet<&str> = stored.iter().map(|(p, _)| p.as_str()).collect();
    for stream in [
        "FLOW_EVENTS",
        "FLOW_JOBS",
        "FLOW_RESULTS",
        "KV_flow_job_state",
    ] {
        assert!(
            places.contains(format!("stream {stream}").as_str()),
            "{stream} was searched: {places:?}"
        );
    }
    assert!(
        rows.iter()
            .any(|(t, r)| t == "table public.tasks" && r.contains(&failed)),
        "the tasks table was dumped"
    );
    for (place, log) in &logs[..2] {
        assert!(log.contains("DEBUG"), "{place} is at debug level:\n{log}");
    }
    assert!(
        logs[1].1.contains("compute-02"),
        "the worker logged the failing call:\n{}",
        logs[1].1
    );
}
