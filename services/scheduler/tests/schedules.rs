//! Schedules through `flow.api` with a real NATS server, Postgres and the
//! simulator: each kind (interval, cron in a time zone, one time), skip and
//! queue overlap, revisions (a stale update refused), the missed-firing
//! policy (one late firing), two schedulers firing each firing once,
//! maintenance windows, pause, resume, trigger and delete, and a firing
//! a dead scheduler left unfinished.
//!
//! A firing "coming due" is made by moving the schedule's `next_run_at`
//! into the past in the database, as the clock would (a cron time is
//! hours away); everything after that — claiming, submitting, the next
//! time — is the scheduler's own.

use std::time::Duration;

use flow_rack_sim::{InitialPower, SimConfig};
use flow_testenv::{FINISH_TIMEOUT, POLL, Stack};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Two racks (`rack-01`, `rack-02`, both labelled `site=lab`) of 2
/// compute trays, 1 switch tray and 1 shelf, powered on. `power_off` powers
/// off the compute trays only (their BMCs stay reachable, so it can run
/// again), sleeping `sleep` before commanding (so a task can still run at
/// the next firing).
async fn two_racks(sleep: &str) -> Stack {
    let env = Stack::builder()
        .simulator(SimConfig {
            racks: 2,
            time_scale: 0.01,
            initial_power: InitialPower::On,
            compute: 2,
            nvswitch: 1,
            powershelf: 1,
            ..SimConfig::default()
        })
        .workers(1)
        .without_rack()
        .start()
        .await;
    for rack in env.sim().inventory() {
        let mut doc = serde_json::to_value(rack).unwrap();
        doc["labels"] = json!({"site": "lab"});
        env.ok("rack.create", json!({ "rack": doc })).await;
    }
    env.ok(
        "rule.create",
        json!({"name": "slow power_off", "operation_type": "power_control",
               "operation": "power_off", "is_default": true,
               "definition": {"version": "v1", "steps": [
            {"component_type": "compute", "stage": 1,
             "pre_operation": [{"name": "Sleep", "parameters": {"duration": sleep}}],
             "main_operation": {"name": "PowerControl"}}
        ]}}),
    )
    .await;
    env
}

fn power_off_everywhere() -> Value {
    json!({"labels": {"site": "lab"}, "operation": "power_off"})
}

fn time_of(v: &Value) -> OffsetDateTime {
    OffsetDateTime::parse(
        v.as_str().unwrap_or_else(|| panic!("not a time: {v}")),
        &Rfc3339,
    )
    .unwrap()
}

async fn db_now(env: &Stack) -> OffsetDateTime {
    sqlx::query_scalar("SELECT now()")
        .fetch_one(env.store.pool())
        .await
        .unwrap()
}

/// Moves a schedule's next firing to `ago` before now, as if its time had
/// come (or passed while no scheduler ran).
async fn make_due(env: &Stack, id: &str, ago: Duration) -> OffsetDateTime {
    sqlx::query_scalar(
        "UPDATE schedules SET next_run_at = now() - make_interval(secs => $2) WHERE id = $1::uuid \
         RETURNING next_run_at",
    )
    .bind(id)
    .bind(ago.as_secs_f64())
    .fetch_one(env.store.pool())
    .await
    .unwrap()
}

/// Waits (bounded) until the schedule's history holds `n` finished
/// firings; the history then, newest first.
async fn firings(env: &Stack, schedule: &str, n: usize) -> Vec<Value> {
    let last = std::sync::Mutex::new(Value::Null);
    let found = flow_tests::eventually(FINISH_TIMEOUT, POLL, || async {
        let h = env
            .ok(
                "schedule.history",
                json!({"schedule": schedule, "limit": 100}),
            )
            .await;
        let f = h["firings"].as_array().cloned().unwrap_or_default();
        *last.lock().unwrap() = h;
        (f.len() >= n && f.iter().all(|f| f["done"] == true)).then_some(f)
    })
    .await;
    found.unwrap_or_else(|e| panic!("{n} firings of {schedule}: {e}; {}", last.lock().unwrap()))
}

fn tasks_of(firing: &Value) -> Vec<String> {
    firing["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["task_id"]
                .as_str()
                .unwrap_or_else(|| panic!("refused: {r}"))
                .to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interval_schedule_fires_on_its_beat_and_skips_racks_still_busy() {
    let env = two_racks("4s").await;
    let s = env
        .ok(
            "schedule.create",
            json!({"name": "nightly off", "spec": {"kind": "interval", "every": "2s"},
                   "task": power_off_everywhere()}),
        )
        .await;
    assert_eq!(s["overlap"], "skip");
    assert_eq!(s["revision"], 1);
    let created = time_of(&s["created_at"]);
    let next = time_of(&s["next_run_at"]);
    assert_eq!(next - created, time::Duration::seconds(2), "{s:#}");
    // First firing: a task per rack. Second (2 s later): both still in
    // their 4 s sleep, so both skipped, naming the open task.
    let f = firings(&env, "nightly off", 2).await;
    let (second, first) = (&f[0], &f[1]);
    assert_eq!(
        time_of(&second["due_at"]) - time_of(&first["due_at"]),
        time::Duration::seconds(2),
        "on the beat: {f:#?}"
    );
    let tasks = tasks_of(first);
    assert_eq!(tasks.len(), 2, "{first:#}");
    assert!(
        second["results"].as_array().unwrap().is_empty(),
        "{second:#}"
    );
    let skipped: Vec<&str> = second["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["task_id"].as_str().unwrap())
        .collect();
    let mut expect: Vec<&str> = tasks.iter().map(String::as_str).collect();
    expect.sort();
    let mut got = skipped.clone();
    got.sort();
    assert_eq!(got, expect, "{second:#}");
    // The tasks say where they came from.
    let t = env.task(&tasks[0]).await;
    assert_eq!(t["schedule_id"], s["id"], "{t:#}");
    assert_eq!(
        t["description"],
        format!(
            "nightly off — {}",
            flow_protocol::task::timestamp::format(time_of(&first["due_at"]))
        )
    );
    // Paused: no next time; resumed: the next time is counted from now.
    let paused = env
        .ok("schedule.pause", json!({"schedule": "nightly off"}))
        .await;
    assert_eq!(paused["enabled"], false);
    assert!(paused["next_run_at"].is_null(), "{paused:#}");
    assert_eq!(paused["revision"], 2);
    for t in &tasks {
        assert_eq!(env.finish(t).await["status"], "completed");
    }
    let before = db_now(&env).await;
    let resumed = env
        .ok("schedule.resume", json!({"schedule": "nightly off"}))
        .await;
    let next = time_of(&resumed["next_run_at"]);
    assert!(
        next - before >= time::Duration::seconds(2) && next - before < time::Duration::seconds(4),
        "{resumed:#}"
    );
    // Its tasks finished: the next firing creates a task per rack again.
    let f = firings(&env, "nightly off", 3).await;
    assert_eq!(tasks_of(&f[0]).len(), 2, "{:#}", f[0]);
    env.ok("schedule.pause", json!({"schedule": "nightly off"}))
        .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queue_overlap_queues_behind_the_running_task_and_trigger_fires_when_paused() {
    let env = two_racks("3s").await;
    let s = env
        .ok(
            "schedule.create",
            json!({"name": "cycle", "spec": {"kind": "interval", "every": "1h"},
                   "overlap": "queue", "task": {"racks": ["rack-01"], "operation": "power_off"}}),
        )
        .await;
    let id = s["id"].as_str().unwrap().to_owned();
    env.ok("schedule.pause", json!({"schedule": "cycle"})).await;
    // A trigger fires a paused schedule, now.
    let first = env.ok("schedule.trigger", json!({"schedule": id})).await;
    assert_eq!(first["trigger"], "manual");
    let running = tasks_of(&first);
    assert_eq!(running.len(), 1, "{first:#}");
    // Due while its task runs: queued behind it, not skipped.
    env.ok("schedule.resume", json!({"schedule": "cycle"}))
        .await;
    make_due(&env, &id, Duration::from_millis(100)).await;
    let f = firings(&env, "cycle", 2).await;
    let second = &f[0];
    assert_eq!(second["trigger"], "scheduled");
    assert!(second["skipped"].as_array().unwrap().is_empty());
    let r = &second["results"][0];
    assert_eq!(r["queued"], true, "{second:#}");
    assert_eq!(r["queue_position"], 1, "{second:#}");
    let queued = r["task_id"].as_str().unwrap().to_owned();
    let t = env.finish(&running[0]).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    let t = env.finish(&queued).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    // Delete: the schedule goes, its tasks stay.
    let d = env
        .ok("schedule.delete", json!({"schedule": "cycle"}))
        .await;
    assert_eq!(d["id"], id);
    let e = env.err("schedule.get", json!({"schedule": "cycle"})).await;
    assert_eq!(e.code, flow_protocol::api::ErrorCode::NotFound);
    assert_eq!(env.task(&queued).await["status"], "completed");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cron_schedules_read_their_time_zone_and_a_missed_firing_fires_once_late() {
    let env = two_racks("10ms").await;
    let now = db_now(&env).await;
    // 02:00 in Kolkata (UTC+05:30, no daylight saving) is 20:30 UTC.
    let s = env
        .ok(
            "schedule.create",
            json!({"name": "kolkata", "spec": {"kind": "cron", "expression": "0 2 * * *"},
                   "timezone": "Asia/Kolkata", "task": power_off_everywhere()}),
        )
        .await;
    let next = time_of(&s["next_run_at"]);
    assert_eq!((next.hour(), next.minute()), (20, 30), "{s:#}");
    assert!(
        next > now && next - now <= time::Duration::hours(24),
        "{s:#}"
    );
    // 02:00 in Berlin is 01:00 UTC in winter, 00:00 in summer.
    let s = env
        .ok(
            "schedule.create",
            json!({"name": "berlin", "spec": {"kind": "cron", "expression": "0 2 * * 1"},
                   "timezone": "Europe/Berlin", "task": power_off_everywhere()}),
        )
        .await;
    let b = time_of(&s["next_run_at"]);
    assert!(
        b.minute() == 0 && [0, 1].contains(&b.hour()) && b - now <= time::Duration::days(7),
        "{s:#}"
    );
    env.ok("schedule.pause", json!({"schedule": "berlin"}))
        .await;
    // The schedulers were down across three 20:30s: one firing when one
    // comes back, late, due at the time it missed; the next is tonight's.
    let id = env.ok("schedule.get", json!({"schedule": "kolkata"})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut env = env;
    env.stop_schedulers().await;
    let due = make_due(&env, &id, Duration::from_secs(3 * 24 * 3600 + 60)).await;
    env.start_scheduler().await;
    let f = firings(&env, "kolkata", 1).await;
    assert_eq!(f.len(), 1, "missed firings are not replayed: {f:#?}");
    assert_eq!(time_of(&f[0]["due_at"]), due);
    assert_eq!(f[0]["late"], true);
    assert_eq!(tasks_of(&f[0]).len(), 2);
    let s = env.ok("schedule.get", json!({"schedule": "kolkata"})).await;
    let next = time_of(&s["next_run_at"]);
    let now = db_now(&env).await;
    assert_eq!((next.hour(), next.minute()), (20, 30), "{s:#}");
    assert!(
        next > now && next - now <= time::Duration::hours(24),
        "{s:#}"
    );
    assert_eq!(time_of(&s["last_fired_at"]), due);
    for t in tasks_of(&f[0]) {
        assert_eq!(env.finish(&t).await["status"], "completed");
    }
    // A scheduler that died mid-firing (claimed two minutes ago, never
    // finished): another finishes it after the lease, once.
    sqlx::query(
        "INSERT INTO schedule_firings (schedule_id, due_at, trigger, claimed_at) \
         VALUES ($1::uuid, now() - interval '3 minutes', 'scheduled', now() - interval '2 minutes')",
    )
    .bind(&id)
    .execute(env.store.pool())
    .await
    .unwrap();
    let f = firings(&env, "kolkata", 2).await;
    let finished = f
        .iter()
        .find(|f| time_of(&f["due_at"]) != due)
        .expect("the unfinished firing");
    assert_eq!(tasks_of(finished).len(), 2, "{finished:#}");
    for t in tasks_of(finished) {
        assert_eq!(env.finish(&t).await["status"], "completed");
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_one_time_schedule_fires_once_and_is_done() {
    let env = two_racks("10ms").await;
    let at = db_now(&env).await + time::Duration::milliseconds(500);
    // Kept to the millisecond, as every time Flow computes with.
    let at = at.replace_millisecond(at.millisecond()).unwrap();
    let s = env
        .ok(
            "schedule.create",
            json!({"name": "once", "spec": {"kind": "once", "at": at.format(&Rfc3339).unwrap()},
                   "task": {"racks": ["rack-02"], "operation": "power_off"}}),
        )
        .await;
    assert_eq!(time_of(&s["next_run_at"]), at);
    let f = firings(&env, "once", 1).await;
    assert_eq!(tasks_of(&f[0]).len(), 1);
    let s = env.ok("schedule.get", json!({"schedule": "once"})).await;
    assert!(s["next_run_at"].is_null(), "{s:#}");
    let e = env.err("schedule.pause", json!({"schedule": "once"})).await;
    assert_eq!(e.code, flow_protocol::api::ErrorCode::Conflict, "{e}");
    assert!(e.message.contains("will not fire again"), "{e}");
    env.finish(&tasks_of(&f[0])[0]).await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn updates_need_the_current_revision_and_bad_schedules_are_named() {
    let env = two_racks("10ms").await;
    let s = env
        .ok(
            "schedule.create",
            json!({"name": "weekly", "spec": {"kind": "cron", "expression": "0 3 * * 0"},
                   "task": power_off_everywhere()}),
        )
        .await;
    assert_eq!(s["revision"], 1);
    let u = env
        .ok(
            "schedule.update",
            json!({"schedule": "weekly", "revision": 1, "name": "weekly-2",
                   "timezone": "America/New_York", "overlap": "queue"}),
        )
        .await;
    assert_eq!(
        (&u["name"], &u["revision"], &u["overlap"]),
        (&json!("weekly-2"), &json!(2), &json!("queue"))
    );
    // 03:00 New York is 07:00 or 08:00 UTC.
    let next = time_of(&u["next_run_at"]);
    assert!([7, 8].contains(&next.hour()), "{u:#}");
    // A change made on what was read before that one is refused, and
    // changes nothing.
    let e = env
        .err(
            "schedule.update",
            json!({"schedule": "weekly-2", "revision": 1, "overlap": "skip"}),
        )
        .await;
    assert_eq!(e.code, flow_protocol::api::ErrorCode::Conflict);
    assert!(e.message.contains("at revision 2, not 1"), "{e}");
    let now = env
        .ok("schedule.get", json!({"schedule": "weekly-2"}))
        .await;
    assert_eq!(
        (&now["overlap"], &now["revision"]),
        (&json!("queue"), &json!(2))
    );
    // A name another schedule has.
    env.ok(
        "schedule.create",
        json!({"name": "other", "spec": {"kind": "interval", "every": "24h"},
               "task": power_off_everywhere()}),
    )
    .await;
    let e = env
        .err(
            "schedule.update",
            json!({"schedule": "other", "revision": 1, "name": "weekly-2"}),
        )
        .await;
    assert_eq!(e.code, flow_protocol::api::ErrorCode::Conflict, "{e}");
    // Every problem of a bad schedule, each naming its field.
    let e = env
        .err(
            "schedule.create",
            json!({"name": "bad", "spec": {"kind": "cron", "expression": "0 25 * * *"},
                   "timezone": "Mars/Olympus",
                   "windows": [{"cron": "0 22 * * *", "duration": "9d"}],
                   "task": {"request_id": "mine", "racks": ["rack-01"], "operation": "power_off",
                            "not_before": "2030-01-01T00:00:00Z"}}),
        )
        .await;
    assert_eq!(e.code, flow_protocol::api::ErrorCode::Invalid, "{e}");
    let details = e.details.join("\n");
    for word in [
        "hour",
        "Mars/Olympus",
        "windows[0]",
        "task.request_id",
        "task.not_before",
    ] {
        assert!(details.contains(word), "{word} not in {details}");
    }
    let e = env
        .err(
            "schedule.create",
            json!({"name": "nothing", "spec": {"kind": "interval", "every": "1h"},
                   "task": {"labels": {"row": "Z"}, "operation": "power_off"}}),
        )
        .await;
    assert!(e.message.contains("no rack carries row=Z"), "{e}");
    let e = env
        .err(
            "schedule.create",
            json!({"name": " padded", "spec": {"kind": "interval", "every": "1h"},
                   "task": power_off_everywhere()}),
        )
        .await;
    assert!(e.message.contains("name:"), "{e}");
    let list = env.ok("schedule.list", json!({})).await;
    let names: Vec<&str> = list["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["weekly-2", "other"]);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_schedulers_make_each_firing_once() {
    let mut env = two_racks("10ms").await;
    env.start_scheduler().await;
    env.start_scheduler().await;
    env.ok(
        "schedule.create",
        json!({"name": "fast", "spec": {"kind": "interval", "every": "1s"},
               "overlap": "skip", "task": power_off_everywhere()}),
    )
    .await;
    let f = firings(&env, "fast", 6).await;
    env.ok("schedule.pause", json!({"schedule": "fast"})).await;
    let f = firings(&env, "fast", f.len()).await;
    let mut dues: Vec<OffsetDateTime> = f.iter().map(|f| time_of(&f["due_at"])).collect();
    dues.sort();
    dues.dedup();
    assert_eq!(dues.len(), f.len(), "one firing per due time: {f:#?}");
    let mut tasks = Vec::new();
    for firing in &f {
        // Each rack once per firing: a task, or skipped for the last one.
        assert_eq!(
            firing["results"].as_array().unwrap().len()
                + firing["skipped"].as_array().unwrap().len(),
            2,
            "{firing:#}"
        );
        for r in firing["results"].as_array().unwrap() {
            assert_eq!(r["duplicate"], false, "fired twice: {firing:#}");
            tasks.push(r["task_id"].as_str().unwrap().to_owned());
        }
    }
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE schedule_id = (SELECT id FROM schedules WHERE name = 'fast')",
    )
    .fetch_one(env.store.pool())
    .await
    .unwrap();
    assert_eq!(stored, i64::try_from(tasks.len()).unwrap());
    for t in &tasks {
        env.finish(t).await;
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn maintenance_windows_give_tasks_their_start_and_end() {
    let env = two_racks("10ms").await;
    let now = db_now(&env).await;
    // A window that opens in two hours (on the hour, UTC) for an hour.
    let opens = now + time::Duration::hours(2);
    let s = env
        .ok(
            "schedule.create",
            json!({"name": "later", "spec": {"kind": "interval", "every": "24h"},
                   "windows": [{"cron": format!("0 {} * * *", opens.hour()), "duration": "1h",
                                "timezone": "UTC"}],
                   "task": {"racks": ["rack-01"], "operation": "power_off"}}),
        )
        .await;
    assert_eq!(s["windows"][0]["duration"], "1h");
    let f = env
        .ok("schedule.trigger", json!({"schedule": "later"}))
        .await;
    let start = time_of(&f["window_start"]);
    assert_eq!((start.hour(), start.minute()), (opens.hour(), 0), "{f:#}");
    assert_eq!(time_of(&f["window_end"]) - start, time::Duration::hours(1));
    let task = tasks_of(&f)[0].clone();
    let t = env
        .until_task(&task, "waits for its window", FINISH_TIMEOUT, |t| {
            t["status"] == "waiting"
        })
        .await;
    assert_eq!(time_of(&t["not_before"]), start, "{t:#}");
    env.ok("task.cancel", json!({"id": task})).await;
    // Inside a window (one that is always open): starts now, must start
    // before the window's end.
    let s = env
        .ok(
            "schedule.create",
            json!({"name": "now", "spec": {"kind": "interval", "every": "24h"},
                   "windows": [{"cron": "* * * * *", "duration": "2h"}],
                   "task": {"racks": ["rack-02"], "operation": "power_off"}}),
        )
        .await;
    assert_eq!(s["windows"].as_array().unwrap().len(), 1);
    let f = env.ok("schedule.trigger", json!({"schedule": "now"})).await;
    let task = tasks_of(&f)[0].clone();
    let t = env.finish(&task).await;
    assert_eq!(t["status"], "completed", "{t:#}");
    assert!(t["not_before"].is_null(), "{t:#}");
    assert_eq!(time_of(&t["not_after"]), time_of(&f["window_end"]));
    env.stop().await;
}
