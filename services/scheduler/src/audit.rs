//! The audit of `flow.api` requests (docs/audit.md). The endpoint catalog
//! (`flow_protocol::api::endpoint::CATALOG`) says which endpoints change
//! state; [`AuditedRequest::begin`] gives each request to one of them an
//! [`AuditScope`], the handler answers it with a store carrying the scope
//! (so the record is written in the change's own transaction, see
//! `flow_store::audit`), and [`AuditedRequest::end`] records a request that
//! ended without committing anything. What a record names (racks, tasks, a
//! target, the reason) is read from the request's JSON by [`subjects`], the
//! same for every endpoint: a new endpoint is audited by its kind in the
//! catalog alone.

use std::sync::Arc;

use flow_protocol::TaskId;
use flow_protocol::api::endpoint;
use flow_protocol::audit::{Actor, AuditOutcome};
use flow_store::Store;
use flow_store::audit::{AuditEntry, AuditScope};
use flow_telemetry::ErrorChain;
use serde_json::Value;

use crate::service::TaskService;

/// What a request names, as the audit records it.
#[derive(Debug, Default, PartialEq)]
pub struct Subjects {
    /// Racks, by name or ID as given.
    pub racks: Vec<String>,
    /// Tasks.
    pub task_ids: Vec<TaskId>,
    /// Another target (a rule, schedule, run or event rule).
    pub target: Option<String>,
    /// The operator's reason.
    pub reason: Option<String>,
}

/// Keys naming the target of a request that is not a rack or task, in the
/// order they are looked for.
const TARGET_KEYS: [&str; 6] = ["id", "rule", "rule_id", "schedule", "run", "name"];

/// Reads what a request to `endpoint` names from its JSON `request`:
/// racks (`racks`, `rack` as a name or a rack document, `<rack>/<name>`
/// components, a rack `scope`, and the same inside a nested `task`),
/// tasks (`id` of a `task.*` endpoint), the first other target, and
/// `reason` (or `task.reason`).
pub fn subjects(endpoint: &str, request: &Value) -> Subjects {
    let mut out = Subjects::default();
    let add_rack = |out: &mut Subjects, name: &str| {
        if !name.is_empty() && !out.racks.iter().any(|r| r == name) {
            out.racks.push(name.to_owned());
        }
    };
    let objects = [Some(request), request.get("task")];
    for object in objects.into_iter().flatten() {
        if let Some(racks) = object.get("racks").and_then(Value::as_array) {
            for rack in racks.iter().filter_map(Value::as_str) {
                add_rack(&mut out, rack);
            }
        }
        match object.get("rack") {
            Some(Value::String(rack)) => add_rack(&mut out, rack),
            Some(Value::Object(doc)) => {
                if let Some(name) = doc.get("name").and_then(Value::as_str) {
                    add_rack(&mut out, name);
                }
            }
            _ => {}
        }
        if let Some(components) = object.get("components").and_then(Value::as_array) {
            for component in components.iter().filter_map(Value::as_str) {
                if let Some((rack, _)) = component.split_once('/') {
                    add_rack(&mut out, rack);
                }
            }
        }
        if let Some(rack) = object
            .get("scope")
            .and_then(|s| s.get("rack"))
            .and_then(Value::as_str)
        {
            add_rack(&mut out, rack);
        }
        if out.reason.is_none() {
            out.reason = object
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
    }
    let is_task = endpoint.starts_with("task.");
    if is_task
        && let Some(id) = request
            .get("id")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
    {
        out.task_ids.push(id);
    }
    out.target = TARGET_KEYS
        .iter()
        .filter(|k| !(is_task && **k == "id"))
        .find_map(|k| match request.get(*k) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            _ => None,
        });
    out
}

/// The request body as JSON: an empty body is `{}`, one that is not JSON
/// is kept as a string.
fn request_json(body: &[u8]) -> Value {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Value::Object(Default::default());
    }
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

/// When a reply that is not an error still refused everything: a
/// submission whose every rack was refused. The messages, joined.
fn refusal_in(reply: &Value) -> Option<String> {
    let results = reply.get("results")?.as_array()?;
    if results.is_empty() {
        return None;
    }
    let errors: Option<Vec<String>> = results
        .iter()
        .map(|r| {
            let rack = r.get("rack").and_then(Value::as_str).unwrap_or_default();
            let message = r.get("error")?.get("message")?.as_str()?;
            Some(format!("{rack}: {message}"))
        })
        .collect();
    errors.map(|e| e.join("; "))
}

/// How a request ended, from its encoded reply.
pub fn outcome_of(reply: &[u8]) -> (AuditOutcome, String) {
    match flow_protocol::api::decode_reply::<Value>(reply) {
        Err(error) => (AuditOutcome::of_error(&error), error.message),
        Ok(value) => match refusal_in(&value) {
            Some(message) => (AuditOutcome::Refused, message),
            None => (AuditOutcome::Ok, String::new()),
        },
    }
}

/// A request being answered under audit.
pub struct AuditedRequest {
    scope: Arc<AuditScope>,
    /// The store to answer with: it writes the record with the change.
    pub store: Store,
    /// The task service to answer with, over that store.
    pub tasks: TaskService,
}

impl AuditedRequest {
    /// Starts the audit of a request to `name` if its kind is audited
    /// (`None` for reads).
    pub fn begin(
        store: &Store,
        tasks: &TaskService,
        name: &str,
        actor: Actor,
        body: &[u8],
    ) -> Option<AuditedRequest> {
        let kind = endpoint::kind(name).filter(|k| k.is_audited())?;
        let request = request_json(body);
        let subjects = subjects(name, &request);
        let scope = AuditScope::new(AuditEntry {
            actor,
            endpoint: name.to_owned(),
            kind,
            racks: subjects.racks,
            task_ids: subjects.task_ids,
            target: subjects.target,
            request,
            reason: subjects.reason,
        });
        Some(AuditedRequest {
            store: store.with_audit(Arc::clone(&scope)),
            tasks: tasks.with_store(store.with_audit(Arc::clone(&scope))),
            scope,
        })
    }

    /// Ends the request answered with `reply`: unless its change already
    /// committed the record, writes it alone with the outcome. A record that
    /// cannot be written is logged (the reply still goes out).
    pub async fn end(self, reply: &[u8]) {
        let (outcome, message) = outcome_of(reply);
        if let Err(error) = self.scope.finish(&self.store, outcome, &message).await {
            tracing::error!(error = %ErrorChain(&error), outcome = outcome.as_str(), "audit record not written");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subjects_are_read_from_any_request() {
        let s = subjects(
            "task.submit",
            &json!({"racks": ["r1", "r2"], "components": ["r3/compute-01", "bare"],
                    "override_readiness": true, "reason": "swap done"}),
        );
        assert_eq!(s.racks, vec!["r1", "r2", "r3"]);
        assert_eq!(s.reason.as_deref(), Some("swap done"));
        assert_eq!(s.target, None);
        let id = TaskId::new();
        let s = subjects("task.cancel", &json!({"id": id.to_string()}));
        assert_eq!((s.task_ids, s.target), (vec![id], None));
        let s = subjects(
            "rack.create",
            &json!({"rack": {"name": "r9", "components": []}}),
        );
        assert_eq!(s.racks, vec!["r9"]);
        let s = subjects(
            "schedule.create",
            &json!({"name": "nightly", "task": {"racks": ["r1"], "reason": "why"}}),
        );
        assert_eq!(
            (s.racks, s.target, s.reason),
            (
                vec!["r1".to_owned()],
                Some("nightly".to_owned()),
                Some("why".to_owned())
            )
        );
        let s = subjects(
            "event_rule.bind",
            &json!({"rule": "leak", "scope": {"rack": "r4"}}),
        );
        assert_eq!(
            (s.racks, s.target),
            (vec!["r4".to_owned()], Some("leak".to_owned()))
        );
        assert_eq!(
            subjects("rule.create", &json!("not json")),
            Subjects::default()
        );
    }

    #[test]
    fn a_submission_refused_for_every_rack_is_a_refusal() {
        let reply = |v: Value| serde_json::to_vec(&json!({"schema": 1, "result": v})).unwrap();
        let refused = json!({"results": [
            {"rack": "r1", "duplicate": false, "queued": false, "error": {"code": "conflict", "message": "busy"}},
        ]});
        assert_eq!(
            outcome_of(&reply(refused)),
            (AuditOutcome::Refused, "r1: busy".to_owned())
        );
        let mixed = json!({"results": [
            {"rack": "r1", "duplicate": false, "queued": false, "error": {"code": "conflict", "message": "busy"}},
            {"rack": "r2", "task_id": TaskId::new(), "duplicate": false, "queued": false},
        ]});
        assert_eq!(outcome_of(&reply(mixed)).0, AuditOutcome::Ok);
        let error = serde_json::to_vec(
            &json!({"schema": 1, "error": {"code": "not_found", "message": "rack \"x\" not found"}}),
        )
        .unwrap();
        assert_eq!(
            outcome_of(&error),
            (AuditOutcome::Refused, "rack \"x\" not found".to_owned())
        );
        let fault = serde_json::to_vec(
            &json!({"schema": 1, "error": {"code": "internal", "message": "database error"}}),
        )
        .unwrap();
        assert_eq!(outcome_of(&fault).0, AuditOutcome::Error);
    }
}
