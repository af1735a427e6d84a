//! A database restored from a backup, against a real nats-server, a fresh
//! Postgres database (`pg_dump` / `pg_restore`), the scheduler, a worker
//! and the rack simulator: the backup is taken while a power-on runs; the
//! task goes on after it; the scheduler is killed and the database
//! destroyed and restored mid-task; a scheduler started with `--restored`
//! sends the backup's running steps again in a new epoch, the worker
//! resumes each from its checkpoint, and the task completes with every
//! component powered on by exactly one command (the simulator's record).
//! And the guard that makes a job sent twice safe: two deliveries of one
//! job at once, and only one of them commands.

use std::time::Duration;

use flow_rack_sim::{CommandKind, InitialPower, SimConfig};
use flow_testenv::Stack;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(20);

/// Shelves, then switches, then compute after a `sleep`, each verified: a
/// sleep long enough that the restore lands while compute's job is alive.
fn rule(sleep: &str) -> Value {
    let verify = json!({"name": "VerifyPowerStatus", "timeout": "30s", "poll_interval": "1s",
                        "parameters": {"expected_status": "on"}});
    json!({"version": "v1", "steps": [
        {"component_type": "powershelf", "stage": 1, "main_operation": {"name": "PowerControl"},
         "post_operation": [verify]},
        {"component_type": "nvswitch", "stage": 2, "main_operation": {"name": "PowerControl"},
         "post_operation": [verify]},
        {"component_type": "compute", "stage": 3,
         "pre_operation": [{"name": "Sleep", "parameters": {"duration": sleep}}],
         "main_operation": {"name": "PowerControl"}, "post_operation": [verify]}
    ]})
}

fn small_rack() -> SimConfig {
    SimConfig {
        time_scale: 0.01,
        initial_power: InitialPower::Off,
        compute: 3,
        nvswitch: 1,
        powershelf: 1,
        ..SimConfig::default()
    }
}

/// Power commands (`Reset`) the simulator accepted, per component.
fn commands(env: &Stack) -> Vec<(String, usize)> {
    env.sim().state().racks[0]
        .components
        .iter()
        .map(|c| (c.name.clone(), c.command_count(CommandKind::Reset)))
        .collect()
}

fn step_status(task: &Value, component_type: &str) -> String {
    task["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["component_type"] == component_type)
        .and_then(|s| s["status"].as_str())
        .unwrap_or_default()
        .to_owned()
}

async fn submit_power_on(env: &Stack, request: &str) -> String {
    let rack = env.sim().inventory()[0].name.clone();
    env.ok(
        "task.submit",
        json!({"request_id": request, "racks": [rack], "operation": "power_on"}),
    )
    .await["results"][0]["task_id"]
        .as_str()
        .expect("a task")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_restored_mid_task_finishes_it_with_every_component_commanded_once() {
    let mut env = Stack::builder().simulator(small_rack()).start().await;
    env.ok(
        "rule.create",
        json!({"name": "on, slow compute", "operation_type": "power_control",
               "operation": "power_on", "is_default": true, "definition": rule("4s")}),
    )
    .await;
    // A schedule that fires hourly: after a restore it is held for review.
    let rack = env.sim().inventory()[0].name.clone();
    env.ok(
        "schedule.create",
        json!({"name": "hourly off", "spec": {"kind": "interval", "every": "1h"},
               "task": {"racks": [rack], "operation": "power_off"}}),
    )
    .await;
    let task = submit_power_on(&env, "on-1").await;

    // The backup, taken as the task starts: it records stage 1 running
    // (its job perhaps not yet published) and the rest pending.
    let backup = std::env::temp_dir().join(format!("flow-restore-{}.dump", uuid::Uuid::new_v4()));
    env.db.backup(&backup).await;
    let backed_up = env.task(&task).await;
    assert_eq!(backed_up["status"], "running", "{backed_up:#}");

    // The task goes on past the backup: stage 3 runs (compute sleeping,
    // its job alive on the worker). Then the database is lost.
    env.until_task(&task, "compute's step started", WAIT, |t| {
        step_status(t, "Compute") == "running"
    })
    .await;
    env.kill_schedulers();
    env.db.destroy_and_restore(&backup).await;
    let _ = std::fs::remove_file(&backup);

    // The restored database knows only the backup's state.
    let restored: (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'running'), count(*) FILTER (WHERE status = 'pending') \
         FROM task_steps WHERE task_id = $1::uuid",
    )
    .bind(&task)
    .fetch_one(env.store.pool())
    .await
    .expect("the restored steps");
    assert_eq!(
        restored,
        (1, 2),
        "the backup's stage 1 running, 2 and 3 pending"
    );

    env.start_restored_scheduler().await;
    let done = env.finish(&task).await;
    assert_eq!(done["status"], "completed", "{done:#}");

    // The simulator's record: every component on, each by one command.
    let state = env.sim().state();
    for c in &state.racks[0].components {
        assert_eq!(
            serde_json::to_value(c.power_state).unwrap(),
            "On",
            "{} is on",
            c.name
        );
    }
    for (name, n) in commands(&env) {
        assert_eq!(n, 1, "{name} commanded once, not {n} times");
    }

    // The restore is on record: its epoch, what it sent, audited.
    let (epoch, tasks, steps): (i64, i32, i32) =
        sqlx::query_as("SELECT epoch, tasks, steps FROM restores")
            .fetch_one(env.store.pool())
            .await
            .expect("one restore");
    assert!(epoch > 1_700_000_000, "an epoch from the clock: {epoch}");
    assert_eq!((tasks, steps), (1, 1), "the one running step sent again");
    let audit = env
        .ok(
            "audit.list",
            json!({"endpoint": flow_protocol::restore::RESTORE_ENDPOINT}),
        )
        .await;
    let records = audit["records"].as_array().expect("records");
    assert_eq!(records.len(), 1, "{audit:#}");
    assert_eq!(records[0]["actor"], "flow-scheduler", "{audit:#}");
    assert_eq!(
        records[0]["request"]["paused_schedules"],
        json!(["hourly off"]),
        "{audit:#}"
    );
    // The schedule waits for an operator: paused, nothing due.
    let schedule = env
        .ok("schedule.get", json!({"schedule": "hourly off"}))
        .await;
    assert_eq!(schedule["enabled"], false, "{schedule:#}");
    env.stop().await;
}

/// A stack whose default restart rule restarts the compute trays (after
/// `sleep`, when given), its trays on, and the restart task submitted.
async fn restart_task(workers: usize, sleep: Option<&str>) -> (Stack, String) {
    let env = Stack::builder()
        .simulator(SimConfig {
            initial_power: InitialPower::On,
            ..small_rack()
        })
        .workers(workers)
        .start()
        .await;
    // A restart: a second one, sent once the first is over, would be
    // accepted by the tray and restart it twice.
    let mut step = json!({"component_type": "compute", "stage": 1,
        "main_operation": {"name": "PowerControl"},
        "post_operation": [{"name": "VerifyPowerStatus", "timeout": "30s", "poll_interval": "1s",
                            "parameters": {"expected_status": "on"}}]});
    if let Some(sleep) = sleep {
        step["pre_operation"] = json!([{"name": "Sleep", "parameters": {"duration": sleep}}]);
    }
    env.ok(
        "rule.create",
        json!({"name": "compute restart", "operation_type": "power_control",
               "operation": "restart", "is_default": true,
               "definition": {"version": "v1", "steps": [step]}}),
    )
    .await;
    let rack = env.sim().inventory()[0].name.clone();
    let task = env
        .ok(
            "task.submit",
            json!({"request_id": "restart-twice", "racks": [rack], "operation": "restart"}),
        )
        .await["results"][0]["task_id"]
        .as_str()
        .expect("a task")
        .to_owned();
    (env, task)
}

/// Publishes a second copy of the one job in `FLOW_JOBS` under another
/// message ID, as a restore would send it again.
async fn copy_the_job(env: &Stack) {
    flow_tests::eventually(WAIT, POLL, || async {
        (env.stream_messages("FLOW_JOBS").await == 1).then_some(())
    })
    .await
    .expect("the job is in the stream");
    let mut stream = env.js.get_stream("FLOW_JOBS").await.expect("FLOW_JOBS");
    let seq = stream.info().await.expect("its info").state.first_sequence;
    let first = stream.get_raw_message(seq).await.expect("the job");
    let copy_id = format!(
        "{}@e7",
        first
            .headers
            .get(async_nats::header::NATS_MESSAGE_ID)
            .expect("the job's message ID")
            .as_str()
    );
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(async_nats::header::NATS_MESSAGE_ID, copy_id.as_str());
    env.js
        .publish_with_headers(first.subject.clone(), headers, first.payload.clone())
        .await
        .expect("the copy is sent")
        .await
        .expect("and stored");
    assert_eq!(env.stream_messages("FLOW_JOBS").await, 2);
}

/// The task completed and each compute tray was restarted once.
async fn restarted_once(env: &Stack, task: &str) {
    let done = env.finish(task).await;
    assert_eq!(done["status"], "completed", "{done:#}");
    let compute: Vec<(String, usize)> = commands(env)
        .into_iter()
        .filter(|(name, _)| name.starts_with("compute"))
        .collect();
    assert_eq!(compute.len(), 3);
    for (name, n) in compute {
        assert_eq!(n, 1, "{name} commanded once, not {n} times");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_deliveries_of_one_job_at_once_command_each_component_once() {
    // No worker yet: the job waits in the stream, where a second copy of it
    // joins it; then one worker takes both at once.
    let (mut env, task) = restart_task(0, None).await;
    copy_the_job(&env).await;
    env.start_worker().await;
    restarted_once(&env, &task).await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_copy_that_arrives_while_the_first_delivery_waits_commands_nothing_twice() {
    // The first delivery sleeps 3 s before its commands, its checkpoint
    // saved; the copy arrives then, reads that checkpoint and waits for the
    // same moment: both go on from the same state at about the same time.
    // (When they wake within one millisecond they write the same bytes:
    // `services/worker/src/stored.rs` tests that case.)
    let (env, task) = restart_task(1, Some("3s")).await;
    let key = format!("job.{task}.0.1");
    let bucket = env
        .js
        .get_key_value(flow_protocol::jobs::BUCKET_JOB_STATE)
        .await
        .expect("the job-state bucket");
    flow_tests::eventually(WAIT, POLL, || async {
        bucket.get(&key).await.ok().flatten().map(|_| ())
    })
    .await
    .expect("the first delivery saved its checkpoint at its sleep");
    copy_the_job(&env).await;
    restarted_once(&env, &task).await;
    env.stop().await;
}
