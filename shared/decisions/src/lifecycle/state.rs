//! What the lifecycle decides on: a task's plan (fixed at submission) and
//! its state (status, stage, steps), as the store loads and saves them.

use std::collections::BTreeMap;
use std::sync::Arc;

use flow_hardware::ComponentTarget;
use flow_protocol::jobs::{ComponentResult, FirmwareImage, StepJob};
use flow_protocol::{RackId, StepStatus, TaskId, TaskStatus};
use flow_rules::{ComponentType, OperationCode, RuleDefinition};

use crate::plan::Plan;

/// What a task runs, fixed when it is submitted: the operation, the rule
/// snapshot, the targeted components by type (as the planner grouped
/// them) and the firmware images.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskPlan {
    /// The operation.
    pub operation: OperationCode,
    /// The rule snapshot.
    pub rule: RuleDefinition,
    /// Every targeted component, by type, in inventory order.
    pub components: BTreeMap<ComponentType, Vec<ComponentTarget>>,
    /// Firmware images by type (firmware tasks).
    pub firmware: BTreeMap<ComponentType, FirmwareImage>,
    /// How long the readiness gate waits for the components to be ready
    /// (ms), or `None` for a task without a gate (decommission, or
    /// overridden).
    pub readiness_wait_ms: Option<u64>,
    /// When it may start.
    pub window: Window,
    /// Its rack's power domains, read at submission.
    pub power_domains: Vec<flow_protocol::power::DomainName>,
    /// A task of an event rule (not held by the shelves-off cap).
    pub emergency: bool,
}

/// When a task may start (epoch ms): not before the first, not after the
/// second; either open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Window {
    /// It waits (without holding its components) until this time.
    pub not_before_ms: Option<u64>,
    /// Not started by this time, it fails.
    pub not_after_ms: Option<u64>,
}

impl Window {
    /// Whether it may start at `now_ms` already (the end aside).
    pub fn open_at(&self, now_ms: u64) -> bool {
        self.not_before_ms.is_none_or(|t| now_ms >= t)
    }

    /// Whether its end has passed at `now_ms`.
    pub fn ended_at(&self, now_ms: u64) -> bool {
        self.not_after_ms.is_some_and(|t| now_ms >= t)
    }
}

impl TaskPlan {
    /// What the task occupies in its rack, for the conflict table.
    pub fn footprint(&self) -> super::conflict::Footprint {
        super::conflict::Footprint::new(
            self.operation,
            self.components
                .values()
                .flatten()
                .map(|c| (c.component_type, c.name.as_str())),
        )
    }

    /// The job of the step at `step_index` (`None` when the snapshot has no
    /// such step).
    pub fn job(&self, step_index: u32) -> Option<StepJob> {
        let step = self
            .rule
            .steps
            .get(usize::try_from(step_index).ok()?)?
            .clone();
        Some(StepJob {
            operation: self.operation,
            components: self
                .components
                .get(&step.component_type)
                .cloned()
                .unwrap_or_default(),
            all_components: self.components.clone(),
            firmware: self.firmware.clone(),
            power_domains: self.power_domains.clone(),
            emergency: self.emergency,
            step,
        })
    }
}

/// One step of a task.
#[derive(Debug, Clone, PartialEq)]
pub struct StepState {
    /// Its index in the rule snapshot.
    pub step_index: u32,
    /// Its stage.
    pub stage: u32,
    /// Its component type.
    pub component_type: ComponentType,
    /// Where it stands.
    pub status: StepStatus,
    /// How often its job was queued; a result must name the current one.
    pub generation: u32,
    /// How many components it acts on.
    pub components: u32,
    /// Its execution budget (ms).
    pub budget_ms: u64,
    /// When it fails if no result came (epoch ms), once started.
    pub deadline_ms: Option<u64>,
    /// When its job was queued (epoch ms).
    pub started_ms: Option<u64>,
    /// When it ended (epoch ms).
    pub finished_ms: Option<u64>,
    /// Why it failed or stopped.
    pub error: Option<String>,
    /// Each component's last result, by name.
    pub results: BTreeMap<String, ComponentResult>,
    /// Hardware calls its job made.
    pub calls: u64,
}

/// A task as the lifecycle sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskState {
    /// The task.
    pub id: TaskId,
    /// Its rack.
    pub rack: RackId,
    /// What it runs (shared: it never changes).
    pub plan: Arc<TaskPlan>,
    /// Where it stands.
    pub status: TaskStatus,
    /// The stage running, or the last one that ran.
    pub current_stage: Option<u32>,
    /// Why it ended (empty while open and when completed).
    pub message: String,
    /// An operator asked to cancel it (its cancel mark is out).
    pub cancel_requested: bool,
    /// When its first stage was queued (epoch ms).
    pub started_ms: Option<u64>,
    /// When it ended (epoch ms).
    pub finished_ms: Option<u64>,
    /// While waiting: when it gives up (epoch ms).
    pub queue_expires_ms: Option<u64>,
    /// While its readiness gate holds it (running, no stage started yet):
    /// when it gives up (epoch ms).
    pub readiness_until_ms: Option<u64>,
    /// Its steps, in rule order.
    pub steps: Vec<StepState>,
}

impl TaskState {
    /// A task as planned, not yet submitted ([`TaskStatus::Pending`]):
    /// steps of targeted types pending, the others skipped.
    pub fn planned(id: TaskId, rack: RackId, plan: Arc<TaskPlan>, planned: &Plan) -> TaskState {
        let mut steps: Vec<StepState> = planned
            .stages
            .iter()
            .flat_map(|stage| {
                stage.steps.iter().map(move |s| StepState {
                    step_index: u32::try_from(s.step_index).unwrap_or(u32::MAX),
                    stage: stage.stage.get(),
                    component_type: s.component_type,
                    status: if s.skipped {
                        StepStatus::Skipped
                    } else {
                        StepStatus::Pending
                    },
                    generation: 0,
                    components: u32::try_from(s.components.len()).unwrap_or(u32::MAX),
                    budget_ms: u64::try_from(s.budget.as_millis()).unwrap_or(u64::MAX),
                    deadline_ms: None,
                    started_ms: None,
                    finished_ms: None,
                    error: None,
                    results: BTreeMap::new(),
                    calls: 0,
                })
            })
            .collect();
        steps.sort_by_key(|s| s.step_index);
        TaskState {
            id,
            rack,
            plan,
            status: TaskStatus::Pending,
            current_stage: None,
            message: String::new(),
            cancel_requested: false,
            started_ms: None,
            finished_ms: None,
            queue_expires_ms: None,
            readiness_until_ms: None,
            steps,
        }
    }

    /// The step at `step_index`.
    pub fn step(&self, step_index: u32) -> Option<&StepState> {
        self.steps.iter().find(|s| s.step_index == step_index)
    }
}
