//! Schedules on the wire: a task request (the operation, its targets and
//! options, as `task.submit` takes them) fired at an interval, at cron
//! times in a time zone, or once; the maintenance windows its tasks may
//! start in; what each firing did. The calendar arithmetic is
//! `flow_decisions::calendar`'s.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::envelope::ApiError;
use crate::ids::{ScheduleId, TaskId};
use crate::submit::{RackOutcome, TaskSubmit};

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum ScheduleSpec {
    /// Every `every` (a Go duration, at least 1s), counted from creation.
    Interval {
        /// The period, e.g. `24h`.
        every: String,
    },
    /// At the times a 5-field cron expression names, read in the
    /// schedule's time zone.
    Cron {
        /// `minute hour day-of-month month day-of-week`.
        expression: String,
    },
    /// Once (a time already past fires at once).
    Once {
        /// When.
        #[schemars(with = "crate::contract::Timestamp")]
        #[serde(with = "crate::task::timestamp")]
        at: OffsetDateTime,
    },
}

impl ScheduleSpec {
    /// `interval`, `cron` or `once`.
    pub fn kind(&self) -> &'static str {
        match self {
            ScheduleSpec::Interval { .. } => "interval",
            ScheduleSpec::Cron { .. } => "cron",
            ScheduleSpec::Once { .. } => "once",
        }
    }

    /// The spec as an operator typed it: `every 24h`, `cron 0 2 * * 1`,
    /// `at 2026-12-02T02:00:00Z`.
    pub fn describe(&self) -> String {
        match self {
            ScheduleSpec::Interval { every } => format!("every {every}"),
            ScheduleSpec::Cron { expression } => format!("cron {expression}"),
            ScheduleSpec::Once { at } => format!("at {}", crate::task::timestamp::format(*at)),
        }
    }
}

/// What a firing does for a rack whose task from an earlier firing of the
/// same schedule has not finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Leave the rack out of this firing (recorded as skipped).
    #[default]
    Skip,
    /// Submit anyway, queued behind the running task.
    Queue,
}

impl Overlap {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::Queue => "queue",
        }
    }
}

/// A maintenance window: it opens at the times `cron` names (in
/// `timezone`, or the schedule's) and stays open for `duration`. A
/// schedule with windows starts tasks only inside one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceWindow {
    /// When it opens (5-field cron).
    pub cron: String,
    /// How long it stays open (Go duration, 1m to 168h).
    pub duration: String,
    /// Its time zone (empty: the schedule's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub timezone: String,
}

impl std::fmt::Display for MaintenanceWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} for {}", self.cron, self.duration)?;
        if !self.timezone.is_empty() {
            write!(f, " in {}", self.timezone)?;
        }
        Ok(())
    }
}

/// `schedule.create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleCreate {
    /// A unique name.
    pub name: String,
    /// When it fires.
    pub spec: ScheduleSpec,
    /// The IANA time zone cron times and windows are read in (default UTC).
    #[serde(default)]
    pub timezone: String,
    /// What a firing does for a rack still busy with the last one's task.
    #[serde(default)]
    pub overlap: Overlap,
    /// Windows its tasks may start in (none: any time).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<MaintenanceWindow>,
    /// The task request each firing submits. Its `request_id`, window
    /// (`not_before`, `not_after`) and description are the firing's.
    pub task: TaskSubmit,
}

/// `schedule.update`: changes what is given, at the revision the caller
/// read (a stale revision is refused, nothing changes). The operation and
/// its targets are fixed: delete and create for others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleUpdate {
    /// The schedule, by ID or name.
    pub schedule: String,
    /// The revision the change is made on.
    pub revision: u64,
    /// A new name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A new spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<ScheduleSpec>,
    /// A new time zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// A new overlap policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<Overlap>,
    /// New windows (an empty list removes them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows: Option<Vec<MaintenanceWindow>>,
}

/// `schedule.get`, `pause`, `resume`, `trigger`, `delete`, `history`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleByRef {
    /// The schedule, by ID or name.
    pub schedule: String,
    /// `history`: at most this many firings, newest first (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

impl ScheduleByRef {
    /// A reference without a limit.
    pub fn new(schedule: impl Into<String>) -> Self {
        ScheduleByRef {
            schedule: schedule.into(),
            limit: None,
        }
    }
}

/// `schedule.list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleList {
    /// Only schedules that are not paused.
    #[serde(default)]
    pub enabled_only: bool,
}

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleRecord {
    /// Its ID.
    pub id: ScheduleId,
    /// Its name.
    pub name: String,
    /// When it fires.
    pub spec: ScheduleSpec,
    /// The zone cron times and windows are read in.
    pub timezone: String,
    /// What a firing does for a busy rack.
    pub overlap: Overlap,
    /// Windows its tasks may start in.
    #[serde(default)]
    pub windows: Vec<MaintenanceWindow>,
    /// The task request each firing submits.
    pub task: TaskSubmit,
    /// False when paused.
    pub enabled: bool,
    /// When it fires next (none: paused, or a one-time schedule that fired).
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(default, with = "crate::task::timestamp::option")]
    pub next_run_at: Option<OffsetDateTime>,
    /// The time its last firing was due.
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(default, with = "crate::task::timestamp::option")]
    pub last_fired_at: Option<OffsetDateTime>,
    /// Changes with every update, pause and resume.
    pub revision: u64,
    /// When it was created.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "crate::task::timestamp")]
    pub created_at: OffsetDateTime,
    /// When it last changed.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "crate::task::timestamp")]
    pub updated_at: OffsetDateTime,
}

/// `schedule.list`'s reply, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleListReply {
    /// The schedules.
    pub schedules: Vec<ScheduleRecord>,
}

/// `schedule.delete`'s reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleDeleteReply {
    /// The schedule deleted (its tasks run on).
    pub id: ScheduleId,
}

/// What started a firing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FiringTrigger {
    /// Its time came.
    Scheduled,
    /// An operator's `trigger` (ignores the overlap policy and a pause).
    Manual,
}

impl FiringTrigger {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            FiringTrigger::Scheduled => "scheduled",
            FiringTrigger::Manual => "manual",
        }
    }
}

/// A rack a firing left out: its task from an earlier firing is still open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Skipped {
    /// The rack.
    pub rack: String,
    /// The schedule's open task on it.
    pub task_id: TaskId,
}

/// One firing of a schedule and what it did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FiringRecord {
    /// The time the firing was due (its identity, with the schedule).
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "crate::task::timestamp")]
    pub due_at: OffsetDateTime,
    /// When a scheduler fired it (later than `due_at` when the schedulers
    /// were down then: see `late`).
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "crate::task::timestamp")]
    pub fired_at: OffsetDateTime,
    /// Fired more than a minute after it was due (missed firings are not
    /// replayed: one late firing stands for them).
    pub late: bool,
    /// What started it.
    pub trigger: FiringTrigger,
    /// False until its submissions are recorded (a scheduler that died
    /// mid-firing leaves it for another to finish).
    pub done: bool,
    /// Per rack: the task created (or queued, or why refused).
    #[serde(default)]
    pub results: Vec<RackOutcome>,
    /// Racks left out by the overlap policy.
    #[serde(default)]
    pub skipped: Vec<Skipped>,
    /// Why the firing created nothing at all (its targets named nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
    /// The maintenance window its tasks were given, when it has windows.
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(default, with = "crate::task::timestamp::option")]
    pub window_start: Option<OffsetDateTime>,
    /// Its end.
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(default, with = "crate::task::timestamp::option")]
    pub window_end: Option<OffsetDateTime>,
}

/// What a firing did, as its row keeps it (and a trigger's reply shows it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FiringOutcome {
    /// Per rack: the task created, queued or refused.
    #[serde(default)]
    pub results: Vec<RackOutcome>,
    /// Racks left out by the overlap policy.
    #[serde(default)]
    pub skipped: Vec<Skipped>,
    /// Why nothing was created at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
}

/// `schedule.history`'s reply, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleHistoryReply {
    /// The firings.
    pub firings: Vec<FiringRecord>,
}

/// `schedule.trigger`'s reply: the firing it made.
pub type TriggerReply = FiringRecord;
