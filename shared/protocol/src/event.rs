//! Hardware events and the rules that react to them, on the wire.
//!
//! A watcher (`flow-worker --watch`, `services/worker/src/watch.rs`) turns
//! what a BMC reports — a Redfish event on its EventService SSE stream, or a
//! condition in a chassis' `Status.Conditions` — into a [`HardwareEvent`]
//! with an identity (`source`, `key`) and publishes it on
//! `flow.hardware.<event type>` ([`STREAM_HARDWARE`]). The scheduler stores
//! each identity once, picks the rule (rack binding → site binding →
//! built-in), and runs the rule's actions as durable executions
//! ([`ExecutionStatus`]). The decisions are `flow_decisions::events`'.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::ids::{EventId, EventRuleId, ExecutionId, TaskId};
use crate::status::status_enum;
use crate::submit::TaskSubmit;
use flow_rules::ComponentType;

/// The JetStream stream of hardware events (work queue, `flow.hardware.>`).
pub const STREAM_HARDWARE: &str = "FLOW_HARDWARE";
/// Its subjects.
pub const HARDWARE_SUBJECTS: &str = "flow.hardware.>";
/// The schedulers' shared durable consumer on [`STREAM_HARDWARE`].
pub const CONSUMER_HARDWARE: &str = "flow-hardware";

/// The subject an event of `event_type` is published on.
pub fn subject(event_type: EventType) -> String {
    format!("flow.hardware.{}", event_type.as_str())
}

/// What happened to the hardware. Its name (`hardware.leak.detected`) is
/// the same on the wire, in the database and on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "&'static str")]
pub enum EventType {
    /// A liquid-cooling leak detector of a component tripped.
    LeakDetected,
    /// A component's temperature crossed its critical threshold.
    TemperatureCritical,
}

impl EventType {
    /// Every event type.
    pub const ALL: &'static [EventType] =
        &[EventType::LeakDetected, EventType::TemperatureCritical];

    /// The name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::LeakDetected => "hardware.leak.detected",
            EventType::TemperatureCritical => "hardware.temperature.critical",
        }
    }
}

impl JsonSchema for EventType {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "EventType".into()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        concat!(module_path!(), "::EventType").into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
        schemars::json_schema!({
            "description": "What happened to the hardware (also the last tokens of its subject, `flow.hardware.<event type>`).",
            "type": "string",
            "enum": names,
        })
    }
}

impl From<EventType> for &'static str {
    fn from(t: EventType) -> Self {
        t.as_str()
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for EventType {
    type Err = crate::status::UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventType::ALL
            .iter()
            .copied()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| crate::status::UnknownStatus {
                what: "event type",
                text: s.to_owned(),
                allowed: "hardware.leak.detected, hardware.temperature.critical",
            })
    }
}

impl TryFrom<String> for EventType {
    type Error = crate::status::UnknownStatus;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

status_enum!(
    /// How bad it is (Redfish `MessageSeverity`).
    Severity, "severity", "ok, warning, critical" {
        /// Informational.
        Ok => "ok",
        /// Needs attention.
        Warning => "warning",
        /// Act now.
        Critical => "critical",
    }
);

/// One observation of a hardware event, as a watcher publishes it. The
/// same (`source`, `key`) observed again — by another watcher, by a poll
/// after an SSE event, after a restart — is the same event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HardwareEvent {
    /// Who observed it: `redfish` for BMC events and conditions, or the
    /// producer's name.
    pub source: String,
    /// Its identity within the source: for Redfish, the component, the
    /// message ID and the time the condition began.
    pub key: String,
    /// What happened.
    pub event_type: EventType,
    /// How bad.
    pub severity: Severity,
    /// The rack (name).
    pub rack: String,
    /// The component (name) the event is about.
    pub component: String,
    /// The BMC's message.
    #[serde(default)]
    pub message: String,
    /// The Redfish resource the condition is on, if known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub origin: String,
    /// When the condition began (the BMC's timestamp).
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "crate::task::timestamp")]
    pub observed_at: OffsetDateTime,
}

/// The longest `source` or `key` (they become a `Nats-Msg-Id`).
pub const MAX_IDENTITY_LEN: usize = 200;

impl HardwareEvent {
    /// The `Nats-Msg-Id`: JetStream drops a repeat within its window, the
    /// store after it.
    pub fn message_id(&self) -> String {
        format!("{}/{}", self.source, self.key)
    }
}

/// Which components an action's task targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TargetStrategy {
    /// The component the event is about.
    Component,
    /// Its whole rack.
    Rack,
    /// The component and the trays of its type below it in its rack (a
    /// lower slot): what a leak drips on.
    AffectedComponents,
}

/// When an action applies: any of the severities (empty: any), any of
/// the component types (empty: any), and — for a leak — a count of the
/// rack's leaking trays within bounds (none: any count).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActionCondition {
    /// Severities (OR).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub severities: Vec<Severity>,
    /// Component types (OR).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub component_types: Vec<ComponentType>,
    /// At least this many trays (compute or switch) of the event's rack
    /// leak, this event's tray included: their leak events are not cleared
    /// (`event.clear`). The escalation of the built-in leak rule: 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_leaking_trays: Option<u32>,
    /// At most this many trays of the rack leak (the same count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_leaking_trays: Option<u32>,
}

/// What an action does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum ActionKind {
    /// Submit a task on the targets: the operation and options as
    /// `task.submit` takes them, without targets (the strategy names them)
    /// and without a request ID (the execution's is used).
    SubmitTask {
        /// Which components.
        target: TargetStrategy,
        /// The operation and its options.
        task: Box<TaskSubmit>,
        /// Goes first: open tasks of the rack its task conflicts with are
        /// cancelled (at their next action boundary; their record names
        /// this event) and its task starts at once instead of queueing.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        preempt: bool,
        /// Locks the targets: no power-on, reset or firmware task may
        /// start on them until the event is cleared (`event.clear`). The
        /// event's own component is always locked for a leak.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        lock: bool,
    },
    /// Log a line at the severity and count it
    /// (`flow_event_alerts_total`).
    Alert {
        /// Log level: `ok` (info), `warning`, `critical` (error).
        severity: Severity,
        /// The line (the event's rack, component and message follow it).
        message: String,
    },
    /// Record the event, do nothing.
    Noop,
}

impl ActionKind {
    /// `submit_task`, `alert` or `noop`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ActionKind::SubmitTask { .. } => "submit_task",
            ActionKind::Alert { .. } => "alert",
            ActionKind::Noop => "noop",
        }
    }
}

/// One action of a rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleAction {
    /// Unique in the rule, lower_snake_case.
    pub name: String,
    /// When it applies (default: always).
    #[serde(default, skip_serializing_if = "is_default")]
    pub when: ActionCondition,
    /// What it does.
    #[serde(rename = "do")]
    pub kind: ActionKind,
}

fn is_default(c: &ActionCondition) -> bool {
    *c == ActionCondition::default()
}

/// A rule's content: the event type it handles and its actions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventRuleSpec {
    /// Unique name (at most 128 bytes, no surrounding whitespace).
    pub name: String,
    /// What it is for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The event type it handles.
    pub event_type: EventType,
    /// What to do, in order (at least one).
    pub actions: Vec<RuleAction>,
}

/// `event_rule.create`: a rule is created disabled unless `enabled`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventRuleCreate {
    /// The rule.
    pub spec: EventRuleSpec,
    /// Enable it at once.
    #[serde(default)]
    pub enabled: bool,
}

/// A rule named by ID or name (`builtin:<event type>` for a built-in).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventRuleByRef {
    /// ID or name.
    pub rule: String,
}

/// `event_rule.update`: the new content, at the revision read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventRuleUpdate {
    /// ID or name.
    pub rule: String,
    /// The revision the change was made against; a stale one is refused.
    pub revision: i64,
    /// The new content (the event type cannot change while bound).
    pub spec: EventRuleSpec,
}

/// `event_rule.enable` / `event_rule.disable`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventRuleEnable {
    /// ID or name.
    pub rule: String,
    /// Enabled or not.
    pub enabled: bool,
}

/// A stored (or built-in) rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventRuleRecord {
    /// Its ID (`None` for a built-in).
    pub id: Option<EventRuleId>,
    /// Built in: cannot be changed, deleted or bound; used when no binding
    /// applies.
    pub read_only: bool,
    /// Disabled rules are skipped when bindings are read.
    pub enabled: bool,
    /// Bumped by each change.
    pub revision: i64,
    /// The content.
    pub spec: EventRuleSpec,
    /// Created.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "crate::task::timestamp")]
    pub created_at: OffsetDateTime,
    /// Last changed.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "crate::task::timestamp")]
    pub updated_at: OffsetDateTime,
}

/// `event_rule.list` reply: stored rules by name, then the built-ins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventRuleListReply {
    /// The rules.
    pub rules: Vec<EventRuleRecord>,
}

/// `event_rule.delete` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventRuleDeleteReply {
    /// The rule deleted.
    pub id: EventRuleId,
    /// The bindings removed with it.
    pub bindings_removed: u64,
}

/// `event_rule.list` (no filter).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventRuleList {}

/// Where a binding applies: the whole site (`"site"`) or one rack
/// (`{"rack": "rack-01"}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BindingScope {
    /// Every rack without a rack binding.
    Site,
    /// One rack (ID or name; replies carry the name).
    Rack(String),
}

impl std::fmt::Display for BindingScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BindingScope::Site => f.write_str("site"),
            BindingScope::Rack(r) => write!(f, "rack {r}"),
        }
    }
}

/// `event_rule.bind`: one rule per (event type, scope); binding again
/// replaces the rule bound there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventRuleBind {
    /// ID or name of a stored rule; its event type is the binding's.
    pub rule: String,
    /// Where.
    pub scope: BindingScope,
}

/// `event_rule.unbind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventRuleUnbind {
    /// The event type.
    pub event_type: EventType,
    /// Where.
    pub scope: BindingScope,
}

/// One binding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BindingRecord {
    /// The event type.
    pub event_type: EventType,
    /// Where.
    pub scope: BindingScope,
    /// The rule bound.
    pub rule_id: EventRuleId,
    /// Its name.
    pub rule_name: String,
    /// Whether it is enabled (a disabled rule's binding is passed over).
    pub enabled: bool,
}

/// `event_rule.bindings` (no filter).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BindingList {}

/// `event_rule.bindings` reply, by event type then scope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BindingListReply {
    /// The bindings.
    pub bindings: Vec<BindingRecord>,
}

/// `event_rule.unbind` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UnbindReply {
    /// Whether a binding was there.
    pub removed: bool,
}

status_enum!(
    /// Where an execution of an action stands: `pending → running →
    /// completed | failed`, `pending` again between attempts, `skipped`
    /// when it had nothing to act on.
    ExecutionStatus, "execution", "pending, running, completed, failed, skipped" {
        /// Due now or at `next_attempt_at`.
        Pending => "pending",
        /// Claimed by a scheduler.
        Running => "running",
        /// Done.
        Completed => "completed",
        /// Every attempt failed.
        Failed => "failed",
        /// Its condition did not match, or no component to act on.
        Skipped => "skipped",
    }
);

/// One action's execution for one event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExecutionRecord {
    /// Its ID.
    pub id: ExecutionId,
    /// The action's name.
    pub action: String,
    /// `submit_task`, `alert` or `noop`.
    pub kind: String,
    /// Where it stands.
    pub status: ExecutionStatus,
    /// Attempts made.
    pub attempts: u32,
    /// When the next attempt is due (pending).
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(with = "crate::task::timestamp::option")]
    pub next_attempt_at: Option<OffsetDateTime>,
    /// What the last attempt failed with, or why it was skipped.
    pub last_error: String,
    /// The components it acts on (`<rack>/<name>`), fixed when the event
    /// arrived.
    pub targets: Vec<String>,
    /// The tasks it submitted.
    pub tasks: Vec<TaskId>,
}

/// A stored event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventRecord {
    /// Its ID.
    pub id: EventId,
    /// The observation.
    pub event: HardwareEvent,
    /// When the first observation arrived.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "crate::task::timestamp")]
    pub received_at: OffsetDateTime,
    /// The rule chosen (its name; `builtin:<type>` for a built-in), empty
    /// when none applied.
    pub rule: String,
    /// Its actions' executions.
    pub executions: Vec<ExecutionRecord>,
    /// The components it locks (none once cleared).
    #[serde(default)]
    pub locks: Vec<ComponentLock>,
    /// When an operator cleared it (its locks removed).
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(default, with = "crate::task::timestamp::option")]
    pub cleared_at: Option<OffsetDateTime>,
    /// Why, as the operator gave it.
    #[serde(default)]
    pub cleared_reason: String,
    /// Who cleared it.
    #[serde(default)]
    pub cleared_by: String,
}

/// A component an event locks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ComponentLock {
    /// The rack's name.
    pub rack: String,
    /// The component's name.
    pub component: String,
    /// The event.
    pub event_id: EventId,
    /// Since when.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "crate::task::timestamp")]
    pub since: OffsetDateTime,
}

/// The longest reason `event.clear` takes.
pub const MAX_CLEAR_REASON_LEN: usize = 1024;

/// `event.clear`: removes the event's locks, recording who and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventClear {
    /// The event.
    pub id: EventId,
    /// Why it is safe (required, not blank, at most
    /// [`MAX_CLEAR_REASON_LEN`] bytes).
    pub reason: String,
    /// Who clears it (the CLI sends the operator's login name).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
}

/// `event.get`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventById {
    /// The event.
    pub id: EventId,
}

/// `event.list`: newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventList {
    /// Only this rack (name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// At most this many (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `event.list` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventListReply {
    /// The events.
    pub events: Vec<EventRecord>,
}

/// `event.publish` reply: whether the observation was new.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventPublishReply {
    /// The stored event.
    pub id: EventId,
    /// False when the identity had been seen (nothing new was run).
    pub created: bool,
}
