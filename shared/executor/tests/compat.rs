//! Compatibility fixtures (`docs/upgrading.md`): the JSON of every message
//! Flow's processes exchange or keep — step jobs, results, cancel marks,
//! task events and live progress, power observations, hardware events,
//! stream submissions, power admission requests, and the workers'
//! checkpoints — as each release writes it, checked in under
//! `tests/compat/<release>/`.
//!
//! * Every fixture of **every** release is read by this release: a change
//!   that breaks reading what an older writer wrote fails here, so a
//!   rolling upgrade (a new scheduler beside old workers, or the reverse,
//!   or a checkpoint written before the upgrade) keeps working.
//! * This release's own fixtures are exactly what it writes (read, then
//!   written again, byte for byte as JSON values): a change to the written
//!   form is a decision — bless it into a new release's directory
//!   (`FLOW_BLESS=1 cargo test -p flow-executor --test compat`) and keep
//!   the old one.
//! * The rule for readers, shown on each fixture: a field a newer writer
//!   added is ignored (or refused where the message is a request that
//!   refuses unknown fields, and then named); a required field an older
//!   writer did not send fails to decode — the consumers park such a
//!   message with the reason (never a crash), which the last test shows is
//!   a decode error naming the field.

use std::path::{Path, PathBuf};

use flow_executor::checkpoint::Checkpoint;
use flow_protocol::event::HardwareEvent;
use flow_protocol::jobs::{CancelMark, JobMessage, ResultMessage};
use flow_protocol::power::{PowerAdmit, PowerSent};
use flow_protocol::state::{ComponentState, Observed};
use flow_protocol::submit::TaskSubmit;
use flow_protocol::task::TaskEvent;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// This release's fixtures.
const RELEASE: &str = env!("CARGO_PKG_VERSION");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/compat")
}

/// How a process reads a kind of message.
#[derive(Clone, Copy)]
enum Reader {
    /// A JetStream or core NATS message (`flow_protocol::decode::message`:
    /// its `schema` checked, its fields named when wrong).
    Message,
    /// A `flow.api` request body (`flow_protocol::decode::request`).
    Request,
    /// A worker's checkpoint from the job-state bucket.
    Checkpoint,
}

/// Reads `value` as `T` the way its reader does, and writes it again.
fn round_trip<T: Serialize + DeserializeOwned>(
    reader: Reader,
    value: &Value,
) -> Result<Value, String> {
    let bytes = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    let typed: T = match reader {
        Reader::Message => flow_protocol::decode::message(&bytes).map_err(|e| e.to_string())?,
        Reader::Request => flow_protocol::decode::request(&bytes).map_err(|e| e.to_string())?,
        Reader::Checkpoint => serde_json::from_slice(&bytes).map_err(|e| e.to_string())?,
    };
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

/// The message a fixture holds, by its file name: read and written again
/// by this release.
fn read(name: &str, value: &Value) -> Result<Value, String> {
    let kind = name
        .strip_suffix(".json")
        .unwrap_or(name)
        .split('-')
        .collect::<Vec<_>>();
    match kind.as_slice() {
        ["job", ..] => round_trip::<JobMessage>(Reader::Message, value),
        ["result", ..] => round_trip::<ResultMessage>(Reader::Message, value),
        ["cancel", "mark"] => round_trip::<CancelMark>(Reader::Message, value),
        ["task", "event", ..] => round_trip::<TaskEvent>(Reader::Message, value),
        ["observed"] => round_trip::<Observed>(Reader::Message, value),
        ["component", "state"] => round_trip::<ComponentState>(Reader::Message, value),
        ["hardware", "event"] => round_trip::<HardwareEvent>(Reader::Message, value),
        ["task", "submit"] => round_trip::<TaskSubmit>(Reader::Request, value),
        ["power", "admit"] => round_trip::<PowerAdmit>(Reader::Request, value),
        ["power", "sent"] => round_trip::<PowerSent>(Reader::Request, value),
        ["checkpoint"] => round_trip::<Checkpoint>(Reader::Checkpoint, value),
        _ => panic!("{name}: no message type is known for this fixture name"),
    }
}

/// Every fixture of `dir`: (file name, JSON).
fn fixtures(dir: &Path) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).expect("readable");
            let value: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            out.push((name, value));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn releases() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root())
        .expect("tests/compat")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn every_releases_messages_are_read_by_this_release() {
    let dirs = releases();
    assert!(
        dirs.iter().any(|d| d.ends_with(RELEASE)),
        "no fixtures for this release ({RELEASE}) under tests/compat"
    );
    let mut read_count = 0;
    for dir in dirs {
        for (name, value) in fixtures(&dir) {
            read(&name, &value)
                .unwrap_or_else(|e| panic!("{}/{name} no longer reads: {e}", dir.display()));
            read_count += 1;
        }
    }
    // Every kind of message has at least one fixture.
    assert!(read_count >= 16, "only {read_count} fixtures");
}

#[test]
fn this_release_writes_exactly_its_fixtures() {
    let dir = root().join(RELEASE);
    let bless = std::env::var_os("FLOW_BLESS").is_some_and(|v| v == "1");
    for (name, value) in fixtures(&dir) {
        let written = read(&name, &value).unwrap_or_else(|e| panic!("{name}: {e}"));
        if bless {
            let text = serde_json::to_string_pretty(&written).expect("json") + "\n";
            std::fs::write(dir.join(&name), text).expect("written");
            continue;
        }
        assert_eq!(
            written, value,
            "{RELEASE}/{name}: this release writes another form than its fixture. If intended, \
             keep the old release's fixtures and bless this one's \
             (FLOW_BLESS=1 cargo test -p flow-executor --test compat)"
        );
    }
}

#[test]
fn a_field_added_by_a_newer_writer_is_ignored_or_named() {
    for (name, value) in fixtures(&root().join(RELEASE)) {
        let Value::Object(mut fields) = value.clone() else {
            panic!("{name}: not an object");
        };
        fields.insert("added_by_a_newer_release".into(), Value::from(7));
        match read(&name, &Value::Object(fields)) {
            Ok(written) => assert_eq!(written, value, "{name}: the added field changed the read"),
            // Requests and events that refuse unknown fields name it (the
            // API answers `bad_request`, a consumer parks it).
            Err(e) => assert!(e.contains("added_by_a_newer_release"), "{name}: {e}"),
        }
    }
}

#[test]
fn a_required_field_an_older_writer_left_out_is_a_decode_error_naming_it() {
    let dir = root().join(RELEASE);
    let mut required = 0;
    for (name, value) in fixtures(&dir) {
        let Value::Object(fields) = &value else {
            continue;
        };
        for key in fields.keys() {
            let mut without = fields.clone();
            without.remove(key);
            if let Err(e) = read(&name, &Value::Object(without)) {
                required += 1;
                assert!(
                    e.contains(key.as_str()) || e.contains("missing field") || e.contains("kind"),
                    "{name} without {key}: the error does not say what is missing: {e}"
                );
            }
        }
    }
    assert!(required > 20, "only {required} required fields found");
}

#[test]
fn a_message_of_a_schema_this_release_does_not_speak_is_refused_for_its_version() {
    let mut checked = 0;
    for (name, value) in fixtures(&root().join(RELEASE)) {
        let Value::Object(mut fields) = value else {
            continue;
        };
        if !fields.contains_key("schema") {
            continue;
        }
        fields.insert("schema".into(), Value::from(2));
        let error = read(&name, &Value::Object(fields)).expect_err("schema 2 is refused");
        assert!(
            error.contains("schema: version 2 is not supported"),
            "{name}: {error}"
        );
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} fixtures carry a schema");
}
