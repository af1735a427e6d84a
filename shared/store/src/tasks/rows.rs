//! Task and step rows and their conversion to the lifecycle's state and the
//! API's records. The statuses are read and written through their enums'
//! one mapping (`as_str` / `FromStr` in `flow-protocol`); times are
//! converted between `timestamptz` and epoch milliseconds here only.

use flow_protocol::power::DomainName;
use std::collections::BTreeMap;
use std::sync::Arc;

use flow_decisions::lifecycle::conflict::Footprint;
use flow_decisions::lifecycle::{StepState, TaskPlan, TaskState, Window};
use flow_protocol::api::RuleSource;
use flow_protocol::jobs::{ComponentResult, ComponentTarget, FirmwareImage};
use flow_protocol::task::{StepRecord, TaskRecord, TaskSummary};
use flow_protocol::{RackId, RuleId, StepStatus, TaskId, TaskStatus};
use flow_rules::{ComponentType, OperationCode, OperationType, RuleDefinition};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::StoreError;

/// The columns of [`TaskRow`], for `SELECT`s (a macro so `concat!` can
/// build static SQL).
macro_rules! task_columns {
    () => {
        "id, request_id, rack_id, rack_name, operation_type, operation_code, status, rule_id, \
         rule_revision, rule_source, rule_name, rule_snapshot, components, firmware, \
         current_stage, message, cancel_requested_at, created_at, started_at, finished_at, \
         queue_expires_at, description, readiness_wait_ms, readiness_until, not_before, not_after, \
         schedule_id, run_id, event_id, power_domains, preempted_by, firmware_snapshot, archived"
    };
}
pub(crate) use task_columns;

/// The columns of [`StepRow`], for `SELECT`s.
macro_rules! step_columns {
    () => {
        "step_index, stage, component_type, status, generation, components, budget_ms, \
         deadline, started_at, finished_at, error, results, calls"
    };
}
pub(crate) use step_columns;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct TaskRow {
    pub id: Uuid,
    pub request_id: String,
    pub rack_id: Uuid,
    pub rack_name: String,
    pub operation_type: String,
    pub operation_code: String,
    pub status: String,
    pub rule_id: Option<Uuid>,
    pub rule_revision: Option<i32>,
    pub rule_source: String,
    pub rule_name: String,
    pub rule_snapshot: Value,
    pub components: Value,
    pub firmware: Value,
    pub current_stage: Option<i32>,
    pub message: String,
    pub cancel_requested_at: Option<OffsetDateTime>,
    pub created_at: OffsetDateTime,
    pub started_at: Option<OffsetDateTime>,
    pub finished_at: Option<OffsetDateTime>,
    pub queue_expires_at: Option<OffsetDateTime>,
    pub description: String,
    pub readiness_wait_ms: Option<i64>,
    pub readiness_until: Option<OffsetDateTime>,
    pub not_before: Option<OffsetDateTime>,
    pub not_after: Option<OffsetDateTime>,
    pub schedule_id: Option<Uuid>,
    pub run_id: Option<Uuid>,
    pub event_id: Option<Uuid>,
    pub power_domains: Vec<String>,
    pub preempted_by: Option<Uuid>,
    pub firmware_snapshot: Value,
    pub archived: Option<Value>,
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct StepRow {
    pub step_index: i32,
    pub stage: i32,
    pub component_type: String,
    pub status: String,
    pub generation: i32,
    pub components: i32,
    pub budget_ms: i64,
    pub deadline: Option<OffsetDateTime>,
    pub started_at: Option<OffsetDateTime>,
    pub finished_at: Option<OffsetDateTime>,
    pub error: Option<String>,
    pub results: Value,
    pub calls: i64,
}

fn corrupt(what: impl Into<String>, reason: impl ToString) -> StoreError {
    StoreError::Corrupt {
        what: what.into(),
        reason: reason.to_string(),
    }
}

pub(crate) use flow_protocol::task::timestamp::{from_ms as at, to_ms as ms};

pub(crate) fn int(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

pub(crate) fn big(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn unsigned(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

fn unsigned64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn source(text: &str, task: Uuid) -> Result<RuleSource, StoreError> {
    RuleSource::parse(text).ok_or_else(|| {
        corrupt(
            format!("rule source of task {task}"),
            format!("unknown rule source {text:?}"),
        )
    })
}

/// What an open task occupies, read from its row; what cannot be read is
/// logged and left unknown (conflicting with everything).
pub(crate) fn footprint(task: Uuid, operation: &str, components: serde_json::Value) -> Footprint {
    let operation = operation
        .parse::<flow_rules::OperationCode>()
        .inspect_err(|e| tracing::error!(task_id = %task, error = %e, "unreadable operation of an open task: it blocks its rack"))
        .ok();
    let by_type: BTreeMap<ComponentType, Vec<ComponentTarget>> = match serde_json::from_value(
        components,
    ) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(task_id = %task, error = %e, "unreadable components of an open task: it blocks its rack");
            return Footprint::default();
        }
    };
    Footprint {
        operation,
        components: by_type
            .into_iter()
            .map(|(t, targets)| (t, targets.into_iter().map(|c| c.name).collect()))
            .collect(),
    }
}

pub(crate) fn task_status(text: &str, task: Uuid) -> Result<TaskStatus, StoreError> {
    text.parse()
        .map_err(|e| corrupt(format!("status of task {task}"), e))
}

impl TaskRow {
    fn what(&self) -> String {
        format!("task {}", self.id)
    }

    fn operation(&self) -> Result<OperationCode, StoreError> {
        self.operation_code
            .parse()
            .map_err(|e: flow_rules::InvalidOperation| corrupt(self.what(), e))
    }

    fn status(&self) -> Result<TaskStatus, StoreError> {
        task_status(&self.status, self.id)
    }

    /// The plan: the operation, the validated rule snapshot, the components
    /// by type as the planner grouped them, the firmware images.
    fn plan(&self) -> Result<TaskPlan, StoreError> {
        let rule =
            RuleDefinition::from_value(&self.rule_snapshot).map_err(|e| corrupt(self.what(), e))?;
        let components: BTreeMap<ComponentType, Vec<ComponentTarget>> =
            serde_json::from_value(self.components.clone()).map_err(|e| corrupt(self.what(), e))?;
        let firmware: BTreeMap<ComponentType, FirmwareImage> =
            serde_json::from_value(self.firmware.clone()).map_err(|e| corrupt(self.what(), e))?;
        Ok(TaskPlan {
            operation: self.operation()?,
            rule,
            components,
            firmware,
            readiness_wait_ms: self.readiness_wait_ms.map(unsigned64),
            window: Window {
                not_before_ms: self.not_before.map(ms),
                not_after_ms: self.not_after.map(ms),
            },
            power_domains: self
                .power_domains
                .iter()
                .map(|d| DomainName::try_from(d.clone()).map_err(|e| corrupt(self.what(), e)))
                .collect::<Result<_, _>>()?,
            emergency: self.event_id.is_some(),
        })
    }

    /// The lifecycle's view of the task and its steps.
    pub(crate) fn into_state(self, steps: Vec<StepRow>) -> Result<TaskState, StoreError> {
        let plan = Arc::new(self.plan()?);
        let what = self.what();
        let steps = steps
            .into_iter()
            .map(|s| s.into_state(&what))
            .collect::<Result<_, _>>()?;
        Ok(TaskState {
            id: TaskId(self.id),
            rack: RackId(self.rack_id),
            plan,
            status: self.status()?,
            current_stage: self.current_stage.map(unsigned),
            message: self.message,
            cancel_requested: self.cancel_requested_at.is_some(),
            started_ms: self.started_at.map(ms),
            finished_ms: self.finished_at.map(ms),
            queue_expires_ms: self.queue_expires_at.map(ms),
            readiness_until_ms: self.readiness_until.map(ms),
            steps,
        })
    }

    /// The API's record of the task and its steps.
    pub(crate) fn into_record(self, steps: Vec<StepRow>) -> Result<TaskRecord, StoreError> {
        let what = self.what();
        let operation = self.operation()?;
        let operation_type: OperationType = self
            .operation_type
            .parse()
            .map_err(|e: flow_rules::InvalidOperation| corrupt(&what, e))?;
        Ok(TaskRecord {
            id: TaskId(self.id),
            status: self.status()?,
            rule_source: source(&self.rule_source, self.id)?,
            request_id: self.request_id,
            description: self.description,
            rack_id: RackId(self.rack_id),
            rack: self.rack_name,
            operation_type,
            operation,
            rule_id: self.rule_id.map(RuleId),
            rule_revision: self.rule_revision.map(unsigned),
            rule_name: self.rule_name,
            rule: self.rule_snapshot,
            current_stage: self.current_stage.map(unsigned),
            message: self.message,
            created_at: self.created_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            not_before: self.not_before,
            not_after: self.not_after,
            schedule_id: self.schedule_id.map(flow_protocol::ScheduleId),
            run_id: self.run_id.map(flow_protocol::RunId),
            event_id: self.event_id.map(flow_protocol::EventId),
            power_waits: Vec::new(),
            preempted_by: self.preempted_by.map(flow_protocol::EventId),
            firmware_snapshot: serde_json::from_value(self.firmware_snapshot)
                .map_err(|e| corrupt(&what, e))?,
            archived: self
                .archived
                .map(serde_json::from_value)
                .transpose()
                .map_err(|e| corrupt(&what, e))?,
            steps: steps
                .into_iter()
                .map(|s| s.into_record(&what))
                .collect::<Result<_, _>>()?,
        })
    }
}

/// A listing's row.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SummaryRow {
    pub id: Uuid,
    pub rack_name: String,
    pub operation_code: String,
    pub status: String,
    pub current_stage: Option<i32>,
    pub message: String,
    pub description: String,
    pub created_at: OffsetDateTime,
    pub finished_at: Option<OffsetDateTime>,
}

impl SummaryRow {
    pub(crate) fn into_summary(self) -> Result<TaskSummary, StoreError> {
        Ok(TaskSummary {
            id: TaskId(self.id),
            operation: self
                .operation_code
                .parse()
                .map_err(|e: flow_rules::InvalidOperation| {
                    corrupt(format!("task {}", self.id), e)
                })?,
            status: task_status(&self.status, self.id)?,
            rack: self.rack_name,
            current_stage: self.current_stage.map(unsigned),
            message: self.message,
            description: self.description,
            created_at: self.created_at,
            finished_at: self.finished_at,
        })
    }
}

impl StepRow {
    fn status(&self, what: &str) -> Result<StepStatus, StoreError> {
        self.status
            .parse()
            .map_err(|e| corrupt(format!("step {} of {what}", self.step_index), e))
    }

    fn component_type(&self, what: &str) -> Result<ComponentType, StoreError> {
        self.component_type
            .parse()
            .map_err(|e: flow_rules::UnknownComponentType| {
                corrupt(format!("step {} of {what}", self.step_index), e)
            })
    }

    fn results(&self, what: &str) -> Result<BTreeMap<String, ComponentResult>, StoreError> {
        serde_json::from_value(self.results.clone())
            .map_err(|e| corrupt(format!("results of step {} of {what}", self.step_index), e))
    }

    fn into_state(self, what: &str) -> Result<StepState, StoreError> {
        Ok(StepState {
            status: self.status(what)?,
            component_type: self.component_type(what)?,
            results: self.results(what)?,
            step_index: unsigned(self.step_index),
            stage: unsigned(self.stage),
            generation: unsigned(self.generation),
            components: unsigned(self.components),
            budget_ms: unsigned64(self.budget_ms),
            deadline_ms: self.deadline.map(ms),
            started_ms: self.started_at.map(ms),
            finished_ms: self.finished_at.map(ms),
            error: self.error,
            calls: unsigned64(self.calls),
        })
    }

    fn into_record(self, what: &str) -> Result<StepRecord, StoreError> {
        Ok(StepRecord {
            status: self.status(what)?,
            component_type: self.component_type(what)?,
            results: self.results(what)?,
            step_index: unsigned(self.step_index),
            stage: unsigned(self.stage),
            components: unsigned(self.components),
            budget_ms: unsigned64(self.budget_ms),
            deadline: self.deadline,
            started_at: self.started_at,
            finished_at: self.finished_at,
            error: self.error,
            calls: unsigned64(self.calls),
            generation: unsigned(self.generation),
        })
    }
}
