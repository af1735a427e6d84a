//! The flow.api service against a real nats-server and a fresh Postgres
//! database per test: every endpoint, a default rule, atomic batch
//! overwrite that keeps associations, resolution order, and clear errors.

use std::time::Duration;

use flow_protocol::api::{ApiError, ErrorCode, decode_reply};
use flow_protocol::subjects::api_subject;
use flow_scheduler::Scheduler;
use flow_store::Store;
use flow_testenv::Stack;
use flow_tests::TestDb;
use serde_json::{Value, json};

/// A scheduler on a private server and a fresh database.
struct Env(Stack);

impl std::ops::Deref for Env {
    type Target = Stack;
    fn deref(&self) -> &Stack {
        &self.0
    }
}

impl Env {
    async fn new() -> Env {
        Env(Stack::builder().start().await)
    }

    /// A second scheduler's API on its own connection, same database.
    async fn second_scheduler(&self) -> (Scheduler, async_nats::Client) {
        let client = async_nats::connect(self.nats.url()).await.expect("connect");
        let service = Scheduler::start(client.clone(), self.store.clone())
            .await
            .expect("start second api");
        (service, client)
    }

    async fn raw(&self, endpoint: &str, body: Vec<u8>) -> Result<Value, ApiError> {
        raw_on(&self.client, endpoint, body).await
    }

    async fn stop(self) {
        self.0.stop().await;
    }
}

async fn raw_on(
    client: &async_nats::Client,
    endpoint: &str,
    body: Vec<u8>,
) -> Result<Value, ApiError> {
    let reply = flow_client::Client::new(client.clone(), "test")
        .request_raw(endpoint, body, Duration::from_secs(10), None)
        .await
        .unwrap_or_else(|e| panic!("{endpoint}: no reply within 10 s: {e}"));
    decode_reply::<Value>(&reply)
}

fn definition(fixture: &str) -> Value {
    let path = format!(
        "{}/../../shared/rules/tests/fixtures/{fixture}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn power_on(name: &str, is_default: bool) -> Value {
    json!({
        "name": name, "description": "test", "operation_type": "power_control",
        "operation": "power_on", "definition": definition("seed-graceful-power-on.json"),
        "is_default": is_default
    })
}

fn example_rack() -> Value {
    let path = format!(
        "{}/../../examples/rack-nvl72.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn example_batch() -> Value {
    let path = format!(
        "{}/../../examples/operation-rules.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let batch = flow_rules::RuleBatch::from_yaml_str(&std::fs::read_to_string(path).unwrap())
        .expect("example batch");
    json!({"version": "v1", "rules": batch.rules.iter().map(|r| r.to_json_value()).collect::<Vec<_>>()})
}

fn id(v: &Value) -> String {
    v["id"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn rule_lifecycle_create_get_list_update_history_delete() {
    let env = Env::new().await;
    let created = env.ok("rule.create", power_on("Mine", false)).await;
    assert_eq!(created["revision"], 1);
    assert_eq!(created["operation_type"], "power_control");
    assert_eq!(
        created["definition"]["steps"][0]["component_type"],
        "PowerShelf"
    );
    let rule = id(&created);

    let got = env.ok("rule.get", json!({"id": rule})).await;
    assert_eq!(got["name"], "Mine");

    let list = env.ok("rule.list", json!({"operation": "power_on"})).await;
    assert_eq!(list["total"], 1);
    assert_eq!(
        env.ok("rule.list", json!({"operation": "power_off"})).await["total"],
        0
    );

    // A new definition is a new revision; a rename alone is not.
    let renamed = env
        .ok("rule.update", json!({"id": rule, "name": "Renamed"}))
        .await;
    assert_eq!(renamed["revision"], 1);
    let updated = env
        .ok(
            "rule.update",
            json!({"id": rule, "definition": definition("seed-forceful-power-on.json")}),
        )
        .await;
    assert_eq!(updated["revision"], 2);
    assert_eq!(updated["name"], "Renamed");
    let bad = env
        .err(
            "rule.update",
            json!({"id": rule, "definition": {"steps": [{"stage": 0}]}}),
        )
        .await;
    assert_eq!(bad.code, ErrorCode::Invalid);
    assert!(
        bad.details
            .iter()
            .any(|d| d.starts_with("definition.steps[0].stage: must be >= 1")),
        "{bad:?}"
    );

    let deleted = env.ok("rule.delete", json!({"id": rule})).await;
    assert_eq!(deleted["deleted"], true);
    let again = env.ok("rule.delete", json!({"id": rule})).await;
    assert_eq!(again["deleted"], false, "deleting twice is not an error");
    assert_eq!(
        env.err("rule.get", json!({"id": rule})).await.code,
        ErrorCode::NotFound
    );

    // The history outlives the rule.
    let history = env.ok("rule.history", json!({"id": rule})).await;
    let revisions = history["revisions"].as_array().unwrap();
    assert_eq!(revisions.len(), 2);
    assert_eq!(
        revisions[0]["definition"]["steps"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        revisions[1]["definition"]["steps"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
    env.stop().await;
}

#[tokio::test]
async fn invalid_rules_are_refused_with_every_problem() {
    let env = Env::new().await;
    let mut body = power_on("X", false);
    body["definition"]["steps"][0]["timeot"] = json!("5m");
    body["definition"]["steps"][1]["post_operation"][0]["timeout"] = json!("-1s");
    let e = env.err("rule.create", body).await;
    assert_eq!(e.code, ErrorCode::Invalid);
    assert_eq!(e.message, "the rule is invalid (2 errors)");
    assert!(
        e.details[0].starts_with("definition.steps[0]: unknown field `timeot`"),
        "{e:?}"
    );
    assert_eq!(
        e.details[1],
        "definition.steps[1].post_operation[0] (VerifyPowerStatus).timeout: must be positive, got -1s"
    );
    let mut body = power_on("X", false);
    body["operation"] = json!("upgrade");
    let e = env.err("rule.create", body).await;
    assert!(
        e.details[0].starts_with("operation: operation \"upgrade\" is not a power_control"),
        "{e:?}"
    );
    assert_eq!(
        env.ok("rule.list", json!({})).await["total"],
        0,
        "nothing half-written"
    );
    env.stop().await;
}

#[tokio::test]
async fn one_default_per_operation_and_set_default_moves_it() {
    let env = Env::new().await;
    let first = id(&env.ok("rule.create", power_on("First", true)).await);
    let e = env.err("rule.create", power_on("Second", true)).await;
    assert_eq!(e.code, ErrorCode::Conflict);
    assert!(e.message.contains(&first), "{e}");
    let second = id(&env.ok("rule.create", power_on("Second", false)).await);
    let moved = env.ok("rule.set_default", json!({"id": second})).await;
    assert_eq!(moved["is_default"], true);
    assert_eq!(
        env.ok("rule.get", json!({"id": first})).await["is_default"],
        false
    );
    // Idempotent.
    env.ok("rule.set_default", json!({"id": second})).await;
    let defaults = env.ok("rule.list", json!({"default_only": true})).await;
    assert_eq!(defaults["total"], 1);
    assert_eq!(defaults["rules"][0]["id"], second.as_str());
    assert_eq!(
        env.err(
            "rule.set_default",
            json!({"id": "00000000-0000-0000-0000-000000000001"})
        )
        .await
        .code,
        ErrorCode::NotFound
    );
    env.stop().await;
}

#[tokio::test]
async fn batch_create_skips_then_overwrites_atomically_keeping_associations() {
    let env = Env::new().await;
    let rack = env.ok("rack.create", json!({"rack": example_rack()})).await;
    let reply = env
        .ok("rule.batch_create", json!({"batch": example_batch()}))
        .await;
    assert_eq!(reply["created"].as_array().unwrap().len(), 8);
    let on = reply["created"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["operation"] == "power_on")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    env.ok("rule.associate", json!({"rack": "rack-01", "rule_id": on}))
        .await;

    // Again: everything exists, so everything is skipped.
    let again = env
        .ok("rule.batch_create", json!({"batch": example_batch()}))
        .await;
    assert_eq!(again["skipped"].as_array().unwrap().len(), 8);
    assert!(again["created"].as_array().unwrap().is_empty());

    // A batch whose second rule is invalid changes nothing.
    let mut broken = example_batch();
    broken["rules"][0]["name"] = json!("Replaced On");
    broken["rules"][1]["steps"][0]["stage"] = json!(0);
    let e = env
        .err(
            "rule.batch_create",
            json!({"batch": broken, "overwrite": true}),
        )
        .await;
    assert_eq!(e.code, ErrorCode::Invalid);
    assert!(
        e.details[0].starts_with("rules[1] (Graceful Power Off).steps[0].stage"),
        "{e:?}"
    );
    let rule = env.ok("rule.get", json!({"id": on})).await;
    assert_eq!(rule["name"], "Graceful Power On");
    assert_eq!(rule["revision"], 1);

    // Overwrite: the same rule gets a new revision and keeps its rack binding.
    let mut changed = example_batch();
    changed["rules"][0]["name"] = json!("Replaced On");
    let over = env
        .ok(
            "rule.batch_create",
            json!({"batch": changed, "overwrite": true}),
        )
        .await;
    assert_eq!(over["overwritten"].as_array().unwrap().len(), 8);
    let rule = env.ok("rule.get", json!({"id": on})).await;
    assert_eq!(rule["name"], "Replaced On");
    assert_eq!(rule["revision"], 2);
    assert_eq!(rule["is_default"], true);
    assert_eq!(rule["associations"][0]["rack_id"], rack["id"]);
    let resolved = env
        .ok(
            "rule.resolve",
            json!({"rack": "rack-01", "operation": "power_on"}),
        )
        .await;
    assert_eq!(resolved["source"], "rack_association");
    assert_eq!(resolved["revision"], 2);
    assert_eq!(env.ok("rule.list", json!({})).await["total"], 8);
    env.stop().await;
}

#[tokio::test]
async fn resolution_order_explicit_then_rack_then_default_then_builtin() {
    let env = Env::new().await;
    env.ok("rack.create", json!({"rack": example_rack()})).await;
    let resolve = |rule_id: Option<String>| {
        let mut body = json!({"rack": "rack-01", "operation": "power_on"});
        if let Some(r) = rule_id {
            body["rule_id"] = json!(r);
        }
        body
    };
    let builtin = env.ok("rule.resolve", resolve(None)).await;
    assert_eq!(builtin["source"], "builtin");
    assert_eq!(builtin["name"], "Built-in Power On");
    assert!(builtin.get("rule_id").is_none());

    let default = id(&env.ok("rule.create", power_on("Default", true)).await);
    let r = env.ok("rule.resolve", resolve(None)).await;
    assert_eq!(
        (r["source"].as_str(), r["rule_id"].as_str()),
        (Some("default"), Some(default.as_str()))
    );

    let bound = id(&env.ok("rule.create", power_on("Bound", false)).await);
    env.ok(
        "rule.associate",
        json!({"rack": "rack-01", "rule_id": bound}),
    )
    .await;
    let r = env.ok("rule.resolve", resolve(None)).await;
    assert_eq!(
        (r["source"].as_str(), r["rule_id"].as_str()),
        (Some("rack_association"), Some(bound.as_str()))
    );
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains("rack-01 is bound to rule")
    );

    let explicit = id(&env.ok("rule.create", power_on("Explicit", false)).await);
    let r = env
        .ok("rule.resolve", resolve(Some(explicit.clone())))
        .await;
    assert_eq!(
        (r["source"].as_str(), r["rule_id"].as_str()),
        (Some("explicit"), Some(explicit.as_str()))
    );

    // A missing explicit rule is an error, never a fallback.
    let e = env
        .err(
            "rule.resolve",
            resolve(Some("00000000-0000-0000-0000-00000000000f".into())),
        )
        .await;
    assert_eq!(e.code, ErrorCode::NotFound);
    assert!(e.message.contains("Flow does not fall back"), "{e}");
    // An explicit rule for another operation is refused.
    let off = env
        .ok(
            "rule.create",
            json!({"name": "Off", "operation_type": "power_control", "operation": "power_off",
                                  "definition": definition("seed-graceful-power-off.json")}),
        )
        .await;
    let e = env.err("rule.resolve", resolve(Some(id(&off)))).await;
    assert_eq!(e.code, ErrorCode::Invalid);

    // Unbinding falls back to the default.
    let removed = env
        .ok(
            "rule.disassociate",
            json!({"rack": "rack-01", "operation": "power_on"}),
        )
        .await;
    assert_eq!(removed["removed"], true);
    let r = env.ok("rule.resolve", resolve(None)).await;
    assert_eq!(r["source"], "default");
    assert_eq!(
        env.err(
            "rule.resolve",
            json!({"rack": "no-such-rack", "operation": "power_on"})
        )
        .await
        .code,
        ErrorCode::NotFound
    );
    env.stop().await;
}

#[tokio::test]
async fn a_rule_bound_to_racks_is_deleted_only_with_force() {
    let env = Env::new().await;
    env.ok("rack.create", json!({"rack": example_rack()})).await;
    let rule = id(&env.ok("rule.create", power_on("Bound", false)).await);
    env.ok(
        "rule.associate",
        json!({"rack": "rack-01", "rule_id": rule}),
    )
    .await;
    let e = env.err("rule.delete", json!({"id": rule})).await;
    assert_eq!(e.code, ErrorCode::Conflict);
    assert!(e.message.contains("rack-01 (power_on)"), "{e}");
    let deleted = env
        .ok("rule.delete", json!({"id": rule, "force": true}))
        .await;
    assert_eq!(deleted["associations_removed"], 1);
    let rack = env.ok("rack.get", json!({"rack": "rack-01"})).await;
    assert!(rack["associations"].as_array().unwrap().is_empty());
    assert_eq!(
        env.ok(
            "rule.resolve",
            json!({"rack": "rack-01", "operation": "power_on"})
        )
        .await["source"],
        "builtin"
    );
    env.stop().await;
}

#[tokio::test]
async fn racks_create_get_list_delete() {
    let env = Env::new().await;
    let rack = env.ok("rack.create", json!({"rack": example_rack()})).await;
    assert_eq!(rack["components"].as_array().unwrap().len(), 35);
    let by_id = env.ok("rack.get", json!({"rack": rack["id"]})).await;
    assert_eq!(by_id["name"], "rack-01");
    assert_eq!(by_id["components"][0]["type"], "Compute");
    assert_eq!(by_id["components"][0]["credential_ref"], "sim-bmc");
    let e = env
        .err("rack.create", json!({"rack": example_rack()}))
        .await;
    assert_eq!(e.code, ErrorCode::Conflict);
    assert_eq!(e.message, "a rack named \"rack-01\" already exists");

    let mut bad = example_rack();
    bad["name"] = json!("rack-02");
    bad["components"][0]["type"] = json!("gpu");
    bad["components"][1]["name"] = json!("powershelf-01");
    let e = env.err("rack.create", json!({"rack": bad})).await;
    assert_eq!(e.code, ErrorCode::Invalid);
    assert_eq!(e.details.len(), 2, "{e:?}");
    assert!(e.details[0].starts_with("components[0].type: unknown component type \"gpu\""));
    assert!(e.details[1].starts_with("components[1].name: \"powershelf-01\" is used"));

    let list = env.ok("rack.list", json!({})).await;
    assert_eq!(list["racks"].as_array().unwrap().len(), 1);
    assert_eq!(
        list["racks"][0]["components"],
        json!([["Compute", 18], ["NVSwitch", 9], ["PowerShelf", 8]])
    );
    assert_eq!(
        env.ok("rack.delete", json!({"rack": "rack-01"})).await["deleted"],
        true
    );
    assert_eq!(
        env.ok("rack.delete", json!({"rack": "rack-01"})).await["deleted"],
        false
    );
    assert_eq!(
        env.err("rack.get", json!({"rack": "rack-01"})).await.code,
        ErrorCode::NotFound
    );
    env.stop().await;
}

#[tokio::test]
async fn malformed_requests_get_clear_errors_and_the_service_survives() {
    let env = Env::new().await;
    let e = env
        .raw("rule.create", b"{not json".to_vec())
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(
        e.message
            .starts_with("request body is not a valid request: key must be a string"),
        "{e}"
    );
    let e = env.err("rule.get", json!({"id": 42})).await;
    assert_eq!(e.code, ErrorCode::BadRequest);
    assert!(
        e.message
            .contains("invalid type: integer `42`, expected a formatted UUID string"),
        "{e}"
    );
    let e = env.err("rule.list", json!({"limt": 5})).await;
    assert!(e.message.contains("unknown field `limt`"), "{e}");
    let e = env.err("rule.create", json!({"name": "x"})).await;
    assert!(e.message.contains("missing field `operation_type`"), "{e}");
    let e = env
        .err(
            "rack.create",
            json!({"rack": {"name": "r", "components": [
        {"type": "compute", "name": "c", "bmc_url": "https://x", "password": "hunter2"}]}}),
        )
        .await;
    assert!(e.message.contains("unknown field `password`"), "{e}");
    let e = env.raw("rule.list", vec![0xff, 0xfe]).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest);
    let e = env.raw("rule.list", vec![b'['; 10_000]).await.unwrap_err();
    assert_eq!(
        e.code,
        ErrorCode::BadRequest,
        "deep nesting is refused, not a crash"
    );

    // An endpoint that does not exist has no responders: the client says so.
    let e = env
        .client
        .request(api_subject("rule.frobnicate"), "{}".into())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), async_nats::RequestErrorKind::NoResponders);

    // Still serving.
    assert_eq!(env.ok("rule.list", json!({})).await["total"], 0);
    env.stop().await;
}

#[tokio::test]
async fn two_schedulers_serve_consistent_results() {
    let env = Env::new().await;
    let (second, second_client) = env.second_scheduler().await;
    // Twenty concurrent attempts to create the default, spread over both
    // schedulers: exactly one wins.
    let mut attempts = Vec::new();
    for i in 0..20 {
        let client = if i % 2 == 0 {
            env.client.clone()
        } else {
            second_client.clone()
        };
        let body = serde_json::to_vec(&power_on(&format!("Racer {i}"), true)).unwrap();
        attempts.push(tokio::spawn(async move {
            raw_on(&client, "rule.create", body).await
        }));
    }
    let mut won = 0;
    for a in attempts {
        match a.await.unwrap() {
            Ok(_) => won += 1,
            Err(e) => assert_eq!(e.code, ErrorCode::Conflict, "{e}"),
        }
    }
    assert_eq!(won, 1);
    let a = env.ok("rule.list", json!({"default_only": true})).await;
    let b = raw_on(
        &second_client,
        "rule.list",
        br#"{"default_only": true}"#.to_vec(),
    )
    .await
    .unwrap();
    assert_eq!(a, b);
    assert_eq!(a["total"], 1);
    // Both instances answer the micro-service discovery ping.
    let inbox = env.client.new_inbox();
    let mut replies = env.client.subscribe(inbox.clone()).await.unwrap();
    env.client
        .publish_with_reply("$SRV.PING.flow", inbox, "".into())
        .await
        .unwrap();
    let mut ids = std::collections::HashSet::new();
    while ids.len() < 2 {
        let msg = tokio::time::timeout(Duration::from_secs(5), futures_next(&mut replies))
            .await
            .expect("two ping replies within 5 s");
        let ping: Value = serde_json::from_slice(&msg.payload).unwrap();
        assert_eq!(ping["name"], "flow");
        ids.insert(ping["id"].as_str().unwrap().to_owned());
    }
    second.stop().await.unwrap();
    env.stop().await;
}

#[tokio::test]
async fn migrations_apply_to_an_empty_database_and_rerun_cleanly() {
    let db = TestDb::create().await;
    let store = Store::connect(db.url(), 2).await.unwrap();
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    let tables: Vec<String> = sqlx_tables(&store).await;
    for t in [
        "components",
        "operation_rules",
        "rack_rule_associations",
        "racks",
        "rule_revisions",
    ] {
        assert!(tables.iter().any(|x| x == t), "{t} missing from {tables:?}");
    }
}

async fn sqlx_tables(store: &Store) -> Vec<String> {
    let rows: Vec<(String,)> = flow_tests_query(store).await;
    rows.into_iter().map(|r| r.0).collect()
}

async fn flow_tests_query(store: &Store) -> Vec<(String,)> {
    sqlx::query_as("SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1")
        .fetch_all(store.pool())
        .await
        .unwrap()
}

async fn futures_next(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    use futures::StreamExt;
    sub.next().await.expect("subscription open")
}
