//! Hostile input on every subject and endpoint, against a real nats-server
//! (with `max_payload` lowered to 64 KiB, so "near the limit" is cheap), a
//! fresh Postgres database, the scheduler, an in-process worker and the rack
//! simulator: malformed JSON, wrong types, missing fields, unknown schema
//! versions and oversized payloads are answered (API) or parked on
//! FLOW_PARKED with the reason (streams), nothing is lost, every consumer
//! goes on, and a flood of duplicate submissions makes exactly one task.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer};
use flow_protocol::api::{ApiError, Endpoint, ErrorCode, endpoint};
use flow_protocol::jobs::{
    HEADER_PARKED_AT, HEADER_PARKED_REASON, HEADER_PARKED_SIZE, HEADER_PARKED_STREAM,
    HEADER_PARKED_SUBJECT, HEADER_PARKED_TRUNCATED, STREAM_PARKED,
};
use flow_protocol::subjects::api_subject;
use flow_rack_sim::{InitialPower, SimConfig};
use flow_testenv::Stack;
use futures::StreamExt;
use serde_json::{Value, json};

/// The test server's `max_payload` (the default is 1 MiB).
const MAX_PAYLOAD: usize = 64 * 1024;

/// How long one API caller waits for its reply: a flood queues hundreds of
/// requests behind [`flow_scheduler::api::MAX_CONCURRENT_REQUESTS`].
const REPLY_WAIT: Duration = Duration::from_secs(120);

/// The whole stack, a small rack that is on, and one quick rule.
struct Env(Stack);

impl std::ops::Deref for Env {
    type Target = Stack;
    fn deref(&self) -> &Stack {
        &self.0
    }
}

impl Env {
    async fn new() -> Env {
        let stack = Stack::builder()
            .nats_config(&format!("max_payload: {MAX_PAYLOAD}"))
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
        assert_eq!(stack.client.max_payload(), MAX_PAYLOAD);
        let env = Env(stack);
        // One quick rule: power shelves and compute trays are already on.
        let definition = json!({"version": "v1", "steps": [
            {"component_type": "powershelf", "stage": 1, "main_operation": {"name": "PowerControl"}},
            {"component_type": "compute", "stage": 2, "main_operation": {"name": "PowerControl"}}
        ]});
        env.ok(
            "rule.create",
            json!({"name": "quick on", "operation_type": "power_control", "operation": "power_on",
                   "definition": definition, "is_default": true}),
        )
        .await;
        env
    }

    /// Sends raw bytes to an endpoint and decodes the envelope.
    async fn raw(&self, endpoint: &str, body: Vec<u8>) -> Result<Value, ApiError> {
        self.0.raw(endpoint, body, REPLY_WAIT).await
    }

    /// A hostile body must be refused with `bad_request` and a message that
    /// names `field`.
    async fn refused(&self, endpoint: &str, body: Vec<u8>, field: &str) -> ApiError {
        let shown = String::from_utf8_lossy(&body[..body.len().min(120)]).into_owned();
        let e = match self.raw(endpoint, body).await {
            Ok(v) => panic!("{endpoint} accepted {shown}: {v}"),
            Err(e) => e,
        };
        assert_eq!(e.code, ErrorCode::BadRequest, "{endpoint} {shown}: {e}");
        assert!(
            e.message
                .starts_with("request body is not a valid request: "),
            "{endpoint}: {e}"
        );
        assert!(
            e.message.contains(field),
            "{endpoint} {shown}: the message should name {field:?}: {e}"
        );
        assert!(e.message.len() < 1024, "{endpoint}: a capped message: {e}");
        e
    }

    /// Waits (bounded) until FLOW_PARKED holds `n` messages, then reads them.
    async fn parked(&self, n: u64) -> Vec<jetstream::Message> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.stream_messages(STREAM_PARKED).await < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} messages parked",
                self.stream_messages(STREAM_PARKED).await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(self.stream_messages(STREAM_PARKED).await, n);
        let reader = self
            .js
            .get_stream(STREAM_PARKED)
            .await
            .unwrap()
            .create_consumer(consumer::pull::Config {
                ack_policy: consumer::AckPolicy::None,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut batch = reader
            .fetch()
            .max_messages(usize::try_from(n).unwrap())
            .expires(Duration::from_secs(5))
            .messages()
            .await
            .unwrap();
        let mut out = Vec::new();
        while let Some(m) = batch.next().await {
            out.push(m.unwrap());
            if out.len() as u64 == n {
                break;
            }
        }
        out
    }

    async fn stop(self) {
        self.0.stop().await;
    }
}

/// An endpoint, a valid-looking body for it, one of its fields with a value
/// of the wrong type, and one required field to leave out (none: the
/// endpoint has no required field, so an unknown field stands in for it).
type Case = (
    &'static str,
    Value,
    (&'static str, Value),
    Option<&'static str>,
);

fn endpoint_cases() -> Vec<Case> {
    let id = "00000000-0000-4000-8000-000000000001";
    let definition = json!({"version": "v1", "steps": [
        {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}}]});
    vec![
        (
            endpoint::RuleCreate::NAME,
            json!({"name": "r", "operation_type": "power_control", "operation": "power_on",
                   "definition": definition}),
            ("is_default", json!("yes")),
            Some("operation_type"),
        ),
        (
            endpoint::RuleBatchCreate::NAME,
            json!({"batch": {"version": "v1", "rules": []}}),
            ("overwrite", json!(1)),
            Some("batch"),
        ),
        (
            endpoint::RuleGet::NAME,
            json!({"id": id}),
            ("id", json!(42)),
            Some("id"),
        ),
        (
            endpoint::RuleList::NAME,
            json!({"limit": 5}),
            ("limit", json!("five")),
            None,
        ),
        (
            endpoint::RuleUpdate::NAME,
            json!({"id": id, "name": "n"}),
            ("name", json!(["n"])),
            Some("id"),
        ),
        (
            endpoint::RuleDelete::NAME,
            json!({"id": id}),
            ("force", json!("please")),
            Some("id"),
        ),
        (
            endpoint::RuleSetDefault::NAME,
            json!({"id": id}),
            ("id", json!(true)),
            Some("id"),
        ),
        (
            endpoint::RuleAssociate::NAME,
            json!({"rack": "rack-01", "rule_id": id}),
            ("rule_id", json!(7)),
            Some("rule_id"),
        ),
        (
            endpoint::RuleDisassociate::NAME,
            json!({"rack": "rack-01", "operation": "power_on"}),
            ("operation", json!(3)),
            Some("operation"),
        ),
        (
            endpoint::RuleResolve::NAME,
            json!({"rack": "rack-01", "operation": "power_on"}),
            ("rule_id", json!([])),
            Some("rack"),
        ),
        (
            endpoint::RuleHistory::NAME,
            json!({"id": id}),
            ("id", json!({"uuid": id})),
            Some("id"),
        ),
        (
            endpoint::RackCreate::NAME,
            json!({"rack": {"name": "r2", "components": []}}),
            ("rack", json!("r2")),
            Some("rack"),
        ),
        (
            endpoint::RackGet::NAME,
            json!({"rack": "rack-01"}),
            ("rack", json!(42)),
            Some("rack"),
        ),
        (
            endpoint::RackList::NAME,
            json!({}),
            ("rack", json!(1)),
            None,
        ),
        (
            endpoint::RackDelete::NAME,
            json!({"rack": "rack-01"}),
            ("rack", json!(null)),
            Some("rack"),
        ),
        (
            endpoint::RackLabel::NAME,
            json!({"rack": "rack-01", "set": {"row": "B"}}),
            ("set", json!("row=B")),
            Some("rack"),
        ),
        (
            endpoint::ComponentStatusSet::NAME,
            json!({"components": ["rack-01/compute-01"], "status": "ready"}),
            ("status", json!("broken")),
            Some("components"),
        ),
        (
            endpoint::TaskSubmit::NAME,
            json!({"request_id": "r", "racks": ["rack-01"], "operation": "power_on"}),
            ("racks", json!("rack-01")),
            Some("operation"),
        ),
        (
            endpoint::TaskPlan::NAME,
            json!({"racks": ["rack-01"], "operation": "power_on"}),
            ("racks", json!("rack-01")),
            Some("operation"),
        ),
        (
            endpoint::TaskGet::NAME,
            json!({"id": id}),
            ("id", json!(1.5)),
            Some("id"),
        ),
        (
            endpoint::TaskList::NAME,
            json!({"limit": 1}),
            ("limit", json!(-1)),
            None,
        ),
        (
            endpoint::TaskCancel::NAME,
            json!({"id": id}),
            ("id", json!("not-a-uuid")),
            Some("id"),
        ),
        (
            endpoint::TaskCounts::NAME,
            json!({}),
            ("since", json!(0)),
            None,
        ),
        (
            endpoint::ScheduleCreate::NAME,
            json!({"name": "s", "spec": {"kind": "interval", "every": "1h"},
                   "task": {"racks": ["rack-01"], "operation": "power_on"}}),
            ("name", json!(5)),
            Some("spec"),
        ),
        (
            endpoint::SchedulePlan::NAME,
            json!({"name": "s", "spec": {"kind": "interval", "every": "1h"},
                   "task": {"racks": ["rack-01"], "operation": "power_on"}}),
            ("name", json!(5)),
            Some("spec"),
        ),
        (
            endpoint::ScheduleGet::NAME,
            json!({"schedule": "x"}),
            ("schedule", json!(5)),
            Some("schedule"),
        ),
        (
            endpoint::ScheduleList::NAME,
            json!({}),
            ("enabled_only", json!("yes")),
            None,
        ),
        (
            endpoint::ScheduleUpdate::NAME,
            json!({"schedule": "s", "revision": 1}),
            ("revision", json!("one")),
            Some("revision"),
        ),
        (
            endpoint::SchedulePause::NAME,
            json!({"schedule": "x"}),
            ("schedule", json!(5)),
            Some("schedule"),
        ),
        (
            endpoint::ScheduleResume::NAME,
            json!({"schedule": "x"}),
            ("schedule", json!(5)),
            Some("schedule"),
        ),
        (
            endpoint::ScheduleTrigger::NAME,
            json!({"schedule": "x"}),
            ("schedule", json!(5)),
            Some("schedule"),
        ),
        (
            endpoint::ScheduleDelete::NAME,
            json!({"schedule": "x"}),
            ("schedule", json!(5)),
            Some("schedule"),
        ),
        (
            endpoint::ScheduleHistory::NAME,
            json!({"schedule": "x"}),
            ("schedule", json!(5)),
            Some("schedule"),
        ),
        (
            endpoint::RunCreate::NAME,
            json!({"name": "r", "task": {"racks": ["rack-01"], "operation": "power_on"},
                   "phases": {"equal": 1}, "max_concurrent": 1,
                   "gates": [{"kind": "failure_count", "count": 1}]}),
            ("max_concurrent", json!("many")),
            Some("gates"),
        ),
        (
            endpoint::RunPlan::NAME,
            json!({"name": "r", "task": {"racks": ["rack-01"], "operation": "power_on"},
                   "phases": {"equal": 1}, "max_concurrent": 1,
                   "gates": [{"kind": "failure_count", "count": 1}]}),
            ("max_concurrent", json!("many")),
            Some("gates"),
        ),
        (
            endpoint::RunGet::NAME,
            json!({"run": "x"}),
            ("run", json!(5)),
            Some("run"),
        ),
        (
            endpoint::RunList::NAME,
            json!({}),
            ("limit", json!("x")),
            None,
        ),
        (
            endpoint::RunTargets::NAME,
            json!({"run": "r"}),
            ("phase", json!("x")),
            Some("run"),
        ),
        (
            endpoint::RunPause::NAME,
            json!({"run": "x"}),
            ("run", json!(5)),
            Some("run"),
        ),
        (
            endpoint::RunResume::NAME,
            json!({"run": "x"}),
            ("run", json!(5)),
            Some("run"),
        ),
        (
            endpoint::RunAdvance::NAME,
            json!({"run": "r"}),
            ("expect_phase", json!("x")),
            Some("run"),
        ),
        (
            endpoint::RunCancel::NAME,
            json!({"run": "x"}),
            ("run", json!(5)),
            Some("run"),
        ),
        (
            endpoint::EventRuleCreate::NAME,
            json!({"spec": {"name": "r", "event_type": "hardware.leak.detected",
                            "actions": [{"name": "a", "do": {"kind": "noop"}}]}}),
            ("enabled", json!("yes")),
            Some("spec"),
        ),
        (
            endpoint::EventRuleGet::NAME,
            json!({"rule": "r"}),
            ("rule", json!(1)),
            Some("rule"),
        ),
        (
            endpoint::EventRuleList::NAME,
            json!({}),
            ("rule", json!(1)),
            None,
        ),
        (
            endpoint::EventRuleUpdate::NAME,
            json!({"rule": "r", "revision": 1, "spec": {"name": "r",
                   "event_type": "hardware.leak.detected",
                   "actions": [{"name": "a", "do": {"kind": "noop"}}]}}),
            ("revision", json!("one")),
            Some("revision"),
        ),
        (
            endpoint::EventRuleEnable::NAME,
            json!({"rule": "r", "enabled": true}),
            ("enabled", json!("yes")),
            Some("enabled"),
        ),
        (
            endpoint::EventRuleDelete::NAME,
            json!({"rule": "r"}),
            ("rule", json!([])),
            Some("rule"),
        ),
        (
            endpoint::EventRuleBind::NAME,
            json!({"rule": "r", "scope": "site"}),
            ("scope", json!("row")),
            Some("scope"),
        ),
        (
            endpoint::EventRuleUnbind::NAME,
            json!({"event_type": "hardware.leak.detected", "scope": {"rack": "rack-01"}}),
            ("event_type", json!("hardware.flood")),
            Some("event_type"),
        ),
        (
            endpoint::EventRuleBindings::NAME,
            json!({}),
            ("rule", json!(1)),
            None,
        ),
        (
            endpoint::EventPublish::NAME,
            json!({"source": "s", "key": "k", "event_type": "hardware.leak.detected",
                   "severity": "critical", "rack": "rack-01", "component": "compute-01",
                   "observed_at": "2026-12-01T00:00:00Z"}),
            ("severity", json!("dire")),
            Some("key"),
        ),
        (
            endpoint::EventGet::NAME,
            json!({"id": id}),
            ("id", json!("not-a-uuid")),
            Some("id"),
        ),
        (
            endpoint::EventList::NAME,
            json!({}),
            ("limit", json!("x")),
            None,
        ),
        (
            endpoint::EventClear::NAME,
            json!({"id": id, "reason": "dried"}),
            ("reason", json!(1)),
            Some("reason"),
        ),
        (
            endpoint::PowerDomainSet::NAME,
            json!({"name": "row=B", "budget_kw": 1200.0}),
            ("budget_kw", json!("lots")),
            Some("name"),
        ),
        (
            endpoint::PowerDomainGet::NAME,
            json!({"name": "row=B"}),
            ("name", json!("row B")),
            Some("name"),
        ),
        (
            endpoint::PowerDomainList::NAME,
            json!({}),
            ("name", json!(1)),
            None,
        ),
        (
            endpoint::PowerDomainDelete::NAME,
            json!({"name": "row=B"}),
            ("name", json!([])),
            Some("name"),
        ),
        (
            endpoint::PowerModelSet::NAME,
            json!({"component_type": "Compute", "inrush_w": 9000, "steady_w": 5400,
                   "settle_ms": 2000}),
            ("component_type", json!("Toaster")),
            Some("steady_w"),
        ),
        (
            endpoint::PowerModelList::NAME,
            json!({}),
            ("rack_model", json!(1)),
            None,
        ),
        (
            endpoint::RackPowerDomains::NAME,
            json!({"rack": "rack-01", "domains": ["row=B"]}),
            ("domains", json!("row=B")),
            Some("domains"),
        ),
        (
            endpoint::PowerAdmit::NAME,
            json!({"task": id, "rack": "rack-01", "component": "compute-01",
                   "component_type": "Compute", "operation": "power_on",
                   "domains": ["row=B"]}),
            ("operation", json!("power_up")),
            Some("operation"),
        ),
        (
            endpoint::PowerSent::NAME,
            json!({"task": id, "rack": "rack-01",
                   "sent": [{"component": "compute-01", "operation": "power_on", "at_ms": 1}]}),
            ("sent", json!("soon")),
            Some("sent"),
        ),
        (
            endpoint::RackPower::NAME,
            json!({"rack": "rack-01"}),
            ("rack", json!(7)),
            Some("rack"),
        ),
        (
            endpoint::AuditList::NAME,
            json!({"since": "2026-12-05T00:00:00Z", "rack": "r1"}),
            ("since", json!("yesterday")),
            None,
        ),
        (
            endpoint::AuditVerify::NAME,
            json!({}),
            ("verbose", json!(1)),
            None,
        ),
        (
            endpoint::ArchiveList::NAME,
            json!({"kind": "tasks"}),
            ("kind", json!("logs")),
            None,
        ),
        (
            endpoint::ArchiveShow::NAME,
            json!({"segment": "tasks-20261207T180000Z-1a2b3c4d", "task": id}),
            ("task", json!(7)),
            Some("segment"),
        ),
        (
            endpoint::ArchiveVerify::NAME,
            json!({"segment": "tasks-20261207T180000Z-1a2b3c4d"}),
            ("segment", json!(["x"])),
            None,
        ),
        (
            endpoint::AccessGrant::NAME,
            json!({"subject": "OPS/alice", "role": "operator", "labels": {"row": "A"}}),
            ("role", json!("superuser")),
            Some("role"),
        ),
        (
            endpoint::AccessRevoke::NAME,
            json!({"id": 4}),
            ("id", json!("four")),
            Some("id"),
        ),
        (
            endpoint::AccessList::NAME,
            json!({"subject": "OPS/alice"}),
            ("subject", json!(7)),
            None,
        ),
        (
            endpoint::AccessCheck::NAME,
            json!({"subject": "OPS/alice", "endpoint": "task.submit", "racks": ["rack-01"]}),
            ("racks", json!("rack-01")),
            Some("endpoint"),
        ),
        (
            endpoint::FirmwareBundlePublish::NAME,
            json!({"name": "gb200-fw", "version": "2026.11", "images": [
                {"component_type": "compute", "version": "1.4", "url": "http://fw.example/c.bin",
                 "digest": format!("sha256:{}", "a".repeat(64)), "size": 1024}]}),
            ("images", json!("compute.bin")),
            Some("images"),
        ),
        (
            endpoint::FirmwareBundleGet::NAME,
            json!({"name": "gb200-fw", "version": "2026.11"}),
            ("version", json!(2026.11)),
            Some("version"),
        ),
        (
            endpoint::FirmwareBundleList::NAME,
            json!({"name": "gb200-fw"}),
            ("retired", json!("yes")),
            None,
        ),
        (
            endpoint::FirmwareBundleRetire::NAME,
            json!({"name": "gb200-fw", "version": "2026.11"}),
            ("name", json!(["gb200-fw"])),
            Some("name"),
        ),
    ]
}

fn bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_endpoint_answers_hostile_requests_with_an_error_naming_the_field() {
    let env = Env::new().await;
    let cases = endpoint_cases();
    assert_eq!(
        cases.iter().map(|c| c.0).collect::<Vec<_>>(),
        endpoint::ALL,
        "every endpoint has a case"
    );
    for (name, good, (field, wrong), required) in cases {
        // Not JSON at all, not UTF-8, not an object.
        env.refused(name, b"{not json".to_vec(), "key must be a string")
            .await;
        env.refused(name, vec![0xff, 0xfe, 0x00], "expected value")
            .await;
        env.refused(name, b"[1, 2]".to_vec(), "expected a JSON object")
            .await;
        // A wrong type: the message names the field.
        let mut body = good.clone();
        body[field] = wrong.clone();
        let e = env.refused(name, bytes(&body), field).await;
        if ![
            endpoint::TaskCounts::NAME,
            endpoint::RackList::NAME,
            endpoint::EventRuleList::NAME,
            endpoint::EventRuleBindings::NAME,
            endpoint::PowerDomainList::NAME,
            endpoint::PowerModelList::NAME,
            endpoint::AuditVerify::NAME,
        ]
        .contains(&name)
        {
            assert!(
                e.message
                    .starts_with(&format!("request body is not a valid request: {field}: ")),
                "{name}: {e}"
            );
        }
        // A missing field (or, with none required, an unknown one).
        let mut body = good.clone();
        match required {
            Some(f) => {
                body.as_object_mut().unwrap().remove(f);
                env.refused(name, bytes(&body), &format!("missing field `{f}`"))
                    .await;
            }
            None => {
                body["colour"] = json!("blue");
                env.refused(name, bytes(&body), "unknown field `colour`")
                    .await;
            }
        }
        // An unknown schema version is refused before anything else.
        let mut body = good.clone();
        body["schema"] = json!(2);
        let e = env.refused(name, bytes(&body), "schema").await;
        assert!(
            e.message
                .ends_with("schema: version 2 is not supported (this build speaks schema 1)"),
            "{name}: {e}"
        );
        // Oversized: just under max_payload, the wrong-type value itself
        // huge (a string where a string is wrong, else an object), so that
        // an error quoting it must be capped to fit a reply.
        let mut body = good.clone();
        body[field] = if wrong.is_string() {
            json!("x".repeat(60_000))
        } else {
            json!({"huge": "x".repeat(60_000)})
        };
        let big = bytes(&body);
        assert!(
            big.len() > 60_000 && big.len() < MAX_PAYLOAD,
            "{}",
            big.len()
        );
        let e = env.refused(name, big, field).await;
        assert!(e.message.len() < 1024, "{name}: the reply stays small");
        // Over max_payload: the client refuses to send it; the service
        // never sees it.
        let over = vec![b' '; MAX_PAYLOAD + 1];
        let e = env
            .client
            .request(api_subject(name), over.into())
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("exceeded"),
            "{name}: over max_payload: {e}"
        );
    }
    // Right types, hostile sizes: refused by validation, never a crash.
    let huge = "x".repeat(60_000);
    let e = env
        .raw(
            "task.submit",
            bytes(&json!({"request_id": huge, "racks": ["rack-01"], "operation": "power_on"})),
        )
        .await
        .unwrap_err();
    assert_eq!(e.message, "request_id: must be at most 128 characters");
    let e = env
        .raw("rack.get", bytes(&json!({"rack": huge})))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound, "{e}");
    let e = env
        .raw(
            "rule.create",
            bytes(&json!({"name": huge, "operation_type": "power_control",
                          "operation": "power_on", "definition": {"version": "v1", "steps": []}})),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Invalid, "{e}");
    // Still serving, with the state the hostile requests left untouched.
    assert_eq!(env.ok("rule.list", json!({})).await["total"], 1);
    assert_eq!(
        env.ok("rack.list", json!({})).await["racks"][0]["name"],
        "rack-01"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_messages_on_every_stream_are_parked_with_the_reason_and_nothing_is_lost() {
    let env = Env::new().await;
    let task_id = "00000000-0000-4000-8000-000000000002";
    let padding = "x".repeat(MAX_PAYLOAD - 200);
    let near_max = format!(
        r#"{{"request_id": "big", "racks": ["rack-01"], "operation": "power_on", "padding": "{padding}"}}"#
    );
    // (subject, payload, what the reason must say)
    let hostile: Vec<(String, Vec<u8>, &str)> = vec![
        (
            "flow.tasks.submit".into(),
            b"{not json".to_vec(),
            "key must be a string",
        ),
        (
            "flow.tasks.submit".into(),
            bytes(&json!({"request_id": 5, "racks": ["rack-01"], "operation": "power_on"})),
            "request_id: invalid type: integer `5`",
        ),
        (
            "flow.tasks.submit".into(),
            bytes(&json!({"request_id": "m", "racks": ["rack-01"]})),
            "missing field `operation`",
        ),
        (
            "flow.tasks.submit".into(),
            bytes(
                &json!({"schema": 2, "request_id": "s", "racks": ["rack-01"], "operation": "power_on"}),
            ),
            "schema: version 2 is not supported",
        ),
        (
            "flow.tasks.submit".into(),
            bytes(&json!({"request_id": " ", "racks": ["rack-01"], "operation": "power_on"})),
            "request_id: must not be empty",
        ),
        (
            "flow.tasks.submit".into(),
            near_max.clone().into_bytes(),
            "unknown field `padding`",
        ),
        (
            "flow.jobs.compute".into(),
            vec![0xff, 0x00, 0x13],
            "expected value",
        ),
        (
            "flow.jobs.powershelf".into(),
            bytes(&json!({"schema": 1, "id": "job-1", "stage": 1})),
            "id: invalid type: string",
        ),
        (
            "flow.jobs.compute".into(),
            bytes(
                &json!({"schema": 1, "id": {"task": task_id, "step_index": 0, "generation": 1},
                          "stage": 1, "deadline_ms": 0}),
            ),
            "missing field `job`",
        ),
        (
            "flow.jobs.nvswitch".into(),
            bytes(&json!({"schema": 99, "id": "whatever"})),
            "schema: version 99 is not supported",
        ),
        (
            format!("flow.results.{task_id}"),
            b"null".to_vec(),
            "expected a JSON object, found null",
        ),
        (
            format!("flow.results.{task_id}"),
            bytes(
                &json!({"schema": 1, "id": {"task": task_id, "step_index": "zero", "generation": 1}}),
            ),
            "id.step_index: invalid type: string \"zero\"",
        ),
        (
            format!("flow.results.{task_id}"),
            bytes(&json!({"schema": "one"})),
            "schema: version \"one\" is not supported",
        ),
    ];
    for (subject, payload, _) in &hostile {
        env.js
            .publish(subject.clone(), payload.clone().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let parked = env.parked(hostile.len() as u64).await;
    for (subject, payload, reason) in &hostile {
        let found = parked
            .iter()
            .find(|m| {
                let h = m.headers.as_ref().unwrap();
                h.get(HEADER_PARKED_SUBJECT).map(|v| v.as_str()) == Some(subject.as_str())
                    && payload.starts_with(&m.payload)
                    && h.get(HEADER_PARKED_REASON)
                        .is_some_and(|r| r.as_str().contains(reason))
            })
            .unwrap_or_else(|| panic!("{subject}: nothing parked with reason {reason:?}"));
        let h = found.headers.as_ref().unwrap();
        let stream = h.get(HEADER_PARKED_STREAM).unwrap().as_str().to_owned();
        assert_eq!(
            found.subject.as_str(),
            format!("flow.parked.{}", stream.to_lowercase())
        );
        assert_eq!(
            h.get(HEADER_PARKED_SIZE).unwrap().as_str(),
            payload.len().to_string()
        );
        assert!(h.get(HEADER_PARKED_AT).unwrap().as_str().starts_with("20"));
        if found.payload.len() < payload.len() {
            // Only the one at max_payload is cut, and it says so.
            assert_eq!(payload.as_slice(), near_max.as_bytes());
            assert_eq!(
                h.get(HEADER_PARKED_TRUNCATED).unwrap().as_str(),
                found.payload.len().to_string()
            );
            assert!(found.payload.len() > MAX_PAYLOAD - 1024);
        } else {
            assert_eq!(found.payload.as_ref(), payload.as_slice(), "{subject}");
            assert!(h.get(HEADER_PARKED_TRUNCATED).is_none());
        }
    }
    // The work queues hold none of them any more.
    for stream in ["FLOW_TASKS", "FLOW_JOBS", "FLOW_RESULTS"] {
        assert_eq!(env.stream_messages(stream).await, 0, "{stream}");
    }
    // Every consumer goes on: a good submission on the stream runs through
    // submission, jobs and results to the end.
    let mut outcomes = env
        .client
        .subscribe("flow.events.submit.good-1")
        .await
        .unwrap();
    env.js
        .publish(
            "flow.tasks.submit",
            bytes(&json!({"request_id": "good-1", "racks": ["rack-01"], "operation": "power_on"}))
                .into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(20), outcomes.next())
        .await
        .expect("an outcome")
        .unwrap();
    // The outcome is a reply envelope, as on flow.api.
    let reply: Value = flow_protocol::api::decode_reply(&outcome.payload).expect("a result");
    let task = reply["results"][0]["task_id"].as_str().expect("a task");
    assert_eq!(env.finish(task).await["status"], "completed");
    assert_eq!(
        env.stream_messages(STREAM_PARKED).await,
        hostile.len() as u64
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_duplicate_submissions_makes_one_task_and_every_caller_is_answered() {
    const FLOOD: usize = 500;
    let env = Env::new().await;
    let request = json!({"request_id": "flood-1", "racks": ["rack-01"], "operation": "power_on"});
    let body = bytes(&request);
    let mut outcomes = env
        .client
        .subscribe("flow.events.submit.flood-1")
        .await
        .unwrap();
    // On the stream: half with the request id as Nats-Msg-Id (JetStream
    // drops the repeats), half without (the store recognises the request).
    let publishes = (0..FLOOD).map(|i| {
        let (js, body) = (env.js.clone(), body.clone());
        async move {
            let mut message = jetstream::message::PublishMessage::build().payload(body.into());
            if i % 2 == 0 {
                message = message.message_id("flood-1");
            }
            js.send_publish("flow.tasks.submit", message)
                .await
                .unwrap()
                .await
                .unwrap()
                .duplicate
        }
    });
    // Through the API, at the same time, with the same request id.
    let calls = (0..FLOOD).map(|_| env.raw("task.submit", body.clone()));
    let (duplicates, replies) = tokio::join!(
        futures::future::join_all(publishes),
        futures::future::join_all(calls)
    );
    assert_eq!(
        duplicates.iter().filter(|d| **d).count(),
        FLOOD / 2 - 1,
        "JetStream keeps one of the publishes with the same Nats-Msg-Id"
    );
    let mut tasks = std::collections::BTreeSet::new();
    for reply in replies {
        let reply = reply.expect("every caller is answered with a result");
        tasks.insert(reply["results"][0]["task_id"].as_str().unwrap().to_owned());
    }
    // Every stream submission that JetStream kept is answered on the
    // outcome subject, with the same task.
    let kept = FLOOD / 2 + 1;
    for _ in 0..kept {
        let outcome = tokio::time::timeout(REPLY_WAIT, outcomes.next())
            .await
            .expect("an outcome per kept submission")
            .unwrap();
        let reply: Value = flow_protocol::api::decode_reply(&outcome.payload).expect("a result");
        tasks.insert(reply["results"][0]["task_id"].as_str().unwrap().to_owned());
    }
    assert_eq!(tasks.len(), 1, "one task for one request id: {tasks:?}");
    let listed = env.ok("task.list", json!({})).await;
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    // The scheduler is alive and well: the task runs, the API answers.
    let task = tasks.into_iter().next().unwrap();
    assert_eq!(env.finish(&task).await["status"], "completed");
    assert_eq!(env.ok("rule.list", json!({})).await["total"], 1);
    assert_eq!(
        env.stream_messages(STREAM_PARKED).await,
        0,
        "nothing refused"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn values_the_database_refuses_are_answered_or_parked_never_retried_forever() {
    let env = Env::new().await;
    // Through the API: a NUL byte (valid JSON, refused by Postgres text).
    let e = env
        .raw(
            "task.submit",
            bytes(&json!({"request_id": "a\u{0}b", "racks": ["rack-01"], "operation": "power_on"})),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
    assert_eq!(e.message, "request_id: must not contain control characters");
    let e = env
        .raw(
            "rule.create",
            bytes(&json!({"name": "nul", "description": "a\u{0}b", "operation_type": "power_control",
                          "operation": "power_off", "definition": {"version": "v1", "steps": [
                              {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}}]}})),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Invalid, "not `unavailable`: {e}");
    assert!(e.message.contains("0x00"), "{e}");
    // On the stream: a result for a running step whose text Postgres
    // refuses is parked, not handed back forever.
    let definition = json!({"version": "v1", "steps": [
        {"component_type": "powershelf", "stage": 1,
         "pre_operation": [{"name": "Sleep", "parameters": {"duration": "60s"}}],
         "main_operation": {"name": "PowerControl"}}]});
    let rule = env
        .ok(
            "rule.create",
            json!({"name": "slow", "operation_type": "power_control", "operation": "power_off",
                   "definition": definition}),
        )
        .await;
    let reply = env
        .ok(
            "task.submit",
            json!({"request_id": "slow-1", "racks": ["rack-01"], "operation": "power_off",
                   "rule_id": rule["id"]}),
        )
        .await;
    let task = reply["results"][0]["task_id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    let step = loop {
        let t = env.ok("task.get", json!({"id": task})).await;
        if t["steps"][0]["status"] == "running" {
            break t["steps"][0].clone();
        }
        assert!(Instant::now() < deadline, "the step never ran: {t}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let forged = json!({"schema": 1,
        "id": {"task": task, "step_index": step["step_index"], "generation": step["generation"]},
        "outcome": {"outcome": "failed", "action": "PowerControl", "message": "bad\u{0}byte"},
        "components": {}, "calls": 0, "started_ms": 0, "finished_ms": 0});
    env.js
        .publish(format!("flow.results.{task}"), bytes(&forged).into())
        .await
        .unwrap()
        .await
        .unwrap();
    let parked = env.parked(1).await;
    let reason = parked[0]
        .headers
        .as_ref()
        .unwrap()
        .get(HEADER_PARKED_REASON)
        .unwrap();
    assert!(reason.as_str().contains("0x00"), "{}", reason.as_str());
    assert_eq!(env.stream_messages("FLOW_RESULTS").await, 0);
    // The task was not touched by it.
    let t = env.ok("task.get", json!({"id": task})).await;
    assert_eq!(t["status"], "running", "{t}");
    env.ok("task.cancel", json!({"id": task})).await;
    assert_eq!(env.finish(&task).await["status"], "terminated");
    env.stop().await;
}
