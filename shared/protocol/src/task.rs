//! Tasks on the wire: the record `task.get` returns, the listing and counts,
//! and the events on `flow.events.task.<task>` (written by the scheduler
//! through its outbox) and `flow.progress.task.<task>` (workers' live
//! progress, on no stream).

use std::collections::BTreeMap;

use flow_rules::{ComponentType, OperationCode, OperationType};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::ids::{RackId, RuleId, TaskId};
use crate::jobs::ComponentResult;
use crate::rule_api::RuleSource;
use crate::status::{StepStatus, TaskStatus};

/// Timestamps in records: RFC 3339 in UTC with six fractional digits
/// (`2026-12-01T13:06:27.520000Z`), so that two of them compare as text the
/// way they compare as times.
pub mod timestamp {
    use serde::{Deserialize, Deserializer, Serializer};
    use time::OffsetDateTime;
    use time::format_description::well_known::Rfc3339;
    use time::macros::format_description;

    /// The latest time a record holds (the end of year 9999): a deadline
    /// or an expiry past it (a budget of every attempt of a huge timeout)
    /// is kept as this, as good as never, not wrapped round to 1970.
    pub const LATEST_MS: u64 = 253_402_300_799_999;

    /// Epoch milliseconds as a time, at most [`LATEST_MS`].
    pub fn from_ms(ms: u64) -> OffsetDateTime {
        let ms = ms.min(LATEST_MS);
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH)
    }

    /// A time as epoch milliseconds (0 before the epoch).
    pub fn to_ms(t: OffsetDateTime) -> u64 {
        u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
    }

    /// The text form.
    pub fn format(t: OffsetDateTime) -> String {
        let utc = t.to_offset(time::UtcOffset::UTC);
        utc.format(format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
        ))
        .unwrap_or_else(|_| utc.to_string())
    }

    /// Serialises a timestamp.
    pub fn serialize<S: Serializer>(t: &OffsetDateTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(*t))
    }

    /// Reads any RFC 3339 timestamp.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<OffsetDateTime, D::Error> {
        let text = String::deserialize(d)?;
        OffsetDateTime::parse(&text, &Rfc3339).map_err(serde::de::Error::custom)
    }

    /// The same for an optional timestamp (`null` when absent).
    pub mod option {
        use super::*;

        /// Serialises an optional timestamp.
        pub fn serialize<S: Serializer>(
            t: &Option<OffsetDateTime>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => s.serialize_str(&super::format(*t)),
                None => s.serialize_none(),
            }
        }

        /// Reads an optional RFC 3339 timestamp.
        pub fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<OffsetDateTime>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(|text| {
                    OffsetDateTime::parse(&text, &Rfc3339).map_err(serde::de::Error::custom)
                })
                .transpose()
        }
    }
}

/// One step of a task, as `task.get` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepRecord {
    /// Its index in the rule snapshot.
    pub step_index: u32,
    /// Its stage.
    pub stage: u32,
    /// Its component type.
    pub component_type: ComponentType,
    /// Where it stands.
    pub status: StepStatus,
    /// The task's components of its type.
    pub components: u32,
    /// Its execution budget.
    pub budget_ms: u64,
    /// When the scheduler fails it (set when it starts).
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(with = "timestamp::option")]
    pub deadline: Option<OffsetDateTime>,
    /// When its job was queued.
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(with = "timestamp::option")]
    pub started_at: Option<OffsetDateTime>,
    /// When it ended.
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(with = "timestamp::option")]
    pub finished_at: Option<OffsetDateTime>,
    /// Why it failed or stopped.
    pub error: Option<String>,
    /// Each component's last result, by component name.
    pub results: BTreeMap<String, ComponentResult>,
    /// Hardware calls its job made.
    pub calls: u64,
    /// How often its job was queued (1 once started; a result of an older
    /// generation is ignored).
    pub generation: u32,
}

/// A task with its steps: the `task.get` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskRecord {
    /// The task.
    pub id: TaskId,
    /// The submission's idempotency key.
    pub request_id: String,
    /// The rack.
    pub rack_id: RackId,
    /// The rack's name.
    pub rack: String,
    /// What the operator said it is for.
    #[serde(default)]
    pub description: String,
    /// The operation's type.
    pub operation_type: OperationType,
    /// The operation.
    pub operation: OperationCode,
    /// Where it stands.
    pub status: TaskStatus,
    /// The stored rule it runs (none for a built-in rule).
    pub rule_id: Option<RuleId>,
    /// That rule's revision.
    pub rule_revision: Option<u32>,
    /// How the rule was resolved.
    pub rule_source: RuleSource,
    /// The rule's name.
    pub rule_name: String,
    /// The snapshot of the rule it runs (canonical JSON).
    #[schemars(with = "flow_rules::RuleDefinition")]
    pub rule: Value,
    /// The stage running, or the last one that ran.
    pub current_stage: Option<u32>,
    /// Why it ended (empty while it runs and when it completed).
    pub message: String,
    /// Submitted.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "timestamp")]
    pub created_at: OffsetDateTime,
    /// Its first stage queued.
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(with = "timestamp::option")]
    pub started_at: Option<OffsetDateTime>,
    /// Ended.
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(with = "timestamp::option")]
    pub finished_at: Option<OffsetDateTime>,
    /// Starts no earlier than this.
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(default, with = "timestamp::option")]
    pub not_before: Option<OffsetDateTime>,
    /// Fails if not started by this.
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(default, with = "timestamp::option")]
    pub not_after: Option<OffsetDateTime>,
    /// The schedule whose firing created it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<crate::ids::ScheduleId>,
    /// The phased rollout it was submitted for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<crate::ids::RunId>,
    /// The hardware event whose rule submitted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<crate::ids::EventId>,
    /// Its commands power admission holds now, and why
    /// (`docs/operating-safety.md`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub power_waits: Vec<crate::power::PowerWait>,
    /// The hardware event that preempted it: cancelled so that the event's
    /// task could start at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_by: Option<crate::ids::EventId>,
    /// A firmware task's snapshot: the version each component it was to
    /// flash had when it was submitted (`flow firmware restore`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub firmware_snapshot: Vec<crate::firmware::InstalledVersion>,
    /// Set once the task's detail went to the archive: its steps are then
    /// empty here and this says where they are and what they came to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived: Option<crate::history::ArchivedDetail>,
    /// Its steps, by stage then index.
    pub steps: Vec<StepRecord>,
}

/// A task in a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskSummary {
    /// The task.
    pub id: TaskId,
    /// The rack's name.
    pub rack: String,
    /// The operation.
    pub operation: OperationCode,
    /// Where it stands.
    pub status: TaskStatus,
    /// The stage running, or the last one that ran.
    pub current_stage: Option<u32>,
    /// Why it ended.
    pub message: String,
    /// What the operator said it is for.
    #[serde(default)]
    pub description: String,
    /// Submitted.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "timestamp")]
    pub created_at: OffsetDateTime,
    /// Ended.
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(with = "timestamp::option")]
    pub finished_at: Option<OffsetDateTime>,
}

/// The `task.list` reply: recent tasks, newest first (a JSON array).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct TaskListReply {
    /// The tasks.
    pub tasks: Vec<TaskSummary>,
}

/// The `task.counts` reply: how many tasks have each status (a JSON object
/// `{status: count}`; statuses no task has are absent).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct TaskCounts {
    /// Count by status.
    pub by_status: BTreeMap<TaskStatus, u64>,
}

/// An event about a task, on `flow.events.task.<task>` (stream
/// `FLOW_EVENTS`): `{"schema": 1, "task_id", "at_ms", "kind", …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskEvent {
    /// Message schema (1).
    pub schema: u32,
    /// The task.
    pub task_id: TaskId,
    /// When it happened (epoch ms).
    pub at_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: TaskEventKind,
}

/// What a [`TaskEvent`] reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TaskEventKind {
    /// A stage's steps were queued.
    StageStarted {
        /// The stage.
        stage: u32,
        /// The indexes of its steps that run.
        steps: Vec<u32>,
    },
    /// A step's result was recorded.
    StepFinished {
        /// Its stage.
        stage: u32,
        /// Its index.
        step_index: u32,
        /// The generation of the job that reported.
        #[serde(default)]
        generation: u32,
        /// How it ended.
        status: StepStatus,
        /// Why it failed or stopped.
        error: Option<String>,
        /// Hardware calls it made.
        calls: u64,
    },
    /// The task reached a final status.
    TaskFinished {
        /// The status.
        status: TaskStatus,
        /// Why (empty when it completed).
        message: String,
    },
    /// A worker's live progress on a step (published directly, not
    /// through the outbox: best effort, for watchers).
    StepProgress {
        /// The step's stage.
        stage: u32,
        /// Its index.
        step_index: u32,
        /// Its component type.
        component_type: ComponentType,
        /// The current action's label, or `done`.
        action: String,
        /// Components done with the current action.
        done: usize,
        /// Components that failed it.
        failed: usize,
        /// The step's components.
        total: usize,
        /// Components whose command power admission holds now.
        #[serde(default, skip_serializing_if = "is_zero")]
        held: usize,
        /// Why (the first held component's reason): `waiting for power
        /// budget in row=B: 1,180 of 1,200 kW`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        waiting: Option<String>,
    },
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl TaskEvent {
    /// An event of schema 1.
    pub fn new(task_id: TaskId, at_ms: u64, kind: TaskEventKind) -> Self {
        TaskEvent {
            schema: crate::envelope::SCHEMA,
            task_id,
            at_ms,
            kind,
        }
    }

    /// The subject it is published on: live progress on the task's
    /// progress subject (no stream keeps it), every other event on its
    /// event subject (`FLOW_EVENTS` keeps it).
    pub fn subject(&self) -> String {
        match self.kind {
            TaskEventKind::StepProgress { .. } => crate::jobs::progress_subject(self.task_id),
            _ => crate::jobs::event_subject(self.task_id),
        }
    }

    /// Its `Nats-Msg-Id`: one per stage start, step generation and finish,
    /// so a republished event is dropped; none for live progress.
    pub fn msg_id(&self) -> Option<String> {
        let task = self.task_id;
        match &self.kind {
            TaskEventKind::StageStarted { stage, .. } => {
                Some(format!("event/{task}/stage/{stage}"))
            }
            TaskEventKind::StepFinished {
                step_index,
                generation,
                ..
            } => Some(format!("event/{task}/step/{step_index}.{generation}")),
            TaskEventKind::TaskFinished { .. } => Some(format!("event/{task}/finished")),
            TaskEventKind::StepProgress { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_back_as_written_with_their_kind_beside_the_fields() {
        let task = TaskId::new();
        let e = TaskEvent::new(
            task,
            7,
            TaskEventKind::StepFinished {
                stage: 2,
                step_index: 1,
                generation: 1,
                status: StepStatus::Failed,
                error: Some("x".into()),
                calls: 3,
            },
        );
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["kind"], "step_finished");
        assert_eq!(v["status"], "failed");
        assert_eq!(v["schema"], 1);
        assert_eq!(serde_json::from_value::<TaskEvent>(v).unwrap(), e);
    }

    #[test]
    fn timestamps_compare_as_text_as_they_do_as_times() {
        let a = OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_500_000_000).unwrap();
        let b = OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_520_000_000).unwrap();
        assert_eq!(timestamp::format(a), "2023-11-14T22:13:20.500000Z");
        assert!(timestamp::format(a) < timestamp::format(b));
        assert_eq!(
            timestamp::to_ms(timestamp::from_ms(1_700_000_000_500)),
            1_700_000_000_500
        );
        // Far beyond what a record holds: the latest time, not 1970.
        assert_eq!(
            timestamp::format(timestamp::from_ms(u64::MAX)),
            "9999-12-31T23:59:59.999000Z"
        );
    }
}
