//! A step's durable progress. A worker saves it before every wait, before
//! and after every command it sends (the [`CommandRecord`] of each
//! component: `shared/executor/src/command.rs`), and at the end; whichever
//! worker receives the job next resumes from it. A read may be repeated; a
//! command is repeated only where the record cannot say it was not sent and
//! a second copy is harmless.

use std::collections::{BTreeMap, BTreeSet};

use flow_hardware::{FirmwareJob, PowerStatus};
use flow_protocol::jobs::ActionCalls;
use flow_rules::{ComponentType, PowerOperation};
use serde::{Deserialize, Serialize};

/// Where one component stands in the current action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ComponentStatus {
    /// Not started (waiting for a `max_parallel` slot).
    Pending,
    /// In progress.
    Active,
    /// Finished successfully.
    Done,
    /// Failed; the step fails.
    Failed,
}

/// One component's progress in the current action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentState {
    /// Where it stands.
    pub status: ComponentStatus,
    /// Attempts of the current call so far.
    pub attempts: u32,
    /// When to act next (epoch ms).
    pub next_at_ms: u64,
    /// When it started the current action (epoch ms): a polling action's
    /// timeout counts from here, so a component that waited for a
    /// `max_parallel` slot gets the whole timeout too.
    #[serde(default)]
    pub started_ms: Option<u64>,
    /// The last error, for the record.
    pub last_error: Option<String>,
    /// A started firmware update.
    pub firmware_job: Option<FirmwareJob>,
    /// When the firmware poll gives up (epoch ms).
    pub poll_deadline_ms: Option<u64>,
    /// Since when status calls have failed without a break (epoch ms).
    pub failing_since_ms: Option<u64>,
    /// The firmware version a finished `FirmwareControl` left it with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_version: Option<String>,
    /// Why its command waits now: power admission holds it (`waiting for
    /// power budget in row=B: 1,180 of 1,200 kW`) or the component is
    /// moving (`waiting for PoweringOff to end before sending power_off`);
    /// cleared when the command goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// A power reservation's last moment (epoch ms): when the component's
    /// time comes before it, its command goes without asking again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_by_ms: Option<u64>,
    /// That reservation's start (epoch ms): should the component come after
    /// its send-by, the command asks again and releases it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_at_ms: Option<u64>,
    /// This job's command to the component in the current action: written
    /// before it is sent, confirmed once the device accepted it, removed
    /// when the device refused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandRecord>,
    /// The transition the component was read in while its command waits
    /// for it to settle (`shared/hardware/src/command.rs`); an event from
    /// its device reads it again at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awaiting: Option<PowerStatus>,
}

/// A command a step sends to a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// A power operation.
    Power(PowerOperation),
    /// The start of a firmware update.
    FirmwareUpdate,
    /// A decommission request.
    Decommission,
}

impl Command {
    /// How the record spells it: the power operation's code,
    /// `firmware_update` or `decommission`.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Power(op) => op.as_str(),
            Command::FirmwareUpdate => "firmware_update",
            Command::Decommission => "decommission",
        }
    }
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Command {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "firmware_update" => Ok(Command::FirmwareUpdate),
            "decommission" => Ok(Command::Decommission),
            other => other
                .parse::<PowerOperation>()
                .map(Command::Power)
                .map_err(|_| format!("unknown command {other:?}")),
        }
    }
}

impl Serialize for Command {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Whether a recorded command reached its device, as far as the step knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Written before the send; no answer is known (the worker stopped
    /// mid-send, or the device did not answer): it may have been carried
    /// out.
    Unconfirmed,
    /// The device accepted it.
    Accepted,
}

/// One component's command in the current action, as the step recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRecord {
    /// What was sent.
    pub command: Command,
    /// When it was recorded, just before the send (epoch ms).
    pub at_ms: u64,
    /// Whether it is known to have arrived.
    pub delivery: Delivery,
}

impl Checkpoint {
    /// Records a call for `component` in the action `label` at `at_ms`.
    pub fn record_call(&mut self, component: &str, label: &str, at_ms: u64, error: Option<&str>) {
        let actions = self.history.entry(component.to_owned()).or_default();
        if actions.last().is_none_or(|a| a.action != label) {
            actions.push(ActionCalls::new(label));
        }
        if let Some(record) = actions.last_mut() {
            record.record(at_ms, error);
        }
    }
}

impl ComponentState {
    /// A component not yet started.
    pub fn pending() -> Self {
        ComponentState {
            status: ComponentStatus::Pending,
            attempts: 0,
            next_at_ms: 0,
            started_ms: None,
            last_error: None,
            firmware_job: None,
            poll_deadline_ms: None,
            failing_since_ms: None,
            installed_version: None,
            held: None,
            send_by_ms: None,
            reserved_at_ms: None,
            command: None,
            awaiting: None,
        }
    }
}

/// An action that finished, for the task's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionRecord {
    /// `pre_operation[0] (Sleep)`-style label.
    pub label: String,
    /// Started (epoch ms).
    pub started_ms: u64,
    /// Ended (epoch ms).
    pub ended_ms: u64,
}

/// A step's progress.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Index of the current action among pre, main and post actions.
    pub action: usize,
    /// When the current action started (epoch ms).
    pub action_started_ms: Option<u64>,
    /// Per-component progress in the current action, by component name.
    pub components: BTreeMap<String, ComponentState>,
    /// When the current `Sleep` ends (epoch ms).
    pub sleep_until_ms: Option<u64>,
    /// Types `VerifyReachability` has found reachable.
    pub reachable: BTreeSet<ComponentType>,
    /// The components of each type `VerifyReachability` has not found
    /// reachable that did not answer its last probe.
    #[serde(default)]
    pub unanswered: BTreeMap<ComponentType, Vec<String>>,
    /// When `VerifyReachability` probes next (epoch ms).
    pub next_probe_ms: Option<u64>,
    /// Last result per component (power status read, version installed, …).
    pub results: BTreeMap<String, String>,
    /// Hardware calls made by this step.
    pub calls: u64,
    /// Of those, the calls that changed the hardware (a power or
    /// decommission command, the start of a firmware update): a worker
    /// saves the checkpoint after any, so no redelivery repeats one; the
    /// reads between them (polls) it need not save (`services/worker/src/job.rs`).
    #[serde(default)]
    pub commands: u64,
    /// Every component's calls, action by action, for the record (kept
    /// across actions, unlike [`Checkpoint::components`]).
    #[serde(default)]
    pub history: BTreeMap<String, Vec<ActionCalls>>,
    /// Finished actions.
    pub finished: Vec<ActionRecord>,
    /// The firmware version each component's finished `FirmwareControl`
    /// left it with (kept across actions: what the inventory records).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub installed: BTreeMap<String, String>,
}
