//! Bounded history against a real nats-server, a fresh Postgres database,
//! the scheduler, a worker and the rack simulator: the retention pass
//! archives a finished task's detail and removes its steps, keeping the
//! task with a summary (`task.get` answers, `archive.show` gives the steps
//! back); an open task is never touched; audit records past retention are
//! exported as a hash chain and removed, the removal itself recorded; the
//! archive and the chain verify; a damaged segment or a record changed in
//! SQL fails verification, naming it.

use std::time::Duration;

use flow_rack_sim::{InitialPower, SimConfig};
use flow_scheduler::history::{History, HistoryPolicy};
use flow_testenv::Stack;
use serde_json::{Value, json};
use time::OffsetDateTime;

fn temp_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("flow-history-{}", uuid::Uuid::new_v4()))
}

async fn steps_of(env: &Stack, task: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM task_steps WHERE task_id = $1::uuid")
        .bind(task)
        .fetch_one(env.store.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_archives_a_finished_tasks_detail_keeps_its_summary_and_the_chain_verifies() {
    let dir = temp_dir();
    // The scheduler's own pass keeps everything for 90 days: this test's
    // pass (same archive, same lock) is the one with retention zero.
    let env = Stack::builder()
        .simulator(SimConfig {
            time_scale: 0.01,
            initial_power: InitialPower::On,
            compute: 2,
            nvswitch: 1,
            powershelf: 1,
            ..SimConfig::default()
        })
        .history(HistoryPolicy::new(&dir))
        .start()
        .await;
    env.ok(
        "rule.create",
        json!({"name": "quick off", "operation_type": "power_control", "operation": "power_off",
               "is_default": true, "definition": {"version": "v1", "steps": [
            {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}},
            {"component_type": "powershelf", "stage": 2, "main_operation": {"name": "PowerControl"}}
        ]}}),
    )
    .await;
    let rack = env.sim().inventory()[0].name.clone();
    let done = env
        .ok(
            "task.submit",
            json!({"request_id": "off-1", "racks": [rack], "operation": "power_off"}),
        )
        .await["results"][0]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let finished = env.finish(&done).await;
    assert_eq!(finished["status"], "completed", "{finished:#}");
    let before = finished.clone();
    assert_eq!(before["steps"].as_array().unwrap().len(), 2);
    // An open task: waiting for its window.
    let open = env
        .ok(
            "task.submit",
            json!({"request_id": "on-later", "racks": [rack], "operation": "power_on",
                   "not_before": "2099-01-01T00:00:00Z"}),
        )
        .await["results"][0]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let open_before = env.task(&open).await;
    assert!(steps_of(&env, &open).await > 0);

    let mut policy = HistoryPolicy::new(&dir);
    policy.detail_for = Duration::ZERO;
    policy.audit_for = Duration::ZERO;
    policy.outbox_for = Duration::ZERO;
    let history = History::open(policy).unwrap();
    let report = history
        .pass(
            &env.store,
            OffsetDateTime::now_utc() + time::Duration::seconds(1),
        )
        .await
        .unwrap();
    assert!(!report.skipped, "{report:?}");
    assert_eq!(report.tasks, 1, "only the finished task: {report:?}");
    assert!(
        report.audit >= 3,
        "the rule, rack and tasks' records: {report:?}"
    );
    assert!(report.outbox > 0, "published outbox rows go: {report:?}");

    // The finished task: summary kept, steps gone, the detail archived.
    let after = env.task(&done).await;
    assert_eq!(after["steps"], json!([]), "{after:#}");
    let archived = &after["archived"];
    for field in [
        "status",
        "rack",
        "operation",
        "rule_name",
        "created_at",
        "finished_at",
        "message",
    ] {
        assert_eq!(after[field], before[field], "{field} is kept");
    }
    assert_eq!(archived["steps"], 2, "{archived:#}");
    assert_eq!(
        archived["components"], 3,
        "2 compute + 1 shelf: {archived:#}"
    );
    assert_eq!(archived["failed"], 0, "{archived:#}");
    assert_eq!(archived["submitted_by"], "development", "{archived:#}");
    assert_eq!(steps_of(&env, &done).await, 0, "its steps are removed");
    let segment = archived["segment"].as_str().unwrap().to_owned();
    assert!(segment.starts_with("tasks-"), "{segment}");
    // `task.list` still answers for it.
    let list = env.ok("task.list", json!({})).await;
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == done.as_str()),
        "{list:#}"
    );
    // The archive gives the steps back as task.get showed them.
    let shown = env
        .ok("archive.show", json!({"segment": segment, "task": done}))
        .await;
    assert_eq!(shown["task"]["steps"], before["steps"], "{shown:#}");
    assert_eq!(shown["task"]["status"], "completed");
    assert_eq!(shown["segment"]["records"], 1);

    // The open task is untouched.
    let open_after = env.task(&open).await;
    assert_eq!(open_after, open_before, "an open task is never touched");
    assert!(open_after.get("archived").is_none());

    // Each removal left an audit record, which the live chain now holds.
    let expire = env
        .ok("audit.list", json!({"endpoint": "history.expire"}))
        .await;
    let messages: Vec<&str> = expire["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["message"].as_str().unwrap())
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("archived the detail of 1 finished tasks")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("audit records") && m.contains("removed them")),
        "{messages:?}"
    );
    // A record an export does not cover still cannot be deleted.
    let e = sqlx::query("DELETE FROM audit_log")
        .execute(env.store.pool())
        .await
        .expect_err("live records stay");
    assert!(e.to_string().contains("append-only"), "{e}");

    history.seal(&env.store).await.unwrap();
    let verified = env.ok("audit.verify", json!({})).await;
    assert_eq!(verified["ok"], true, "{verified:#}");
    assert_eq!(verified["archived"], report.audit, "{verified:#}");
    assert!(verified["sealed"].as_u64().unwrap() >= 2, "{verified:#}");
    let archive = env.ok("archive.verify", json!({})).await;
    assert_eq!(archive["ok"], true, "{archive:#}");
    let listed = env.ok("archive.list", json!({})).await;
    assert_eq!(
        listed["segments"].as_array().unwrap().len(),
        report.segments.len(),
        "{listed:#}"
    );

    // A record changed behind the guard's back is named.
    let id: i64 = sqlx::query_scalar("SELECT record_id FROM audit_seals ORDER BY seq LIMIT 1")
        .fetch_one(env.store.pool())
        .await
        .unwrap();
    let mut tx = env.store.pool().begin().await.unwrap();
    sqlx::query("ALTER TABLE audit_log DISABLE TRIGGER audit_log_no_update")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("UPDATE audit_log SET actor = 'mallory' WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("ALTER TABLE audit_log ENABLE TRIGGER audit_log_no_update")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let verified = env.ok("audit.verify", json!({})).await;
    assert_eq!(verified["ok"], false, "{verified:#}");
    let problems: Vec<&str> = verified["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        problems
            .iter()
            .any(|p| p.contains(&format!("(audit record {id})")) && p.contains("was changed")),
        "{problems:?}"
    );

    // A damaged segment is named by archive.verify and audit.verify.
    let path = history.archive().data_path(&segment).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    let archive = env.ok("archive.verify", json!({})).await;
    assert_eq!(archive["ok"], false, "{archive:#}");
    let bad: Vec<&Value> = archive["segments"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| !s["problems"].as_array().unwrap().is_empty())
        .collect();
    assert_eq!(bad.len(), 1, "{archive:#}");
    assert_eq!(bad[0]["segment"], segment.as_str());

    // Names from requests never leave the archive directory.
    let e = env
        .err("archive.show", json!({"segment": "../../etc/passwd"}))
        .await;
    assert!(e.message.contains("segment"), "{e}");
    env.stop().await;
    std::fs::remove_dir_all(dir).unwrap();
}
