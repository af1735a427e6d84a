//! Tasks end to end: a real nats-server, a fresh Postgres database, the
//! scheduler, an in-process worker and the rack simulator over HTTP.

use std::time::{Duration, Instant};

use flow_protocol::api::decode_reply;
use flow_rack_sim::{InitialPower, SimConfig};
use flow_testenv::Stack;
use serde_json::{Value, json};

/// The whole stack with a small rack (4 compute, 2 switch, 2 shelves) at
/// 1 % of real time, one worker, and the test's helpers.
struct Env(Stack);

impl std::ops::Deref for Env {
    type Target = Stack;
    fn deref(&self) -> &Stack {
        &self.0
    }
}

impl std::ops::DerefMut for Env {
    fn deref_mut(&mut self) -> &mut Stack {
        &mut self.0
    }
}

impl Env {
    async fn new(initial_power: InitialPower) -> Env {
        Self::with_ack_wait(initial_power, flow_scheduler::JOB_ACK_WAIT).await
    }

    async fn with_ack_wait(initial_power: InitialPower, ack_wait: Duration) -> Env {
        Self::with(initial_power, ack_wait, 0.01).await
    }

    /// The rack's physics at `time_scale` of real time.
    async fn scaled(initial_power: InitialPower, time_scale: f64) -> Env {
        Self::with(initial_power, flow_scheduler::JOB_ACK_WAIT, time_scale).await
    }

    async fn with(initial_power: InitialPower, ack_wait: Duration, time_scale: f64) -> Env {
        Env(Stack::builder()
            .job_ack_wait(ack_wait)
            .simulator(SimConfig {
                time_scale,
                initial_power,
                compute: 4,
                nvswitch: 2,
                powershelf: 2,
                ..SimConfig::default()
            })
            .start()
            .await)
    }

    /// Kills the worker as a crash would: its future is dropped mid-await,
    /// nothing is checkpointed or acknowledged on the way out.
    async fn kill_worker(&mut self) {
        self.kill_workers().await;
    }

    /// Commands the simulator accepted per component.
    fn commands(&self) -> Vec<(String, usize)> {
        let v = serde_json::to_value(self.sim().state()).unwrap();
        v["racks"][0]["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_owned(),
                    c["commands"].as_array().map_or(0, Vec::len),
                )
            })
            .collect()
    }

    /// The values of the commands the simulator accepted from `component`
    /// (the `ResetType`s), in order.
    fn command_values(&self, component: &str) -> Vec<String> {
        self.sim()
            .state()
            .component("rack-01", component)
            .unwrap_or_else(|| panic!("no {component}"))
            .commands
            .iter()
            .map(|c| c.value.clone())
            .collect()
    }

    /// Submits and returns the task's ID (the submission must be accepted).
    async fn submit_task(&self, request_id: &str, operation: &str, extra: Value) -> String {
        let outcome = self.submit(request_id, operation, extra).await;
        outcome["task_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{request_id} was not accepted: {outcome}"))
            .to_owned()
    }

    /// Installs a fault in the simulator through its admin API.
    async fn fault(&self, spec: Value) {
        reqwest::Client::new()
            .post(format!("{}/admin/v1/faults", self.sim().admin_url()))
            .json(&spec)
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap();
    }

    async fn submit(&self, request_id: &str, operation: &str, extra: Value) -> Value {
        let mut body =
            json!({"request_id": request_id, "racks": ["rack-01"], "operation": operation});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        self.ok("task.submit", body).await["results"][0].clone()
    }

    /// Waits (bounded) until the task's first step is running.
    async fn until_first_step_runs(&self, task: &str) {
        self.until_task(
            task,
            "the first step never ran",
            Duration::from_secs(20),
            |t| t["steps"][0]["status"] == "running",
        )
        .await;
    }

    async fn power(&self) -> Vec<(String, String)> {
        let state = self.sim().state();
        let v = serde_json::to_value(&state).unwrap();
        v["racks"][0]["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_owned(),
                    c["power_state"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    }

    async fn stop(self) {
        self.0.stop().await;
    }
}

fn fast_rule(expected: &str) -> Value {
    let verify = json!({"name": "VerifyPowerStatus", "timeout": "20s", "poll_interval": "50ms",
                        "parameters": {"expected_status": expected}});
    let (first, last) = if expected == "on" {
        ("powershelf", "compute")
    } else {
        ("compute", "powershelf")
    };
    json!({"version": "v1", "steps": [
        {"component_type": first, "stage": 1, "main_operation": {"name": "PowerControl"}, "post_operation": [verify]},
        {"component_type": "nvswitch", "stage": 2, "max_parallel": 1, "main_operation": {"name": "PowerControl"}, "post_operation": [verify]},
        {"component_type": last, "stage": 3, "max_parallel": 2,
         "pre_operation": [{"name": "Sleep", "parameters": {"duration": "1500ms"}}],
         "main_operation": {"name": "PowerControl"}, "post_operation": [verify]},
        {"component_type": "cdu", "stage": 3, "main_operation": {"name": "PowerControl"}}
    ]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn power_on_then_off_run_stage_by_stage_through_jetstream() {
    let env = Env::new(InitialPower::Off).await;
    for (code, expected) in [("power_on", "on"), ("power_off", "off")] {
        env.ok(
            "rule.create",
            json!({"name": code, "operation_type": "power_control", "operation": code,
                                     "definition": fast_rule(expected), "is_default": true}),
        )
        .await;
    }
    // Slow power commands so that parallel ones overlap at the simulator.
    env.fault(json!({"target": "rack-01/*", "kind": {"latency": {"ms": 100}}}))
        .await;
    let mut events = env.client.subscribe("flow.events.task.>").await.unwrap();
    let mut progress = env.client.subscribe("flow.progress.task.>").await.unwrap();
    let outcome = env.submit("req-on", "power_on", json!({})).await;
    let task = outcome["task_id"]
        .as_str()
        .expect("task created")
        .to_owned();
    // The same request again is recognised, not run twice.
    let again = env.submit("req-on", "power_on", json!({})).await;
    assert_eq!(
        (again["task_id"].as_str(), again["duplicate"].as_bool()),
        (Some(task.as_str()), Some(true))
    );
    // A different request for the busy rack is refused with the reason.
    let busy = env.submit("req-other", "power_off", json!({})).await;
    assert!(
        busy["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already has a conflicting task"),
        "{busy}"
    );

    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    assert_eq!(t["rule_source"], "default");
    let steps = t["steps"].as_array().unwrap();
    let summary: Vec<(i64, &str, &str)> = steps
        .iter()
        .map(|s| {
            (
                s["stage"].as_i64().unwrap(),
                s["component_type"].as_str().unwrap(),
                s["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (1, "PowerShelf", "completed"),
            (2, "NVSwitch", "completed"),
            (3, "Compute", "completed"),
            (3, "CDU", "skipped")
        ]
    );
    // Stage order: every step of stage n finished before stage n+1 started.
    let time = |s: &Value, k: &str| s[k].as_str().unwrap().to_owned();
    assert!(time(&steps[0], "finished_at") <= time(&steps[1], "started_at"));
    assert!(time(&steps[1], "finished_at") <= time(&steps[2], "started_at"));
    assert_eq!(steps[2]["results"]["compute-01"]["result"], "On");
    assert!(
        env.power().await.iter().all(|(_, p)| p == "On"),
        "{:?}",
        env.power().await
    );
    // Transactional events on FLOW_EVENTS, in order, ending with the
    // outcome; none is live progress (that has its own subject, on no
    // stream).
    let mut kinds = Vec::new();
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), futures_next(&mut events))
            .await
            .expect("events");
        let e: Value = serde_json::from_slice(&msg.payload).unwrap();
        assert_eq!(e["task_id"], task.as_str());
        let detail = match e["stage"].as_i64() {
            Some(stage) => stage.to_string(),
            None => e["status"].as_str().unwrap_or_default().to_owned(),
        };
        let done = e["kind"] == "task_finished";
        assert_ne!(e["kind"], "step_progress", "progress on the event subject");
        kinds.push(format!("{}:{detail}", e["kind"].as_str().unwrap()));
        if done {
            break;
        }
    }
    assert_eq!(
        kinds,
        [
            "stage_started:1",
            "step_finished:1",
            "stage_started:2",
            "step_finished:2",
            "stage_started:3",
            "step_finished:3",
            "task_finished:completed"
        ]
    );
    // Live progress from the workers, on its own subject.
    let mut steps_reported = std::collections::BTreeSet::new();
    while let Ok(Some(msg)) = tokio::time::timeout(
        Duration::from_millis(200),
        futures::StreamExt::next(&mut progress),
    )
    .await
    {
        let e: Value = serde_json::from_slice(&msg.payload).unwrap();
        assert_eq!(e["kind"], "step_progress", "{e}");
        assert_eq!(e["task_id"], task.as_str());
        steps_reported.insert(e["step_index"].as_u64().unwrap());
    }
    assert_eq!(
        steps_reported.len(),
        3,
        "each step reported progress at least once: {steps_reported:?}"
    );

    // max_parallel as the simulator saw it: compute 2 at a time, switches one.
    let state = serde_json::to_value(env.sim().state()).unwrap();
    let peaks = &state["racks"][0]["peak_concurrent_resets"];
    assert_eq!(
        (peaks["Compute"].as_u64(), peaks["NVSwitch"].as_u64()),
        (Some(2), Some(1)),
        "{peaks}"
    );

    let off = env.submit("req-off", "power_off", json!({})).await;
    let t = env.finish(off["task_id"].as_str().unwrap()).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    assert!(
        env.power().await.iter().all(|(_, p)| p == "Off"),
        "{:?}",
        env.power().await
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_step_fails_the_task_and_no_later_stage_starts() {
    let env = Env::new(InitialPower::On).await;
    // Shelves cannot restart: stage 1 fails permanently; stage 2 never runs.
    env.ok("rule.create", json!({"name": "bad", "operation_type": "power_control", "operation": "restart",
        "is_default": true, "definition": {"steps": [
            {"component_type": "powershelf", "stage": 1, "main_operation": {"name": "PowerControl"}},
            {"component_type": "compute", "stage": 2, "main_operation": {"name": "PowerControl"}}]}})).await;
    let task = env.submit_task("req-restart", "restart", json!({})).await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "failed");
    assert!(
        t["message"]
            .as_str()
            .unwrap()
            .contains("power shelves cannot restart"),
        "{t:#}"
    );
    assert_eq!(t["steps"][1]["status"], "cancelled");
    assert!(
        t["steps"][1]["started_at"].is_null(),
        "stage 2 never started"
    );

    // Nothing to do is an error, not a success.
    let e = env
        .call_json("task.submit", json!({"request_id": "r2", "racks": ["rack-01"], "operation": "upgrade", "component_types": ["PowerShelf"]}))
        .await
        .unwrap();
    assert!(
        e["results"][0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nothing to do"),
        "{e}"
    );
    let e = env
        .call_json(
            "task.submit",
            json!({"request_id": "r3", "racks": ["no-such-rack"], "operation": "power_on"}),
        )
        .await
        .unwrap();
    assert_eq!(e["results"][0]["error"]["code"], "not_found");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancellation_terminates_a_running_task_at_an_action_boundary() {
    let env = Env::new(InitialPower::On).await;
    slow_power_off(&env, "30s").await;
    let task = env.submit_task("req-slow", "power_off", json!({})).await;
    cancel_during_the_sleep(&env, &task).await;
    env.stop().await;
}

/// Cancels a [`slow_power_off`] task once its step runs (its Sleep is a
/// durable wait) and checks the task is terminated and the power command
/// after the Sleep was never sent (the worker saw the cancel mark).
async fn cancel_during_the_sleep(env: &Env, task: &str) {
    env.until_first_step_runs(task).await;
    let reply = env.ok("task.cancel", json!({"id": task})).await;
    assert_eq!(reply["cancelling"], true);
    let t = env.finish(task).await;
    assert_eq!(t["status"], "terminated", "{t:#}");
    assert!(env.power().await.iter().all(|(_, p)| p == "On"));
}

/// A slow power-off as the default: a Sleep of `sleep` (e.g. `30s`), then
/// the command.
async fn slow_power_off(env: &Env, sleep: &str) {
    env.ok(
        "rule.create",
        json!({"name": "slow", "operation_type": "power_control", "operation": "power_off",
        "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1,
             "pre_operation": [{"name": "Sleep", "parameters": {"duration": sleep}}],
             "main_operation": {"name": "PowerControl"}}]}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_after_a_nats_restart_still_stops_the_worker() {
    let mut env = Env::new(InitialPower::On).await;
    slow_power_off(&env, "30s").await;
    // The server dies and comes back on the same store: every client
    // reconnects, and the worker must still be watching for cancel marks.
    tokio::task::block_in_place(|| env.nats.restart());
    let deadline = Instant::now() + Duration::from_secs(20);
    let submit =
        json!({"request_id": "req-after-restart", "racks": ["rack-01"], "operation": "power_off"});
    let task = loop {
        // Until the scheduler's API answers again (its client reconnects).
        let reply = env
            .api
            .request_raw(
                "task.submit",
                serde_json::to_vec(&submit).unwrap(),
                Duration::from_secs(2),
                None,
            )
            .await;
        if let Ok(reply) = reply {
            let reply: Value = decode_reply(&reply).expect("submitted");
            break reply["results"][0]["task_id"].as_str().unwrap().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "the API never came back: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    cancel_during_the_sleep(&env, &task).await;
    env.stop().await;
}

/// How long the NATS outage of the deadline test lasts.
const OUTAGE: Duration = Duration::from_secs(8);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_step_failed_past_its_deadline_while_nats_is_down_is_still_stopped() {
    let mut env = Env::new(InitialPower::On).await;
    slow_power_off(&env, "60s").await;
    let task = env.submit_task("req-overdue", "power_off", json!({})).await;
    env.until_first_step_runs(&task).await;
    // NATS goes away; meanwhile the step passes its deadline (moved into
    // the past, as if its budget had run out) and the scheduler's sweeper
    // fails it and its task. The cancel mark cannot reach NATS now.
    tokio::task::block_in_place(|| env.nats.kill());
    let db = sqlx::PgPool::connect(env.db.url()).await.unwrap();
    sqlx::query(
        "UPDATE task_steps SET deadline = now() - interval '1 second' WHERE task_id = $1::uuid",
    )
    .bind(&task)
    .execute(&db)
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status: String = sqlx::query_scalar("SELECT status FROM tasks WHERE id = $1::uuid")
            .bind(&task)
            .fetch_one(&db)
            .await
            .unwrap();
        if status == "failed" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sweeper never failed the task: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The outage itself lasts longer than a JetStream request may wait
    // (5 s): a publish buffered by the client while disconnected has failed
    // by the time the server is back.
    tokio::time::sleep(OUTAGE).await;
    tokio::task::block_in_place(|| env.nats.start_again());
    // The worker acknowledges the job only when it stops (the mark reached
    // it) or after its 60 s Sleep and the power commands: wait for the
    // jobs stream to hold nothing (a work queue: a job acknowledged is
    // gone), well before the Sleep could end.
    let js = async_nats::jetstream::new(env.client.clone());
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let idle = match js.get_stream(flow_protocol::jobs::STREAM_JOBS).await {
            Ok(mut stream) => match stream.info().await {
                Ok(info) => info.state.messages == 0,
                Err(_) => false,
            },
            Err(_) => false,
        };
        if idle {
            break;
        }
        if Instant::now() >= deadline {
            let outbox: Vec<(String, Option<String>)> =
                sqlx::query_as("SELECT subject, published_at::text FROM outbox ORDER BY id")
                    .fetch_all(&db)
                    .await
                    .unwrap();
            let info = js
                .get_stream(flow_protocol::jobs::STREAM_JOBS)
                .await
                .unwrap()
                .info()
                .await
                .unwrap()
                .clone();
            panic!(
                "the worker never stopped the failed task's step; outbox {outbox:?}; jobs stream {info:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        env.commands().iter().all(|(_, n)| *n == 0),
        "commands were sent for a failed task: {:?}",
        env.commands()
    );
    assert!(env.power().await.iter().all(|(_, p)| p == "On"));
    env.stop().await;
}

/// Points a stream at `subjects` (publishes on others fail: no stream
/// takes them) and returns the subjects it had.
async fn set_subjects(
    client: &async_nats::Client,
    stream: &str,
    subjects: &[String],
) -> Vec<String> {
    let js = async_nats::jetstream::new(client.clone());
    let mut config = js
        .get_stream(stream)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .config
        .clone();
    let before = std::mem::replace(&mut config.subjects, subjects.to_vec());
    js.update_stream(config).await.unwrap();
    before
}

/// The job-state bucket's stream.
fn job_state_stream() -> String {
    format!("KV_{}", flow_protocol::jobs::BUCKET_JOB_STATE)
}

/// Only cancel marks can be written to the job-state bucket.
fn cancel_marks_only() -> Vec<String> {
    vec![format!(
        "$KV.{}.cancel.>",
        flow_protocol::jobs::BUCKET_JOB_STATE
    )]
}

/// Makes the simulator's compute trays accept power commands and stay on,
/// so a repeated step would send its command again (its state reads On).
async fn trays_stay_on(env: &Env) {
    env.fault(json!({"target": "rack-01/compute-*", "kind": {"stuck_power": {"state": "On"}}}))
        .await;
}

/// Waits (bounded) until every compute tray was commanded.
async fn until_trays_commanded(env: &Env) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !env
        .commands()
        .iter()
        .filter(|(n, _)| n.starts_with("compute"))
        .all(|(_, c)| *c > 0)
    {
        assert!(
            Instant::now() < deadline,
            "the commands were never sent: {:?}",
            env.commands()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every compute tray commanded exactly once, nothing else commanded.
fn assert_trays_commanded_once(env: &Env) {
    for (name, commands) in env.commands() {
        let expected = usize::from(name.starts_with("compute"));
        assert_eq!(commands, expected, "{name} was commanded {commands} times");
    }
}

/// How long the checkpoint store (or the results stream) refuse writes in
/// the tests below: longer than the waits and retry delays that would
/// otherwise hand a job back.
const WRITES_REFUSED: Duration = Duration::from_secs(5);

/// A power-off rule whose one compute step is `step`, on trays that accept
/// the command and stay on.
async fn refused_rule(env: &Env, step: Value) {
    env.ok(
        "rule.create",
        json!({"name": "refused", "operation_type": "power_control", "operation": "power_off",
               "is_default": true, "definition": {"steps": [step]}}),
    )
    .await;
    trays_stay_on(env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_command_whose_record_cannot_be_saved_is_not_sent_until_it_is() {
    // The step's checkpoint cannot be written from before its job starts:
    // a command sent then could not be known to have been sent, so none
    // is; once writes return, each tray is commanded once.
    let env = Env::new(InitialPower::On).await;
    refused_rule(
        &env,
        json!({"component_type": "compute", "stage": 1,
               "main_operation": {"name": "PowerControl"},
               "post_operation": [{"name": "Sleep", "parameters": {"duration": "3s"}}]}),
    )
    .await;
    let kv = set_subjects(&env.client, &job_state_stream(), &cancel_marks_only()).await;
    let task = env.submit_task("req-refused", "power_off", json!({})).await;
    env.until_first_step_runs(&task).await;
    // Held for as long as writes are refused: no tray is commanded.
    let refused_until = Instant::now() + WRITES_REFUSED;
    while Instant::now() < refused_until {
        let sent: usize = env.commands().iter().map(|(_, n)| n).sum();
        assert_eq!(sent, 0, "a command went unrecorded: {:?}", env.commands());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    set_subjects(&env.client, &job_state_stream(), &kv).await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    assert_trays_commanded_once(&env);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_result_that_cannot_be_published_does_not_repeat_commands() {
    // The commands go (their record is kept) and the step ends, but its
    // result cannot be published: handed back, its next delivery resumes
    // from the record and publishes without commanding again.
    let env = Env::new(InitialPower::On).await;
    refused_rule(
        &env,
        json!({"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}}),
    )
    .await;
    let refused = ["flow.refused.results".to_owned()];
    let results = set_subjects(&env.client, flow_protocol::jobs::STREAM_RESULTS, &refused).await;
    let task = env.submit_task("req-refused", "power_off", json!({})).await;
    until_trays_commanded(&env).await;
    tokio::time::sleep(WRITES_REFUSED).await;
    set_subjects(&env.client, flow_protocol::jobs::STREAM_RESULTS, &results).await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    assert_trays_commanded_once(&env);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_on_the_stream_are_deduplicated_answered_and_malformed_ones_parked() {
    let env = Env::new(InitialPower::On).await;
    let js = async_nats::jetstream::new(env.client.clone());
    let mut outcomes = env.client.subscribe("flow.events.submit.>").await.unwrap();
    // Malformed first: parked with a log line, the consumer goes on.
    js.publish("flow.tasks.submit", "{not json".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let request = json!({"request_id": "stream-1", "racks": ["rack-01"], "operation": "power_on",
                         "component_types": ["PowerShelf"]});
    let body = serde_json::to_vec(&request).unwrap();
    for _ in 0..3 {
        let ack = js
            .send_publish(
                "flow.tasks.submit",
                async_nats::jetstream::message::PublishMessage::build()
                    .payload(body.clone().into())
                    .message_id("stream-1"),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        let _ = ack.duplicate;
    }
    let outcome = tokio::time::timeout(Duration::from_secs(15), futures_next(&mut outcomes))
        .await
        .expect("an outcome for the request");
    // A reply envelope, as on flow.api.
    let reply: Value = flow_protocol::api::decode_reply(&outcome.payload).expect("a result");
    let task = reply["results"][0]["task_id"]
        .as_str()
        .expect("task")
        .to_owned();
    assert_eq!(env.finish(&task).await["status"], "completed");
    let tasks = env.ok("task.list", json!({})).await;
    assert_eq!(
        tasks.as_array().unwrap().len(),
        1,
        "three publishes, one task: {tasks}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_streamed_request_that_meets_a_database_outage_is_admitted_when_it_returns() {
    let env = Env::new(InitialPower::Off).await;
    let mut outcomes = env.client.subscribe("flow.events.submit.>").await.unwrap();
    env.db.refuse_connections().await;
    let request = json!({"request_id": "outage-1", "racks": ["rack-01"], "operation": "power_on",
                         "component_types": ["PowerShelf"]});
    env.js
        .publish(
            "flow.tasks.submit",
            serde_json::to_vec(&request).unwrap().into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    // Tried while the database is down, and not acknowledged: JetStream
    // delivers it again.
    let mut consumer = env
        .js
        .get_stream("FLOW_TASKS")
        .await
        .unwrap()
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>("flow-submit")
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let info = consumer.info().await.unwrap();
        if info.num_redelivered > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never delivered again: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.db.allow_connections().await;
    let outcome = tokio::time::timeout(Duration::from_secs(60), futures_next(&mut outcomes))
        .await
        .expect("an outcome once the database is back");
    // The first answer is the task, not a refusal for the outage.
    let reply: Value = flow_protocol::api::decode_reply(&outcome.payload).expect("a result");
    let task = reply["results"][0]["task_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a task, not {reply}"))
        .to_owned();
    assert_eq!(env.finish(&task).await["status"], "completed");
    env.stop().await;
}

async fn futures_next(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    use futures::StreamExt;
    sub.next().await.expect("subscription open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sleep_survives_a_worker_kill_and_a_killed_call_is_repeated_once_at_most() {
    let mut env = Env::with_ack_wait(InitialPower::On, Duration::from_secs(3)).await;
    env.ok("rule.create", json!({"name": "sleepy off", "operation_type": "power_control", "operation": "power_off",
        "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1,
             "pre_operation": [{"name": "Sleep", "parameters": {"duration": "4s"}}],
             "main_operation": {"name": "PowerControl", "parameters": {"operation": "force_power_off"}}}]}})).await;
    let started = Instant::now();
    let task = env
        .submit_task(
            "req-kill",
            "power_off",
            json!({"component_types": ["Compute"]}),
        )
        .await;
    // Let the worker take the job and checkpoint its Sleep, then kill it.
    env.until_first_step_runs(&task).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    env.kill_worker().await;
    env.start_worker().await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "the Sleep was not cut short"
    );
    for (name, n) in env.commands() {
        if name.starts_with("compute") {
            assert_eq!(n, 1, "{name} commanded {n} times");
        }
    }

    // Now kill a worker in the middle of a slow power call.
    env.ok("rule.create", json!({"name": "slow on", "operation_type": "power_control", "operation": "power_on",
        "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}}]}})).await;
    env.fault(json!({"target": "rack-01/compute-*", "kind": {"latency": {"ms": 1500}}}))
        .await;
    let task = env
        .submit_task(
            "req-kill-2",
            "power_on",
            json!({"component_types": ["Compute"]}),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    env.kill_worker().await;
    env.start_worker().await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    for (name, n) in env.commands() {
        if name.starts_with("compute") {
            // One off before, then the on, once: the worker was killed
            // while reading the state (each request takes 1.5 s), before
            // the command was recorded or sent, so the redelivery sends it.
            assert_eq!(n, 2, "{name} commanded {n} times in all");
        }
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scheduler_restart_mid_task_loses_nothing() {
    let mut env = Env::new(InitialPower::Off).await;
    for (code, expected) in [("power_on", "on")] {
        env.ok(
            "rule.create",
            json!({"name": code, "operation_type": "power_control", "operation": code,
                                     "definition": fast_rule(expected), "is_default": true}),
        )
        .await;
    }
    let task = env
        .submit_task("req-restart-sched", "power_on", json!({}))
        .await;
    // Stop the scheduler while stage 3's Sleep runs, then start a new one on
    // the same database and NATS server.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let t = env.ok("task.get", json!({"id": task})).await;
        if t["current_stage"] == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "stage 3 never started: {t}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    env.stop_schedulers().await;
    env.start_scheduler().await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    assert!(env.power().await.iter().all(|(_, p)| p == "On"));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn firmware_upgrade_and_decommission_tasks_on_the_simulator() {
    let env = Env::new(InitialPower::On).await;
    env.ok("rule.create", json!({"name": "fw", "operation_type": "firmware_control", "operation": "upgrade",
        "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1, "max_parallel": 2,
             "main_operation": {"name": "FirmwareControl", "parameters": {"poll_interval": "100ms", "poll_timeout": "20s"}}},
            {"component_type": "nvswitch", "stage": 2,
             "main_operation": {"name": "FirmwareControl", "parameters": {"poll_interval": "100ms", "poll_timeout": "20s"}}}]}})).await;
    let images = env
        .served_images(json!({"firmware": {
            "Compute": {"image_uri": "http://images.local/bmc-26.04.bin", "version": "26.04"},
            "NVSwitch": {"image_uri": "http://images.local/nvos-25.05.1.bin", "version": "25.05.1"}}}))
        .await;
    let task = env.submit_task("req-fw", "upgrade", images).await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    assert_eq!(
        t["steps"][0]["results"]["compute-01"]["result"],
        "installed 26.04"
    );
    let state = serde_json::to_value(env.sim().state()).unwrap();
    let comps = state["racks"][0]["components"].as_array().unwrap();
    let compute = comps.iter().find(|c| c["name"] == "compute-03").unwrap();
    assert_eq!(compute["firmware"]["FW_BMC_0"], "26.04");

    env.ok("rule.create", json!({"name": "decom", "operation_type": "decommission", "operation": "decommission",
        "is_default": true, "definition": {"steps": [
            {"component_type": "powershelf", "stage": 1, "main_operation": {"name": "DecommissionControl"},
             "post_operation": [{"name": "WaitDecommissioned", "timeout": "20s", "poll_interval": "50ms"}]}]}})).await;
    let task = env
        .submit_task("req-decom", "decommission", json!({}))
        .await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    assert_eq!(
        t["steps"][0]["results"]["powershelf-02"]["result"],
        "Decommissioned"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_rack_refuses_or_queues_fifo_with_expiry() {
    let env = Env::new(InitialPower::On).await;
    env.ok(
        "rule.create",
        json!({"name": "slow status", "operation_type": "power_control", "operation": "warm_reset",
        "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1,
             "pre_operation": [{"name": "Sleep", "parameters": {"duration": "2s"}}],
             "main_operation": {"name": "GetPowerStatus", "timeout": "5s"}}]}}),
    )
    .await;
    let first = env.submit("q-1", "warm_reset", json!({})).await;
    let first = first["task_id"].as_str().unwrap().to_owned();
    let refused = env.submit("q-2", "warm_reset", json!({})).await;
    assert_eq!(refused["error"]["code"], "conflict", "{refused}");
    let queue = |secs: u64| json!({"conflict": {"strategy": "queue", "timeout_seconds": secs}});
    let second = env.submit("q-3", "warm_reset", queue(600)).await;
    assert_eq!(second["queued"], true, "{second}");
    let second = second["task_id"].as_str().unwrap().to_owned();
    let third = env.submit("q-4", "warm_reset", queue(1)).await;
    let third = third["task_id"].as_str().unwrap().to_owned();
    assert_eq!(
        env.ok("task.get", json!({"id": second})).await["status"],
        "waiting"
    );

    assert_eq!(env.finish(&first).await["status"], "completed");
    // FIFO: the second runs; the third's second of patience ran out first.
    let t = env.finish(&third).await;
    assert_eq!(t["status"], "failed");
    assert!(
        t["message"]
            .as_str()
            .unwrap()
            .contains("expired while queued"),
        "{t}"
    );
    assert_eq!(env.finish(&second).await["status"], "completed");
    // A queued task can be cancelled before it starts.
    let a = env.submit_task("q-5", "warm_reset", json!({})).await;
    let b = env.submit_task("q-6", "warm_reset", queue(600)).await;
    let reply = env.ok("task.cancel", json!({"id": b})).await;
    assert_eq!(reply["cancelling"], false, "{reply}");
    // The reply says what happened: it was cancelled while queued.
    assert_eq!(reply["outcome"], "cancelled_while_queued", "{reply}");
    assert_eq!(reply["status"], "terminated", "{reply}");
    // Again: it has finished now.
    let again = env.ok("task.cancel", json!({"id": b})).await;
    assert_eq!(again["outcome"], "already_finished", "{again}");
    assert_eq!(
        env.ok("task.get", json!({"id": b})).await["status"],
        "terminated"
    );
    assert_eq!(env.finish(&a).await["status"], "completed");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_schedulers_never_advance_a_task_twice() {
    let mut env = Env::new(InitialPower::Off).await;
    // A second scheduler on the same database and NATS server: both consume
    // results, both sweep the outbox and deadlines.
    env.start_scheduler().await;
    env.ok(
        "rule.create",
        json!({"name": "on", "operation_type": "power_control", "operation": "power_on",
                                 "definition": fast_rule("on"), "is_default": true}),
    )
    .await;
    let task = env.submit_task("two-sched", "power_on", json!({})).await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    for step in t["steps"].as_array().unwrap() {
        if step["status"] != "skipped" {
            // One generation: each step was queued once, not by both.
            assert_eq!(step["generation"], 1, "{step}");
            assert!(!step["results"].as_object().unwrap().is_empty(), "{step}");
        }
    }
    // Every component was commanded exactly once (the task is printed with
    // a failure: which result its step recorded for the component).
    for (name, n) in env.commands() {
        assert_eq!(n, 1, "{name} commanded {n} times; the task: {t:#}");
    }
    env.stop_schedulers().await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_seeds_forceful_power_on_and_graceful_power_off_rules_run_as_written() {
    let env = Env::new(InitialPower::Off).await;
    let fixture = |name: &str| -> Value {
        let path = format!(
            "{}/../../shared/rules/tests/fixtures/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    env.ok("rule.create", json!({"name": "seed forceful on", "operation_type": "power_control",
        "operation": "force_power_on", "is_default": true, "definition": fixture("seed-forceful-power-on.json")})).await;
    env.ok("rule.create", json!({"name": "seed graceful off", "operation_type": "power_control",
        "operation": "power_off", "is_default": true, "definition": fixture("seed-graceful-power-off.json")})).await;
    let on = env
        .submit_task("seed-on", "force_power_on", json!({}))
        .await;
    let t = env.finish(&on).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    let stages: Vec<i64> = t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_i64().unwrap())
        .collect();
    assert_eq!(
        stages,
        [1, 2, 3, 4, 4, 4],
        "stage 4 verifies every type at once"
    );
    assert!(
        env.power().await.iter().all(|(_, p)| p == "On"),
        "{:?}",
        env.power().await
    );
    let off = env.submit_task("seed-off", "power_off", json!({})).await;
    let t = env.finish(&off).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    assert!(
        env.power().await.iter().all(|(_, p)| p == "Off"),
        "{:?}",
        env.power().await
    );
    // The shelves' 30 s settle ran before they were cut.
    let shelves = &t["steps"][2];
    assert_eq!(shelves["component_type"], "PowerShelf");
    let at = |k: &str| {
        time::OffsetDateTime::parse(
            shelves[k].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
    };
    assert!(
        at("finished_at") - at("started_at") >= time::Duration::seconds(30),
        "{shelves}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopping_worker_hands_its_job_back_and_another_finishes_it() {
    let mut env = Env::new(InitialPower::On).await;
    env.ok("rule.create", json!({"name": "sleepy status", "operation_type": "power_control", "operation": "warm_reset",
        "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1,
             "pre_operation": [{"name": "Sleep", "parameters": {"duration": "3s"}}],
             "main_operation": {"name": "GetPowerStatus", "timeout": "5s"}}]}})).await;
    let task = env
        .submit_task("graceful-stop", "warm_reset", json!({}))
        .await;
    env.until_first_step_runs(&task).await;
    // SIGTERM's path: stop pulling, checkpoint, hand back. The worker must
    // return promptly, not after the Sleep.
    let stopped_at = Instant::now();
    assert!(env.stop_workers().await, "the worker stops within 10 s");
    assert!(stopped_at.elapsed() < Duration::from_secs(10));
    env.start_worker().await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    // Handed back, not stranded until the 30 s ack wait ran out.
    assert!(
        stopped_at.elapsed() < Duration::from_secs(20),
        "{:?}",
        stopped_at.elapsed()
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upgrade_records_the_version_and_one_to_an_older_version_needs_allowing() {
    let env = Env::new(InitialPower::On).await;
    env.ok("rule.create", json!({"name": "fw", "operation_type": "firmware_control", "operation": "upgrade",
        "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1,
             "main_operation": {"name": "FirmwareControl", "parameters": {"poll_interval": "100ms", "poll_timeout": "20s"}}}]}})).await;
    env.ok("rule.create", json!({"name": "fw down", "operation_type": "firmware_control", "operation": "downgrade",
        "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1,
             "main_operation": {"name": "FirmwareControl", "parameters": {"poll_interval": "100ms", "poll_timeout": "20s"}}}]}})).await;
    let image = |v: &str| json!({"Compute": {"image_uri": format!("http://images.local/bmc-{v}.bin"), "version": v}});
    let inventory = || async {
        let rack = env.ok("rack.get", json!({"rack": "rack-01"})).await;
        rack["components"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["type"] == "Compute")
            .map(|c| c["firmware_version"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let task = env
        .submit_task(
            "up",
            "upgrade",
            env.served_images(json!({"component_types": ["Compute"], "firmware": image("26.02")}))
                .await,
        )
        .await;
    assert_eq!(env.finish(&task).await["status"], "completed");
    assert_eq!(
        inventory().await,
        ["26.02"; 4],
        "the inventory records what was installed"
    );

    // An "upgrade" to an older version is refused, naming each tray.
    let refused = env
        .submit(
            "older",
            "upgrade",
            env.served_images(json!({"component_types": ["Compute"], "firmware": image("25.10")}))
                .await,
        )
        .await;
    assert_eq!(
        refused["error"]["message"], "the images would move components' firmware the wrong way",
        "{refused}"
    );
    let details = refused["error"]["details"].as_array().unwrap();
    assert_eq!(details.len(), 4, "{refused}");
    assert_eq!(
        details[0],
        "compute-01: has 26.02; upgrade to 25.10 would move it the wrong way (allow with allow_version_change, --allow-version-change)"
    );
    // A downgrade to a newer version likewise.
    let refused = env
        .submit(
            "newer",
            "downgrade",
            env.served_images(json!({"component_types": ["Compute"], "firmware": image("26.04")}))
                .await,
        )
        .await;
    assert!(
        refused["error"]["details"][0]
            .as_str()
            .unwrap()
            .contains("downgrade to 26.04"),
        "{refused}"
    );
    // Allowed, it runs.
    let task = env
        .submit_task(
            "allowed",
            "upgrade",
            env.served_images(json!({"component_types": ["Compute"], "firmware": image("25.10"), "allow_version_change": true,
                   "reason": "roll back the bad 26.02 build"})).await,
        )
        .await;
    assert_eq!(env.finish(&task).await["status"], "completed");
    assert_eq!(inventory().await, ["25.10"; 4]);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sub_targets_flash_the_named_firmware_and_only_what_the_type_has() {
    let env = Env::new(InitialPower::On).await;
    env.ok("rule.create", json!({"name": "fw", "operation_type": "firmware_control", "operation": "upgrade",
        "is_default": true, "definition": {"steps": [
            {"component_type": "nvswitch", "stage": 1,
             "main_operation": {"name": "FirmwareControl", "parameters": {"poll_interval": "100ms", "poll_timeout": "20s"}}}]}})).await;
    let image = |v: &str, subs: Value| json!({"NVSwitch": {"image_uri": format!("http://images.local/switch-bmc-{v}.bin"), "version": v, "sub_targets": subs}});
    let firmware = |name: &str| {
        env.sim()
            .state()
            .component("rack-01", name)
            .unwrap()
            .firmware
            .clone()
    };
    let before = firmware("nvswitch-01");
    let rack = env.ok("rack.get", json!({"rack": "rack-01"})).await;
    let recorded = |rack: &Value| {
        rack["components"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "nvswitch-01")
            .unwrap()["firmware_version"]
            .clone()
    };
    let main_before = recorded(&rack);
    let task = env
        .submit_task(
            "bmc",
            "upgrade",
            env.served_images(
                json!({"component_types": ["NVSwitch"], "firmware": image("99.1", json!(["bmc"]))}),
            )
            .await,
        )
        .await;
    assert_eq!(env.finish(&task).await["status"], "completed");
    let after = firmware("nvswitch-01");
    assert_eq!(after["FW_BMC_0"], "99.1", "{after:?}");
    assert_eq!(
        after["FW_NVOS_0"], before["FW_NVOS_0"],
        "NVOS is left alone"
    );
    // The inventory keeps the main firmware's version.
    let rack = env.ok("rack.get", json!({"rack": "rack-01"})).await;
    assert_eq!(recorded(&rack), main_before);

    // A sub-target the type does not have is refused before anything runs.
    let refused = env
        .submit(
            "psu",
            "upgrade",
            env.served_images(
                json!({"component_types": ["NVSwitch"], "firmware": image("99.2", json!(["psu"]))}),
            )
            .await,
        )
        .await;
    assert_eq!(
        refused["error"]["details"],
        json!(["NVSwitch: psu is not a sub-target of NVSwitch (it has: bmc, cpld, bios, nvos)"]),
        "{refused}"
    );
    // One the type has but this BMC does not: the task fails naming it.
    let task = env
        .submit_task(
            "cpld",
            "upgrade",
            env.served_images(json!({"component_types": ["NVSwitch"], "firmware": image("99.3", json!(["cpld"]))})).await,
        )
        .await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "failed", "{t:#}");
    assert!(
        t.to_string()
            .contains("has no firmware inventory member \\\"FW_CPLD_0\\\""),
        "{t:#}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_firmware_task_that_could_not_finish_is_refused_before_anything_is_flashed() {
    let env = Env::new(InitialPower::On).await;
    env.ok("rule.create", json!({"name": "fw", "operation_type": "firmware_control", "operation": "upgrade",
        "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1,
             "main_operation": {"name": "FirmwareControl", "parameters": {"poll_interval": "100ms", "poll_timeout": "20s"}}},
            {"component_type": "nvswitch", "stage": 2,
             "main_operation": {"name": "FirmwareControl", "parameters": {"poll_interval": "100ms", "poll_timeout": "20s"}}}]}})).await;
    let compute = json!({"image_uri": "http://images.local/bmc-26.02.bin", "version": "26.02"});
    // The rule flashes switch trays too, and no switch image was named: the
    // compute trays would be flashed and the task fail at stage 2.
    let refused = env
        .submit(
            "fw-missing",
            "upgrade",
            env.served_images(json!({"firmware": {"Compute": compute}}))
                .await,
        )
        .await;
    assert_eq!(refused["error"]["code"], "invalid", "{refused}");
    let details = refused["error"]["details"].to_string();
    assert!(
        details.contains("NVSwitch: the rule flashes NVSwitch but the task names no image for it"),
        "{refused}"
    );
    // An image for a type the rule does not flash, and one without a version.
    let refused = env
        .submit(
            "fw-extra",
            "upgrade",
            env.served_images(
                json!({"component_types": ["Compute"], "firmware": {"Compute": compute,
                "PowerShelf": {"image_uri": "http://images.local/pmc.bin", "version": "1.2"}}}),
            )
            .await,
        )
        .await;
    assert!(
        refused["error"]["details"]
            .to_string()
            .contains("PowerShelf: an image was given but the task flashes no PowerShelf"),
        "{refused}"
    );
    let refused = env
        .submit(
            "fw-unversioned",
            "upgrade",
            json!({"component_types": ["Compute"], "firmware": {"Compute": {"image_uri": "http://images.local/bmc.bin"}}}),
        )
        .await;
    assert!(
        refused["error"]["details"]
            .to_string()
            .contains("has no version"),
        "{refused}"
    );
    // Nothing was created, nothing flashed.
    assert_eq!(env.ok("task.list", json!({})).await, json!([]));
    let versions = || {
        let state = serde_json::to_value(env.sim().state()).unwrap();
        state["racks"][0]["components"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["name"].as_str().unwrap().starts_with("compute"))
            .map(|c| c["firmware"]["FW_BMC_0"].as_str().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
    };
    assert!(versions().iter().all(|v| v != "26.02"), "{:?}", versions());
    // Narrowed to the type it has an image for, the task runs.
    let task = env
        .submit_task(
            "fw-compute",
            "upgrade",
            env.served_images(
                json!({"component_types": ["Compute"], "firmware": {"Compute": compute}}),
            )
            .await,
        )
        .await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    assert_eq!(t["steps"][1]["status"], "skipped", "{t:#}");
    assert!(versions().iter().all(|v| v == "26.02"), "{:?}", versions());
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_components_record_keeps_its_attempts_errors_and_call_times_per_action() {
    let env = Env::new(InitialPower::On).await;
    env.ok("rule.create", json!({"name": "off with retries", "operation_type": "power_control",
        "operation": "power_off", "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1,
             "retry": {"max_attempts": 3, "initial_interval": "100ms", "backoff_coefficient": 2.0},
             "main_operation": {"name": "PowerControl"},
             "post_operation": [{"name": "VerifyPowerStatus", "timeout": "20s", "poll_interval": "50ms",
                                 "parameters": {"expected_status": "off"}}]}]}})).await;
    // compute-01's BMC answers its next two requests with 503: the state
    // is read before the command, so two failed reads, a third that goes
    // through, then the command.
    env.fault(
        json!({"target": "rack-01/compute-01", "kind": {"fail_next": {"count": 2, "status": 503}}}),
    )
    .await;
    let task = env
        .submit_task(
            "retried",
            "power_off",
            json!({"component_types": ["Compute"]}),
        )
        .await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    let c = &t["steps"][0]["results"]["compute-01"];
    let control = &c["actions"][0];
    assert_eq!(control["action"], "main_operation (PowerControl)", "{c:#}");
    assert_eq!(control["attempts"], 4, "{c:#}");
    assert_eq!(control["at_ms"].as_array().unwrap().len(), 4, "{c:#}");
    assert!(
        control["error"]
            .as_str()
            .unwrap()
            .starts_with("transient: compute-01:"),
        "{c:#}"
    );
    let verify = &c["actions"][1];
    assert_eq!(
        verify["action"], "post_operation[0] (VerifyPowerStatus)",
        "{c:#}"
    );
    let polls = verify["attempts"].as_u64().unwrap();
    assert!(polls >= 1, "{c:#}");
    // Every call of the step counted, under its own name: four power
    // calls and the polls are calls, not attempts.
    assert_eq!(c["calls"].as_u64().unwrap(), 4 + polls, "{c:#}");
    assert!(c.get("attempts").is_none(), "{c:#}");
    assert!(c["error"].as_str().unwrap().contains("503"), "{c:#}");
    // A tray that needed no retry says so: its read and its command.
    assert_eq!(
        t["steps"][0]["results"]["compute-02"]["actions"][0]["attempts"],
        2
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiting_task_that_cannot_start_does_not_hold_up_the_one_before_it() {
    let env = Env::new(InitialPower::On).await;
    env.ok(
        "rule.create",
        json!({"name": "slow status", "operation_type": "power_control",
        "operation": "warm_reset", "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1,
             "pre_operation": [{"name": "Sleep", "parameters": {"duration": "1500ms"}}],
             "main_operation": {"name": "GetPowerStatus", "timeout": "5s"}}]}}),
    )
    .await;
    let first = env.submit_task("h-1", "warm_reset", json!({})).await;
    let queue = json!({"conflict": {"strategy": "queue", "timeout_seconds": 600}});
    let second = env.submit_task("h-2", "warm_reset", queue).await;
    // The waiting task's row becomes unreadable (its rule snapshot names a
    // step type that does not exist), as a bad migration or a hand edit
    // might leave it.
    let db = sqlx::PgPool::connect(env.db.url()).await.unwrap();
    sqlx::query("UPDATE tasks SET rule_snapshot = '{\"version\": \"v1\", \"steps\": [{\"component_type\": \"gpu\"}]}' WHERE id = $1::uuid")
        .bind(&second)
        .execute(&db)
        .await
        .unwrap();
    // The first task's last result hands the rack on in its own
    // transaction: it still applies, and the task completes.
    let t = env.finish(&first).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    // The unreadable task is left waiting (it expires in its time) and
    // every other endpoint goes on.
    let list = env.ok("task.list", json!({})).await;
    let waiting = list
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == second.as_str())
        .unwrap();
    assert_eq!(waiting["status"], "waiting", "{list:#}");
    env.stop().await;
}

/// The times of a component's polls in its step's verification.
fn verify_polls(t: &Value, component: &str) -> Vec<u64> {
    action_times(t, component, "post_operation[0] (VerifyPowerStatus)")
}

/// The times of a component's attempts at one action of its step.
fn action_times(t: &Value, component: &str, action: &str) -> Vec<u64> {
    let actions = t["steps"][0]["results"][component]["actions"]
        .as_array()
        .unwrap_or_else(|| panic!("{component}: no actions in {t:#}"));
    let found = actions
        .iter()
        .find(|a| a["action"] == action)
        .unwrap_or_else(|| panic!("{component}: no {action} in {t:#}"));
    found["at_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_verification_polls_when_the_bmc_announces_the_change_and_on_its_interval_without_events()
{
    let env = Env::new(InitialPower::On).await;
    // Polls 10 s apart; the trays' transitions take 50–100 ms here.
    let interval_ms = 10_000;
    for (operation, expected) in [("power_off", "off"), ("power_on", "on")] {
        env.ok("rule.create", json!({"name": format!("{operation} by events"),
            "operation_type": "power_control", "operation": operation, "is_default": true,
            "definition": {"steps": [
                {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"},
                 "post_operation": [{"name": "VerifyPowerStatus", "timeout": "60s",
                                     "poll_interval": "10s",
                                     "parameters": {"expected_status": expected}}]}]}}))
            .await;
    }
    let trays = ["compute-01", "compute-02", "compute-03", "compute-04"];

    // With the BMCs' event streams: a tray's verification ends on the read
    // its transition's event wakes, well inside the interval after its
    // command. Without an event it could not: the worker listens before
    // sending, so a tray quiet since its command is first read one
    // interval later (shared/executor/src/wake.rs, `Listening`), and one
    // read at once would find it mid-transition and wait the interval for
    // the next.
    let task = env
        .submit_task(
            "off-events",
            "power_off",
            json!({"component_types": ["Compute"]}),
        )
        .await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    for tray in trays {
        let polls = verify_polls(&t, tray);
        let sent = action_times(&t, tray, "main_operation (PowerControl)")
            .last()
            .copied()
            .unwrap();
        let took = polls.last().unwrap() - sent;
        assert!(
            took < interval_ms,
            "{tray}: verified {took} ms after its command (polls {polls:?}): no event woke it"
        );
    }

    // The BMCs refuse event streams (the open ones end): the verification
    // falls back to its interval, and still completes.
    env.fault(json!({"target": "rack-01/*", "kind": {"events_down": {}}}))
        .await;
    let task = env
        .submit_task(
            "on-polled",
            "power_on",
            json!({"component_types": ["Compute"]}),
        )
        .await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    for tray in trays {
        let polls = verify_polls(&t, tray);
        assert!(polls.len() >= 2, "{tray}: {polls:?}");
        for pair in polls.windows(2) {
            assert!(
                pair[1] - pair[0] >= interval_ms - 100,
                "{tray}: polls {polls:?} came before the interval without events"
            );
        }
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_the_bmcs_drop_mid_task_are_replaced_without_a_failed_call() {
    // Session-only BMCs (HTTP Basic refused), so a lost session cannot be
    // papered over with Basic; updates take 3 s, polled every 100 ms.
    let env = Env(Stack::builder()
        .simulator(SimConfig {
            time_scale: 0.01,
            initial_power: InitialPower::On,
            compute: 4,
            nvswitch: 2,
            powershelf: 2,
            timings: flow_rack_sim::Timings {
                firmware_update: Duration::from_secs(300),
                ..flow_rack_sim::Timings::default()
            },
            profiles: vec!["session-only".parse().unwrap()],
            ..SimConfig::default()
        })
        .start()
        .await);
    env.ok("rule.create", json!({"name": "fw", "operation_type": "firmware_control", "operation": "upgrade",
        "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1,
             "retry": {"max_attempts": 1, "initial_interval": "1s", "backoff_coefficient": 1.0},
             "main_operation": {"name": "FirmwareControl", "parameters": {"poll_interval": "100ms", "poll_timeout": "60s"}}}]}})).await;
    let images = env
        .served_images(json!({"firmware": {
            "Compute": {"image_uri": "http://images.local/bmc-26.04.bin", "version": "26.04"}}}))
        .await;
    let task = env.submit_task("fw-expiry", "upgrade", images).await;
    // Every tray's update is under way (its BMC took the SimpleUpdate)…
    let updating = |s: &Value| {
        s["racks"][0]["components"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["type"] == "Compute")
            .all(|c| {
                c["commands"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(|x| x["kind"] == "update"))
            })
    };
    flow_tests::eventually(
        Duration::from_secs(30),
        Duration::from_millis(20),
        || async {
            let s = serde_json::to_value(env.sim().state()).unwrap();
            updating(&s).then_some(())
        },
    )
    .await
    .expect("the updates never started");
    let before = env.sim().state().logins_total;
    // …when every BMC drops its sessions (a session timeout or a BMC reboot).
    let expired: Value = reqwest::Client::new()
        .post(format!(
            "{}/admin/v1/sessions/expire",
            env.sim().admin_url()
        ))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(expired["expired"].as_u64().unwrap() >= 4, "{expired}");
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    for tray in ["compute-01", "compute-02", "compute-03", "compute-04"] {
        let c = &t["steps"][0]["results"][tray];
        assert_eq!(c["result"], "installed 26.04", "{c:#}");
        // No call failed: nothing recorded against the tray, one update.
        assert!(c["error"].is_null(), "{tray}: {c:#}");
    }
    let state = env.sim().state();
    // The polls after the drop logged in again (once per tray's BMC at
    // least), and each BMC took its update once.
    assert!(
        state.logins_total >= before + 4,
        "logins {} before the drop, {} after",
        before,
        state.logins_total
    );
    for c in state.racks[0]
        .components
        .iter()
        .filter(|c| c.name.starts_with("compute"))
    {
        let updates = c
            .commands
            .iter()
            .filter(|x| x.kind == flow_rack_sim::CommandKind::Update)
            .count();
        assert_eq!(updates, 1, "{}: {:?}", c.name, c.commands);
        assert!(
            c.refused.iter().all(|r| r.status == 401),
            "{}: {:?}",
            c.name,
            c.refused
        );
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_graceful_power_off_submitted_as_a_restart_ends_reaches_every_tray() {
    // 20 % of real time: a graceful restart is 2 s down, then 1 s up.
    let env = Env::scaled(InitialPower::On, 0.2).await;
    // A restart that only sends the command (no verification), as a
    // rollout retrying a busy rack might run; then a graceful power-off.
    env.ok(
        "rule.create",
        json!({"name": "restart, sent only", "operation_type": "power_control", "operation": "restart",
               "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}}]}}),
    )
    .await;
    env.ok(
        "rule.create",
        json!({"name": "off, verified", "operation_type": "power_control", "operation": "power_off",
               "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"},
             "post_operation": [{"name": "VerifyPowerStatus", "timeout": "30s", "poll_interval": "100ms",
                                 "parameters": {"expected_status": "off"}}]}]}}),
    )
    .await;
    let restart = env
        .submit_task(
            "restart",
            "restart",
            json!({"component_types": ["Compute"]}),
        )
        .await;
    let t = env.finish(&restart).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    // As soon as it completed: the trays are still restarting.
    let off = env
        .submit_task("off", "power_off", json!({"component_types": ["Compute"]}))
        .await;
    let t = env.finish(&off).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    for (tray, power) in env.power().await {
        if !tray.starts_with("compute") {
            continue;
        }
        assert_eq!(
            env.command_values(&tray),
            ["GracefulRestart", "GracefulShutdown"],
            "{tray}: the power-off reached its BMC"
        );
        assert_eq!(power, "Off", "{tray}");
        let record = &t["steps"][0]["results"][&tray];
        assert_eq!(record["result"], "Off", "{record:#}");
    }
    // At least one tray was read moving and its command waited for the
    // restart to end, rather than being taken as done.
    let waited = (1..=4).any(|i| {
        let actions = &t["steps"][0]["results"][format!("compute-{i:02}")]["actions"];
        actions[0]["attempts"].as_u64().unwrap_or(0) >= 3
    });
    assert!(waited, "no tray was read mid-restart: {t:#}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_event_profile_gives_the_same_outcome_and_only_the_speed_differs() {
    use flow_rack_sim::{EventChoice, EventProfile, ProfileScope};
    // Verification polls 3 s apart; the trays' transitions take 50–100 ms.
    let interval_ms = 3_000;
    let trays = ["compute-01", "compute-02", "compute-03", "compute-04"];
    let mut outcomes = Vec::new();
    for (name, profile, drop_events) in [
        ("standard", EventProfile::Standard, false),
        ("openbmc-log", EventProfile::OpenbmcLog, false),
        ("none", EventProfile::None, false),
        ("dropped", EventProfile::Standard, true),
    ] {
        let env = Env(Stack::builder()
            .simulator(SimConfig {
                time_scale: 0.01,
                initial_power: InitialPower::On,
                compute: 4,
                nvswitch: 2,
                powershelf: 2,
                events: vec![EventChoice {
                    scope: ProfileScope::All,
                    profile,
                }],
                ..SimConfig::default()
            })
            .start()
            .await);
        if drop_events {
            env.fault(json!({"target": "rack-01/*", "kind": {"drop_events": {}}}))
                .await;
        }
        for (operation, expected) in [("power_off", "off"), ("power_on", "on")] {
            env.ok("rule.create", json!({"name": format!("{operation} verified"),
                "operation_type": "power_control", "operation": operation, "is_default": true,
                "definition": {"steps": [
                    {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"},
                     "post_operation": [{"name": "VerifyPowerStatus", "timeout": "60s",
                                         "poll_interval": "3s",
                                         "parameters": {"expected_status": expected}}]}]}}))
                .await;
        }
        let mut seconds = Vec::new();
        let mut results = Vec::new();
        for operation in ["power_off", "power_on"] {
            let started = Instant::now();
            let task = env
                .submit_task(
                    &format!("{name}-{operation}"),
                    operation,
                    json!({"component_types": ["Compute"]}),
                )
                .await;
            let t = env.finish(&task).await;
            seconds.push(started.elapsed().as_secs_f64());
            results.push(t["status"].clone());
            for tray in trays {
                results.push(t["steps"][0]["results"][tray]["result"].clone());
                let polls = verify_polls(&t, tray);
                let waited = polls.last().unwrap() - polls.first().unwrap();
                // An event wakes a poll well inside the interval; without
                // one the next poll keeps to it.
                match name {
                    "standard" | "openbmc-log" => assert!(
                        waited < interval_ms,
                        "{name} {operation} {tray}: polls {polls:?} waited out the interval"
                    ),
                    // (A stream that opens wakes a waiting poll once: it
                    // may have missed a change. The change itself is then
                    // read only at the interval.)
                    _ => assert!(
                        polls.len() < 2 || waited >= interval_ms - 100,
                        "{name} {operation} {tray}: polls {polls:?} saw the change before the interval"
                    ),
                }
            }
        }
        // What the hardware did, from the simulator's record.
        for (tray, power) in env.power().await {
            if tray.starts_with("compute") {
                results.push(json!(format!("{tray} {power}")));
                results.push(json!(env.command_values(&tray)));
            }
        }
        eprintln!(
            "events {name}: power-off {:.1} s, power-on {:.1} s",
            seconds[0], seconds[1]
        );
        outcomes.push((name, results));
        env.stop().await;
    }
    for (name, results) in &outcomes[1..] {
        assert_eq!(
            results, &outcomes[0].1,
            "{name}: a different outcome from standard events"
        );
    }
}

/// The update commands each compute tray's BMC accepted, as the simulator
/// recorded them: (image URI, digest of the bytes it received).
fn updates(env: &Env) -> std::collections::BTreeMap<String, Vec<(String, Option<String>)>> {
    let state = env.sim().state();
    state.racks[0]
        .components
        .iter()
        .filter(|c| c.name.starts_with("compute"))
        .map(|c| {
            (
                c.name.clone(),
                c.commands
                    .iter()
                    .filter(|cmd| cmd.kind == flow_rack_sim::CommandKind::Update)
                    .map(|cmd| (cmd.value.clone(), cmd.digest.clone()))
                    .collect(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bundle_is_flashed_from_verified_bytes_and_a_changed_origin_flashes_nothing() {
    let env = Env::new(InitialPower::On).await;
    env.ok("rule.create", json!({"name": "fw", "operation_type": "firmware_control", "operation": "upgrade",
        "is_default": true, "definition": {"steps": [
            {"component_type": "compute", "stage": 1, "max_parallel": 4,
             "retry": {"max_attempts": 2, "initial_interval": "100ms", "backoff_coefficient": 1.0},
             "main_operation": {"name": "FirmwareControl", "parameters": {"poll_interval": "100ms", "poll_timeout": "20s"}}}]}})).await;
    let publish = |version: &str, url: &str, digest: &str, size: usize| {
        json!({"name": "gb200-fw", "version": version, "images": [
            {"component_type": "Compute", "version": version.replace("2026.", "26."), "url": url,
             "digest": digest, "size": size}]})
    };

    // Published and flashed: every BMC received the published bytes, from
    // a worker's store (never the origin).
    let good = b"compute firmware 26.07, as published\n".repeat(64);
    let (origin, digest) = env
        .origin_file("gb200/compute-26.07.bin", good.clone())
        .await;
    env.ok(
        "firmware_bundle.publish",
        publish("2026.07", &origin, &digest, good.len()),
    )
    .await;
    let task = env
        .submit_task(
            "bundle-ok",
            "upgrade",
            json!({"component_types": ["Compute"], "bundle": {"name": "gb200-fw", "version": "2026.07"}}),
        )
        .await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    let hex = digest.trim_start_matches("sha256:");
    let flashed = updates(&env);
    assert_eq!(flashed.len(), 4);
    for (tray, sent) in &flashed {
        let [(uri, got)] = sent.as_slice() else {
            panic!("{tray}: one update expected, got {sent:?}");
        };
        assert_eq!(got.as_deref(), Some(digest.as_str()), "{tray}: {uri}");
        assert!(
            uri.contains(&format!("/images/sha256/{hex}/compute-26.07.bin")) && *uri != origin,
            "{tray} was given {uri}, not a store URL"
        );
    }
    let state = env.sim().state();
    assert!(
        state.racks[0]
            .components
            .iter()
            .filter(|c| c.name.starts_with("compute"))
            .all(|c| c.firmware["FW_BMC_0"] == "26.07"),
        "{state:?}"
    );

    // Published, then the origin's bytes change before any worker fetched
    // them: the task fails naming the image, and no BMC receives an update.
    let published = b"compute firmware 26.08, as published\n".repeat(64);
    let (origin, digest) = env
        .origin_file("gb200/compute-26.08.bin", published.clone())
        .await;
    env.ok(
        "firmware_bundle.publish",
        publish("2026.08", &origin, &digest, published.len()),
    )
    .await;
    let tampered = b"compute firmware 26.08, changed after publication\n".repeat(64);
    let (_, changed) = env
        .origin_file("gb200/compute-26.08.bin", tampered.clone())
        .await;
    assert_ne!(changed, digest);
    let task = env
        .submit_task(
            "bundle-changed",
            "upgrade",
            json!({"component_types": ["Compute"], "bundle": {"name": "gb200-fw", "version": "2026.08"}}),
        )
        .await;
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "failed", "{t:#}");
    let result = t["steps"][0]["results"]["compute-01"].to_string();
    assert!(
        result.contains("does not match its digest")
            && result.contains(&digest)
            && result.contains(&changed),
        "the failure names the image, what was published and what came: {result}"
    );
    assert_eq!(updates(&env), flashed, "no BMC was sent an update");

    // A retired bundle, or one of another model, is refused at submission.
    env.ok(
        "firmware_bundle.retire",
        json!({"name": "gb200-fw", "version": "2026.07"}),
    )
    .await;
    let refused = env
        .submit(
            "bundle-retired",
            "upgrade",
            json!({"component_types": ["Compute"], "bundle": {"name": "gb200-fw", "version": "2026.07"}}),
        )
        .await;
    assert!(
        refused["error"]["details"]
            .to_string()
            .contains("is retired"),
        "{refused}"
    );
    let refused = env
        .submit(
            "bundle-missing",
            "upgrade",
            json!({"component_types": ["Compute"], "bundle": {"name": "gb200-fw", "version": "1999.01"}}),
        )
        .await;
    assert_eq!(refused["error"]["code"], "not_found", "{refused}");
    env.stop().await;
}
