//! The `flow` binary against a real service: a nats-server, a fresh
//! Postgres database and the flow.api service, as an operator uses them.

use std::process::Output;

use flow_testenv::Stack;
use flow_tests::NatsServer;
use serde_json::Value;

/// A scheduler on a private server and a fresh database, driven through
/// the `flow` binary.
struct Env(Stack);

impl Env {
    async fn new() -> Env {
        Env(Stack::builder().start().await)
    }

    async fn flow(&self, args: &[&str]) -> Output {
        flow_at(&self.0.nats.url(), args).await
    }

    async fn ok(&self, args: &[&str]) -> String {
        let out = self.flow(args).await;
        assert_eq!(
            out.status.code(),
            Some(0),
            "flow {args:?}: {}",
            stderr(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    async fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let text = self.ok(&all).await;
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    async fn stop(self) {
        self.0.stop().await;
    }
}

async fn flow_at(url: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(args)
        .env("FLOW_NATS_URL", url)
        .env_remove("FLOW_CONFIG")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .await
        .expect("run flow")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_session_with_rules_and_racks() {
    let env = Env::new().await;
    let text = env
        .ok(&["rack", "create", "--from-json", "examples/rack-nvl72.json"])
        .await;
    assert!(text.starts_with("Created rack rack-01 ("), "{text}");
    assert!(text.ends_with("with 35 components\n"), "{text}");

    let text = env
        .ok(&[
            "rule",
            "create",
            "--from-yaml",
            "examples/operation-rules.yaml",
        ])
        .await;
    assert!(
        text.contains("✅ Created: Graceful Power On (power_control/power_on)"),
        "{text}"
    );
    assert!(
        text.ends_with("Created: 8, overwritten: 0, skipped: 0\n"),
        "{text}"
    );
    let text = env
        .ok(&[
            "rule",
            "create",
            "--from-yaml",
            "examples/operation-rules.yaml",
        ])
        .await;
    assert!(
        text.ends_with("Created: 0, overwritten: 0, skipped: 8\n"),
        "{text}"
    );

    let list = env
        .json(&["rule", "list", "--operation-type", "power_control"])
        .await;
    assert_eq!(list["total"], 6);
    let table = env.ok(&["rule", "list"]).await;
    assert!(
        table.contains("Graceful Power On") && table.ends_with("Total: 8 rules\n"),
        "{table}"
    );

    let resolved = env
        .json(&[
            "rule",
            "resolve",
            "--rack",
            "rack-01",
            "--operation",
            "power_on",
        ])
        .await;
    assert_eq!(resolved["source"], "default");
    let default_id = resolved["rule_id"].as_str().unwrap().to_owned();

    // A rack-specific rule wins over the default.
    let created = env
        .json(&[
            "rule",
            "create",
            "--name",
            "Rack 1 On",
            "--operation-type",
            "power_control",
            "--operation",
            "power_on",
            "--rule-file",
            "shared/rules/tests/fixtures/seed-forceful-power-on.json",
        ])
        .await;
    let rack_rule = created["id"].as_str().unwrap().to_owned();
    env.ok(&[
        "rule",
        "associate",
        "--rack-id",
        "rack-01",
        "--rule-id",
        &rack_rule,
    ])
    .await;
    let text = env
        .ok(&[
            "rule",
            "resolve",
            "--rack",
            "rack-01",
            "--operation",
            "power_on",
        ])
        .await;
    assert!(text.contains("Source:   rack_association"), "{text}");
    assert!(
        text.contains("Shape:    4 stages, 6 steps, budget"),
        "{text}"
    );

    // A bound rule is not deleted without --force; the refusal exits 1.
    let out = env.flow(&["rule", "delete", &rack_rule]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("flow: conflict: rule")
            && stderr(&out).contains("rack-01 (power_on)")
    );
    let text = env.ok(&["rule", "delete", &rack_rule, "--force"]).await;
    assert!(text.contains("1 rack binding(s) removed"), "{text}");

    // History of the default, after an overwrite.
    env.ok(&[
        "rule",
        "create",
        "--from-yaml",
        "examples/operation-rules.yaml",
        "--overwrite",
    ])
    .await;
    let history = env.json(&["rule", "history", &default_id]).await;
    assert_eq!(history["revisions"].as_array().unwrap().len(), 2);
    let rule = env.ok(&["rule", "get", &default_id]).await;
    assert!(rule.contains("Revision:       2"), "{rule}");

    let text = env.ok(&["rule", "set-default", "--id", &default_id]).await;
    assert!(
        text.contains("is now the default for power_control/power_on"),
        "{text}"
    );
    let text = env
        .ok(&[
            "rule",
            "disassociate",
            "--rack-id",
            "rack-01",
            "--operation",
            "power_off",
        ])
        .await;
    assert_eq!(text, "Rack rack-01 had no rule bound for power_off\n");

    let racks = env.ok(&["rack", "list"]).await;
    assert!(
        racks.contains("18 Compute, 9 NVSwitch, 8 PowerShelf"),
        "{racks}"
    );
    let rack = env.ok(&["rack", "get", "rack-01"]).await;
    assert!(
        rack.contains("compute-01") && rack.contains("sim-bmc"),
        "{rack}"
    );
    assert_eq!(
        env.ok(&["rack", "delete", "rack-01"]).await,
        "Deleted rack rack-01\n"
    );
    let out = env.flow(&["rack", "get", "rack-01"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("flow: not_found: rack \"rack-01\" not found"),
        "{}",
        stderr(&out)
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_show_every_problem_and_exit_1() {
    let env = Env::new().await;
    let dir = std::env::temp_dir().join(format!("flow-cli-server-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("rack.json");
    std::fs::write(
        &bad,
        r#"{"name": "r", "components": [{"type": "gpu", "name": "a", "bmc_url": "x"}]}"#,
    )
    .unwrap();
    let out = env
        .flow(&["rack", "create", "--from-json", bad.to_str().unwrap()])
        .await;
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("flow: invalid: the rack document has 2 problem(s)\n"),
        "{err}"
    );
    assert!(
        err.contains("  components[0].type: unknown component type \"gpu\""),
        "{err}"
    );
    let out = env.flow(&["rule", "get", "not-a-uuid"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("bad_request"), "{}", stderr(&out));
    let out = env
        .flow(&["rule", "resolve", "--rack", "r", "--operation", "reboot"])
        .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--operation: unknown operation code \"reboot\""));
    std::fs::remove_dir_all(&dir).unwrap();
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_scheduler_or_nats_the_cli_says_so_and_exits_2() {
    let nats = NatsServer::start();
    let out = flow_at(
        &nats.url(),
        &[
            "rule",
            "create",
            "--from-yaml",
            "examples/operation-rules.yaml",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no flow.api service answers on flow.api.rule.batch_create"),
        "{}",
        stderr(&out)
    );
    let url = nats.url();
    drop(nats);
    let out = flow_at(&url, &["rack", "list"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with(&format!("flow: cannot connect to NATS at {url}")),
        "{}",
        stderr(&out)
    );
    let out = flow_at("http://nope", &["rack", "list"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("FLOW_NATS_URL: \"http://nope\" is not a NATS URL"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_status_shows_the_pipeline() {
    let env = Env::new().await;
    let status = env.json(&["status"]).await;
    let streams: Vec<&str> = status["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stream"].as_str().unwrap())
        .collect();
    assert_eq!(
        streams,
        [
            "FLOW_TASKS",
            "FLOW_JOBS",
            "FLOW_RESULTS",
            "FLOW_EVENTS",
            "FLOW_PARKED"
        ]
    );
    assert_eq!(status["parked"], 0);
    assert_eq!(status["streams"][1]["consumer"], "flow-workers");
    assert_eq!(status["streams"][1]["pending"], 0);
    assert_eq!(status["tasks"], serde_json::json!({}));
    let text = env.ok(&["status"]).await;
    assert!(
        text.contains("FLOW_JOBS") && text.contains("Tasks: none"),
        "{text}"
    );
    // A malformed submission is parked, and `flow status` counts it.
    let client = async_nats::connect(env.0.nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.publish("flow.tasks.submit", "{not json".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while env.json(&["status"]).await["parked"] != 1 {
        assert!(std::time::Instant::now() < deadline, "never parked");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let text = env.ok(&["status"]).await;
    assert!(
        text.contains("Parked: 1 refused messages kept on FLOW_PARKED"),
        "{text}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_queued_task_says_it_was_cancelled_while_queued() {
    let env = Env::new().await;
    env.ok(&["rack", "create", "--from-json", "examples/rack-nvl72.json"])
        .await;
    // No worker runs: the first task holds the rack, the second queues.
    let first = env.ok(&["power", "on", "--rack", "rack-01"]).await;
    assert!(first.starts_with("rack-01: task "), "{first}");
    let queued = env
        .ok(&[
            "power",
            "off",
            "--rack",
            "rack-01",
            "--queue",
            "--timeout",
            "10m",
        ])
        .await;
    assert!(queued.contains(" queued (position 1, expires "), "{queued}");
    let id = queued
        .split_whitespace()
        .find(|w| w.len() == 36 && w.contains('-'))
        .unwrap_or_else(|| panic!("no task ID in {queued:?}"))
        .to_owned();
    let text = env.ok(&["task", "cancel", &id]).await;
    assert_eq!(
        text,
        format!("task {id}: cancelled while queued (terminated; nothing ran)\n")
    );
    let reply = env.json(&["task", "cancel", &id]).await;
    assert_eq!(reply["outcome"], "already_finished", "{reply}");
    assert_eq!(reply["status"], "terminated", "{reply}");
    assert_eq!(reply["cancelling"], false, "{reply}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_every_command_quietly() {
    let env = Env::new().await;
    env.ok(&["rack", "create", "--from-json", "examples/rack-nvl72.json"])
        .await;
    env.ok(&["power", "on", "--rack", "rack-01"]).await;
    let url = env.0.nats.url();
    for args in [
        &["task", "list"][..],
        &["--json", "task", "list"],
        &["rack", "list"],
        &["rule", "list"],
        &["status"],
        &["rule", "validate", "examples/operation-rules.yaml"],
    ] {
        // The reader of the pipe is gone before the command writes.
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_flow"))
            .args(args)
            .env("FLOW_NATS_URL", &url)
            .env_remove("FLOW_CONFIG")
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run flow");
        drop(child.stdout.take());
        let out = child.wait_with_output().await.expect("flow ends");
        assert_eq!(
            out.status.code(),
            Some(141),
            "flow {args:?}: {}",
            stderr(&out)
        );
        assert_eq!(stderr(&out), "", "flow {args:?}");
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racks_are_labelled_and_tasks_target_labels_and_components() {
    let env = Env::new().await;
    env.ok(&["rack", "create", "--from-json", "examples/rack-nvl72.json"])
        .await;
    let text = env
        .ok(&["rack", "label", "rack-01", "row=B", "site=lab"])
        .await;
    assert_eq!(text, "rack-01: row=B, site=lab\n");
    let text = env.ok(&["rack", "label", "rack-01", "site-"]).await;
    assert_eq!(text, "rack-01: row=B\n");
    let bad = env.flow(&["rack", "label", "rack-01", "row"]).await;
    assert_eq!(bad.status.code(), Some(1), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("a label is key=value (or key- to remove a label)"));
    assert!(
        env.ok(&["rack", "list", "--label", "row=B"])
            .await
            .contains("row=B")
    );
    assert_eq!(
        env.ok(&["rack", "list", "--label", "row=C"]).await,
        "No racks\n"
    );

    // No worker runs: tasks stay open. A compute task by label, then a
    // switch tray by name beside it (no shared component), then the
    // compute tray again, which conflicts.
    let first = env
        .ok(&[
            "power",
            "off",
            "--label",
            "row=B",
            "--type",
            "compute",
            "--description",
            "night cycle",
        ])
        .await;
    assert!(first.starts_with("rack-01: task "), "{first}");
    let first_id = first.trim().trim_start_matches("rack-01: task ").to_owned();
    // (A task that has not completed shows with exit 1.)
    let shown = env.flow(&["task", "show", &first_id]).await;
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("\nAbout:     night cycle\n"), "{shown}");
    let beside = env
        .ok(&[
            "power",
            "off",
            "--rack",
            "rack-01",
            "--component",
            "nvswitch-01",
        ])
        .await;
    assert!(beside.starts_with("rack-01: task "), "{beside}");
    let refused = env
        .flow(&["power", "off", "--component", "rack-01/compute-01"])
        .await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains(
            "power_control on Compute conflicts with power_control on Compute on shared components"
        ),
        "{}",
        stderr(&refused)
    );
    let listed = env.json(&["task", "list"]).await;
    let descriptions: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["description"].as_str().unwrap())
        .collect();
    assert_eq!(descriptions, ["", "night cycle"], "{listed}");

    let text = env
        .ok(&[
            "rack",
            "component-status",
            "maintenance",
            "compute-02",
            "compute-03",
            "--rack",
            "rack-01",
        ])
        .await;
    assert_eq!(
        text,
        "rack-01/compute-02: maintenance\nrack-01/compute-03: maintenance\n"
    );
    let shown = env.ok(&["rack", "get", "rack-01"]).await;
    assert!(shown.contains("maintenance"), "{shown}");
    let bad = env
        .flow(&["rack", "component-status", "broken", "rack-01/compute-02"])
        .await;
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stderr(&bad).contains("\"broken\" is not a component status (ready, in-use, maintenance)")
    );
    let forced = env
        .flow(&["power", "on", "--forced", "--rack", "rack-01"])
        .await;
    assert_eq!(forced.status.code(), Some(1));
    assert!(
        stderr(&forced).contains("forced: only power_off and restart have a forced variant"),
        "{}",
        stderr(&forced)
    );
    let several = env
        .flow(&[
            "power",
            "off",
            "--rack",
            "a",
            "--rack",
            "b",
            "--component",
            "compute-01",
        ])
        .await;
    assert_eq!(several.status.code(), Some(1));
    assert!(
        stderr(&several).contains("--component with several --rack"),
        "{}",
        stderr(&several)
    );
    let none = env.flow(&["power", "off"]).await;
    assert_eq!(
        none.status.code(),
        Some(2),
        "clap refuses a command without targets"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_are_created_changed_at_a_revision_triggered_and_deleted() {
    let env = Env::new().await;
    env.ok(&["rack", "create", "--from-json", "examples/rack-nvl72.json"])
        .await;
    let shown = env
        .ok(&[
            "schedule",
            "create",
            "--name",
            "nightly restart",
            "--cron",
            "0 2 * * 1-5",
            "--timezone",
            "Europe/Berlin",
            "--window",
            "0 1 * * * for 4h",
            "power",
            "restart",
            "--rack",
            "rack-01",
            "--type",
            "compute",
        ])
        .await;
    for line in [
        "schedule nightly restart (",
        "  when:     cron 0 2 * * 1-5 (Europe/Berlin)\n",
        "  overlap:  skip\n",
        "  window:   0 1 * * * for 4h\n",
        "  task:     restart on rack-01\n",
        "  state:    active\n",
        "  revision: 1\n",
    ] {
        assert!(shown.contains(line), "{line:?} not in {shown}");
    }
    let listed = env.ok(&["schedule", "list"]).await;
    assert!(listed.contains("nightly restart"), "{listed}");
    // A flag of one submission is refused, naming it.
    let bad = env
        .flow(&[
            "schedule", "create", "--name", "x", "--every", "1h", "power", "on", "--rack",
            "rack-01", "--wait",
        ])
        .await;
    assert_eq!(bad.status.code(), Some(1), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("--wait: not for a schedule"),
        "{}",
        stderr(&bad)
    );
    let bad = env
        .flow(&[
            "schedule", "create", "--name", "x", "--cron", "0 2 * *", "power", "on", "--rack",
            "rack-01",
        ])
        .await;
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("has 4 fields"), "{}", stderr(&bad));
    // Updates at a revision; the same revision again is stale.
    let updated = env
        .ok(&[
            "schedule",
            "update",
            "nightly restart",
            "--revision",
            "1",
            "--overlap",
            "queue",
        ])
        .await;
    assert!(updated.contains("  overlap:  queue\n"), "{updated}");
    assert!(updated.contains("  revision: 2\n"), "{updated}");
    let stale = env
        .flow(&[
            "schedule",
            "update",
            "nightly restart",
            "--revision",
            "1",
            "--no-windows",
        ])
        .await;
    assert_eq!(stale.status.code(), Some(1));
    assert!(
        stderr(&stale).contains("is at revision 2, not 1"),
        "{}",
        stderr(&stale)
    );
    // Paused, triggered by hand (no worker runs: the task stays open).
    let paused = env.ok(&["schedule", "pause", "nightly restart"]).await;
    assert!(
        paused.starts_with("schedule nightly restart: paused"),
        "{paused}"
    );
    let fired = env.ok(&["schedule", "trigger", "nightly restart"]).await;
    assert!(fired.contains(" manual"), "{fired}");
    assert!(fired.contains("  rack-01: task "), "{fired}");
    let history = env.json(&["schedule", "history", "nightly restart"]).await;
    let firings = history["firings"].as_array().unwrap();
    assert_eq!(firings.len(), 1, "{history}");
    let task = firings[0]["results"][0]["task_id"].as_str().unwrap();
    // (A task that has not completed shows with exit 1.)
    let t = env.flow(&["--json", "task", "show", task]).await;
    let t: Value = serde_json::from_slice(&t.stdout).unwrap();
    assert_eq!(
        t["schedule_id"],
        env.json(&["schedule", "get", "nightly restart"]).await["id"]
    );
    env.ok(&["task", "cancel", task]).await;
    let deleted = env.ok(&["schedule", "delete", "nightly restart"]).await;
    assert!(
        deleted.ends_with("deleted (its tasks run on)\n"),
        "{deleted}"
    );
    let gone = env.flow(&["schedule", "get", "nightly restart"]).await;
    assert_eq!(gone.status.code(), Some(1));
    assert!(stderr(&gone).contains("not found"), "{}", stderr(&gone));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_created_shown_paused_cancelled_and_watched() {
    let env = Env::new().await;
    env.ok(&["rack", "create", "--from-json", "examples/rack-nvl72.json"])
        .await;
    let bad = env
        .flow(&[
            "run",
            "create",
            "--name",
            "r",
            "--equal",
            "1",
            "--max-concurrent",
            "1",
            "--gate",
            "rate=5%",
            "power",
            "restart",
            "--rack",
            "rack-01",
        ])
        .await;
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stderr(&bad).contains("--gate \"rate=5%\": use failure-rate=<1-100>% or failure-count=<n>"),
        "{}",
        stderr(&bad)
    );
    let shown = env
        .ok(&[
            "run",
            "create",
            "--name",
            "restart row",
            "--equal",
            "1",
            "--max-concurrent",
            "1",
            "--gate",
            "failure-rate=50%",
            "--order",
            "random:7",
            "power",
            "restart",
            "--rack",
            "rack-01",
        ])
        .await;
    for line in [
        "run restart row (",
        "  operation:  restart on rack-01\n",
        "  order:      random (seed 7)\n",
        "  concurrent: at most 1; waits at each phase gate\n",
        "  gate failure-rate=50% per phase: 0/1 failed (0.0 %)\n",
    ] {
        assert!(shown.contains(line), "{line:?} not in {shown}");
    }
    // No worker runs: its one target's task is submitted and stays open.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let t = env.json(&["run", "targets", "restart row"]).await;
        if t["targets"][0]["status"] == "submitted" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never submitted: {t}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let paused = env.ok(&["run", "pause", "restart row"]).await;
    assert!(paused.contains("paused (operator_paused)"), "{paused}");
    let listed = env.ok(&["run", "list"]).await;
    assert!(listed.contains("restart row"), "{listed}");
    let cancelled = env.ok(&["run", "cancel", "restart row"]).await;
    assert!(
        cancelled.contains("— cancelled, phase 1 of 1"),
        "{cancelled}"
    );
    // Watching a run that ended prints it once and exits 1 (not completed).
    let watched = env.flow(&["run", "watch", "restart row"]).await;
    assert_eq!(watched.status.code(), Some(1), "{}", stderr(&watched));
    let text = String::from_utf8_lossy(&watched.stdout);
    assert!(text.starts_with("run restart row — cancelled"), "{text}");
    assert!(text.contains("phase 1/1 ["), "{text}");
    let again = env.flow(&["run", "resume", "restart row"]).await;
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("has ended (cancelled)"),
        "{}",
        stderr(&again)
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_rules_are_created_bound_enabled_and_events_shown() {
    let env = Env::new().await;
    env.ok(&["rack", "create", "--from-json", "examples/rack-nvl72.json"])
        .await;
    let created = env
        .ok(&[
            "event-rule",
            "create",
            "--file",
            "examples/event-rule-leak.yaml",
        ])
        .await;
    assert!(
        created.starts_with("rule leak: this tray only\n"),
        "{created}"
    );
    assert!(created.contains("state:      disabled"), "{created}");
    assert!(
        created
            .contains("action power_off_tray: submit force_power_off on component (when Compute)"),
        "{created}"
    );
    let listed = env.ok(&["event-rule", "list"]).await;
    assert!(
        listed.contains("builtin:hardware.leak.detected"),
        "{listed}"
    );
    let bound = env
        .ok(&["event-rule", "bind", "leak: this tray only", "--site"])
        .await;
    assert_eq!(
        bound,
        "leak: this tray only bound for hardware.leak.detected at site (disabled: passed over until enabled)\n"
    );
    let enabled = env
        .json(&["event-rule", "enable", "leak: this tray only"])
        .await;
    assert_eq!(enabled["revision"], 2);
    // A stale update is refused (exit 1) naming the revision.
    let stale = env
        .flow(&[
            "event-rule",
            "update",
            "leak: this tray only",
            "--file",
            "examples/event-rule-leak.yaml",
            "--revision",
            "1",
        ])
        .await;
    assert_eq!(stale.status.code(), Some(1), "{}", stderr(&stale));
    assert!(stderr(&stale).contains("not 1"), "{}", stderr(&stale));
    // An event handed in through the API shows with what its rule did.
    let published = env
        .0
        .ok(
            "event.publish",
            serde_json::json!({"source": "test", "key": "1", "event_type": "hardware.leak.detected",
                "severity": "critical", "rack": "rack-01", "component": "compute-03",
                "observed_at": "2026-12-01T00:00:00Z"}),
        )
        .await;
    let id = published["id"].as_str().unwrap().to_owned();
    let shown = env.ok(&["event", "show", &id]).await;
    assert!(shown.contains("rule:     leak: this tray only"), "{shown}");
    assert!(shown.contains("targets: rack-01/compute-03\n"), "{shown}");
    // A leak locks its tray until cleared with a reason.
    assert!(
        shown.contains("locked:   rack-01/compute-03 since "),
        "{shown}"
    );
    let events = env.json(&["event", "list", "--rack", "rack-01"]).await;
    assert_eq!(events["events"][0]["id"], id.as_str());
    let listed = env.ok(&["event", "list"]).await;
    assert!(listed.contains("1 locked"), "{listed}");
    let no_reason = env.flow(&["event", "clear", &id]).await;
    assert_eq!(no_reason.status.code(), Some(2), "{}", stderr(&no_reason));
    assert!(
        stderr(&no_reason).contains("--reason"),
        "{}",
        stderr(&no_reason)
    );
    let blank = env.flow(&["event", "clear", &id, "--reason", " "]).await;
    assert_eq!(blank.status.code(), Some(1), "{}", stderr(&blank));
    assert!(
        stderr(&blank).contains("reason: required"),
        "{}",
        stderr(&blank)
    );
    let cleared = env
        .ok(&["event", "clear", &id, "--reason", "tray dried"])
        .await;
    assert!(cleared.contains("  cleared:  "), "{cleared}");
    assert!(cleared.contains("— tray dried\n"), "{cleared}");
    assert!(!cleared.contains("locked:"), "{cleared}");
    let bindings = env.ok(&["event-rule", "bindings"]).await;
    assert!(bindings.contains("leak: this tray only"), "{bindings}");
    let bad = env.flow(&["event-rule", "bind", "x"]).await;
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    let deleted = env
        .ok(&["event-rule", "delete", "leak: this tray only"])
        .await;
    assert!(
        deleted.ends_with("deleted with 1 binding(s)\n"),
        "{deleted}"
    );
    env.stop().await;
}

/// `flow --json status` with `urls` tried in order.
async fn listed_status(urls: String) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(["--json", "status"])
        .env("FLOW_NATS_URL", urls)
        .env("FLOW_NATS_SERVER_ORDER", "listed")
        .env_remove("FLOW_CONFIG")
        .output()
        .await
        .expect("run flow")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_cli_takes_every_node_and_shows_replicas_and_leaders() {
    let mut stack = Stack::builder().cluster(3).start().await;
    let urls = [stack.nats.url(), stack.peers[0].url(), stack.peers[1].url()].join(",");
    let out = listed_status(urls.clone()).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<String> = std::iter::once(&stack.nats)
        .chain(&stack.peers)
        .map(|n| n.name().to_owned())
        .collect();
    for s in v["streams"].as_array().unwrap() {
        assert_eq!(s["replicas"], 3, "{s}");
        assert_eq!(s["current_replicas"], 3, "{s}");
        assert!(
            names.iter().any(|n| s["leader"] == n.as_str()),
            "the leader is a node of ours: {s}"
        );
    }
    // The first node listed is gone: the CLI connects to the next. Until
    // the scheduler has reconnected too its API has no responder, and
    // `flow` says so (exit 2): an operator tries again.
    tokio::task::block_in_place(|| stack.nats.kill());
    let v = flow_tests::eventually(
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(200),
        || {
            let urls = urls.clone();
            async move {
                let out = listed_status(urls).await;
                if out.status.code() != Some(0) {
                    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
                    return None;
                }
                serde_json::from_slice::<Value>(&out.stdout).ok()
            }
        },
    )
    .await
    .expect("flow status through the second node");
    assert_eq!(v["streams"][0]["stream"], "FLOW_TASKS", "{v}");
    assert_eq!(v["tasks"], serde_json::json!({}), "the API answered: {v}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_audit_shows_who_changed_what_and_overrides_need_a_reason() {
    let env = Env::new().await;
    env.ok(&[
        "--actor",
        "alice",
        "rack",
        "create",
        "--from-json",
        "examples/rack-nvl72.json",
    ])
    .await;
    // An override without --reason is refused naming `reason`, and
    // recorded as refused.
    let out = env
        .flow(&[
            "--actor",
            "bob",
            "power",
            "off",
            "--rack",
            "rack-01",
            "--override-readiness",
        ])
        .await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("reason: required with override_readiness"),
        "{}",
        stderr(&out)
    );
    let all = env.json(&["audit", "--since", "1h"]).await;
    let records = all["records"].as_array().unwrap();
    let summary: Vec<(&str, &str, &str)> = records
        .iter()
        .map(|r| {
            (
                r["claimed_actor"].as_str().unwrap(),
                r["endpoint"].as_str().unwrap(),
                r["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("bob", "task.submit", "refused"),
            ("alice", "rack.create", "ok")
        ]
    );
    let bobs = env
        .json(&["audit", "--user", "bob", "--rack", "rack-01"])
        .await;
    assert_eq!(bobs["records"].as_array().unwrap().len(), 1);
    // The table names the actor, the endpoint and the rack.
    let table = env.ok(&["audit", "--user", "alice"]).await;
    assert!(
        table.contains("alice") && table.contains("rack.create"),
        "{table}"
    );
    assert!(table.contains("rack-01"), "{table}");
    let out = env.flow(&["audit", "--since", "yesterday"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("--since"), "{}", stderr(&out));
    env.stop().await;
}

/// A bundle file of two images; the switch tray's NVOS digest given.
fn bundle_yaml(nvos_digest: &str) -> String {
    format!(
        r#"name: gb200-fw
version: "2026.11"
models: [gb200-nvl72]
images:
  - component_type: nvswitch
    sub_target: nvos
    version: "2.1"
    url: http://fw.example/nvos-2.1.bin
    digest: {nvos_digest}
    size: 2097152
  - component_type: compute
    version: "1.4.0"
    url: http://fw.example/compute-1.4.0.bin
    digest: sha256:{compute}
    size: 1048576
"#,
        compute = "a".repeat(64)
    )
}

fn write_temp(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("flow-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("written");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firmware_bundles_are_published_once_never_changed_listed_shown_and_retired() {
    let env = Env::new().await;
    let nvos = format!("sha256:{}", "b".repeat(64));
    let file = write_temp("bundle.yaml", &bundle_yaml(&nvos));
    let path = file.to_str().unwrap();
    let text = env.ok(&["bundle", "publish", path]).await;
    assert!(text.starts_with("published gb200-fw 2026.11"), "{text}");
    assert!(text.contains(&nvos), "{text}");
    // The same contents again: the same bundle, not a second one.
    env.ok(&["bundle", "publish", path]).await;
    let list = env.json(&["bundle", "list"]).await;
    let bundles = list["bundles"].as_array().unwrap();
    assert_eq!(bundles.len(), 1, "{list}");
    // Images in their canonical order: compute, then the switch's NVOS.
    assert_eq!(
        bundles[0]["images"][0]["component_type"], "Compute",
        "{list}"
    );
    assert_eq!(bundles[0]["images"][1]["sub_target"], "nvos", "{list}");

    // Other contents under the same version: refused, naming the image.
    let changed = format!("sha256:{}", "c".repeat(64));
    let other = write_temp("bundle-changed.yaml", &bundle_yaml(&changed));
    let out = env
        .flow(&["bundle", "publish", other.to_str().unwrap()])
        .await;
    assert_ne!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(
        err.contains("gb200-fw 2026.11 is already published with other contents")
            && err.contains(&format!(
                "NVSwitch/nvos: digest {nvos} published, {changed} now"
            )),
        "{err}"
    );
    let shown = env.json(&["bundle", "show", "gb200-fw", "2026.11"]).await;
    assert_eq!(
        shown["images"][1]["digest"],
        nvos.as_str(),
        "unchanged: {shown}"
    );

    // A digest that is not sha256 is refused before anything is kept.
    let bad = write_temp(
        "bundle-bad.yaml",
        &bundle_yaml("sha256:xyz").replace("2026.11", "2026.12"),
    );
    let out = env
        .flow(&["bundle", "publish", bad.to_str().unwrap()])
        .await;
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("images[0] (NVSwitch/nvos).digest: \"sha256:xyz\" is not sha256:"),
        "{}",
        stderr(&out)
    );
    let out = env.flow(&["bundle", "show", "gb200-fw", "2026.12"]).await;
    assert_ne!(out.status.code(), Some(0), "nothing was kept");

    // Retired: gone from the list, kept with --retired.
    let text = env.ok(&["bundle", "retire", "gb200-fw", "2026.11"]).await;
    assert!(text.contains("retired gb200-fw 2026.11"), "{text}");
    let list = env.json(&["bundle", "list"]).await;
    assert_eq!(list["bundles"].as_array().map(Vec::len), Some(0), "{list}");
    let list = env.json(&["bundle", "list", "--retired"]).await;
    assert!(list["bundles"][0]["retired_at"].is_string(), "{list}");

    // Every publish is audited, the refusals too.
    let audit = env
        .json(&["audit", "--endpoint", "firmware_bundle.publish"])
        .await;
    let outcomes: Vec<&str> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes.len(), 4, "{audit}");
    assert_eq!(
        outcomes.iter().filter(|o| **o == "ok").count(),
        2,
        "{audit}"
    );
    env.stop().await;
}

/// The versions the simulator reports, by component: its main firmware.
fn main_versions(stack: &Stack) -> std::collections::BTreeMap<String, String> {
    stack.sim().state().racks[0]
        .components
        .iter()
        .filter(|c| c.kind != flow_rack_sim::ComponentKind::PowerShelf)
        .map(|c| {
            let member = if c.name.starts_with("compute") {
                "FW_BMC_0"
            } else {
                "FW_NVOS_0"
            };
            (c.name.clone(), c.firmware[member].clone())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_firmware_task_keeps_a_snapshot_and_a_restore_brings_the_rack_back_to_it() {
    use serde_json::json;
    let env = Env(Stack::builder()
        .simulator(flow_rack_sim::SimConfig {
            initial_power: flow_rack_sim::InitialPower::On,
            time_scale: 0.01,
            compute: 2,
            nvswitch: 1,
            powershelf: 1,
            ..flow_rack_sim::SimConfig::default()
        })
        .workers(1)
        .start()
        .await);
    let stack = &env.0;
    stack.ok("rule.create", json!({"name": "fw", "operation_type": "firmware_control", "operation": "upgrade",
        "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1,
             "main_operation": {"name": "FirmwareControl", "parameters": {"poll_interval": "100ms", "poll_timeout": "20s"}}},
            {"component_type": "nvswitch", "stage": 2,
             "main_operation": {"name": "FirmwareControl", "parameters": {"poll_interval": "100ms", "poll_timeout": "20s"}}}]}})).await;
    stack.ok("rule.create", json!({"name": "fw down", "operation_type": "firmware_control", "operation": "downgrade",
        "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1,
             "main_operation": {"name": "FirmwareControl", "parameters": {"poll_interval": "100ms", "poll_timeout": "20s"}}},
            {"component_type": "nvswitch", "stage": 2,
             "main_operation": {"name": "FirmwareControl", "parameters": {"poll_interval": "100ms", "poll_timeout": "20s"}}}]}})).await;
    let before = main_versions(stack);
    let compute_old = before["compute-01"].clone();
    assert_eq!(before["compute-02"], compute_old);
    let switch_old = before["nvswitch-01"].clone();

    // The catalog: the compute trays' present version (published earlier,
    // now retired), and a new release of both types. No bundle holds the
    // switch tray's present version.
    let image = |name: String| async move {
        let bytes = format!("firmware {name}\n").repeat(32).into_bytes();
        let size = bytes.len();
        let (url, digest) = stack.origin_file(&name, bytes).await;
        (url, digest, size)
    };
    let (url, digest, size) = image(format!("compute-{compute_old}.bin")).await;
    stack.ok("firmware_bundle.publish", json!({"name": "gb200-fw", "version": "2026.05", "images": [
        {"component_type": "Compute", "version": compute_old, "url": url, "digest": digest, "size": size}]})).await;
    stack
        .ok(
            "firmware_bundle.retire",
            json!({"name": "gb200-fw", "version": "2026.05"}),
        )
        .await;
    let (c_url, c_digest, c_size) = image("compute-26.09.bin".into()).await;
    let (s_url, s_digest, s_size) = image("nvos-26.09.bin".into()).await;
    stack.ok("firmware_bundle.publish", json!({"name": "gb200-fw", "version": "2026.09", "images": [
        {"component_type": "Compute", "version": "26.09", "url": c_url, "digest": c_digest, "size": c_size},
        {"component_type": "NVSwitch", "version": "26.09", "url": s_url, "digest": s_digest, "size": s_size}]})).await;

    // The upgrade, through the CLI: it keeps what each tray had.
    let reply = env
        .json(&[
            "firmware",
            "upgrade",
            "--rack",
            "rack-01",
            "--bundle",
            "gb200-fw@2026.09",
        ])
        .await;
    let upgrade = reply["results"][0]["task_id"].as_str().unwrap().to_owned();
    let done = stack.finish(&upgrade).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    let after = main_versions(stack);
    assert!(after.values().all(|v| v == "26.09"), "{after:?}");
    let snapshot = stack.ok("task.get", json!({"id": upgrade})).await["firmware_snapshot"].clone();
    assert_eq!(
        snapshot,
        json!([
            {"component": "compute-01", "component_type": "Compute", "version": compute_old},
            {"component": "compute-02", "component_type": "Compute", "version": compute_old},
            {"component": "nvswitch-01", "component_type": "NVSwitch", "version": switch_old},
        ]),
    );

    // The preview names what it restores and what it cannot, and changes
    // nothing.
    let out = env
        .flow(&[
            "firmware",
            "restore",
            "--snapshot",
            &upgrade,
            "--rack",
            "rack-01",
            "--plan",
        ])
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "restore: rack-01/compute-01 to {compute_old} (bundle gb200-fw 2026.05)"
        )) && err.contains(&format!(
            "left alone: rack-01/nvswitch-01 (had {switch_old}): no bundle"
        )) && err.contains(&format!("holds a NVSwitch image of version {switch_old}")),
        "{err}"
    );
    let preview = String::from_utf8_lossy(&out.stdout);
    assert!(preview.contains("would create a task"), "{preview}");
    let out = env
        .flow(&[
            "firmware",
            "restore",
            "--snapshot",
            &upgrade,
            "--rack",
            "rack-02",
            "--plan",
        ])
        .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("ran on rack-01, not rack-02"),
        "{}",
        stderr(&out)
    );
    assert_eq!(main_versions(stack), after, "a preview changes nothing");

    // Run: the compute trays go back, the switch tray is left alone.
    let out = env
        .flow(&[
            "--json",
            "firmware",
            "restore",
            "--snapshot",
            &upgrade,
            "--rack",
            "rack-01",
        ])
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    let restore = reply["results"][0]["task_id"].as_str().unwrap().to_owned();
    let done = stack.finish(&restore).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(done["operation"], "downgrade");
    let restored = main_versions(stack);
    assert_eq!(restored["compute-01"], compute_old);
    assert_eq!(restored["compute-02"], compute_old);
    assert_eq!(restored["nvswitch-01"], "26.09", "left alone");

    // A task that flashed nothing kept no snapshot.
    let power = env.json(&["power", "on", "--rack", "rack-01"]).await;
    let power = power["results"][0]["task_id"].as_str().unwrap().to_owned();
    stack.finish(&power).await;
    let out = env
        .flow(&[
            "firmware",
            "restore",
            "--snapshot",
            &power,
            "--rack",
            "rack-01",
            "--plan",
        ])
        .await;
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("kept no firmware snapshot"),
        "{}",
        stderr(&out)
    );
    env.stop().await;
}
