//! The published contract of the NATS API
//! (`docs/api/flow-api.asyncapi.json`, built by `flow_protocol::contract`)
//! agrees with the types: the checked-in file is what the types generate
//! (`FLOW_BLESS=1 cargo test -p flow-protocol --test contract` rewrites
//! it); it lists exactly the catalog's endpoints, each with its kind and a
//! reply; real examples of every endpoint's request and reply (and of the
//! messages on the submission, task-event and hardware subjects) validate
//! against its schemas, so a schema that does not describe the serde form
//! fails; and a request schema requires exactly the fields serde requires
//! and refuses the unknown fields serde refuses.

#[path = "contract/examples.rs"]
mod examples;

use std::path::PathBuf;

use flow_protocol::api::encode_reply;
use flow_protocol::api::endpoint;
use flow_protocol::contract::{self, DOCUMENT_PATH};
use jsonschema::Validator;
use serde_json::{Value, json};

fn document_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(DOCUMENT_PATH)
}

fn checked_in() -> Value {
    let path = document_file();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; write it with `FLOW_BLESS=1 cargo test -p flow-protocol --test contract`",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DOCUMENT_PATH} is not JSON: {e}"))
}

#[test]
fn the_checked_in_contract_is_what_the_types_generate() {
    let generated = contract::render();
    let path = document_file();
    if std::env::var_os("FLOW_BLESS").is_some_and(|v| v == "1") {
        // Written aside and renamed, so that a test reading it meanwhile
        // sees the old file or the new one, never half of one.
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let partial = path.with_extension("json.partial");
        std::fs::write(&partial, &generated).unwrap();
        std::fs::rename(&partial, &path).unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }
    let Ok(on_disk) = std::fs::read_to_string(&path) else {
        panic!(
            "{DOCUMENT_PATH} is missing; write it with\n\n    \
             FLOW_BLESS=1 cargo test -p flow-protocol --test contract\n"
        );
    };
    if on_disk == generated {
        return;
    }
    let (line, ours, theirs) = generated
        .lines()
        .zip(on_disk.lines())
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| (i + 1, a.to_owned(), b.to_owned()))
        .unwrap_or_else(|| {
            let n = generated.lines().count().min(on_disk.lines().count());
            (
                n + 1,
                "(end or more lines)".into(),
                "(end or more lines)".into(),
            )
        });
    panic!(
        "{DOCUMENT_PATH} does not match what the protocol types generate.\n\
         First difference at line {line}:\n  generated:  {ours}\n  checked in: {theirs}\n\
         If the change to the API is intended, regenerate the contract and review the diff:\n\
         \n    FLOW_BLESS=1 cargo test -p flow-protocol --test contract\n"
    );
}

/// Follows `$ref`s within the document.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let target = r
                .strip_prefix('#')
                .and_then(|p| doc.pointer(p))
                .unwrap_or_else(|| panic!("dangling reference {r}"));
            resolve(doc, target)
        }
        None => value,
    }
}

/// The payload schema of the first message of `operation` (or of its
/// reply).
fn payload<'a>(doc: &'a Value, operation: &str, reply: bool) -> &'a Value {
    let op = &doc["operations"][operation];
    assert!(op.is_object(), "no operation {operation}");
    let messages = if reply {
        &op["reply"]["messages"]
    } else {
        &op["messages"]
    };
    let message = resolve(doc, &messages[0]);
    assert!(
        message["payload"].is_object(),
        "{operation}: a message without a payload"
    );
    &message["payload"]
}

fn validator(doc: &Value, payload: &Value) -> Validator {
    let schema = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "components": doc["components"],
        "allOf": [payload],
    });
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft7)
        .should_validate_formats(true)
        // Draft 7 has no `uuid` format: check IDs as the types read them.
        .with_format("uuid", |s| uuid::Uuid::parse_str(s).is_ok())
        .build(&schema)
        .unwrap_or_else(|e| panic!("a payload schema does not compile: {e}\n{payload:#}"))
}

fn problems(v: &Validator, value: &Value) -> Vec<String> {
    v.iter_errors(value)
        .map(|e| format!("at {:?}: {e}", e.instance_path().to_string()))
        .collect()
}

fn assert_valid(v: &Validator, value: &Value, what: &str) {
    let problems = problems(v, value);
    assert!(
        problems.is_empty(),
        "{what} does not match the contract's schema:\n{}\nvalue: {value:#}",
        problems.join("\n")
    );
}

#[test]
fn the_contract_lists_every_endpoint_of_the_catalog() {
    for doc in [checked_in(), contract::asyncapi()] {
        let prefix = "flow.api.";
        let listed: Vec<&str> = doc["channels"]
            .as_object()
            .unwrap()
            .values()
            .filter_map(|c| c["address"].as_str()?.strip_prefix(prefix))
            .collect();
        assert_eq!(
            listed,
            endpoint::ALL,
            "the contract's flow.api channels are not the catalog's endpoints, in order \
             (regenerate with `FLOW_BLESS=1 cargo test -p flow-protocol --test contract`)"
        );
        for (name, kind) in endpoint::CATALOG {
            let op = &doc["operations"][*name];
            assert_eq!(op["action"], "receive", "{name}");
            let channel = resolve(&doc, &op["channel"]);
            assert_eq!(channel["address"], format!("{prefix}{name}"), "{name}");
            let tags: Vec<&str> = op["tags"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|t| t["name"].as_str())
                .collect();
            assert!(tags.contains(&kind.as_str()), "{name}: tags {tags:?}");
            payload(&doc, name, false);
            payload(&doc, name, true);
        }
        let operations = doc["operations"].as_object().unwrap();
        let others: Vec<&String> = operations
            .keys()
            .filter(|k| !endpoint::ALL.contains(&k.as_str()))
            .collect();
        assert_eq!(
            others,
            [
                "tasks.submit",
                "events.submit",
                "events.task",
                "progress.task",
                "hardware"
            ],
            "operations besides the endpoints"
        );
    }
}

#[test]
fn every_request_and_reply_validates_against_its_schemas() {
    let doc = contract::asyncapi();
    let catalog = examples::catalog();
    let missing: Vec<&&str> = endpoint::ALL
        .iter()
        .filter(|n| !catalog.0.contains_key(**n))
        .collect();
    assert!(
        missing.is_empty(),
        "endpoints without examples in tests/contract/examples.rs: {missing:?}"
    );
    let errors: Vec<Value> = examples::errors()
        .iter()
        .map(|e| serde_json::from_slice(&encode_reply::<()>(&Err(e.clone()))).unwrap())
        .collect();
    for name in endpoint::ALL {
        let examples = &catalog.0[name];
        let request = validator(&doc, payload(&doc, name, false));
        for body in &examples.requests {
            assert_valid(&request, body, &format!("a {name} request"));
        }
        let reply = validator(&doc, payload(&doc, name, true));
        for body in examples.replies.iter().chain(&errors) {
            assert_valid(&reply, body, &format!("a {name} reply"));
        }
    }
}

#[test]
fn a_request_schema_requires_and_refuses_what_serde_does() {
    let doc = contract::asyncapi();
    let catalog = examples::catalog();
    for name in endpoint::ALL {
        let examples = &catalog.0[name];
        let v = validator(&doc, payload(&doc, name, false));
        for body in &examples.requests {
            assert_valid(&v, body, &format!("a {name} request"));
            let fields = body.as_object().expect("a request is an object");
            let mut variants: Vec<(String, Value)> = fields
                .keys()
                .map(|key| {
                    let mut without = fields.clone();
                    without.remove(key);
                    (format!("without {key}"), Value::Object(without))
                })
                .collect();
            let mut extra = fields.clone();
            extra.insert("not_a_field".into(), json!(1));
            variants.push(("with an unknown field".into(), Value::Object(extra)));
            for (change, value) in variants {
                let serde = (examples.decodes)(value.to_string().as_bytes());
                let schema = v.is_valid(&value);
                assert_eq!(
                    schema,
                    serde,
                    "{name} request {change}: serde {} it, the schema {} it\n{value:#}",
                    if serde { "reads" } else { "refuses" },
                    if schema { "accepts" } else { "refuses" },
                );
            }
        }
    }
}

#[test]
fn a_value_that_is_not_the_wire_form_is_refused() {
    let doc = contract::asyncapi();
    let catalog = examples::catalog();
    let reply = validator(&doc, payload(&doc, "rule.get", true));
    let good = catalog.0["rule.get"].replies[0].clone();
    assert_valid(&reply, &good, "a rule.get reply");
    let mut bad = Vec::new();
    let mut renamed = good.clone();
    let id = renamed["result"]
        .as_object_mut()
        .unwrap()
        .remove("id")
        .unwrap();
    renamed["result"]["rule_id"] = id;
    bad.push(("a renamed field", renamed));
    let mut wrong_type = good.clone();
    wrong_type["result"]["revision"] = json!("3");
    bad.push(("a number as text", wrong_type));
    let mut wrong_name = good.clone();
    wrong_name["result"]["operation"] = json!("power_up");
    bad.push(("an unknown operation", wrong_name));
    let mut bad_time = good.clone();
    bad_time["result"]["created_at"] = json!("yesterday");
    bad.push(("a time that is not RFC 3339", bad_time));
    let mut bad_id = good.clone();
    bad_id["result"]["id"] = json!("rule-1");
    bad.push(("an ID that is not a UUID", bad_id));
    let mut bad_rule = good.clone();
    bad_rule["result"]["definition"]["steps"][0]["timeout"] = json!(600);
    bad.push(("a duration as a number", bad_rule));
    let mut both = good.clone();
    both["error"] = json!({"code": "internal", "message": "x"});
    bad.push(("a result and an error", both));
    let mut version = good;
    version["schema"] = json!(2);
    bad.push(("another schema version", version));
    for (what, value) in bad {
        assert!(
            !reply.is_valid(&value),
            "the schema accepts {what}: {value:#}"
        );
    }
}

#[test]
fn stream_messages_validate_against_their_channels() {
    let doc = contract::asyncapi();
    let events = validator(&doc, payload(&doc, "events.task", false));
    let progress = validator(&doc, payload(&doc, "progress.task", false));
    for (kind, event) in examples::task_events() {
        let value = serde_json::to_value(&event).unwrap();
        let (right, wrong) = if kind == "step_progress" {
            (&progress, &events)
        } else {
            (&events, &progress)
        };
        assert_valid(right, &value, &format!("a {kind} event"));
        assert!(
            !wrong.is_valid(&value),
            "a {kind} event fits the other subject"
        );
    }
    let submit = validator(&doc, payload(&doc, "tasks.submit", false));
    for s in examples::submissions() {
        assert_valid(
            &submit,
            &serde_json::to_value(&s).unwrap(),
            "a task request",
        );
    }
    let outcome = validator(&doc, payload(&doc, "events.submit", false));
    for o in examples::submit_outcomes() {
        let body: Value = serde_json::from_slice(&encode_reply(&o)).unwrap();
        assert_valid(&outcome, &body, "a submission outcome");
    }
    let hardware = validator(&doc, payload(&doc, "hardware", false));
    for origin in ["", "/redfish/v1/Chassis/1"] {
        let event = serde_json::to_value(examples::hardware_event(origin)).unwrap();
        assert_valid(&hardware, &event, "a hardware event");
    }
}
