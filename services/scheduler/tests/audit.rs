//! The audit log against a real nats-server, a fresh Postgres database, the
//! scheduler and the rack simulator: every `change` endpoint of the
//! catalog leaves exactly one record per request, naming the actor of the
//! `Flow-Actor` header, written in the change's own transaction; a refused
//! request leaves one `refused` record and no change; reads leave none;
//! overrides need a reason; the database refuses to change or delete a
//! record; `audit.list` filters.

use flow_client::Client;
use flow_protocol::api::endpoint;
use flow_protocol::audit::EndpointKind;
use flow_rack_sim::{InitialPower, SimConfig};
use flow_testenv::Stack;
use serde_json::{Value, json};

async fn env() -> Stack {
    let env = Stack::builder()
        .simulator(SimConfig {
            time_scale: 0.01,
            initial_power: InitialPower::On,
            compute: 2,
            nvswitch: 1,
            powershelf: 1,
            ..SimConfig::default()
        })
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
    env
}

/// A client of the stack's service naming `actor` in every request.
fn client_as(env: &Stack, actor: &str) -> Client {
    Client::new(env.client.clone(), "test").with_actor(actor)
}

/// Sends `body` to `name` as `actor` (untyped, with the header), and
/// returns the decoded reply.
async fn send_as(env: &Stack, actor: &str, name: &str, body: &Value) -> Result<Value, String> {
    let reply = env
        .api
        .request_raw(
            name,
            serde_json::to_vec(body).unwrap(),
            std::time::Duration::from_secs(30),
            Some(actor),
        )
        .await
        .unwrap_or_else(|e| panic!("{name}: no reply: {e}"));
    flow_protocol::api::decode_reply::<Value>(&reply).map_err(|e| e.message)
}

async fn count(env: &Stack) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM audit_log")
        .fetch_one(env.store.pool())
        .await
        .unwrap()
}

async fn tasks(env: &Stack) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM tasks")
        .fetch_one(env.store.pool())
        .await
        .unwrap()
}

/// The newest record, as `audit.list` gives it.
async fn newest(env: &Stack) -> Value {
    env.ok("audit.list", json!({"limit": 1})).await["records"][0].clone()
}

/// The records written after record `after`, oldest first.
async fn since_id(env: &Stack, after: i64) -> Vec<Value> {
    let mut records: Vec<Value> = env.ok("audit.list", json!({"limit": 1000})).await["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["id"].as_i64().unwrap() > after)
        .cloned()
        .collect();
    records.reverse();
    records
}

async fn last_id(env: &Stack) -> i64 {
    sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM audit_log")
        .fetch_one(env.store.pool())
        .await
        .unwrap()
}

/// Whether the audit record `id` was written by the same transaction as
/// the row of `table` whose `key` is `value` (their `xmin` is the same).
async fn same_transaction(env: &Stack, id: i64, table: &str, key: &str, value: &str) -> bool {
    // Table and column are the test's own constants.
    let change: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT xmin::text FROM {table} WHERE {key}::text = $1"
    )))
    .bind(value)
    .fetch_one(env.store.pool())
    .await
    .unwrap_or_else(|e| panic!("{table} {key}={value}: {e}"));
    let record: String = sqlx::query_scalar("SELECT xmin::text FROM audit_log WHERE id = $1")
        .bind(id)
        .fetch_one(env.store.pool())
        .await
        .unwrap();
    change == record
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_change_endpoint_of_the_catalog_leaves_one_record_and_reads_none() {
    let env = env().await;
    // A body every endpoint refuses (an unknown field) or, for a few reads,
    // answers: either way a change endpoint records it once, a read never.
    for &(name, kind) in endpoint::CATALOG {
        let before = count(&env).await;
        let actor = format!("catalog-{name}");
        let reply = send_as(&env, &actor, name, &json!({"no_such_field": 1})).await;
        let written = count(&env).await - before;
        match kind {
            EndpointKind::Change => {
                assert_eq!(written, 1, "{name}: one record");
                let r = newest(&env).await;
                assert_eq!(r["endpoint"], name);
                // Development mode (the default): one user, the header
                // kept as a claim.
                assert_eq!(r["actor"], "development", "{name}");
                assert_eq!(r["actor_source"], "development");
                assert_eq!(r["claimed_actor"], actor.as_str(), "{name}");
                assert_eq!(r["kind"], "change");
                assert_eq!(r["outcome"], "refused", "{name}: {reply:?}");
                let message = reply.expect_err("an unknown field is refused");
                assert_eq!(r["message"], message.as_str(), "{name}");
                assert_eq!(r["request"], json!({"no_such_field": 1}));
            }
            EndpointKind::Read | EndpointKind::Internal => {
                assert_eq!(written, 0, "{name} ({kind:?}) writes nothing")
            }
        }
    }
    // Without the header there is no claim.
    env.err("rack.label", json!({"rack": "nope", "set": {"row": "A"}}))
        .await;
    let r = newest(&env).await;
    assert_eq!(
        (&r["actor"], &r["actor_source"], &r["claimed_actor"]),
        (&json!("development"), &json!("development"), &Value::Null)
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn changes_leave_one_ok_record_each_in_their_own_transaction() {
    let env = env().await;
    let alice = client_as(&env, "alice");
    let start = last_id(&env).await;
    let mut expected: Vec<&str> = Vec::new();
    macro_rules! call {
        ($ep:ty, $body:expr) => {{
            expected.push(<$ep as flow_protocol::api::Endpoint>::NAME);
            let reply = alice
                .call_document::<$ep>(&$body)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", <$ep as flow_protocol::api::Endpoint>::NAME));
            serde_json::to_value(&reply).unwrap()
        }};
    }
    let rule = call!(
        endpoint::RuleCreate,
        json!({"name": "on", "operation_type": "power_control", "operation": "power_on",
               "definition": {"version": "v1", "steps": [
                   {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}}]}})
    );
    let rule_id = rule["id"].as_str().unwrap().to_owned();
    let id = last_id(&env).await;
    assert!(
        same_transaction(&env, id, "operation_rules", "id", &rule_id).await,
        "rule.create's record is in its transaction"
    );
    call!(
        endpoint::RuleUpdate,
        json!({"id": rule_id, "description": "d"})
    );
    call!(
        endpoint::RuleAssociate,
        json!({"rack": "rack-01", "rule_id": rule_id})
    );
    call!(
        endpoint::RuleDisassociate,
        json!({"rack": "rack-01", "operation": "power_on"})
    );
    call!(endpoint::RuleDelete, json!({"id": rule_id}));
    call!(
        endpoint::RackLabel,
        json!({"rack": "rack-01", "set": {"row": "B"}})
    );
    let id = last_id(&env).await;
    assert!(same_transaction(&env, id, "racks", "name", "rack-01").await);
    call!(
        endpoint::ComponentStatusSet,
        json!({"components": ["rack-01/compute-01"], "status": "ready"})
    );
    // Waiting an hour: its row stays as the submission wrote it.
    let later = flow_protocol::task::timestamp::format(
        time::OffsetDateTime::now_utc() + time::Duration::hours(1),
    );
    let submitted = call!(
        endpoint::TaskSubmit,
        json!({"request_id": "audit-1", "labels": {"row": "B"}, "operation": "power_off",
               "override_readiness": true, "reason": "swap done, checked by hand",
               "not_before": later})
    );
    let task = submitted["results"][0]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let id = last_id(&env).await;
    assert!(
        same_transaction(&env, id, "tasks", "id", &task).await,
        "task.submit's record is in the task's transaction"
    );
    call!(endpoint::TaskCancel, json!({"id": task}));
    call!(
        endpoint::ScheduleCreate,
        json!({"name": "nightly", "spec": {"kind": "interval", "every": "1h"},
               "task": {"racks": ["rack-01"], "operation": "power_off"}})
    );
    call!(endpoint::SchedulePause, json!({"schedule": "nightly"}));
    call!(endpoint::ScheduleResume, json!({"schedule": "nightly"}));
    call!(endpoint::ScheduleDelete, json!({"schedule": "nightly"}));
    call!(
        endpoint::EventRuleCreate,
        json!({"spec": {"name": "page", "event_type": "hardware.leak.detected",
                        "actions": [{"name": "act", "do": {"kind": "alert", "severity": "warning", "message": "leak"}}]}})
    );
    call!(
        endpoint::EventRuleEnable,
        json!({"rule": "page", "enabled": true})
    );
    call!(
        endpoint::EventRuleBind,
        json!({"rule": "page", "scope": {"rack": "rack-01"}})
    );
    call!(
        endpoint::EventRuleUnbind,
        json!({"event_type": "hardware.leak.detected", "scope": {"rack": "rack-01"}})
    );
    call!(endpoint::EventRuleDelete, json!({"rule": "page"}));
    call!(
        endpoint::EventPublish,
        json!({"source": "test", "key": "k1", "event_type": "hardware.temperature.critical",
               "severity": "critical", "rack": "rack-01", "component": "compute-02",
               "message": "hot", "observed_at": "2026-12-01T00:00:00Z"})
    );
    let records = since_id(&env, start).await;
    assert_eq!(
        records
            .iter()
            .map(|r| r["endpoint"].as_str().unwrap())
            .collect::<Vec<_>>(),
        expected,
        "one record per request, in order"
    );
    for r in &records {
        assert_eq!(r["claimed_actor"], "alice", "{r}");
        assert_eq!(r["actor"], "development", "{r}");
        assert_eq!(r["outcome"], "ok", "{r}");
        assert_eq!(r["message"], "", "{r}");
    }
    let submit = records
        .iter()
        .find(|r| r["endpoint"] == "task.submit")
        .unwrap();
    assert_eq!(submit["reason"], "swap done, checked by hand");
    assert_eq!(
        submit["racks"],
        json!(["rack-01"]),
        "the label's racks are named"
    );
    assert_eq!(submit["request"]["override_readiness"], true);
    let cancel = records
        .iter()
        .find(|r| r["endpoint"] == "task.cancel")
        .unwrap();
    assert_eq!(cancel["task_ids"], json!([task]));
    let publish = records
        .iter()
        .find(|r| r["endpoint"] == "event.publish")
        .unwrap();
    assert_eq!(publish["racks"], json!(["rack-01"]));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_request_leaves_one_refused_record_and_no_change() {
    let env = env().await;
    let tasks_before = tasks(&env).await;
    // An override without a reason: refused naming `reason`.
    for (flag, body) in [
        ("override_readiness", json!({"override_readiness": true})),
        (
            "allow_version_change",
            json!({"allow_version_change": true, "operation": "upgrade",
            "firmware": {"Compute": {"image_uri": "http://images.local/c.bin", "version": "1",
                "digest": "sha256:0000000000000000000000000000000000000000000000000000000000000000"}}}),
        ),
        (
            "override_readiness",
            json!({"override_readiness": true, "reason": "   "}),
        ),
    ] {
        let mut request = json!({"request_id": format!("no-reason-{flag}"), "racks": ["rack-01"],
                                 "operation": "power_off"});
        request
            .as_object_mut()
            .unwrap()
            .extend(body.as_object().unwrap().clone());
        let before = count(&env).await;
        let e = send_as(&env, "bob", "task.submit", &request)
            .await
            .unwrap_err();
        assert!(e.starts_with("reason: "), "{e}");
        assert!(e.contains(flag) || e.contains("blank"), "{e}");
        assert_eq!(count(&env).await, before + 1);
        let r = newest(&env).await;
        assert_eq!(r["outcome"], "refused");
        assert_eq!(r["message"], e.as_str());
        assert_eq!(r["claimed_actor"], "bob");
        assert_eq!(r["racks"], json!(["rack-01"]));
    }
    // An event rule whose task overrides readiness needs its reason too.
    let spec = json!({"spec": {"name": "cut", "event_type": "hardware.leak.detected",
        "actions": [{"name": "off", "do": {"kind": "submit_task", "target": "component",
            "task": {"operation": "force_power_off", "override_readiness": true}}}]}});
    let e = env.err("event_rule.create", spec.clone()).await;
    assert!(
        e.details
            .iter()
            .any(|d| d == "actions \"off\": task.reason: required with override_readiness"),
        "{e} {:?}",
        e.details
    );
    let mut with_reason = spec;
    with_reason["spec"]["actions"][0]["do"]["task"]["reason"] = json!("a leak cannot wait");
    env.ok("event_rule.create", with_reason).await;
    // Not found, and a conflict: one refused record each, nothing changed.
    let before = count(&env).await;
    let e = send_as(
        &env,
        "bob",
        "rack.label",
        &json!({"rack": "rack-99", "set": {"row": "C"}}),
    )
    .await
    .unwrap_err();
    assert_eq!(count(&env).await, before + 1);
    let r = newest(&env).await;
    assert_eq!(
        (r["outcome"].as_str(), r["message"].as_str()),
        (Some("refused"), Some(e.as_str()))
    );
    assert_eq!(r["racks"], json!(["rack-99"]));
    let rule = json!({"name": "quick off 2", "operation_type": "power_control", "operation": "power_off",
                      "is_default": true, "definition": {"version": "v1", "steps": [
        {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}}]}});
    let e = send_as(&env, "bob", "rule.create", &rule)
        .await
        .unwrap_err();
    assert_eq!(newest(&env).await["message"], e.as_str());
    let rules: i64 = sqlx::query_scalar("SELECT count(*) FROM operation_rules")
        .fetch_one(env.store.pool())
        .await
        .unwrap();
    assert_eq!(rules, 1, "the refused rule was not stored");
    // A submission every rack refuses is a refusal too.
    let busy = json!({"request_id": "busy-1", "racks": ["rack-01"], "operation": "power_off"});
    env.ok("task.submit", busy).await;
    let again = json!({"request_id": "busy-2", "racks": ["rack-01"], "operation": "power_off"});
    let before = count(&env).await;
    let reply = send_as(&env, "bob", "task.submit", &again).await.unwrap();
    assert!(reply["results"][0]["error"].is_object(), "{reply}");
    assert_eq!(count(&env).await, before + 1);
    let r = newest(&env).await;
    assert_eq!(r["outcome"], "refused");
    assert!(
        r["message"].as_str().unwrap().starts_with("rack-01: "),
        "{r}"
    );
    assert_eq!(
        tasks(&env).await,
        tasks_before + 1,
        "only busy-1 made a task"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_cannot_be_changed_or_deleted_even_in_sql() {
    let env = env().await;
    assert!(
        count(&env).await >= 2,
        "the stack's rack and rule are recorded"
    );
    for statement in [
        "UPDATE audit_log SET actor = 'mallory'",
        "DELETE FROM audit_log",
        "TRUNCATE audit_log",
    ] {
        let e = sqlx::query(statement)
            .execute(env.store.pool())
            .await
            .expect_err(statement);
        assert!(
            e.to_string().contains("audit_log is append-only"),
            "{statement}: {e}"
        );
    }
    let actors: Vec<String> = sqlx::query_scalar("SELECT DISTINCT actor FROM audit_log")
        .fetch_all(env.store.pool())
        .await
        .unwrap();
    assert_eq!(actors, vec!["development"], "nothing was rewritten");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn audit_list_filters_newest_first() {
    let env = env().await;
    let t0 = time::OffsetDateTime::now_utc();
    send_as(
        &env,
        "carol",
        "rack.label",
        &json!({"rack": "rack-01", "set": {"row": "A"}}),
    )
    .await
    .unwrap();
    send_as(
        &env,
        "dave",
        "rack.label",
        &json!({"rack": "rack-77", "set": {"row": "A"}}),
    )
    .await
    .unwrap_err();
    send_as(
        &env,
        "carol",
        "rack.component_status",
        &json!({"components": ["rack-01/compute-02"], "status": "maintenance"}),
    )
    .await
    .unwrap();
    let list = |filter: Value| {
        let env = &env;
        async move {
            env.ok("audit.list", filter).await["records"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        // The set-up's requests name no one.
                        r["claimed_actor"].as_str().unwrap_or("-").to_owned(),
                        r["endpoint"].as_str().unwrap().to_owned(),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let pair = |a: &str, e: &str| (a.to_owned(), e.to_owned());
    assert_eq!(
        list(json!({"actor": "carol"})).await,
        vec![
            pair("carol", "rack.component_status"),
            pair("carol", "rack.label")
        ]
    );
    assert_eq!(
        list(json!({"rack": "rack-77"})).await,
        vec![pair("dave", "rack.label")]
    );
    assert_eq!(
        list(json!({"outcome": "refused"})).await,
        vec![pair("dave", "rack.label")]
    );
    assert_eq!(
        list(
            json!({"endpoint": "rack.label", "since": flow_protocol::task::timestamp::format(t0)})
        )
        .await,
        vec![pair("dave", "rack.label"), pair("carol", "rack.label")]
    );
    assert_eq!(
        list(json!({"limit": 1})).await,
        vec![pair("carol", "rack.component_status")]
    );
    assert!(
        list(json!({"until": flow_protocol::task::timestamp::format(t0)}))
            .await
            .len()
            >= 2
    );
    assert!(
        list(json!({"since": "2999-01-01T00:00:00Z"}))
            .await
            .is_empty()
    );
    let e = env.err("audit.list", json!({"limit": 1001})).await;
    assert!(e.message.starts_with("limit: "), "{e}");
    let e = env
        .err("audit.list", json!({"endpoint": "rack.paint"}))
        .await;
    assert!(e.message.starts_with("endpoint: "), "{e}");
    env.stop().await;
}
