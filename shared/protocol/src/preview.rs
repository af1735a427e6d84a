//! `task.plan`: what a submission would do, per rack, without creating
//! anything or touching hardware (`services/scheduler/src/preview.rs`).
//! The preview is computed by the submission's own functions: the same
//! targets, rule resolution, planner, checks and admission decision, in a
//! transaction that is rolled back.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::TaskId;
use crate::envelope::ApiError;
use crate::readiness::NotReady;
use crate::rule_api::ResolveReply;
use flow_rules::ComponentType;

/// `task.plan` reply: one plan per targeted rack, in the submission's
/// order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskPlanReply {
    /// Per rack.
    pub results: Vec<RackPlan>,
}

/// What the submission would do with one rack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlanOutcome {
    /// A task would be created and start (or wait for its window,
    /// readiness or power, as `holds` say).
    Create,
    /// A task would be created and queue behind the rack's open tasks.
    Queue,
    /// The request ID already created a task for this rack: submitting
    /// returns it.
    Duplicate,
    /// Refused: `problems` say why, the first is what the submission
    /// answers.
    Refused,
}

/// One rack's plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RackPlan {
    /// The rack's name (as given, when it is unknown).
    pub rack: String,
    /// What would happen.
    pub outcome: PlanOutcome,
    /// The task a duplicate request returns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// The rule that would run and why (none when the rack is unknown or
    /// no rule resolves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<PlannedRule>,
    /// Stages in order, each with its steps.
    #[serde(default)]
    pub stages: Vec<StagePlan>,
    /// The task's time budget (the sum of its steps' budgets), ms.
    pub budget_ms: u64,
    /// The least time it takes: the rule's own sleeps and one poll
    /// interval per polling action, stage by stage, ms.
    pub expected_ms: u64,
    /// Each flashed component's installed → new version (firmware).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<VersionChange>,
    /// Every reason the submission would refuse this rack, in the order
    /// it checks them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<ApiError>,
    /// Why a created task would not start at once, or would pause on the
    /// way: open tasks ahead of it, readiness, its window, power domains.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<String>,
    /// Components that are not `ready` (a power or firmware task waits
    /// for them unless readiness is overridden).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_ready: Vec<NotReady>,
}

/// The rule a rack's task would run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlannedRule {
    /// Its name.
    pub name: String,
    /// Where it came from (explicit, rack, default, built-in) and why.
    pub resolved: ResolveSummary,
}

/// Where a rule came from, without its definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResolveSummary {
    /// `explicit`, `rack`, `default` or `builtin`.
    pub source: crate::rule_api::RuleSource,
    /// Why, in words.
    pub reason: String,
    /// The stored rule (none for a built-in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<crate::RuleId>,
    /// Its revision (none for a built-in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u32>,
}

impl From<&ResolveReply> for PlannedRule {
    fn from(r: &ResolveReply) -> Self {
        PlannedRule {
            name: r.name.clone(),
            resolved: ResolveSummary {
                source: r.source,
                reason: r.reason.clone(),
                rule_id: r.rule_id,
                revision: r.revision,
            },
        }
    }
}

/// One stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StagePlan {
    /// Its number.
    pub stage: u32,
    /// Its steps, in rule order.
    pub steps: Vec<StepPlan>,
}

/// One step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepPlan {
    /// Its index in the rule.
    pub step_index: u32,
    /// The type it targets.
    pub component_type: ComponentType,
    /// The components it would act on, in order.
    pub components: Vec<String>,
    /// No component of its type is targeted.
    pub skipped: bool,
    /// Its time budget, ms.
    pub budget_ms: u64,
}

/// How a flashed component's version would move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VersionMove {
    /// To a newer version.
    Up,
    /// To an older version.
    Down,
    /// Already at it (the update is skipped).
    Same,
    /// Not comparable (unknown installed version or a version scheme
    /// Flow does not order).
    Unknown,
}

/// One component's version change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VersionChange {
    /// The component.
    pub component: String,
    /// Its type.
    pub component_type: ComponentType,
    /// The version the inventory last knew (empty: unknown).
    pub installed: String,
    /// The image's version.
    pub target: String,
    /// Which way.
    pub direction: VersionMove,
    /// The operation would move it the wrong way (an upgrade down, a
    /// downgrade up): refused unless `allow_version_change`.
    pub wrong_way: bool,
}

/// A window opening, as a preview shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WindowPlan {
    /// When it opens.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "crate::task::timestamp")]
    pub opens: time::OffsetDateTime,
    /// When it closes.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "crate::task::timestamp")]
    pub closes: time::OffsetDateTime,
    /// Open at the firing (else the tasks wait for it to open).
    pub open_at_firing: bool,
}

/// One firing of a schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FiringPlan {
    /// When (UTC).
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "crate::task::timestamp")]
    pub at: time::OffsetDateTime,
    /// The same in the schedule's zone.
    pub local: String,
    /// The window its tasks get (none: the schedule has no windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowPlan>,
}

/// `schedule.plan` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SchedulePlanReply {
    /// The schedule's name.
    pub name: String,
    /// Its zone.
    pub timezone: String,
    /// Its next firings (at most five).
    pub firings: Vec<FiringPlan>,
    /// What a firing's task request would do on each rack now.
    pub racks: Vec<RackPlan>,
}

/// One phase of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PhasePlan {
    /// Its number, from 1 (as `run.targets` numbers them).
    pub phase: u32,
    /// Its racks, in the order they are submitted.
    pub racks: Vec<String>,
}

/// `run.plan` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunPlanReply {
    /// The run's name.
    pub name: String,
    /// The order its racks take (a random order shows the seed that makes
    /// it: give it to `run.create` to get this order).
    pub ordering: crate::run::Ordering,
    /// The phases in order.
    pub phases: Vec<PhasePlan>,
    /// At most this many tasks at once.
    pub max_concurrent: u32,
    /// The safety gates.
    pub gates: Vec<crate::run::Gate>,
    /// Whether phases advance without an operator.
    pub auto_advance: bool,
    /// The zone of its windows.
    pub timezone: String,
    /// The window it would start in (none: no windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowPlan>,
    /// What each rack's task would do now, in the run's order.
    pub racks: Vec<RackPlan>,
}
