//! The task store against a real Postgres (a fresh database per test): a
//! task's state reads back as it was saved, saves are compare-and-set, the
//! outbox keeps its order, the rack's queue and occupancy read right, and
//! the schema's status constraints agree with the enums' one mapping.

use std::collections::BTreeMap;
use std::sync::Arc;

use flow_decisions::lifecycle::{Admission, Effect, Event, TaskPlan, TaskState, Window, apply};
use flow_decisions::plan;
use flow_protocol::api::{ResolveReply, RuleSource};
use flow_protocol::jobs::ComponentTarget;
use flow_protocol::rack::RackSpec;
use flow_protocol::{RackId, StepStatus, TaskId, TaskStatus};
use flow_rules::{ComponentType, OperationCode, RuleDefinition};
use flow_store::tasks::{NewTask, Origin};
use flow_store::{Store, StoreError};
use flow_tests::TestDb;
use serde_json::json;

struct Env {
    store: Store,
    rack: RackId,
    components: Vec<ComponentTarget>,
    _db: TestDb,
}

impl Env {
    async fn new() -> Env {
        let db = TestDb::create().await;
        let store = Store::connect(db.url(), 4).await.unwrap();
        store.migrate().await.unwrap();
        let spec: RackSpec = serde_json::from_value(json!({"name": "rack-01", "components": [
            {"type": "powershelf", "name": "powershelf-01", "bmc_url": "http://127.0.0.1:9001", "credential_ref": "sim"},
            {"type": "compute", "name": "compute-01", "bmc_url": "http://127.0.0.1:9002", "credential_ref": "sim"},
            {"type": "compute", "name": "compute-02", "bmc_url": "http://127.0.0.1:9003", "credential_ref": "sim"}
        ]}))
        .unwrap();
        let rack = store.create_rack(&spec).await.unwrap();
        let components = rack
            .components
            .iter()
            .map(|c| ComponentTarget::of(&rack.name, c))
            .collect();
        Env {
            store,
            rack: rack.id,
            components,
            _db: db,
        }
    }

    fn rule() -> RuleDefinition {
        RuleDefinition::from_value(&json!({"version": "v1", "steps": [
            {"component_type": "powershelf", "stage": 1, "main_operation": {"name": "PowerControl"}},
            {"component_type": "nvswitch", "stage": 2, "main_operation": {"name": "PowerControl"}},
            {"component_type": "compute", "stage": 3, "main_operation": {"name": "PowerControl"}}
        ]}))
        .unwrap()
    }

    fn planned(&self) -> TaskState {
        let rule = Self::rule();
        let planned = plan(&rule, &self.components).unwrap();
        let task_plan = Arc::new(TaskPlan {
            operation: "power_on".parse::<OperationCode>().unwrap(),
            rule,
            components: planned.components.clone(),
            firmware: BTreeMap::new(),
            readiness_wait_ms: None,
            window: Window::default(),
            power_domains: Vec::new(),
            emergency: false,
        });
        TaskState::planned(TaskId::new(), self.rack, task_plan, &planned)
    }

    fn new_task(request_id: &str) -> NewTask {
        NewTask {
            request_id: request_id.to_owned(),
            rack_name: "rack-01".to_owned(),
            description: format!("test task {request_id}"),
            rule: ResolveReply {
                source: RuleSource::Builtin,
                reason: "test".into(),
                rule_id: None,
                revision: None,
                name: "test rule".into(),
                operation: "power_on".parse().unwrap(),
                definition: Self::rule().to_json_value(),
            },
            origin: Origin::Request,
            firmware_snapshot: Vec::new(),
        }
    }

    /// Submits a planned task (started or queued) and commits; its state
    /// and the effects written.
    async fn submit(&self, request_id: &str, admission: Admission) -> (TaskState, Vec<Effect>) {
        let mut tx = self.store.begin_tasks().await.unwrap();
        let t = apply(&self.planned(), &Event::Submitted(admission), tx.now_ms()).unwrap();
        tx.insert(&Self::new_task(request_id), &t.state)
            .await
            .unwrap();
        tx.outbox(&t.effects).await.unwrap();
        tx.commit().await.unwrap();
        (t.state, t.effects)
    }

    async fn load(&self, id: TaskId) -> TaskState {
        let mut tx = self.store.begin_tasks().await.unwrap();
        tx.lock(id).await.unwrap().expect("the task")
    }
}

#[tokio::test]
async fn a_task_reads_back_as_it_was_saved() {
    let env = Env::new().await;
    let (state, _) = env.submit("r1", Admission::Start).await;
    assert_eq!(state.status, TaskStatus::Running);
    let loaded = env.load(state.id).await;
    assert_eq!(loaded, state);
    // The plan's component lists come back grouped as they were.
    assert_eq!(loaded.plan.components, state.plan.components);
    assert_eq!(loaded.steps[1].status, StepStatus::Skipped);

    // A transition saved reads back too: the cancel request included.
    let mut tx = env.store.begin_tasks().await.unwrap();
    let before = tx.lock(state.id).await.unwrap().unwrap();
    let t = apply(&before, &Event::CancelRequested, tx.now_ms()).unwrap();
    tx.save(&before, &t.state).await.unwrap();
    tx.commit().await.unwrap();
    let loaded = env.load(state.id).await;
    assert!(loaded.cancel_requested);
    assert_eq!(loaded, t.state);

    // The record the API shows.
    let record = env.store.task_record(state.id).await.unwrap();
    assert_eq!(record.status, TaskStatus::Running);
    assert_eq!(record.request_id, "r1");
    assert_eq!(record.current_stage, Some(1));
    assert_eq!(
        record.steps.iter().map(|s| s.status).collect::<Vec<_>>(),
        [
            StepStatus::Running,
            StepStatus::Skipped,
            StepStatus::Pending
        ]
    );
    assert_eq!(record.steps[0].generation, 1);
    assert!(record.steps[0].deadline.is_some());
    let list = env.store.list_tasks(10).await.unwrap();
    assert_eq!(list.tasks.len(), 1);
    assert_eq!(list.tasks[0].id, state.id);
    let counts = env.store.task_counts().await.unwrap();
    assert_eq!(counts.by_status.get(&TaskStatus::Running), Some(&1));
    assert!(matches!(
        env.store.task_record(TaskId::new()).await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_save_is_a_compare_and_set_on_what_was_loaded() {
    let env = Env::new().await;
    let (state, _) = env.submit("r1", Admission::Start).await;
    let mut tx = env.store.begin_tasks().await.unwrap();
    let before = tx.lock(state.id).await.unwrap().unwrap();
    let t = apply(&before, &Event::CancelRequested, tx.now_ms()).unwrap();
    tx.save(&before, &t.state).await.unwrap();
    tx.commit().await.unwrap();

    // A writer that loaded before that change cannot overwrite it: its
    // step is no longer at the generation and status it saw once another
    // transition moved it.
    let mut tx = env.store.begin_tasks().await.unwrap();
    let now = tx.lock(state.id).await.unwrap().unwrap();
    let mut moved = now.clone();
    moved.steps[0].status = StepStatus::Completed;
    tx.save(&now, &moved).await.unwrap();
    // Saving from the stale view again (same step, old status) is refused.
    let mut again = now.clone();
    again.steps[0].status = StepStatus::Failed;
    let e = tx.save(&now, &again).await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Conflict(m) if m.contains("changed underneath")),
        "{e}"
    );
    drop(tx);
    // And a task row whose status moved on is refused as well.
    let mut stale = state.clone();
    stale.status = TaskStatus::Waiting;
    let mut finished = state.clone();
    finished.status = TaskStatus::Completed;
    let mut tx = env.store.begin_tasks().await.unwrap();
    let e = tx.save(&stale, &finished).await.unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e}");
}

#[tokio::test]
async fn effects_go_to_the_outbox_in_order_and_are_published_once() {
    let env = Env::new().await;
    let (state, effects) = env.submit("r1", Admission::Start).await;
    let pending = env.store.outbox_pending(100).await.unwrap();
    let written: Vec<(&str, &str)> = pending
        .iter()
        .map(|(_, m)| (m.subject.as_str(), m.msg_id.as_str()))
        .collect();
    let task = state.id;
    // The job goes on its rack's partition (flow.jobs.<partition>.<type>).
    let Effect::PublishJob(first_job) = &effects[1] else {
        panic!("the second effect is not a job: {effects:?}");
    };
    let job_subject =
        flow_protocol::partition::Partition::of_rack(first_job.rack()).subject("powershelf");
    assert_eq!(
        written,
        [
            (
                format!("flow.events.task.{task}").as_str(),
                format!("event/{task}/stage/1").as_str()
            ),
            (job_subject.as_str(), format!("job/{task}.0.1").as_str()),
        ]
    );
    assert!(!first_job.rack().is_empty(), "{first_job:?}");
    // The job's payload is the job the lifecycle built.
    let Effect::PublishJob(job) = &effects[1] else {
        panic!("{effects:?}")
    };
    assert_eq!(pending[1].1.payload, serde_json::to_value(&**job).unwrap());
    let ids: Vec<i64> = pending.iter().map(|(id, _)| *id).collect();
    env.store.outbox_published(&ids).await.unwrap();
    assert!(env.store.outbox_pending(100).await.unwrap().is_empty());
}

#[tokio::test]
async fn claimed_jobs_are_returned_and_left_to_their_claimant_until_the_claim_ends() {
    let env = Env::new().await;
    let claim = std::time::Duration::from_millis(400);
    let mut tx = env.store.begin_tasks().await.unwrap();
    tx.claim_jobs(claim);
    let t = apply(
        &env.planned(),
        &Event::Submitted(Admission::Start),
        tx.now_ms(),
    )
    .unwrap();
    tx.insert(&Env::new_task("r1"), &t.state).await.unwrap();
    tx.outbox(&t.effects).await.unwrap();
    let claimed = tx.commit().await.unwrap();
    let task = t.state.id;
    // The job, not the event, comes back to the committer, with its row.
    assert_eq!(
        claimed
            .iter()
            .map(|(_, m)| m.msg_id.as_str())
            .collect::<Vec<_>>(),
        [format!("job/{task}.0.1").as_str()]
    );
    assert!(claimed[0].1.is_job());
    let Effect::PublishJob(job) = &t.effects[1] else {
        panic!("{:?}", t.effects)
    };
    assert_eq!(claimed[0].1.payload, serde_json::to_value(&**job).unwrap());
    // The publisher sees only the event while the claim lasts.
    let pending = env.store.outbox_pending(100).await.unwrap();
    assert_eq!(
        pending
            .iter()
            .map(|(_, m)| m.msg_id.as_str())
            .collect::<Vec<_>>(),
        [format!("event/{task}/stage/1").as_str()]
    );
    // A claimant that never publishes: once the claim ends, the publisher
    // has the job, under the same row.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let job_row = loop {
        let pending = env.store.outbox_pending(100).await.unwrap();
        if let Some((id, _)) = pending.iter().find(|(_, m)| m.is_job()) {
            break *id;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the claimed job never came back to the publisher: {pending:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(job_row, claimed[0].0);
    // A claimant that published marks it, and it is gone for good.
    env.store.outbox_published(&[job_row]).await.unwrap();
    let pending = env.store.outbox_pending(100).await.unwrap();
    assert!(pending.iter().all(|(_, m)| !m.is_job()), "{pending:?}");
}

#[tokio::test]
async fn a_racks_open_tasks_and_its_queue_read_in_fifo_order() {
    let env = Env::new().await;
    let (first, _) = env.submit("a", Admission::Start).await;
    let (w1, _) = env.submit("b", Admission::Queue { expires_ms: 1 }).await;
    let (w2, _) = env
        .submit(
            "c",
            Admission::Queue {
                expires_ms: u64::MAX / 4,
            },
        )
        .await;
    let mut tx = env.store.begin_tasks().await.unwrap();
    tx.lock_rack(env.rack).await.unwrap();
    let tasks = tx.rack_tasks(env.rack).await.unwrap();
    assert_eq!(
        tasks
            .open
            .iter()
            .map(|t| (t.id, t.status))
            .collect::<Vec<_>>(),
        [
            (first.id, TaskStatus::Running),
            (w1.id, TaskStatus::Waiting),
            (w2.id, TaskStatus::Waiting)
        ]
    );
    assert_eq!(tasks.waiting_count(), 2);
    // Each with what it occupies: its operation and components.
    assert_eq!(tasks.open[0].footprint, first.plan.footprint());
    assert!(tasks.open[0].footprint.operation.is_some());
    assert!(!tasks.open[0].footprint.components.is_empty());
    assert_eq!(tasks.open[0].expires_ms, None);
    assert_eq!(tasks.open[1].expires_ms, Some(1));
    // An expiry past what a timestamp holds is kept as the latest one (as
    // good as never), not wrapped round to 1970.
    assert_eq!(
        tasks.open[2].expires_ms,
        Some(flow_protocol::task::timestamp::LATEST_MS)
    );
    assert_eq!(tx.find_request("b", env.rack).await.unwrap(), Some(w1.id));
    assert_eq!(tx.find_request("z", env.rack).await.unwrap(), None);
    drop(tx);
    assert_eq!(env.store.racks_with_waiting().await.unwrap(), [env.rack]);
}

#[tokio::test]
async fn running_steps_past_their_deadline_are_found_with_their_generation() {
    let env = Env::new().await;
    let (state, _) = env.submit("r1", Admission::Start).await;
    assert!(env.store.overdue_steps().await.unwrap().is_empty());
    // Its deadline passes (as if its budget had run out).
    sqlx::query("UPDATE task_steps SET deadline = now() - interval '1 second' WHERE task_id = $1")
        .bind(state.id.as_uuid())
        .execute(env.store.pool())
        .await
        .unwrap();
    assert_eq!(env.store.overdue_steps().await.unwrap(), [(state.id, 0, 1)]);
    let gauges = env.store.gauges().await.unwrap();
    assert_eq!(gauges.steps_overdue, 1);
    assert_eq!(gauges.tasks.get(&TaskStatus::Running), Some(&1));
}

#[tokio::test]
async fn the_gauges_count_stuck_and_over_budget_tasks_and_leaks_not_acted_on() {
    let env = Env::new().await;
    let (state, _) = env.submit("r1", Admission::Start).await;
    let gauges = env.store.gauges().await.unwrap();
    assert!(gauges.stuck.is_empty(), "{:?}", gauges.stuck);
    assert_eq!(gauges.over_budget, 0);
    assert_eq!(gauges.runs_gate_paused, 0);
    // Nothing changed for 20 minutes, and it started longer ago than its
    // steps' budgets together.
    for sql in [
        "UPDATE tasks SET updated_at = now() - interval '20 minutes', \
         started_at = now() - interval '30 days' WHERE id = $1",
        "UPDATE task_steps SET started_at = now() - interval '20 minutes' WHERE task_id = $1",
    ] {
        sqlx::query(sql)
            .bind(state.id.as_uuid())
            .execute(env.store.pool())
            .await
            .unwrap();
    }
    let gauges = env.store.gauges().await.unwrap();
    assert_eq!(
        gauges.stuck.get(&TaskStatus::Running),
        Some(&1),
        "{gauges:?}"
    );
    assert_eq!(gauges.over_budget, 1);
    // A leak whose first action is still pending 40 s after it arrived.
    assert_eq!(gauges.leaks_unacted, 0);
    for (age, status) in [
        ("40 seconds", "pending"),
        ("10 seconds", "pending"),
        ("40 seconds", "completed"),
    ] {
        let event = uuid::Uuid::new_v4();
        sqlx::query(
            "INSERT INTO hardware_events (id, source, key, event_type, severity, rack_name, \
             component, observed_at, received_at) VALUES ($1, 'test', $1::text, \
             'hardware.leak.detected', 'critical', 'r1', 'compute-01', now(), \
             now() - $2::interval)",
        )
        .bind(event)
        .bind(age)
        .execute(env.store.pool())
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO event_executions (id, event_id, position, action, spec, status) \
             VALUES ($1, $2, 0, 'force_power_off_affected', '{}', $3)",
        )
        .bind(uuid::Uuid::new_v4())
        .bind(event)
        .bind(status)
        .execute(env.store.pool())
        .await
        .unwrap();
    }
    assert_eq!(
        env.store.gauges().await.unwrap().leaks_unacted,
        1,
        "only the old one still pending"
    );
    // A step that just started is progress.
    sqlx::query("UPDATE task_steps SET started_at = now() WHERE task_id = $1")
        .bind(state.id.as_uuid())
        .execute(env.store.pool())
        .await
        .unwrap();
    let gauges = env.store.gauges().await.unwrap();
    assert!(gauges.stuck.is_empty(), "{gauges:?}");
}

#[tokio::test]
async fn the_schema_accepts_exactly_the_statuses_the_enums_name() {
    let env = Env::new().await;
    let (state, _) = env.submit("r1", Admission::Start).await;
    let set_task = |status: String| {
        let store = env.store.clone();
        async move {
            sqlx::query("UPDATE tasks SET status = $2 WHERE id = $1")
                .bind(state.id.as_uuid())
                .bind(status)
                .execute(store.pool())
                .await
        }
    };
    for s in TaskStatus::ALL {
        set_task(s.as_str().to_owned())
            .await
            .unwrap_or_else(|e| panic!("task status {s}: {e}"));
    }
    assert!(set_task("done".into()).await.is_err());
    let set_step = |status: String| {
        let store = env.store.clone();
        async move {
            sqlx::query("UPDATE task_steps SET status = $2 WHERE task_id = $1 AND step_index = 0")
                .bind(state.id.as_uuid())
                .bind(status)
                .execute(store.pool())
                .await
        }
    };
    for s in StepStatus::ALL {
        set_step(s.as_str().to_owned())
            .await
            .unwrap_or_else(|e| panic!("step status {s}: {e}"));
    }
    assert!(set_step("paused".into()).await.is_err());
}

#[tokio::test]
async fn tasks_stored_with_a_flat_component_list_are_migrated_to_the_plans_grouping() {
    let env = Env::new().await;
    let (state, _) = env.submit("r1", Admission::Start).await;
    // As the migration found tasks stored before it: one flat list, in
    // inventory order.
    let flat: Vec<&ComponentTarget> = state.plan.components.values().flatten().collect();
    sqlx::query("UPDATE tasks SET components = $2 WHERE id = $1")
        .bind(state.id.as_uuid())
        .bind(serde_json::to_value(&flat).unwrap())
        .execute(env.store.pool())
        .await
        .unwrap();
    let migration = include_str!("../../../migrations/20261201000003_components_by_type.sql");
    sqlx::raw_sql(sqlx::AssertSqlSafe(migration))
        .execute(env.store.pool())
        .await
        .unwrap();
    assert_eq!(env.load(state.id).await, state);
    // Run again, it changes nothing.
    sqlx::raw_sql(sqlx::AssertSqlSafe(migration))
        .execute(env.store.pool())
        .await
        .unwrap();
    assert_eq!(env.load(state.id).await, state);
}

#[tokio::test]
async fn saves_written_together_are_still_a_compare_and_set() {
    let env = Env::new().await;
    let (a, _) = env.submit("r1", Admission::Start).await;
    let (b, _) = env.submit("r2", Admission::Start).await;
    // Two tasks locked together; both saves written at commit, in one
    // statement for the task rows and one for the steps.
    let mut tx = env.store.begin_tasks().await.unwrap();
    tx.lock_all(&[b.id, a.id]).await.unwrap();
    for id in [a.id, b.id] {
        let before = tx.lock(id).await.unwrap().unwrap();
        let t = apply(&before, &Event::CancelRequested, tx.now_ms()).unwrap();
        tx.save(&before, &t.state).await.unwrap();
    }
    tx.commit().await.unwrap();
    let mut tx = env.store.begin_tasks().await.unwrap();
    for id in [a.id, b.id] {
        let state = tx.lock(id).await.unwrap().unwrap();
        assert!(
            state.cancel_requested,
            "{id}: the deferred save was written"
        );
    }
    drop(tx);
    // A stale view saved in the same way is refused when written: at the
    // commit, which fails, and nothing of the transaction stays.
    let mut tx = env.store.begin_tasks().await.unwrap();
    tx.lock_all(&[a.id]).await.unwrap();
    let now = tx.lock(a.id).await.unwrap().unwrap();
    let mut stale = now.clone();
    stale.steps[0].status = StepStatus::Failed; // claims to have seen Failed
    let mut moved = now.clone();
    moved.steps[0].status = StepStatus::Completed;
    tx.save(&stale, &moved).await.unwrap();
    let e = tx.commit().await.unwrap_err();
    assert!(
        matches!(&e, StoreError::Conflict(m) if m.contains("changed underneath") && m.contains(&a.id.to_string())),
        "{e}"
    );
    let record = env.store.task_record(a.id).await.unwrap();
    assert_ne!(record.steps[0].status, StepStatus::Completed);
}

#[tokio::test]
async fn step_timings_are_read_together_in_the_order_asked() {
    let env = Env::new().await;
    let (state, _) = env.submit("r1", Admission::Start).await;
    // Step 0 (stage 1, the only step of its stage) finishes 1.5 s after it
    // started.
    let mut tx = env.store.begin_tasks().await.unwrap();
    let before = tx.lock(state.id).await.unwrap().unwrap();
    let mut done = before.clone();
    let started = done.steps[0]
        .started_ms
        .expect("a running step has started");
    done.steps[0].status = StepStatus::Completed;
    done.steps[0].finished_ms = Some(started + 1_500);
    tx.save(&before, &done).await.unwrap();
    tx.commit().await.unwrap();

    let timings = env
        .store
        .step_timings(&[(state.id, 2), (TaskId::new(), 0), (state.id, 0)])
        .await
        .unwrap();
    assert_eq!(timings.len(), 3);
    // Asked first: the compute step, not started, its stage not over.
    let compute = timings[0].as_ref().expect("step 2 exists");
    assert_eq!(
        (compute.stage, compute.component_type, compute.status),
        (3, ComponentType::Compute, StepStatus::Pending)
    );
    assert_eq!(compute.stage_finished, None);
    // A step of no task: nothing.
    assert_eq!(timings[1], None);
    // The finished shelf step: its length, and its stage closed by it.
    let shelf = timings[2].as_ref().expect("step 0 exists");
    assert_eq!(shelf.rack, "rack-01");
    assert_eq!(
        (shelf.stage, shelf.component_type, shelf.status),
        (1, ComponentType::PowerShelf, StepStatus::Completed)
    );
    let seconds = shelf.seconds.expect("started and finished");
    assert!((seconds - 1.5).abs() < 0.01, "{seconds}");
    let (stage_status, stage_seconds) = shelf.stage_finished.expect("its stage is over");
    assert_eq!(stage_status, flow_protocol::StageStatus::Completed);
    assert!((stage_seconds - 1.5).abs() < 0.01, "{stage_seconds}");
    assert!(env.store.step_timings(&[]).await.unwrap().is_empty());
}
