//! `flow admin archive …`, `flow audit verify` and `task show` of an
//! archived task, through the `flow` binary against a real service (a
//! nats-server, a fresh Postgres database, the scheduler with an archive,
//! a worker and the rack simulator).

use std::process::Output;
use std::time::Duration;

use flow_scheduler::history::{History, HistoryPolicy};
use flow_testenv::Stack;
use serde_json::{Value, json};

async fn flow(env: &Stack, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(args)
        .env("FLOW_NATS_URL", env.nats.url())
        .env_remove("FLOW_CONFIG")
        .output()
        .await
        .expect("run flow")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

async fn ok(env: &Stack, args: &[&str]) -> String {
    let out = flow(env, args).await;
    assert_eq!(out.status.code(), Some(0), "flow {args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_reads_and_verifies_the_archive_and_an_archived_task() {
    let dir = std::env::temp_dir().join(format!("flow-cli-history-{}", uuid::Uuid::new_v4()));
    let mut policy = HistoryPolicy::new(&dir);
    policy.seal_every = Duration::from_millis(200);
    let env = Stack::builder()
        .simulator(flow_rack_sim::SimConfig {
            initial_power: flow_rack_sim::InitialPower::On,
            time_scale: 0.01,
            compute: 2,
            nvswitch: 1,
            powershelf: 1,
            ..flow_rack_sim::SimConfig::default()
        })
        .workers(1)
        .history(policy)
        .start()
        .await;
    env.ok(
        "rule.create",
        json!({"name": "quick off", "operation_type": "power_control", "operation": "power_off",
               "is_default": true, "definition": {"version": "v1", "steps": [
            {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}}]}}),
    )
    .await;
    let submitted = env
        .ok(
            "task.submit",
            json!({"request_id": "off", "racks": ["rack-01"], "operation": "power_off"}),
        )
        .await;
    let task = submitted["results"][0]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(env.finish(&task).await["status"], "completed");

    // Nothing archived yet; the scheduler seals as records come.
    let listed = ok(&env, &["admin", "archive", "list"]).await;
    assert!(listed.starts_with("no segments in "), "{listed}");
    let sealed = flow_tests::eventually(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || async {
            let v: Value =
                serde_json::from_str(&ok(&env, &["--json", "audit", "verify"]).await).unwrap();
            (v["unsealed"] == 0 && v["sealed"].as_u64() >= Some(3)).then_some(v)
        },
    )
    .await
    .expect("the scheduler seals every record");
    assert_eq!(sealed["ok"], true, "{sealed:#}");

    // A pass with retention zero (the scheduler's own keeps 90 days).
    let mut zero = HistoryPolicy::new(&dir);
    zero.detail_for = Duration::ZERO;
    zero.audit_for = Duration::ZERO;
    let history = History::open(zero).unwrap();
    let report = history
        .pass(
            &env.store,
            time::OffsetDateTime::now_utc() + time::Duration::seconds(1),
        )
        .await
        .unwrap();
    assert_eq!(report.tasks, 1, "{report:?}");

    let shown = ok(&env, &["task", "show", &task]).await;
    let segment = shown
        .lines()
        .find_map(|l| l.strip_prefix("Archived:"))
        .and_then(|l| l.split("steps in segment ").nth(1))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("task show says where the steps went: {shown}"))
        .to_owned();
    assert!(
        shown.contains("Summary:   1 steps, 2 component results, 0 not done"),
        "{shown}"
    );
    let archived: Value = serde_json::from_str(
        &ok(
            &env,
            &["admin", "archive", "show", &segment, "--task", &task],
        )
        .await,
    )
    .unwrap();
    assert_eq!(
        archived["steps"][0]["results"].as_object().unwrap().len(),
        2,
        "{archived:#}"
    );

    let listed = ok(&env, &["admin", "archive", "list", "--kind", "audit"]).await;
    assert!(listed.contains("audit-"), "{listed}");
    assert!(!listed.contains(&segment), "only audit segments: {listed}");
    let verified = ok(&env, &["admin", "archive", "verify"]).await;
    assert!(
        verified.trim_end().ends_with("segments: verified"),
        "{verified}"
    );
    let chain = ok(&env, &["audit", "verify"]).await;
    assert!(chain.starts_with("audit chain verified: "), "{chain}");

    // The task segment damaged: both commands exit 1 naming it.
    let path = history.archive().data_path(&segment).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&path, bytes).unwrap();
    let out = flow(&env, &["admin", "archive", "verify"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("FAILED   {segment}: ")),
        "{}",
        text(&out)
    );
    let out = flow(&env, &["admin", "archive", "list", "--kind", "logs"]).await;
    assert_ne!(out.status.code(), Some(0));
    assert!(text(&out).contains("--kind"), "{}", text(&out));
    env.stop().await;
    std::fs::remove_dir_all(dir).unwrap();
}
