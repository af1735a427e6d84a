//! The task endpoints' requests and replies (`task.*`): a submission, its
//! per-rack outcomes, cancellation.

use flow_rules::{ComponentType, OperationCode, OperationType};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::envelope::{ApiError, ErrorCode};
use crate::ids::{RackRef, RuleId};

/// `task.submit` (also the body of a message on `flow.tasks.submit`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    /// A published firmware bundle whose images the task installs, instead
    /// of `firmware` (firmware operations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<crate::firmware::TaskBundle>,
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
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::task::timestamp::option"
    )]
    pub not_before: Option<OffsetDateTime>,
    /// Start no later than this (RFC 3339): a task that has not started by
    /// then fails ("its window ended").
    #[schemars(with = "Option<crate::contract::Timestamp>")]
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
            bundle: None,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskById {
    /// The task.
    pub id: crate::ids::TaskId,
}

/// `task.counts` (no fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskCountsRequest {}

/// `task.list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(into = "RackOutcomeWire", try_from = "RackOutcomeWire")]
pub struct RackOutcome {
    /// The rack as named in the request.
    pub rack: String,
    /// What happened.
    pub submission: Submission,
}

#[derive(Serialize, Deserialize, JsonSchema)]
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
    #[schemars(with = "Option<crate::contract::Timestamp>")]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskSubmitReply {
    /// One entry per requested rack, in order.
    pub results: Vec<RackOutcome>,
}

/// What a cancel request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskCancelReply {
    /// True while the task is being stopped ([`CancelOutcome::Cancelling`]).
    pub cancelling: bool,
    /// What the request did.
    pub outcome: CancelOutcome,
    /// The task's status after the request.
    pub status: crate::status::TaskStatus,
}
