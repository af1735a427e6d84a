//! The published contract of Flow's NATS API: an AsyncAPI 3.0 document
//! (JSON) built from the endpoint catalog ([`crate::api::endpoint`]) and the
//! types' JSON Schemas (draft 7, derived with `schemars` or, where a type
//! has its own serde form, written by hand beside it), plus the subjects
//! tasks are submitted and followed on. It is checked in at
//! [`DOCUMENT_PATH`]; `tests/contract.rs` fails when the types and the file
//! disagree, and `FLOW_BLESS=1 cargo test -p flow-protocol --test contract`
//! writes it anew.
//!
//! The document describes the Flow service (the schedulers and workers
//! together): it *receives* each `flow.api` request and replies, receives
//! submissions and hardware events, and *sends* task events. A message
//! Flow reads is described as it deserializes (fields with defaults may be
//! left out), one it writes as it serializes (every field it always writes
//! is required). Where the two differ for one type, the document has both:
//! `<Type>.in` and `<Type>.out`.

use std::collections::BTreeSet;

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Map, Value, json};

use crate::api::{Endpoint, Visitor, endpoint};
use crate::envelope::{ApiError, SCHEMA};
use crate::event::{EventType, HardwareEvent};
use crate::subjects::{API_PREFIX, SERVICE_VERSION};
use crate::submit::{TaskSubmit, TaskSubmitReply};
use crate::task::TaskEvent;

/// Where the document is checked in, from the workspace root.
pub const DOCUMENT_PATH: &str = "docs/api/flow-api.asyncapi.json";

/// Where schemas are kept in the document.
const SCHEMAS: &str = "#/components/schemas/";

/// The schema of a timestamp field: RFC 3339 text. Flow writes UTC with
/// six fractional digits (`2026-12-01T13:06:27.520000Z`, so that times
/// compare as text) or, in a few records, `time`'s RFC 3339 form; it reads
/// any RFC 3339 time.
#[derive(Debug, Clone, Copy)]
pub struct Timestamp;

impl JsonSchema for Timestamp {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Timestamp".into()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        concat!(module_path!(), "::Timestamp").into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        schemars::json_schema!({"type": "string", "format": "date-time"})
    }
}

/// The contract, as the AsyncAPI document's JSON value.
pub fn asyncapi() -> Value {
    let mut schemas = Schemas::new();
    let mut endpoints = Endpoints {
        schemas: &mut schemas,
        found: Vec::new(),
    };
    endpoint::visit(&mut endpoints);
    let found = endpoints.found;
    let error = schemas.written_ref::<ApiError>();
    let submission = schemas.read_ref::<TaskSubmit>();
    let outcome = schemas.written_ref::<TaskSubmitReply>();
    let task_event = schemas.written_ref::<TaskEvent>();
    let hardware_event = schemas.read_ref::<HardwareEvent>();
    let (mut definitions, rename) = schemas.finish();
    definitions.insert(
        "ErrorReply".to_owned(),
        json!({
            "description": "A refused or failed request: `{\"schema\": 1, \"error\": {code, message, details?}}`.",
            "type": "object",
            "properties": {"schema": schema_version(), "error": rename.apply(error)},
            "required": ["schema", "error"],
            "additionalProperties": false,
        }),
    );

    let mut doc = Document::default();
    for e in &found {
        let channel = e.name.to_owned();
        let reply_channel = format!("{}.reply", e.name);
        let request_message = format!("{}.request", e.name);
        let reply_message = format!("{}.reply", e.name);
        let summary = doc_text(e.doc);
        doc.message(
            &request_message,
            json!({
                "title": format!("{} request", e.name),
                "summary": summary,
                "description": "The request body, a JSON object (an empty body reads as `{}`). It may also carry `\"schema\": 1`, which is removed before the fields are read; any other version is refused.",
                "payload": rename.apply(e.request.clone()),
            }),
        );
        doc.message(
            &reply_message,
            json!({
                "title": format!("{} reply", e.name),
                "summary": format!("The reply of {}: its result, or an error.", e.name),
                "payload": reply_envelope(rename.apply(e.reply.clone())),
            }),
        );
        doc.channel(
            &channel,
            json!({
                "address": format!("{API_PREFIX}.{}", e.name),
                "title": e.name,
                "summary": summary,
                "messages": {"request": message_ref(&request_message)},
            }),
        );
        doc.channel(
            &reply_channel,
            json!({
                "address": null,
                "title": format!("{} reply", e.name),
                "description": "The requester's reply subject (NATS request-reply).",
                "messages": {"reply": message_ref(&reply_message)},
            }),
        );
        let area = e.name.split('.').next().unwrap_or(e.name);
        doc.operation(
            &channel,
            json!({
                "action": "receive",
                "channel": {"$ref": format!("#/channels/{channel}")},
                "summary": summary,
                "tags": [{"name": area}, {"name": e.kind}],
                "messages": [{"$ref": format!("#/channels/{channel}/messages/request")}],
                "reply": {
                    "channel": {"$ref": format!("#/channels/{reply_channel}")},
                    "messages": [{"$ref": format!("#/channels/{reply_channel}/messages/reply")}],
                },
            }),
        );
    }
    streams(
        &mut doc,
        &rename,
        Streams {
            submission,
            outcome,
            task_event,
            hardware_event,
        },
    );

    let mut schemas: Vec<(String, Value)> = definitions
        .into_iter()
        .map(|(name, mut schema)| {
            plain_descriptions(&mut schema);
            (name, schema)
        })
        .collect();
    schemas.sort_by(|a, b| a.0.cmp(&b.0));
    json!({
        "asyncapi": "3.0.0",
        "info": {
            "title": "Flow NATS API",
            "version": SERVICE_VERSION,
            "description": INFO,
        },
        "defaultContentType": "application/json",
        "channels": doc.channels,
        "operations": doc.operations,
        "components": {
            "messages": doc.messages,
            "schemas": schemas.into_iter().collect::<Map<_, _>>(),
        },
    })
}

/// The document as it is checked in: pretty JSON, keys in a fixed order,
/// a trailing newline.
pub fn render() -> String {
    let mut text = serde_json::to_string_pretty(&asyncapi())
        .unwrap_or_else(|e| panic!("the contract is not JSON: {e}"));
    text.push('\n');
    text
}

const INFO: &str = "Flow's NATS API, generated from the endpoint catalog \
(`flow_protocol::api::endpoint`) by `flow_protocol::contract`; do not edit by hand \
(docs/operating.md, \"The published contract\"). The document describes the Flow service: it \
receives each `flow.api.<endpoint>` request and replies on the requester's reply \
subject with an envelope, `{\"schema\": 1, \"result\": ...}` or `{\"schema\": 1, \
\"error\": {code, message, details?}}`. A request is described as Flow reads it \
(fields with defaults may be left out, unknown fields are refused), a reply or event \
as Flow writes it (every field it always writes is required). Where those differ for \
one type the document has both, `<Type>.in` and `<Type>.out`. Operations are tagged \
with their area and their kind: `read`, `change` (audited) or `internal`.";

/// Rewrites rustdoc's intra-doc links in every `description` (the types'
/// doc comments) as plain code: ``[`MAX_LIST_LIMIT`]`` becomes
/// `` `MAX_LIST_LIMIT` ``.
fn plain_descriptions(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match v {
                    Value::String(text) if key == "description" => *text = unlink(text),
                    _ => plain_descriptions(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(plain_descriptions),
        _ => {}
    }
}

fn unlink(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("[`") {
        let after = &rest[start + 1..];
        let link = after
            .find("`]")
            .filter(|end| !after[..*end].contains(['[', ']']))
            .filter(|end| !after[end + 2..].starts_with('('));
        match link {
            Some(end) => {
                out.push_str(&rest[..start]);
                out.push_str(&after[..end + 1]);
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[..start + 2]);
                rest = &rest[start + 2..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A doc comment as one line.
fn doc_text(doc: &str) -> String {
    doc.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn schema_version() -> Value {
    json!({"description": "The message schema version.", "const": SCHEMA})
}

fn message_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/messages/{name}")})
}

/// `{"schema": 1, "result": <result>}`, or the error reply.
fn reply_envelope(result: Value) -> Value {
    json!({
        "oneOf": [
            {
                "type": "object",
                "properties": {"schema": schema_version(), "result": result},
                "required": ["schema", "result"],
                "additionalProperties": false,
            },
            {"$ref": format!("{SCHEMAS}ErrorReply")},
        ],
    })
}

/// What the catalog walk found for one endpoint.
struct Found {
    name: &'static str,
    kind: &'static str,
    doc: &'static str,
    request: Value,
    reply: Value,
}

struct Endpoints<'a> {
    schemas: &'a mut Schemas,
    found: Vec<Found>,
}

impl Visitor for Endpoints<'_> {
    fn visit<E: Endpoint>(&mut self) {
        self.found.push(Found {
            name: E::NAME,
            kind: E::KIND.as_str(),
            doc: E::DOC,
            request: self.schemas.read_ref::<E::Request>(),
            reply: self.schemas.written_ref::<E::Reply>(),
        });
    }
}

/// The two schema generators: what Flow reads (deserialize) and what it
/// writes (serialize).
struct Schemas {
    read: SchemaGenerator,
    written: SchemaGenerator,
}

impl Schemas {
    fn new() -> Self {
        let settings = SchemaSettings::draft07().with(|s| {
            s.definitions_path = SCHEMAS.into();
            s.meta_schema = None;
        });
        Schemas {
            read: settings.clone().for_deserialize().into_generator(),
            written: settings.for_serialize().into_generator(),
        }
    }

    fn read_ref<T: JsonSchema + ?Sized>(&mut self) -> Value {
        mark(self.read.subschema_for::<T>().to_value(), Side::Read)
    }

    fn written_ref<T: JsonSchema + ?Sized>(&mut self) -> Value {
        mark(self.written.subschema_for::<T>().to_value(), Side::Written)
    }

    /// Every schema, one name each: a type both read and written with the
    /// same schema once, under its name; with different schemas twice, as
    /// `<name>.in` and `<name>.out` (and so is every schema that refers to
    /// such a pair, since its references differ).
    fn finish(mut self) -> (Map<String, Value>, Rename) {
        let read = self.read.take_definitions(true);
        let written = self.written.take_definitions(true);
        let mut split: BTreeSet<String> = read
            .iter()
            .filter(|(name, schema)| written.get(*name).is_some_and(|w| w != *schema))
            .map(|(name, _)| name.clone())
            .collect();
        loop {
            let more: Vec<String> = read
                .iter()
                .filter(|(name, _)| written.contains_key(*name) && !split.contains(*name))
                .filter(|(_, schema)| references(schema).iter().any(|r| split.contains(r)))
                .map(|(name, _)| name.clone())
                .collect();
            if more.is_empty() {
                break;
            }
            split.extend(more);
        }
        let rename = Rename { split };
        let mut all = Map::new();
        for (name, schema) in read {
            let schema = rename.apply(mark(schema, Side::Read));
            all.insert(rename.name(&name, Side::Read), schema);
        }
        for (name, schema) in written {
            let schema = rename.apply(mark(schema, Side::Written));
            all.entry(rename.name(&name, Side::Written))
                .or_insert(schema);
        }
        (all, rename)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Read,
    Written,
}

/// A reference before renaming, marked with the side it was made on.
const MARK_READ: &str = "\u{0}read\u{0}";
const MARK_WRITTEN: &str = "\u{0}written\u{0}";

/// Marks every schema reference in `value` with its side.
fn mark(mut value: Value, side: Side) -> Value {
    let marker = match side {
        Side::Read => MARK_READ,
        Side::Written => MARK_WRITTEN,
    };
    walk_refs(&mut value, &mut |name| format!("{marker}{name}"));
    value
}

/// The names `value` refers to.
fn references(value: &Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut copy = value.clone();
    walk_refs(&mut copy, &mut |name| {
        names.insert(name.to_owned());
        name.to_owned()
    });
    names
}

/// Rewrites the name of every `#/components/schemas/` reference.
fn walk_refs(value: &mut Value, f: &mut impl FnMut(&str) -> String) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if key == "$ref"
                    && let Value::String(r) = v
                    && let Some(name) = r.strip_prefix(SCHEMAS)
                {
                    *r = format!("{SCHEMAS}{}", f(name));
                } else {
                    walk_refs(v, f);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| walk_refs(v, f)),
        _ => {}
    }
}

/// The names of the schemas that differ between reading and writing.
struct Rename {
    split: BTreeSet<String>,
}

impl Rename {
    fn name(&self, name: &str, side: Side) -> String {
        match (self.split.contains(name), side) {
            (false, _) => name.to_owned(),
            (true, Side::Read) => format!("{name}.in"),
            (true, Side::Written) => format!("{name}.out"),
        }
    }

    /// Resolves the marked references in `value` to their final names.
    fn apply(&self, mut value: Value) -> Value {
        walk_refs(&mut value, &mut |marked| {
            if let Some(name) = marked.strip_prefix(MARK_READ) {
                self.name(name, Side::Read)
            } else if let Some(name) = marked.strip_prefix(MARK_WRITTEN) {
                self.name(name, Side::Written)
            } else {
                marked.to_owned()
            }
        });
        value
    }
}

#[derive(Default)]
struct Document {
    channels: Map<String, Value>,
    operations: Map<String, Value>,
    messages: Map<String, Value>,
}

impl Document {
    fn channel(&mut self, id: &str, channel: Value) {
        assert!(
            self.channels.insert(id.to_owned(), channel).is_none(),
            "two channels {id}"
        );
    }

    fn operation(&mut self, id: &str, operation: Value) {
        assert!(
            self.operations.insert(id.to_owned(), operation).is_none(),
            "two operations {id}"
        );
    }

    fn message(&mut self, id: &str, mut message: Value) {
        if let Some(m) = message.as_object_mut() {
            m.insert("name".into(), id.into());
            m.insert("contentType".into(), "application/json".into());
        }
        assert!(
            self.messages.insert(id.to_owned(), message).is_none(),
            "two messages {id}"
        );
    }
}

struct Streams {
    submission: Value,
    outcome: Value,
    task_event: Value,
    hardware_event: Value,
}

/// The JetStream subjects beside `flow.api`: submitting a task request and
/// its outcome, following a task, and hardware events.
fn streams(doc: &mut Document, rename: &Rename, s: Streams) {
    let task_id = json!({"description": "The task's ID (a UUID)."});
    let kinds = |kinds: &[&str]| {
        json!({
            "allOf": [
                rename.apply(s.task_event.clone()),
                {"properties": {"kind": {"enum": kinds}}},
            ],
        })
    };
    let entries: [(&str, &str, &str, Value, &str, Value, &str); 5] = [
        (
            "tasks.submit",
            "flow.tasks.submit",
            "receive",
            json!({}),
            "A task request published on JetStream (stream `FLOW_TASKS`), the body \
             `task.submit` takes, with its request ID as `Nats-Msg-Id` (a repeat is \
             dropped). Its outcome is published on `flow.events.submit.<request_id>`.",
            rename.apply(s.submission),
            "submission",
        ),
        (
            "events.submit",
            "flow.events.submit.{request_id}",
            "send",
            json!({"request_id": {"description": "The request ID as a subject token: every character but ASCII letters, digits, `-` and `_` becomes `_`."}}),
            "The outcome of a task request published on `flow.tasks.submit`: the \
             reply `task.submit` would give, in its envelope (stream `FLOW_EVENTS`).",
            reply_envelope(rename.apply(s.outcome)),
            "outcome",
        ),
        (
            "events.task",
            "flow.events.task.{task_id}",
            "send",
            json!({"task_id": task_id.clone()}),
            "A task's events: a stage started, a step finished, the task finished \
             (stream `FLOW_EVENTS`, kept 7 days; one `Nats-Msg-Id` each).",
            kinds(&["stage_started", "step_finished", "task_finished"]),
            "event",
        ),
        (
            "progress.task",
            "flow.progress.task.{task_id}",
            "send",
            json!({"task_id": task_id}),
            "A worker's live progress on a task's step (on no stream: best effort, \
             for watchers).",
            kinds(&["step_progress"]),
            "progress",
        ),
        (
            "hardware",
            "flow.hardware.{event_type}",
            "receive",
            json!({"event_type": {
                "description": "The event's type.",
                "enum": EventType::ALL.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
            }}),
            "A hardware event as a watcher publishes it (stream `FLOW_HARDWARE`, \
             `Nats-Msg-Id` `<source>/<key>`): the body `event.publish` takes.",
            rename.apply(s.hardware_event),
            "event",
        ),
    ];
    for (id, address, action, parameters, description, payload, message) in entries {
        let message_id = format!("{id}.{message}");
        doc.message(
            &message_id,
            json!({"title": address, "summary": description, "payload": payload}),
        );
        let mut channel = json!({
            "address": address,
            "description": description,
            "messages": {message: message_ref(&message_id)},
        });
        if parameters.as_object().is_some_and(|p| !p.is_empty()) {
            channel["parameters"] = parameters;
        }
        doc.channel(id, channel);
        doc.operation(
            id,
            json!({
                "action": action,
                "channel": {"$ref": format!("#/channels/{id}")},
                "summary": description,
                "tags": [{"name": "stream"}],
                "messages": [{"$ref": format!("#/channels/{id}/messages/{message}")}],
            }),
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn intra_doc_links_become_code() {
        assert_eq!(
            super::unlink("at most [`MAX`] ([`a::B`]) or [`c`](x) [x]"),
            "at most `MAX` (`a::B`) or [`c`](x) [x]"
        );
    }
}
