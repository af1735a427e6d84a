//! Execution messages: step jobs (scheduler → workers, on
//! `flow.jobs.<component_type>`) and step results (workers → scheduler, on
//! `flow.results.<task_id>`), with the component descriptions both carry.
//! Workers have no database: a job carries everything a worker needs.

use std::collections::BTreeMap;

use flow_rules::{ComponentType, OperationCode, Step};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ids::TaskId;

/// The component a call acts on, as the rack inventory describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentTarget {
    /// Its rack's name.
    pub rack: String,
    /// Its name, unique in the rack.
    pub name: String,
    /// Its type.
    pub component_type: ComponentType,
    /// BMC base URL, `https://host[:port]`.
    pub bmc_url: String,
    /// Credential reference, resolved by the worker.
    pub credential_ref: String,
    /// Redfish resource IDs when known (`System_0`, `powershelf`); discovered
    /// when absent.
    #[serde(default)]
    pub resource_id: Option<String>,
}

impl ComponentTarget {
    /// The target of a stored component of the rack named `rack`.
    pub fn of(rack: &str, component: &crate::rack_api::ComponentRecord) -> Self {
        ComponentTarget {
            rack: rack.to_owned(),
            name: component.name.clone(),
            component_type: component.component_type,
            bmc_url: component.bmc_url.clone(),
            credential_ref: component.credential_ref.clone(),
            resource_id: None,
        }
    }
}

/// The image for one component type of a firmware task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FirmwareImage {
    /// Where the BMC fetches it.
    pub image_uri: String,
    /// The version it installs.
    pub version: Option<String>,
    /// Which firmware of the component it flashes (empty: its main one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sub_targets: Vec<SubTarget>,
    /// Its content digest, `sha256:` and 64 lower-case hex digits: a worker
    /// gives BMCs only bytes it has verified against it
    /// (`services/worker/src/images/`). Required of every new task; absent
    /// only in jobs written before digests existed, which are not flashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Its size in bytes, where known (a bundle's images; checked with the
    /// digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// One firmware of a component other than its main one, by what it is: a
/// switch tray's `bmc`, `cpld`, `bios`, `nvos`; a power shelf's `pmc`,
/// `psu`. Each manager maps it to its BMC's inventory member.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SubTarget {
    /// The tray's BMC.
    Bmc,
    /// The CPLD.
    Cpld,
    /// The host BIOS / UEFI.
    Bios,
    /// A switch tray's NVOS.
    Nvos,
    /// A power shelf's controller.
    Pmc,
    /// A power shelf's power supplies.
    Psu,
}

impl SubTarget {
    /// Every sub-target.
    pub const ALL: [SubTarget; 6] = [
        SubTarget::Bmc,
        SubTarget::Cpld,
        SubTarget::Bios,
        SubTarget::Nvos,
        SubTarget::Pmc,
        SubTarget::Psu,
    ];

    /// The name, as typed and serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            SubTarget::Bmc => "bmc",
            SubTarget::Cpld => "cpld",
            SubTarget::Bios => "bios",
            SubTarget::Nvos => "nvos",
            SubTarget::Pmc => "pmc",
            SubTarget::Psu => "psu",
        }
    }

    /// The sub-targets a component type has.
    pub fn of(component_type: ComponentType) -> &'static [SubTarget] {
        match component_type {
            ComponentType::NVSwitch => &[
                SubTarget::Bmc,
                SubTarget::Cpld,
                SubTarget::Bios,
                SubTarget::Nvos,
            ],
            ComponentType::PowerShelf => &[SubTarget::Pmc, SubTarget::Psu],
            _ => &[],
        }
    }
}

impl std::fmt::Display for SubTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SubTarget {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SubTarget::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown sub-target {s:?}; allowed: bmc, cpld, bios, nvos (NVSwitch), pmc, psu (PowerShelf)"
                )
            })
    }
}

/// One step of one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepJob {
    /// The task's operation (PowerControl without `operation` uses it).
    pub operation: OperationCode,
    /// The step, from the task's rule snapshot.
    #[serde(with = "step_json")]
    pub step: Step,
    /// The components of the step's type.
    pub components: Vec<ComponentTarget>,
    /// Every component of the task by type (VerifyReachability probes other
    /// types).
    pub all_components: BTreeMap<ComponentType, Vec<ComponentTarget>>,
    /// Firmware images by type (firmware tasks).
    #[serde(default)]
    pub firmware: BTreeMap<ComponentType, FirmwareImage>,
    /// The power domains of the rack, as the task read them at submission
    /// (empty: its power commands ask no admission).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub power_domains: Vec<crate::power::DomainName>,
    /// A task of an event rule (a leak's power-off): the shelves-off cap
    /// does not hold it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub emergency: bool,
}

/// Steps travel in their canonical JSON form and are validated on arrival.
mod step_json {
    use flow_rules::{RuleDefinition, Step};
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(step: &Step, s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(&step.to_json_value(), s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Step, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        let definition = serde_json::json!({"version": "v1", "steps": [value]});
        RuleDefinition::from_value(&definition)
            .map_err(|e| D::Error::custom(format!("invalid step: {e}")))?
            .steps
            .pop()
            .ok_or_else(|| D::Error::custom("invalid step: empty"))
    }
}

/// The JetStream stream of task requests (work queue, `flow.tasks.submit`).
pub const STREAM_TASKS: &str = "FLOW_TASKS";
/// The JetStream stream of step jobs (work queue, `flow.jobs.>`).
pub const STREAM_JOBS: &str = "FLOW_JOBS";
/// The JetStream stream of step results (work queue, `flow.results.>`).
pub const STREAM_RESULTS: &str = "FLOW_RESULTS";
/// The JetStream stream of task events (limits, 7 days, `flow.events.>`).
pub const STREAM_EVENTS: &str = "FLOW_EVENTS";
/// The JetStream stream of parked messages (limits, [`PARKED_MAX_AGE`],
/// `flow.parked.<origin stream, lowercase>`): every message a consumer
/// refused (not JSON, wrong fields, an unknown schema), kept with why.
pub const STREAM_PARKED: &str = "FLOW_PARKED";
/// How long parked messages are kept: long enough for an operator to notice
/// (`flow status` shows the count) and replay or discard them.
pub const PARKED_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);
/// The most bytes [`STREAM_PARKED`] keeps: past it the oldest parked
/// messages go first, so a flood of garbage cannot fill the disk.
pub const PARKED_MAX_BYTES: i64 = 1 << 30;
/// The most messages [`STREAM_PARKED`] keeps (the oldest go first).
pub const PARKED_MAX_MESSAGES: i64 = 1_000_000;
/// The workers' durable pull consumer on [`STREAM_JOBS`] for jobs
/// published before partitions (`flow.jobs.<type>`); each partition's is
/// `flow-workers-<partition>` ([`crate::partition::Partition::consumer`]).
pub const CONSUMER_WORKERS: &str = "flow-workers";
/// The schedulers' shared durable pull consumer on [`STREAM_RESULTS`].
pub const CONSUMER_SCHEDULER: &str = "flow-scheduler";
/// The schedulers' shared durable pull consumer on [`STREAM_TASKS`].
pub const CONSUMER_SUBMIT: &str = "flow-submit";
/// The KV bucket of worker checkpoints (and cancel marks).
pub const BUCKET_JOB_STATE: &str = "flow_job_state";
/// Task requests published to JetStream.
pub const SUBJECT_SUBMIT: &str = "flow.tasks.submit";

/// Header of a parked message: the stream it came from.
pub const HEADER_PARKED_STREAM: &str = "Flow-Parked-Stream";
/// Header of a parked message: the subject it was published on.
pub const HEADER_PARKED_SUBJECT: &str = "Flow-Parked-Subject";
/// Header of a parked message: its sequence in the origin stream.
pub const HEADER_PARKED_SEQUENCE: &str = "Flow-Parked-Sequence";
/// Header of a parked message: its `Nats-Msg-Id` in the origin stream.
pub const HEADER_PARKED_MSG_ID: &str = "Flow-Parked-Msg-Id";
/// Header of a parked message: why it was refused.
pub const HEADER_PARKED_REASON: &str = "Flow-Parked-Reason";
/// Header of a parked message: when it was parked (RFC 3339).
pub const HEADER_PARKED_AT: &str = "Flow-Parked-At";
/// Header of a parked message: the original payload's size in bytes.
pub const HEADER_PARKED_SIZE: &str = "Flow-Parked-Size";
/// Header of a parked message, present when its payload had to be cut to
/// fit `max_payload` with the headers: the bytes kept.
pub const HEADER_PARKED_TRUNCATED: &str = "Flow-Parked-Truncated";

/// The subject messages refused on `origin_stream` are parked on.
pub fn parked_subject(origin_stream: &str) -> String {
    format!("flow.parked.{}", origin_stream.to_ascii_lowercase())
}

/// Where a refused message came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkOrigin<'a> {
    /// Its stream.
    pub stream: &'a str,
    /// Its subject.
    pub subject: &'a str,
    /// Its sequence in the stream (stable across redeliveries; 0 when
    /// unknown).
    pub sequence: u64,
    /// Its `Nats-Msg-Id`, if it had one.
    pub msg_id: Option<&'a str>,
}

/// A refused message as it is parked on [`STREAM_PARKED`]: what to publish
/// (no I/O here; the services publish it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parked {
    /// `flow.parked.<stream>`.
    pub subject: String,
    /// `parked/<stream>/<sequence>` (none when the sequence is unknown): a
    /// redelivered message that was already parked (the term got lost) is
    /// dropped as a duplicate.
    pub msg_id: Option<String>,
    /// The headers, values on one line each.
    pub headers: Vec<(&'static str, String)>,
    /// How many bytes of the original payload to keep: all of them unless
    /// payload and headers together exceed `max_payload`.
    pub keep: usize,
}

/// Describes how to park a message of `payload_len` bytes refused for
/// `reason` at `at`, within the server's `max_payload`.
pub fn park(
    origin: &ParkOrigin<'_>,
    reason: &str,
    at: std::time::SystemTime,
    payload_len: usize,
    max_payload: usize,
) -> Parked {
    let line = |s: &str| -> String {
        crate::decode::cap(
            s.chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect(),
        )
    };
    let at = time::OffsetDateTime::from(at)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let msg_id =
        (origin.sequence > 0).then(|| format!("parked/{}/{}", origin.stream, origin.sequence));
    let mut headers = vec![
        (HEADER_PARKED_STREAM, line(origin.stream)),
        (HEADER_PARKED_SUBJECT, line(origin.subject)),
        (HEADER_PARKED_SEQUENCE, origin.sequence.to_string()),
        (HEADER_PARKED_REASON, line(reason)),
        (HEADER_PARKED_AT, at),
        (HEADER_PARKED_SIZE, payload_len.to_string()),
    ];
    if let Some(id) = origin.msg_id {
        headers.push((HEADER_PARKED_MSG_ID, line(id)));
    }
    // As NATS counts an HPUB: "NATS/1.0\r\n", "<name>: <value>\r\n" each,
    // "\r\n"; plus the Nats-Msg-Id header the publish adds.
    let header_len = |headers: &[(&str, String)]| -> usize {
        10 + 2
            + headers
                .iter()
                .map(|(k, v)| k.len() + 2 + v.len() + 2)
                .sum::<usize>()
            + msg_id
                .as_ref()
                .map_or(0, |id| "Nats-Msg-Id".len() + 2 + id.len() + 2)
    };
    let mut keep = payload_len;
    if header_len(&headers) + payload_len > max_payload {
        // The truncation header's own size, at its longest.
        headers.push((HEADER_PARKED_TRUNCATED, payload_len.to_string()));
        keep = max_payload.saturating_sub(header_len(&headers));
        if let Some((_, v)) = headers.last_mut() {
            *v = keep.to_string();
        }
    }
    Parked {
        subject: parked_subject(origin.stream),
        msg_id,
        headers,
        keep,
    }
}

/// What every job subject begins with.
pub const JOB_SUBJECT_PREFIX: &str = "flow.jobs.";

/// The subject of a component type's jobs on a rack's partition
/// (`flow.jobs.<partition>.<type>`, [`crate::partition`]).
pub fn job_subject(rack: &str, component_type: ComponentType) -> String {
    crate::partition::Partition::of_rack(rack).subject(component_type.subject_token())
}

/// The subject of a task's results.
pub fn result_subject(task: TaskId) -> String {
    format!("flow.results.{task}")
}

/// The subject of a task's events.
pub fn event_subject(task: TaskId) -> String {
    format!("flow.events.task.{task}")
}

/// The subject of a task's live progress (`step_progress` events from the
/// workers): plain NATS, outside every stream, so a progress report costs
/// no write to disk; only a live subscriber sees it (`flow task watch`).
/// The task's record and its transactional events on [`event_subject`]
/// tell what happened afterwards.
pub fn progress_subject(task: TaskId) -> String {
    format!("flow.progress.task.{task}")
}

/// The KV key of a task's cancel mark.
pub fn cancel_key(task: TaskId) -> String {
    format!("cancel.{task}")
}

/// The subject a put of a task's cancel mark is published on (a KV put is
/// a publish on `$KV.<bucket>.<key>`): the scheduler sets marks through its
/// outbox, in the transaction that ends or cancels the task.
pub fn cancel_mark_subject(task: TaskId) -> String {
    format!("$KV.{BUCKET_JOB_STATE}.{}", cancel_key(task))
}

/// A task's cancel mark, as the scheduler's outbox puts it into the
/// job-state bucket (key `cancel.<task>`): workers watching the bucket stop
/// the task's steps at their next action boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelMark {
    /// Message schema (1).
    pub schema: u32,
    /// The task.
    pub task_id: TaskId,
    /// When it was set (epoch ms).
    pub at_ms: u64,
}

impl CancelMark {
    /// The subject of the KV put ([`cancel_mark_subject`]).
    pub fn subject(&self) -> String {
        cancel_mark_subject(self.task_id)
    }

    /// Its `Nats-Msg-Id`: one mark per task.
    pub fn msg_id(&self) -> String {
        format!("cancel/{}", self.task_id)
    }
}

/// Identifies one delivery generation of one step of one task:
/// `<task>.<step_index>.<generation>` (also the `Nats-Msg-Id` stem and the
/// checkpoint key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct JobId {
    /// The task.
    pub task: TaskId,
    /// The step's index in the rule snapshot.
    pub step_index: u32,
    /// Bumped when the scheduler republishes a step from scratch.
    pub generation: u32,
}

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.task, self.step_index, self.generation)
    }
}

/// A step job as published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobMessage {
    /// Message schema (1).
    pub schema: u32,
    /// Which job.
    pub id: JobId,
    /// The stage it belongs to.
    pub stage: u32,
    /// When the scheduler fails it (epoch ms).
    pub deadline_ms: u64,
    /// The work.
    pub job: StepJob,
}

impl JobMessage {
    /// The rack it acts on: a task's components are all of one rack
    /// (empty when the step has no component at all).
    pub fn rack(&self) -> &str {
        self.job
            .components
            .first()
            .or_else(|| self.job.all_components.values().flatten().next())
            .map_or("", |c| c.rack.as_str())
    }

    /// The subject it is published on: its rack's partition and its step's
    /// component type.
    pub fn subject(&self) -> String {
        job_subject(self.rack(), self.job.step.component_type)
    }

    /// Its `Nats-Msg-Id`: one per job generation.
    pub fn msg_id(&self) -> String {
        format!("job/{}", self.id)
    }
}

/// How a step ended, as a worker reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum StepOutcome {
    /// Every action done.
    Completed,
    /// Failed: which action and why.
    Failed {
        /// The action label.
        action: String,
        /// What went wrong.
        message: String,
    },
    /// Stopped at an action boundary after a cancel mark.
    Cancelled,
}

/// A step result as published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultMessage {
    /// Message schema (1).
    pub schema: u32,
    /// Which job.
    pub id: JobId,
    /// How it ended.
    pub outcome: StepOutcome,
    /// Last result per component.
    pub components: BTreeMap<String, ComponentResult>,
    /// Hardware calls made.
    pub calls: u64,
    /// When the worker started and finished (epoch ms).
    pub started_ms: u64,
    /// Finished (epoch ms).
    pub finished_ms: u64,
}

/// One component's outcome in a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ComponentResult {
    /// Done, failed, or still pending when the step ended.
    pub status: crate::status::ComponentOutcome,
    /// Last result text (e.g. `sent On`, `On`).
    pub result: String,
    /// Calls made for it in the step, every action together (each retry
    /// and each poll is one): not its attempts — those are per action
    /// ([`ActionCalls`]). Records stored before this name read as
    /// `attempts`.
    #[serde(alias = "attempts")]
    pub calls: u32,
    /// Its last error in the step (it may have succeeded since).
    pub error: Option<String>,
    /// Its calls action by action.
    #[serde(default)]
    pub actions: Vec<ActionCalls>,
    /// The firmware version its `FirmwareControl` left it with (it was
    /// flashed, or already had it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_version: Option<String>,
}

/// The calls one action made for one component, for the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ActionCalls {
    /// The action's label, `main_operation (PowerControl)`.
    pub action: String,
    /// Calls made (the first and every retry or poll).
    pub attempts: u32,
    /// The last error of this action's calls.
    #[serde(default)]
    pub error: Option<String>,
    /// When the calls were made (epoch ms): the first and the last
    /// [`ActionCalls::KEPT_TIMES`] − 1 of them.
    #[serde(default)]
    pub at_ms: Vec<u64>,
}

impl ActionCalls {
    /// How many call times a record keeps (a long verification polls every
    /// few seconds for minutes).
    pub const KEPT_TIMES: usize = 16;

    /// A record of no calls yet.
    pub fn new(action: &str) -> Self {
        ActionCalls {
            action: action.to_owned(),
            attempts: 0,
            error: None,
            at_ms: Vec::new(),
        }
    }

    /// The action's name without its place (`PowerControl` of
    /// `main_operation (PowerControl)`).
    pub fn name(&self) -> &str {
        self.action
            .rsplit_once('(')
            .map_or(self.action.as_str(), |(_, n)| n.trim_end_matches(')'))
    }

    /// Whether its calls are polls (a verification or a wait), not attempts
    /// of a command.
    pub fn polls(&self) -> bool {
        let name = self.name();
        name.starts_with("Verify") || name.starts_with("Wait")
    }

    /// `PowerControl: 3 attempts`, `VerifyPowerStatus: 1 poll`.
    pub fn summary(&self) -> String {
        let (one, many) = if self.polls() {
            ("poll", "polls")
        } else {
            ("attempt", "attempts")
        };
        format!(
            "{}: {} {}",
            self.name(),
            self.attempts,
            if self.attempts == 1 { one } else { many }
        )
    }

    /// Counts one call made at `at_ms`, ending with `error` if it failed.
    pub fn record(&mut self, at_ms: u64, error: Option<&str>) {
        self.attempts += 1;
        if self.at_ms.len() >= Self::KEPT_TIMES {
            // Keep the first call's time; drop the oldest after it.
            self.at_ms.remove(1);
        }
        self.at_ms.push(at_ms);
        if let Some(e) = error {
            self.error = Some(e.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_components_calls_read_under_the_old_name_and_actions_say_attempts_or_polls() {
        let stored = serde_json::json!({"status": "done", "result": "sent Off",
            "attempts": 6, "error": null, "actions": [
                {"action": "main_operation (PowerControl)", "attempts": 3},
                {"action": "post_operation[0] (VerifyPowerStatus)", "attempts": 1}]});
        let r: ComponentResult = serde_json::from_value(stored).unwrap();
        assert_eq!(r.calls, 6);
        let written = serde_json::to_value(&r).unwrap();
        assert_eq!(written["calls"], 6);
        assert!(written.get("attempts").is_none(), "{written}");
        assert_eq!(r.actions[0].summary(), "PowerControl: 3 attempts");
        assert_eq!(r.actions[1].summary(), "VerifyPowerStatus: 1 poll");
    }

    fn origin() -> ParkOrigin<'static> {
        ParkOrigin {
            stream: STREAM_TASKS,
            subject: SUBJECT_SUBMIT,
            sequence: 7,
            msg_id: Some("req-1"),
        }
    }

    #[test]
    fn a_parked_message_keeps_its_payload_and_says_why_on_one_line() {
        let p = park(
            &origin(),
            "line 1\nline 2",
            std::time::UNIX_EPOCH,
            100,
            1 << 20,
        );
        assert_eq!(p.subject, "flow.parked.flow_tasks");
        assert_eq!(p.msg_id.as_deref(), Some("parked/FLOW_TASKS/7"));
        assert_eq!(p.keep, 100);
        let reason = p.headers.iter().find(|(k, _)| *k == HEADER_PARKED_REASON);
        assert_eq!(reason.map(|(_, v)| v.as_str()), Some("line 1 line 2"));
        assert!(p.headers.iter().all(|(_, v)| !v.contains(['\r', '\n'])));
        assert!(!p.headers.iter().any(|(k, _)| *k == HEADER_PARKED_TRUNCATED));
        let at = p.headers.iter().find(|(k, _)| *k == HEADER_PARKED_AT);
        assert_eq!(at.map(|(_, v)| v.as_str()), Some("1970-01-01T00:00:00Z"));
    }

    #[test]
    fn a_payload_at_max_payload_is_cut_to_fit_with_its_headers() {
        let max = 4096;
        let p = park(&origin(), "bad", std::time::SystemTime::now(), max, max);
        let headers: usize = 12
            + p.headers
                .iter()
                .map(|(k, v)| k.len() + v.len() + 4)
                .sum::<usize>()
            + "Nats-Msg-Id".len()
            + p.msg_id.as_ref().map_or(0, String::len)
            + 4;
        assert!(p.keep < max);
        assert!(
            headers + p.keep <= max && headers + p.keep > max - 8,
            "{p:?}"
        );
        let truncated = p
            .headers
            .iter()
            .find(|(k, _)| *k == HEADER_PARKED_TRUNCATED);
        assert_eq!(truncated.map(|(_, v)| v.clone()), Some(p.keep.to_string()));
    }
}
