//! Phased rollouts ("runs") on the wire: an operation (any: power,
//! firmware, decommission) rolled over racks in phases, at most so many at
//! once, paused by safety gates when failures climb. The decisions are
//! `flow_decisions::rollout`'s.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::ids::{RunId, TaskId};
use crate::schedule::MaintenanceWindow;
use crate::status::status_enum;
use crate::submit::TaskSubmit;

status_enum!(
    /// Where a run is.
    RunStatus, "run", "pending, running, paused, completed, cancelled, failed, completed_with_failures" {
        /// Created; not yet picked up by a scheduler.
        Pending => "pending",
        /// Submitting targets.
        Running => "running",
        /// Stopped by an operator, a gate, conflicts or its window (`reason`).
        Paused => "paused",
        /// Every target completed.
        Completed => "completed",
        /// Cancelled by an operator.
        Cancelled => "cancelled",
        /// Every target failed.
        Failed => "failed",
        /// Done; some targets failed.
        CompletedWithFailures => "completed_with_failures",
    }
);

impl RunStatus {
    /// Done for good.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RunStatus::Completed
                | RunStatus::Cancelled
                | RunStatus::Failed
                | RunStatus::CompletedWithFailures
        )
    }
}

status_enum!(
    /// Why a run is paused.
    RunReason, "run reason", "none, operator_paused, phase_gate, safety_gate, conflict_retry_timeout, outside_window" {
        /// Not paused.
        None => "none",
        /// An operator paused it.
        OperatorPaused => "operator_paused",
        /// A phase completed; waiting for `advance` (no auto-advance).
        PhaseGate => "phase_gate",
        /// A safety gate tripped.
        SafetyGate => "safety_gate",
        /// A target stayed blocked by conflicting tasks past the retry timeout.
        ConflictRetryTimeout => "conflict_retry_timeout",
        /// Outside its maintenance windows; resumes when one opens.
        OutsideWindow => "outside_window",
    }
);

status_enum!(
    /// Where one target (a rack) of a run is.
    TargetStatus, "run target", "pending, blocked, submitted, completed, failed, terminated, skipped" {
        /// Not yet submitted.
        Pending => "pending",
        /// Refused for a conflict; tried again later.
        Blocked => "blocked",
        /// Its task is open.
        Submitted => "submitted",
        /// Its task completed.
        Completed => "completed",
        /// Its task failed (or was refused for a reason other than a conflict).
        Failed => "failed",
        /// Its task was cancelled.
        Terminated => "terminated",
        /// Left out (the run was cancelled first).
        Skipped => "skipped",
    }
);

/// How a run's racks are cut into phases.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PhasePolicy {
    /// Cumulative shares of the racks, rising to 100 (`[1, 10, 50, 100]`).
    Percentages(Vec<u32>),
    /// Phases of these many racks; the rest is a final phase.
    Counts(Vec<usize>),
    /// This many phases as even as can be.
    Equal(usize),
}

/// The order a run takes its racks in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Ordering {
    /// Shuffled by a seed (generated and stored when not given).
    Random {
        /// The seed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
    },
    /// Row by row (a rack's `row` label, else its location).
    RowByRow,
    /// One rack of each row in turn.
    RoundRobinRows,
}

impl Default for Ordering {
    fn default() -> Self {
        Ordering::Random { seed: None }
    }
}

/// What a gate measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum GateKind {
    /// Trips when failed / planned reaches `percent`.
    FailureRate {
        /// 1 to 100.
        percent: u32,
    },
    /// Trips when `count` targets have failed.
    FailureCount {
        /// At least 1.
        count: u32,
    },
}

/// Which targets a gate counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GateScope {
    /// The current phase's.
    #[default]
    Phase,
    /// The whole run's.
    Run,
}

/// A safety gate: any one that trips pauses the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Gate {
    /// What it measures.
    #[serde(flatten)]
    pub kind: GateKind,
    /// Over which targets.
    #[serde(default)]
    pub scope: GateScope,
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            GateKind::FailureRate { percent } => write!(f, "failure-rate={percent}%")?,
            GateKind::FailureCount { count } => write!(f, "failure-count={count}")?,
        }
        match self.scope {
            GateScope::Phase => f.write_str(" per phase"),
            GateScope::Run => f.write_str(" over the run"),
        }
    }
}

/// How a target refused for a conflict is tried again: after
/// `initial_seconds`, doubling to `max_seconds`; past `timeout_seconds` of
/// trying the run pauses (`conflict_retry_timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// How long a target may stay blocked (default 1 h).
    #[serde(default = "default_retry_timeout")]
    pub timeout_seconds: u64,
    /// The first delay (default 30 s).
    #[serde(default = "default_retry_initial")]
    pub initial_seconds: u64,
    /// The longest delay (default 5 min).
    #[serde(default = "default_retry_max")]
    pub max_seconds: u64,
}

fn default_retry_timeout() -> u64 {
    3600
}
fn default_retry_initial() -> u64 {
    30
}
fn default_retry_max() -> u64 {
    300
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            timeout_seconds: default_retry_timeout(),
            initial_seconds: default_retry_initial(),
            max_seconds: default_retry_max(),
        }
    }
}

/// `run.create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCreate {
    /// A unique name.
    pub name: String,
    /// What it is for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The operation and its racks (by ID, name or label) and options, as
    /// `task.submit` takes them; one task per rack.
    pub task: TaskSubmit,
    /// How the racks are cut into phases.
    pub phases: PhasePolicy,
    /// At most this many racks' tasks open at once.
    pub max_concurrent: u32,
    /// Safety gates (at least one).
    pub gates: Vec<Gate>,
    /// Start the next phase when one completes (default: pause at the
    /// phase gate until `run.advance`).
    #[serde(default)]
    pub auto_advance: bool,
    /// The order the racks are taken in.
    #[serde(default)]
    pub ordering: Ordering,
    /// Windows targets may start in (none: any time).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<MaintenanceWindow>,
    /// The zone windows are read in (default UTC).
    #[serde(default)]
    pub timezone: String,
    /// Retrying targets refused for conflicts.
    #[serde(default)]
    pub retry: RetryPolicy,
}

/// `run.get`, `pause`, `resume`, `cancel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunByRef {
    /// The run, by ID or name.
    pub run: String,
}

/// `run.advance`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunAdvance {
    /// The run, by ID or name.
    pub run: String,
    /// The phase (1-based) the operator means to advance from: refused if
    /// the run is at another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_phase: Option<u32>,
}

/// `run.list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunList {
    /// At most this many, newest first (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `run.targets`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunTargets {
    /// The run, by ID or name.
    pub run: String,
    /// Only this phase (1-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<u32>,
}

/// Outcome counts of one phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PhaseCounts {
    /// Racks in it.
    pub planned: usize,
    /// Not yet submitted (or blocked).
    pub pending: usize,
    /// Tasks open.
    pub running: usize,
    /// Completed.
    pub completed: usize,
    /// Failed or terminated.
    pub failed: usize,
    /// Skipped.
    pub skipped: usize,
}

/// A tripped gate as the run keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GateState {
    /// The gate.
    pub gate: Gate,
    /// What it saw.
    pub figure: String,
    /// When.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "crate::task::timestamp")]
    pub at: OffsetDateTime,
}

/// A run as stored, with its phases' counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunRecord {
    /// Its ID.
    pub id: RunId,
    /// Its name.
    pub name: String,
    /// What it is for.
    #[serde(default)]
    pub description: String,
    /// The task request each target's task is made from.
    pub task: TaskSubmit,
    /// Where it is.
    pub status: RunStatus,
    /// Why it is paused.
    pub reason: RunReason,
    /// The current phase (1-based).
    pub phase: u32,
    /// Each phase's counts, in order.
    pub phases: Vec<PhaseCounts>,
    /// How the racks were cut.
    pub phase_policy: PhasePolicy,
    /// At most this many tasks open at once.
    pub max_concurrent: u32,
    /// Its gates.
    pub gates: Vec<Gate>,
    /// Whether it advances by itself.
    pub auto_advance: bool,
    /// The order (with the seed used).
    pub ordering: Ordering,
    /// Its windows.
    #[serde(default)]
    pub windows: Vec<MaintenanceWindow>,
    /// Their zone.
    pub timezone: String,
    /// Conflict retries.
    pub retry: RetryPolicy,
    /// The last gate that tripped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateState>,
    /// Failures accepted by resumes: in the current phase, in the run.
    #[serde(default)]
    pub accepted: [usize; 2],
    /// When it was created.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "crate::task::timestamp")]
    pub created_at: OffsetDateTime,
    /// When it last changed.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "crate::task::timestamp")]
    pub updated_at: OffsetDateTime,
    /// When it ended.
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(default, with = "crate::task::timestamp::option")]
    pub finished_at: Option<OffsetDateTime>,
}

impl RunRecord {
    /// Each gate's figure now against its threshold, one line each:
    /// `gate failure-rate=20% per phase: 1/10 failed (10.0 %)` (failures
    /// accepted by resumes not counted).
    pub fn gate_figures(&self) -> Vec<String> {
        let current = self
            .phases
            .get(usize::try_from(self.phase).unwrap_or(1).saturating_sub(1))
            .copied()
            .unwrap_or_default();
        let total = self.phases.iter().fold(PhaseCounts::default(), |mut a, p| {
            a.planned += p.planned;
            a.failed += p.failed;
            a
        });
        self.gates
            .iter()
            .map(|g| {
                let (counts, accepted) = match g.scope {
                    GateScope::Phase => (current, self.accepted[0]),
                    GateScope::Run => (total, self.accepted[1]),
                };
                let failed = counts.failed.saturating_sub(accepted);
                let figure = match g.kind {
                    GateKind::FailureRate { .. } => format!(
                        "{failed}/{} failed ({:.1} %)",
                        counts.planned,
                        failed as f64 * 100.0 / counts.planned.max(1) as f64
                    ),
                    GateKind::FailureCount { .. } => format!("{failed} failed"),
                };
                format!("gate {g}: {figure}")
            })
            .collect()
    }
}

/// One target of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunTargetRecord {
    /// The rack.
    pub rack: String,
    /// Its phase (1-based).
    pub phase: u32,
    /// Its place in the run's order (1-based).
    pub seq: u32,
    /// Where it is.
    pub status: TargetStatus,
    /// Its task, once submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// Submissions tried.
    pub attempts: u32,
    /// The last refusal or the task's message.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// A blocked target's next try.
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(default, with = "crate::task::timestamp::option")]
    pub next_attempt_at: Option<OffsetDateTime>,
}

/// `run.list`'s reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunListReply {
    /// Newest first.
    pub runs: Vec<RunRecord>,
}

/// `run.targets`' reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunTargetsReply {
    /// By phase, then order.
    pub targets: Vec<RunTargetRecord>,
}
