//! Execution messages: step jobs (scheduler → workers, on
//! `flow.jobs.<component_type>`) and step results (workers → scheduler, on
//! `flow.results.<task_id>`), with the component descriptions both carry.
//! Workers have no database: a job carries everything a worker needs.

use std::collections::BTreeMap;

use flow_rules::{ComponentType, OperationCode, Step};
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

/// The image for one component type of a firmware task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirmwareImage {
    /// Where the BMC fetches it.
    pub image_uri: String,
    /// The version it installs.
    pub version: Option<String>,
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
/// The workers' shared durable pull consumer on [`STREAM_JOBS`].
pub const CONSUMER_WORKERS: &str = "flow-workers";
/// The schedulers' shared durable pull consumer on [`STREAM_RESULTS`].
pub const CONSUMER_SCHEDULER: &str = "flow-scheduler";
/// The schedulers' shared durable pull consumer on [`STREAM_TASKS`].
pub const CONSUMER_SUBMIT: &str = "flow-submit";
/// The KV bucket of worker checkpoints (and cancel marks).
pub const BUCKET_JOB_STATE: &str = "flow_job_state";
/// Task requests published to JetStream.
pub const SUBJECT_SUBMIT: &str = "flow.tasks.submit";

/// The subject of a component type's jobs.
pub fn job_subject(component_type: ComponentType) -> String {
    format!("flow.jobs.{}", component_type.subject_token())
}

/// The subject of a task's results.
pub fn result_subject(task: TaskId) -> String {
    format!("flow.results.{task}")
}

/// The subject of a task's events.
pub fn event_subject(task: TaskId) -> String {
    format!("flow.events.task.{task}")
}

/// The KV key of a task's cancel mark.
pub fn cancel_key(task: TaskId) -> String {
    format!("cancel.{task}")
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentResult {
    /// `done`, `failed` or `pending`.
    pub status: String,
    /// Last result text (e.g. `sent On`, `On`).
    pub result: String,
    /// Attempts of the last call.
    pub attempts: u32,
    /// Last error.
    pub error: Option<String>,
}
