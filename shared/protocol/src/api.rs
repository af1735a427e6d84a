//! The `flow.api` request/reply contract. Every request is a JSON object
//! (unknown fields are refused); every reply is
//! `{"schema": 1, "result": …}` or `{"schema": 1, "error": {"code", "message", "details"}}`.

use flow_rules::{ComponentType, OperationCode, OperationType};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::audit::EndpointKind;
use crate::ids::{ComponentId, RackId, RackRef, RuleId};
use crate::rack::RackSpec;

/// The schema version of every message.
pub const SCHEMA: u32 = 1;

/// Stable error codes, for scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is not valid JSON or has wrong fields or types.
    BadRequest,
    /// The request is well-formed but its content is invalid (e.g. a rule
    /// that fails validation); `details` lists every problem.
    Invalid,
    /// What the request names does not exist.
    NotFound,
    /// The request conflicts with the current state (a default already
    /// exists, a name is taken, a rule still has associations).
    Conflict,
    /// No service answered (client side), or a dependency is down.
    Unavailable,
    /// A fault inside the service; the message says what.
    Internal,
}

impl ErrorCode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::Invalid => "invalid",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
        }
    }
}

/// An error reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}", code = code.as_str())]
pub struct ApiError {
    /// The stable code.
    pub code: ErrorCode,
    /// What was wrong, naming the field or object.
    pub message: String,
    /// Every individual problem, when there are several.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
}

impl ApiError {
    /// An error without details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// An `invalid` error listing every problem.
    pub fn invalid(message: impl Into<String>, details: Vec<String>) -> Self {
        ApiError {
            code: ErrorCode::Invalid,
            message: message.into(),
            details,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Envelope<T> {
    schema: u32,
    #[serde(
        default = "none",
        skip_serializing_if = "Option::is_none",
        bound(deserialize = "T: Deserialize<'de>")
    )]
    result: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ApiError>,
}

fn none<T>() -> Option<T> {
    None
}

/// Encodes a reply.
pub fn encode_reply<T: Serialize>(reply: &Result<T, ApiError>) -> Vec<u8> {
    let envelope = match reply {
        Ok(t) => Envelope {
            schema: SCHEMA,
            result: Some(t),
            error: None,
        },
        Err(e) => Envelope {
            schema: SCHEMA,
            result: None,
            error: Some(e.clone()),
        },
    };
    serde_json::to_vec(&envelope).unwrap_or_else(|e| {
        format!(
            r#"{{"schema":1,"error":{{"code":"internal","message":"reply could not be encoded: {e}"}}}}"#
        )
        .into_bytes()
    })
}

/// Decodes a reply.
pub fn decode_reply<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let envelope: Envelope<T> = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            ErrorCode::Internal,
            format!("the service sent a reply this client cannot read: {e}"),
        )
    })?;
    if envelope.schema != SCHEMA {
        return Err(ApiError::new(
            ErrorCode::Internal,
            format!(
                "the service speaks schema {}, this client schema {SCHEMA}",
                envelope.schema
            ),
        ));
    }
    match (envelope.result, envelope.error) {
        (_, Some(e)) => Err(e),
        (Some(r), None) => Ok(r),
        (None, None) => Err(ApiError::new(
            ErrorCode::Internal,
            "the service sent a reply with neither result nor error",
        )),
    }
}

/// Decodes a request body; an empty body reads as `{}`. A body that is not
/// JSON, names an unknown field, lacks one, has a wrong type, or speaks
/// another `schema` is a `bad_request` whose message names the field (see
/// [`crate::decode`]).
pub fn decode_request<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    crate::decode::request(bytes).map_err(|e| {
        ApiError::new(
            ErrorCode::BadRequest,
            format!("request body is not a valid request: {e}"),
        )
    })
}

// ---- endpoints --------------------------------------------------------------

/// A `flow.api` endpoint: its name (the subject is `flow.api.<NAME>`), the
/// request it takes and the reply it gives. The service and the client are
/// both written against these, so a subject cannot drift from its types.
pub trait Endpoint {
    /// The name, `rule.create`.
    const NAME: &'static str;
    /// Whether it reads or changes state (which decides whether requests
    /// to it are audited, see [`crate::audit`]).
    const KIND: EndpointKind;
    /// The request body.
    type Request: Serialize + DeserializeOwned + Send + Sync;
    /// The reply's `result`.
    type Reply: Serialize + DeserializeOwned + Send;
}

/// Every endpoint: a marker type each, tied to its request and reply.
pub mod endpoint {
    use super::*;
    use crate::task::{TaskListReply, TaskRecord};

    macro_rules! endpoints {
        ($($(#[$doc:meta])* $marker:ident = $name:literal ($kind:ident): $req:ty => $rep:ty;)+) => {
            $(
                $(#[$doc])*
                #[derive(Debug, Clone, Copy)]
                pub struct $marker;

                impl Endpoint for $marker {
                    const NAME: &'static str = $name;
                    const KIND: EndpointKind = EndpointKind::$kind;
                    type Request = $req;
                    type Reply = $rep;
                }
            )+

            /// Every endpoint's name.
            pub const ALL: &[&str] = &[$($name,)+];

            /// Every endpoint with its kind (read, change, internal):
            /// every `change` request leaves one audit record.
            pub const CATALOG: &[(&str, EndpointKind)] = &[$(($name, EndpointKind::$kind),)+];
        };
    }

    /// The kind of the endpoint named `name`, if there is one.
    pub fn kind(name: &str) -> Option<EndpointKind> {
        CATALOG.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
    }

    endpoints! {
        /// Create one rule.
        RuleCreate = "rule.create" (Change): super::RuleCreate => RuleRecord;
        /// Create a batch of rules (the YAML batch, as JSON).
        RuleBatchCreate = "rule.batch_create" (Change): super::RuleBatchCreate => BatchCreateReply;
        /// Get one rule.
        RuleGet = "rule.get" (Read): RuleById => RuleRecord;
        /// List rules.
        RuleList = "rule.list" (Read): super::RuleList => RuleListReply;
        /// Change a rule's name, description or definition.
        RuleUpdate = "rule.update" (Change): super::RuleUpdate => RuleRecord;
        /// Delete a rule.
        RuleDelete = "rule.delete" (Change): super::RuleDelete => RuleDeleteReply;
        /// Make a rule the default for its operation.
        RuleSetDefault = "rule.set_default" (Change): RuleById => RuleRecord;
        /// Bind a rule to a rack.
        RuleAssociate = "rule.associate" (Change): super::RuleAssociate => Association;
        /// Unbind a rack's rule for an operation.
        RuleDisassociate = "rule.disassociate" (Change): super::RuleDisassociate => DisassociateReply;
        /// Which rule would run, and why.
        RuleResolve = "rule.resolve" (Read): super::RuleResolve => ResolveReply;
        /// Every saved definition of a rule.
        RuleHistory = "rule.history" (Read): RuleById => HistoryReply;
        /// Create a rack from a rack document.
        RackCreate = "rack.create" (Change): super::RackCreate => RackRecord;
        /// Get a rack and its components.
        RackGet = "rack.get" (Read): RackByRef => RackRecord;
        /// List racks.
        RackList = "rack.list" (Read): super::RackList => RackListReply;
        /// Delete a rack.
        RackDelete = "rack.delete" (Change): RackByRef => RackDeleteReply;
        /// Set or remove a rack's labels.
        RackLabel = "rack.label" (Change): super::RackLabel => RackRecord;
        /// Set components' operator status (ready, in_use, maintenance).
        ComponentStatusSet = "rack.component_status" (Change): super::ComponentStatusSet => ComponentStatusReply;
        /// Submit an operation on racks (one task per rack).
        TaskSubmit = "task.submit" (Change): super::TaskSubmit => TaskSubmitReply;
        /// What `task.submit` would do, per rack, creating nothing.
        TaskPlan = "task.plan" (Read): super::TaskSubmit => crate::preview::TaskPlanReply;
        /// Get a task with its steps.
        TaskGet = "task.get" (Read): TaskById => TaskRecord;
        /// List recent tasks.
        TaskList = "task.list" (Read): super::TaskList => TaskListReply;
        /// Cancel a task at its next action boundary.
        TaskCancel = "task.cancel" (Change): TaskById => TaskCancelReply;
        /// Tasks by status.
        TaskCounts = "task.counts" (Read): TaskCountsRequest => crate::task::TaskCounts;
        /// Create a schedule.
        ScheduleCreate = "schedule.create" (Change): crate::schedule::ScheduleCreate => crate::schedule::ScheduleRecord;
        /// What `schedule.create` would store and fire, creating nothing.
        SchedulePlan = "schedule.plan" (Read): crate::schedule::ScheduleCreate => crate::preview::SchedulePlanReply;
        /// Get a schedule.
        ScheduleGet = "schedule.get" (Read): crate::schedule::ScheduleByRef => crate::schedule::ScheduleRecord;
        /// List schedules, oldest first.
        ScheduleList = "schedule.list" (Read): crate::schedule::ScheduleList => crate::schedule::ScheduleListReply;
        /// Change a schedule at the revision read.
        ScheduleUpdate = "schedule.update" (Change): crate::schedule::ScheduleUpdate => crate::schedule::ScheduleRecord;
        /// Stop a schedule firing.
        SchedulePause = "schedule.pause" (Change): crate::schedule::ScheduleByRef => crate::schedule::ScheduleRecord;
        /// Let a paused schedule fire again (its next time counted from now).
        ScheduleResume = "schedule.resume" (Change): crate::schedule::ScheduleByRef => crate::schedule::ScheduleRecord;
        /// Fire a schedule now.
        ScheduleTrigger = "schedule.trigger" (Change): crate::schedule::ScheduleByRef => crate::schedule::TriggerReply;
        /// Delete a schedule (its tasks run on).
        ScheduleDelete = "schedule.delete" (Change): crate::schedule::ScheduleByRef => crate::schedule::ScheduleDeleteReply;
        /// A schedule's firings and the tasks each created, newest first.
        ScheduleHistory = "schedule.history" (Read): crate::schedule::ScheduleByRef => crate::schedule::ScheduleHistoryReply;
        /// Create a phased rollout.
        RunCreate = "run.create" (Change): crate::run::RunCreate => crate::run::RunRecord;
        /// What `run.create` would do: phases, order, gates, windows and
        /// each rack's task, creating nothing.
        RunPlan = "run.plan" (Read): crate::run::RunCreate => crate::preview::RunPlanReply;
        /// Get a run with its phases' counts.
        RunGet = "run.get" (Read): crate::run::RunByRef => crate::run::RunRecord;
        /// List runs, newest first.
        RunList = "run.list" (Read): crate::run::RunList => crate::run::RunListReply;
        /// A run's targets.
        RunTargets = "run.targets" (Read): crate::run::RunTargets => crate::run::RunTargetsReply;
        /// Pause a run.
        RunPause = "run.pause" (Change): crate::run::RunByRef => crate::run::RunRecord;
        /// Resume a paused run (accepting the failures that tripped a gate).
        RunResume = "run.resume" (Change): crate::run::RunByRef => crate::run::RunRecord;
        /// Start the next phase of a run at its phase gate.
        RunAdvance = "run.advance" (Change): crate::run::RunAdvance => crate::run::RunRecord;
        /// Cancel a run and its open tasks.
        RunCancel = "run.cancel" (Change): crate::run::RunByRef => crate::run::RunRecord;
        /// Create an event rule (disabled unless asked).
        EventRuleCreate = "event_rule.create" (Change): crate::event::EventRuleCreate => crate::event::EventRuleRecord;
        /// Get an event rule (or a built-in: `builtin:<event type>`).
        EventRuleGet = "event_rule.get" (Read): crate::event::EventRuleByRef => crate::event::EventRuleRecord;
        /// List event rules, then the built-ins.
        EventRuleList = "event_rule.list" (Read): crate::event::EventRuleList => crate::event::EventRuleListReply;
        /// Change an event rule at the revision read.
        EventRuleUpdate = "event_rule.update" (Change): crate::event::EventRuleUpdate => crate::event::EventRuleRecord;
        /// Enable or disable an event rule.
        EventRuleEnable = "event_rule.enable" (Change): crate::event::EventRuleEnable => crate::event::EventRuleRecord;
        /// Delete an event rule and its bindings.
        EventRuleDelete = "event_rule.delete" (Change): crate::event::EventRuleByRef => crate::event::EventRuleDeleteReply;
        /// Bind a rule to the site or a rack for its event type.
        EventRuleBind = "event_rule.bind" (Change): crate::event::EventRuleBind => crate::event::BindingRecord;
        /// Remove the binding of an event type at a scope.
        EventRuleUnbind = "event_rule.unbind" (Change): crate::event::EventRuleUnbind => crate::event::UnbindReply;
        /// Every binding.
        EventRuleBindings = "event_rule.bindings" (Read): crate::event::BindingList => crate::event::BindingListReply;
        /// Hand in a hardware event (as a watcher publishes it).
        EventPublish = "event.publish" (Change): crate::event::HardwareEvent => crate::event::EventPublishReply;
        /// Get an event and its executions.
        EventGet = "event.get" (Read): crate::event::EventById => crate::event::EventRecord;
        /// List events, newest first.
        EventList = "event.list" (Read): crate::event::EventList => crate::event::EventListReply;
        /// Clear an event with a reason: its locks go.
        EventClear = "event.clear" (Change): crate::event::EventClear => crate::event::EventRecord;
        /// Create a power domain or replace its limits.
        PowerDomainSet = "power_domain.set" (Change): crate::power::PowerDomainSet => crate::power::PowerDomainRecord;
        /// A power domain: limits, racks, draw in use, waiting commands.
        PowerDomainGet = "power_domain.get" (Read): crate::power::PowerDomainByName => crate::power::PowerDomainRecord;
        /// Every power domain.
        PowerDomainList = "power_domain.list" (Read): crate::power::PowerDomainList => crate::power::PowerDomainListReply;
        /// Delete a power domain (racks naming it keep the name, unlimited).
        PowerDomainDelete = "power_domain.delete" (Change): crate::power::PowerDomainByName => crate::power::PowerDomainDeleteReply;
        /// Set the draw of a component type (for a rack model).
        PowerModelSet = "power_model.set" (Change): crate::power::PowerModelSet => crate::power::PowerModelSet;
        /// Every draw model, defaults included.
        PowerModelList = "power_model.list" (Read): crate::power::PowerModelList => crate::power::PowerModelListReply;
        /// Replace the power domains a rack belongs to.
        RackPowerDomains = "rack.power_domains" (Change): crate::power::RackPowerDomains => RackRecord;
        /// May this power command go now (budget, spacing, shelves off)? Asked by workers.
        PowerAdmit = "power.admit" (Internal): crate::power::PowerAdmit => crate::power::Admission;
        /// Audit records, newest first (nothing can change or delete them).
        AuditList = "audit.list" (Read): crate::audit::AuditList => crate::audit::AuditListReply;
    }
}

// ---- requests ---------------------------------------------------------------

/// `rule.create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleCreate {
    /// Rule name.
    pub name: String,
    /// Description.
    #[serde(default)]
    pub description: String,
    /// `power_control`, `firmware_control` or `decommission`.
    pub operation_type: String,
    /// The operation code.
    pub operation: String,
    /// The rule definition `{"version", "steps"}`.
    pub definition: Value,
    /// Make it the default; refused if a default exists.
    #[serde(default)]
    pub is_default: bool,
}

/// `rule.batch_create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleBatchCreate {
    /// The batch document `{"version", "rules": […]}` (the YAML batch as JSON).
    pub batch: Value,
    /// Replace existing rules for the same operations (as new revisions of
    /// those rules, keeping their rack associations).
    #[serde(default)]
    pub overwrite: bool,
}

/// `rule.get`, `rule.set_default`, `rule.history`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleById {
    /// The rule.
    pub id: RuleId,
}

/// `rule.delete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleDelete {
    /// The rule.
    pub id: RuleId,
    /// Also remove its rack associations (otherwise a rule bound to racks is
    /// not deleted).
    #[serde(default)]
    pub force: bool,
}

/// `rule.list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleList {
    /// Only this operation type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_type: Option<OperationType>,
    /// Only this operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<OperationCode>,
    /// Only default rules.
    #[serde(default)]
    pub default_only: bool,
    /// Skip this many (newest first).
    #[serde(default)]
    pub offset: u32,
    /// At most this many (default 100, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `rule.update`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleUpdate {
    /// The rule.
    pub id: RuleId,
    /// New name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// New description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// New definition (a new revision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<Value>,
}

/// `rule.associate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleAssociate {
    /// The rack, by ID or name.
    pub rack: RackRef,
    /// The rule; its operation decides which binding it replaces.
    pub rule_id: RuleId,
}

/// `rule.disassociate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleDisassociate {
    /// The rack, by ID or name.
    pub rack: RackRef,
    /// The operation whose binding to remove.
    pub operation: OperationCode,
}

/// `rule.resolve`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleResolve {
    /// The rack, by ID or name.
    pub rack: RackRef,
    /// The operation.
    pub operation: OperationCode,
    /// An explicit rule, as a task request may name one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<RuleId>,
}

/// `rack.create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RackCreate {
    /// The rack document.
    pub rack: RackSpec,
}

/// `rack.get`, `rack.delete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RackByRef {
    /// The rack, by ID or name.
    pub rack: RackRef,
}

/// `rack.list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RackList {
    /// Only racks carrying every one of these labels.
    #[serde(default, skip_serializing_if = "crate::labels::Labels::is_empty")]
    pub labels: crate::labels::Labels,
}

/// `rack.label`: sets and removes labels of a rack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RackLabel {
    /// The rack, by ID or name.
    pub rack: RackRef,
    /// Labels to set (a key it has already gets the new value).
    #[serde(default)]
    pub set: crate::labels::Labels,
    /// Keys to remove (a key it does not have is no error).
    #[serde(default)]
    pub remove: Vec<String>,
}

/// `rack.component_status`: sets the status of components.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComponentStatusSet {
    /// The components: IDs, `<rack>/<name>`, or names one rack has.
    pub components: Vec<String>,
    /// Their new status.
    pub status: crate::readiness::ComponentStatus,
}

/// `rack.component_status` reply: each component as it is now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentStatusReply {
    /// (rack, component, status), in the order named.
    pub components: Vec<ComponentStatusEntry>,
}

/// One component's status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentStatusEntry {
    /// Its rack's name.
    pub rack: String,
    /// Its name.
    pub component: String,
    /// Its status.
    pub status: crate::readiness::ComponentStatus,
}

/// `task.submit` (also the body of a message on `flow.tasks.submit`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSubmit {
    /// Idempotency key: a repeated request returns the tasks it created
    /// (required by `task.submit`; a schedule's task sets its own).
    #[serde(default)]
    pub request_id: String,
    /// Whole racks, by ID or name (one task each).
    #[serde(default)]
    pub racks: Vec<RackRef>,
    /// Whole racks carrying every one of these labels.
    #[serde(default, skip_serializing_if = "crate::labels::Labels::is_empty")]
    pub labels: crate::labels::Labels,
    /// Individual components: an ID, `<rack>/<name>`, or a name that only
    /// one rack has (one task per rack they are in).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<String>,
    /// Only these component types (empty: all).
    #[serde(default)]
    pub component_types: Vec<ComponentType>,
    /// The operation.
    pub operation: OperationCode,
    /// Use the operation's forced variant (`power_off` → `force_power_off`,
    /// `restart` → `force_restart`; power operations only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forced: bool,
    /// What the task is for, shown with it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// An explicit rule (no fallback when missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<RuleId>,
    /// Firmware images by component type (firmware operations).
    #[serde(default)]
    pub firmware: std::collections::BTreeMap<ComponentType, crate::jobs::FirmwareImage>,
    /// What to do when a rack is busy: refuse (default) or queue.
    #[serde(default)]
    pub conflict: ConflictStrategy,
    /// Start even if targeted components are not `ready` (power and
    /// firmware tasks otherwise wait for them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub override_readiness: bool,
    /// How long a power or firmware task waits for its components to be
    /// ready before it fails naming them (default 1800).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_timeout_seconds: Option<u64>,
    /// Allow a firmware upgrade to install an older version than a
    /// component has (or a downgrade a newer one); refused otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_version_change: bool,
    /// Why: required with `override_readiness` or `allow_version_change`
    /// (refused without one, naming `reason`); kept in the audit record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Start no earlier than this (RFC 3339): until then the task waits
    /// without holding its components.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::task::timestamp::option"
    )]
    pub not_before: Option<OffsetDateTime>,
    /// Start no later than this (RFC 3339): a task that has not started by
    /// then fails ("its window ended").
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::task::timestamp::option"
    )]
    pub not_after: Option<OffsetDateTime>,
}

/// The longest request ID: it becomes a `Nats-Msg-Id` and a subject token
/// (`flow.events.submit.<request_id>`), which must stay well inside the
/// server's control-line limit (4 KiB).
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// Racks in one submission at most (one task each, created one by one).
pub const MAX_RACKS_PER_SUBMIT: usize = 1000;

/// Components named in one submission at most.
pub const MAX_COMPONENTS_PER_SUBMIT: usize = 10_000;

/// The longest task description.
pub const MAX_DESCRIPTION_LEN: usize = 1024;

impl TaskSubmit {
    /// What decoding cannot check: a non-empty request ID of at most
    /// [`MAX_REQUEST_ID_LEN`] characters; at least one rack, label or
    /// component, at most [`MAX_RACKS_PER_SUBMIT`] racks and
    /// [`MAX_COMPONENTS_PER_SUBMIT`] components; valid labels; a
    /// description of at most [`MAX_DESCRIPTION_LEN`] characters; `forced`
    /// only where the operation has a forced variant; a `reason` with
    /// `override_readiness` or `allow_version_change`.
    pub fn check(&self) -> Result<(), ApiError> {
        let bad = |m: String| Err(ApiError::new(ErrorCode::BadRequest, m));
        if self.request_id.trim().is_empty() {
            return bad("request_id: must not be empty".to_owned());
        }
        if self.request_id.chars().count() > MAX_REQUEST_ID_LEN {
            return bad(format!(
                "request_id: must be at most {MAX_REQUEST_ID_LEN} characters"
            ));
        }
        if self.request_id.chars().any(char::is_control) {
            return bad("request_id: must not contain control characters".to_owned());
        }
        if self.racks.is_empty() && self.labels.is_empty() && self.components.is_empty() {
            return bad("racks: name at least one rack, label or component".to_owned());
        }
        if self.racks.len() > MAX_RACKS_PER_SUBMIT {
            return bad(format!(
                "racks: at most {MAX_RACKS_PER_SUBMIT} per request, got {}",
                self.racks.len()
            ));
        }
        if self.components.len() > MAX_COMPONENTS_PER_SUBMIT {
            return bad(format!(
                "components: at most {MAX_COMPONENTS_PER_SUBMIT} per request, got {}",
                self.components.len()
            ));
        }
        if let Some(problem) = crate::labels::problems("labels", &self.labels)
            .into_iter()
            .next()
        {
            return bad(problem);
        }
        if self.description.chars().count() > MAX_DESCRIPTION_LEN {
            return bad(format!(
                "description: must be at most {MAX_DESCRIPTION_LEN} characters"
            ));
        }
        if let Some(t) = self.readiness_timeout_seconds
            && !(1..=crate::readiness::MAX_WAIT_SECONDS).contains(&t)
        {
            return bad(format!(
                "readiness_timeout_seconds: must be 1 to {}, got {t}",
                crate::readiness::MAX_WAIT_SECONDS
            ));
        }
        // Compared as stored, to the millisecond.
        let ms = crate::task::timestamp::to_ms;
        if let (Some(start), Some(end)) = (self.not_before, self.not_after)
            && ms(start) >= ms(end)
        {
            return bad(format!(
                "not_after: must be later than not_before ({})",
                crate::task::timestamp::format(start)
            ));
        }
        self.operation_to_run()?;
        for (set, field) in [
            (self.override_readiness, "override_readiness"),
            (self.allow_version_change, "allow_version_change"),
        ] {
            if set {
                crate::audit::check_reason(self.reason.as_deref(), field)?;
            }
        }
        if let Some(reason) = &self.reason {
            crate::audit::check_reason(Some(reason), "a reason")?;
        }
        Ok(())
    }

    /// The operation the task runs: [`TaskSubmit::operation`], or its forced
    /// variant when [`TaskSubmit::forced`] is set.
    pub fn operation_to_run(&self) -> Result<OperationCode, ApiError> {
        use flow_rules::PowerOperation as P;
        if !self.forced {
            return Ok(self.operation);
        }
        match self.operation {
            OperationCode::Power(P::PowerOff | P::ForcePowerOff) => {
                Ok(OperationCode::Power(P::ForcePowerOff))
            }
            OperationCode::Power(P::Restart | P::ForceRestart) => {
                Ok(OperationCode::Power(P::ForceRestart))
            }
            other => Err(ApiError::new(
                ErrorCode::BadRequest,
                format!(
                    "forced: only power_off and restart have a forced variant (force_power_off, force_restart), not {other}"
                ),
            )),
        }
    }

    /// A submission of `operation` on whole `racks`, with every option at
    /// its default.
    pub fn new(request_id: String, operation: OperationCode, racks: Vec<RackRef>) -> TaskSubmit {
        TaskSubmit {
            request_id,
            racks,
            labels: crate::labels::Labels::new(),
            components: Vec::new(),
            component_types: Vec::new(),
            operation,
            forced: false,
            description: String::new(),
            rule_id: None,
            firmware: std::collections::BTreeMap::new(),
            conflict: ConflictStrategy::default(),
            override_readiness: false,
            readiness_timeout_seconds: None,
            allow_version_change: false,
            reason: None,
            not_before: None,
            not_after: None,
        }
    }

    /// How long the task's readiness gate waits, or `None` when it has
    /// none: only power and firmware tasks are gated, unless overridden.
    pub fn readiness_wait(&self) -> Option<std::time::Duration> {
        let gated = matches!(
            self.operation.operation_type(),
            OperationType::PowerControl | OperationType::FirmwareControl
        );
        (gated && !self.override_readiness).then(|| {
            std::time::Duration::from_secs(
                self.readiness_timeout_seconds
                    .unwrap_or(crate::readiness::DEFAULT_WAIT_SECONDS),
            )
        })
    }
}

/// What a submission does when a rack already has an unfinished task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "strategy", deny_unknown_fields)]
pub enum ConflictStrategy {
    /// Refuse with the reason.
    #[default]
    Reject,
    /// Wait (at most 5 per rack, FIFO) until the rack is free, or fail
    /// after `timeout_seconds` (default 3600).
    Queue {
        /// How long to wait.
        #[serde(default = "default_queue_timeout")]
        timeout_seconds: u64,
    },
}

fn default_queue_timeout() -> u64 {
    3600
}

/// `task.get`, `task.cancel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskById {
    /// The task.
    pub id: crate::ids::TaskId,
}

/// `task.counts` (no fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskCountsRequest {}

/// `task.list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskList {
    /// At most this many (default 50).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// What a submission did for one rack.
#[derive(Debug, Clone, PartialEq)]
pub enum Submission {
    /// A new task, started.
    Created(crate::ids::TaskId),
    /// The request ID had already created this task.
    Duplicate(crate::ids::TaskId),
    /// A new task, waiting for the rack (FIFO).
    Queued {
        /// The task.
        task_id: crate::ids::TaskId,
        /// Its place in the rack's queue (1: next).
        position: u32,
        /// When it gives up waiting.
        expires_at: OffsetDateTime,
    },
    /// No task: why.
    Refused(ApiError),
}

impl Submission {
    /// The task, unless refused.
    pub fn task_id(&self) -> Option<crate::ids::TaskId> {
        match self {
            Submission::Created(id)
            | Submission::Duplicate(id)
            | Submission::Queued { task_id: id, .. } => Some(*id),
            Submission::Refused(_) => None,
        }
    }
}

/// One rack's outcome of a submission. On the wire:
/// `{"rack", "task_id"?, "duplicate", "queued", "error"?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "RackOutcomeWire", try_from = "RackOutcomeWire")]
pub struct RackOutcome {
    /// The rack as named in the request.
    pub rack: String,
    /// What happened.
    pub submission: Submission,
}

#[derive(Serialize, Deserialize)]
struct RackOutcomeWire {
    rack: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    task_id: Option<crate::ids::TaskId>,
    #[serde(default)]
    duplicate: bool,
    #[serde(default)]
    queued: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queue_position: Option<u32>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::task::timestamp::option"
    )]
    queue_expires_at: Option<OffsetDateTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ApiError>,
}

impl From<RackOutcome> for RackOutcomeWire {
    fn from(o: RackOutcome) -> Self {
        let mut wire = RackOutcomeWire {
            rack: o.rack,
            task_id: o.submission.task_id(),
            duplicate: false,
            queued: false,
            queue_position: None,
            queue_expires_at: None,
            error: None,
        };
        match o.submission {
            Submission::Duplicate(_) => wire.duplicate = true,
            Submission::Queued {
                position,
                expires_at,
                ..
            } => {
                wire.queued = true;
                wire.queue_position = Some(position);
                wire.queue_expires_at = Some(expires_at);
            }
            Submission::Refused(e) => wire.error = Some(e),
            Submission::Created(_) => {}
        }
        wire
    }
}

impl TryFrom<RackOutcomeWire> for RackOutcome {
    type Error = String;

    fn try_from(w: RackOutcomeWire) -> Result<Self, Self::Error> {
        let submission = match (w.task_id, w.error, w.duplicate, w.queued) {
            (Some(id), None, false, false) => Submission::Created(id),
            (Some(id), None, true, false) => Submission::Duplicate(id),
            (Some(id), None, false, true) => Submission::Queued {
                task_id: id,
                position: w.queue_position.unwrap_or(0),
                expires_at: w.queue_expires_at.unwrap_or(OffsetDateTime::UNIX_EPOCH),
            },
            (None, Some(e), false, false) => Submission::Refused(e),
            _ => {
                return Err(format!(
                    "rack {:?}: an outcome has either a task (created, duplicate or queued) or an error",
                    w.rack
                ));
            }
        };
        Ok(RackOutcome {
            rack: w.rack,
            submission,
        })
    }
}

/// `task.submit` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSubmitReply {
    /// One entry per requested rack, in order.
    pub results: Vec<RackOutcome>,
}

/// What a cancel request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelOutcome {
    /// The task runs: its steps stop at their next action boundary, then it
    /// is terminated.
    Cancelling,
    /// The task was waiting for its rack: it is terminated, nothing ran.
    CancelledWhileQueued,
    /// Its readiness gate held it: it is terminated, nothing ran.
    CancelledBeforeStart,
    /// The task had already ended.
    AlreadyFinished,
}

/// `task.cancel` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskCancelReply {
    /// True while the task is being stopped ([`CancelOutcome::Cancelling`]).
    pub cancelling: bool,
    /// What the request did.
    pub outcome: CancelOutcome,
    /// The task's status after the request.
    pub status: crate::status::TaskStatus,
}

// ---- replies ------------------------------------------------------------------

/// A stored rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleRecord {
    /// ID.
    pub id: RuleId,
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Operation type.
    pub operation_type: OperationType,
    /// Operation code.
    pub operation: OperationCode,
    /// The default for its operation.
    pub is_default: bool,
    /// Revision of the definition (1 on create, +1 on each change).
    pub revision: u32,
    /// The canonical definition.
    pub definition: Value,
    /// Racks bound to this rule.
    #[serde(default)]
    pub associations: Vec<Association>,
    /// Created.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// Last changed.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

/// A rule in a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleSummary {
    /// ID.
    pub id: RuleId,
    /// Name.
    pub name: String,
    /// Operation type.
    pub operation_type: OperationType,
    /// Operation code.
    pub operation: OperationCode,
    /// The default for its operation.
    pub is_default: bool,
    /// Current revision.
    pub revision: u32,
    /// Created.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// `rule.list` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleListReply {
    /// This page, newest first.
    pub rules: Vec<RuleSummary>,
    /// How many match in all.
    pub total: u64,
}

/// A rule a batch created, replaced or skipped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchItem {
    /// The rule (for a skip: the existing rule that caused it).
    pub id: RuleId,
    /// Its name.
    pub name: String,
    /// Its operation.
    pub operation: OperationCode,
}

/// `rule.batch_create` reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BatchCreateReply {
    /// New rules.
    pub created: Vec<BatchItem>,
    /// Existing rules given a new revision.
    pub overwritten: Vec<BatchItem>,
    /// Operations that already had a rule (without `overwrite`).
    pub skipped: Vec<BatchItem>,
}

/// `rule.delete` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleDeleteReply {
    /// False when no such rule existed (deleting is idempotent).
    pub deleted: bool,
    /// Rack associations removed with it.
    pub associations_removed: u64,
}

/// A rack's binding of a rule to an operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Association {
    /// The rack.
    pub rack_id: RackId,
    /// Its name.
    pub rack_name: String,
    /// The operation.
    pub operation: OperationCode,
    /// The rule.
    pub rule_id: RuleId,
}

/// `rule.disassociate` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DisassociateReply {
    /// False when nothing was bound.
    pub removed: bool,
}

/// Where a resolved rule came from, in resolution order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleSource {
    /// Named by the request.
    Explicit,
    /// Bound to the rack.
    RackAssociation,
    /// The operation's default.
    Default,
    /// Flow's built-in rule.
    Builtin,
}

impl RuleSource {
    /// Every source, in resolution order.
    pub const ALL: [RuleSource; 4] = [
        RuleSource::Explicit,
        RuleSource::RackAssociation,
        RuleSource::Default,
        RuleSource::Builtin,
    ];

    /// The name, as serialised and stored.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleSource::Explicit => "explicit",
            RuleSource::RackAssociation => "rack_association",
            RuleSource::Default => "default",
            RuleSource::Builtin => "builtin",
        }
    }

    /// The source named `text`.
    pub fn parse(text: &str) -> Option<RuleSource> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// `rule.resolve` reply: which rule would run, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolveReply {
    /// Where it came from.
    pub source: RuleSource,
    /// Why, in words.
    pub reason: String,
    /// The stored rule (none for a built-in rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<RuleId>,
    /// Its revision (none for a built-in rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u32>,
    /// Its name.
    pub name: String,
    /// The operation.
    pub operation: OperationCode,
    /// The canonical definition that would run.
    pub definition: Value,
}

/// One saved definition of a rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RevisionRecord {
    /// Revision number.
    pub revision: u32,
    /// Name at that revision.
    pub name: String,
    /// Description at that revision.
    pub description: String,
    /// The canonical definition.
    pub definition: Value,
    /// When it was saved.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// `rule.history` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryReply {
    /// The rule (it may since have been deleted).
    pub rule_id: RuleId,
    /// Operation.
    pub operation: OperationCode,
    /// Oldest first.
    pub revisions: Vec<RevisionRecord>,
}

/// A stored component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentRecord {
    /// ID.
    pub id: ComponentId,
    /// Type.
    #[serde(rename = "type")]
    pub component_type: ComponentType,
    /// Name.
    pub name: String,
    /// Slot or tray position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// Vendor.
    pub manufacturer: String,
    /// Model.
    pub model: String,
    /// Serial.
    pub serial: String,
    /// Firmware version, as last known.
    pub firmware_version: String,
    /// BMC base URL.
    pub bmc_url: String,
    /// Credential reference.
    pub credential_ref: String,
    /// Its operator-set status (the readiness gate waits on it).
    #[serde(default)]
    pub status: crate::readiness::ComponentStatus,
}

/// A stored rack with its components.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RackRecord {
    /// ID.
    pub id: RackId,
    /// Unique name.
    pub name: String,
    /// Vendor.
    pub manufacturer: String,
    /// Model.
    pub model: String,
    /// Serial.
    pub serial: String,
    /// Location.
    pub location: String,
    /// Labels.
    #[serde(default)]
    pub labels: crate::labels::Labels,
    /// The power domains it belongs to.
    #[serde(default)]
    pub power_domains: Vec<crate::power::DomainName>,
    /// Components, by type then slot then name.
    pub components: Vec<ComponentRecord>,
    /// Rules bound to it.
    #[serde(default)]
    pub associations: Vec<Association>,
    /// Created.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// A rack in a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RackSummary {
    /// ID.
    pub id: RackId,
    /// Name.
    pub name: String,
    /// Model.
    pub model: String,
    /// Location.
    pub location: String,
    /// Labels.
    #[serde(default)]
    pub labels: crate::labels::Labels,
    /// How many components of each type.
    pub components: Vec<(ComponentType, u32)>,
    /// Created.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// `rack.list` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RackListReply {
    /// Racks by name.
    pub racks: Vec<RackSummary>,
}

/// `rack.delete` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RackDeleteReply {
    /// False when no such rack existed.
    pub deleted: bool,
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_submission_needs_a_target_and_checks_its_options() {
        let submit = |body: serde_json::Value| {
            crate::decode::request::<TaskSubmit>(body.to_string().as_bytes())
                .unwrap()
                .check()
                .map_err(|e| e.message)
        };
        assert_eq!(
            submit(serde_json::json!({"request_id": "r", "operation": "power_on"})),
            Err("racks: name at least one rack, label or component".to_owned())
        );
        for target in [
            serde_json::json!({"racks": ["r1"]}),
            serde_json::json!({"labels": {"row": "B"}}),
            serde_json::json!({"components": ["r1/compute-01"]}),
        ] {
            let mut body = serde_json::json!({"request_id": "r", "operation": "power_off"});
            body.as_object_mut()
                .unwrap()
                .extend(target.as_object().unwrap().clone());
            assert_eq!(submit(body), Ok(()));
        }
        assert_eq!(
            submit(
                serde_json::json!({"request_id": "r", "operation": "power_off", "labels": {"row": ""}})
            ),
            Err("labels: label \"row\" needs a value".to_owned())
        );
        assert_eq!(
            submit(
                serde_json::json!({"request_id": "r", "operation": "power_off", "racks": ["r1"],
                                      "description": "x".repeat(MAX_DESCRIPTION_LEN + 1)})
            ),
            Err(format!(
                "description: must be at most {MAX_DESCRIPTION_LEN} characters"
            ))
        );
        let forced = |op: &str| {
            let mut s =
                TaskSubmit::new("r".into(), op.parse().unwrap(), vec![RackRef("r1".into())]);
            s.forced = true;
            s.operation_to_run()
                .map(|o| o.to_string())
                .map_err(|e| e.message)
        };
        assert_eq!(forced("power_off"), Ok("force_power_off".to_owned()));
        assert_eq!(forced("restart"), Ok("force_restart".to_owned()));
        assert_eq!(forced("force_power_off"), Ok("force_power_off".to_owned()));
        assert!(
            forced("upgrade")
                .unwrap_err()
                .starts_with("forced: only power_off and restart")
        );
    }

    use super::*;

    #[test]
    fn replies_round_trip_and_errors_keep_their_code() {
        let ok: Result<RuleDeleteReply, ApiError> = Ok(RuleDeleteReply {
            deleted: true,
            associations_removed: 2,
        });
        let bytes = encode_reply(&ok);
        assert_eq!(decode_reply::<RuleDeleteReply>(&bytes), ok);
        let err: Result<RuleDeleteReply, ApiError> =
            Err(ApiError::new(ErrorCode::NotFound, "rule 1 not found"));
        let bytes = encode_reply(&err);
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            r#"{"schema":1,"error":{"code":"not_found","message":"rule 1 not found"}}"#
        );
        assert_eq!(decode_reply::<RuleDeleteReply>(&bytes), err);
    }

    #[test]
    fn bad_requests_name_the_problem() {
        let e = decode_request::<RuleById>(br#"{"id": 5}"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert!(e.message.contains("invalid type: integer `5`"), "{e}");
        let e = decode_request::<RuleById>(br#"{"id": "x", "extra": 1}"#).unwrap_err();
        assert!(e.message.contains("UUID"), "{e}");
        let e = decode_request::<RackByRef>(b"{").unwrap_err();
        assert!(e.message.contains("EOF"), "{e}");
        let e = decode_request::<RuleList>(br#"{"operation": "reboot"}"#).unwrap_err();
        assert!(
            e.message.contains("unknown operation code \"reboot\""),
            "{e}"
        );
        assert_eq!(decode_request::<RackList>(b""), Ok(RackList::default()));
    }
}
