//! Actions: what a step does before, as and after its main operation. Each
//! action is an enum variant with typed, validated parameters.

use std::fmt;
use std::time::Duration;

use crate::{ComponentType, FirmwareOperation, PowerOperation, defaults};

/// The power state `VerifyPowerStatus` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PowerState {
    /// `"on"`.
    On,
    /// `"off"`.
    Off,
}

impl PowerState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            PowerState::On => "on",
            PowerState::Off => "off",
        }
    }
}

/// An action's name: the closed set of actions Flow knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionName {
    /// A durable pause.
    Sleep,
    /// A power command.
    PowerControl,
    /// A firmware update, started and polled to completion.
    FirmwareControl,
    /// Poll until every component has a power state.
    VerifyPowerStatus,
    /// Poll until component types answer.
    VerifyReachability,
    /// One power-status query.
    GetPowerStatus,
    /// Request decommissioning.
    DecommissionControl,
    /// Poll until decommissioned.
    WaitDecommissioned,
}

impl ActionName {
    /// The actions user rules may use, in the order the format specification
    /// lists them (`docs/rule-format.md`, "Actions").
    pub const ALL: [ActionName; 8] = [
        ActionName::PowerControl,
        ActionName::FirmwareControl,
        ActionName::VerifyPowerStatus,
        ActionName::VerifyReachability,
        ActionName::Sleep,
        ActionName::GetPowerStatus,
        ActionName::DecommissionControl,
        ActionName::WaitDecommissioned,
    ];

    /// The allowed names, for messages.
    pub const USER_ALLOWED: &'static str = "PowerControl, FirmwareControl, VerifyPowerStatus, \
        VerifyReachability, Sleep, GetPowerStatus, DecommissionControl, WaitDecommissioned";

    /// Names that exist inside the reference system but that user rules may
    /// not use: BringUpControl, WaitBringUp and InjectExpectation, which the
    /// format refuses, and the reference system's two internal firmware
    /// checks (`docs/rule-format.md`, "Actions user rules may not use").
    pub const INTERNAL: [&'static str; 5] = [
        "BringUpControl",
        "WaitBringUp",
        "InjectExpectation",
        "VerifyFirmwareConsistency",
        "VerifyFirmwareVersion",
    ];

    /// The name as written in rules (case-sensitive).
    pub fn as_str(self) -> &'static str {
        match self {
            ActionName::Sleep => "Sleep",
            ActionName::PowerControl => "PowerControl",
            ActionName::FirmwareControl => "FirmwareControl",
            ActionName::VerifyPowerStatus => "VerifyPowerStatus",
            ActionName::VerifyReachability => "VerifyReachability",
            ActionName::GetPowerStatus => "GetPowerStatus",
            ActionName::DecommissionControl => "DecommissionControl",
            ActionName::WaitDecommissioned => "WaitDecommissioned",
        }
    }

    /// Looks a name up exactly (names are case-sensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        ActionName::ALL.into_iter().find(|a| a.as_str() == name)
    }

    /// True for actions that act on each component and so run in batches of
    /// `max_parallel`; `Sleep` and `VerifyReachability` act once per step
    /// (`docs/rule-format.md`, "Actions" and "Step budget").
    pub fn is_per_component(self) -> bool {
        !matches!(self, ActionName::Sleep | ActionName::VerifyReachability)
    }
}

impl fmt::Display for ActionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A validated action.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Pause for `duration` (a durable timer).
    Sleep {
        /// How long (> 0).
        duration: Duration,
    },
    /// Issue a power command.
    PowerControl {
        /// The command; `None` inherits the task's own power operation.
        operation: Option<PowerOperation>,
        /// Activity timeout for this action only; `None` uses the step's.
        timeout: Option<Duration>,
    },
    /// Start a firmware update and poll it to completion.
    FirmwareControl {
        /// The operation; `None` inherits the task's.
        operation: Option<FirmwareOperation>,
        /// Time between status polls; `None` = 2 min.
        poll_interval: Option<Duration>,
        /// Maximum wait for completion; `None` = 30 min.
        poll_timeout: Option<Duration>,
        /// Activity timeout of the start call; `None` uses the step's.
        timeout: Option<Duration>,
    },
    /// Poll until every component reports `expected`.
    VerifyPowerStatus {
        /// The state to wait for.
        expected: PowerState,
        /// Overall wait (> 0).
        timeout: Duration,
        /// Time between polls (> 0).
        poll_interval: Duration,
    },
    /// Poll until the listed component types answer.
    VerifyReachability {
        /// Types to probe (at least one, no repeats).
        component_types: Vec<ComponentType>,
        /// Every component must answer, not just the type's status call.
        require_all: bool,
        /// Overall wait (> 0).
        timeout: Duration,
        /// Time between probes (> 0).
        poll_interval: Duration,
    },
    /// Query power status once.
    GetPowerStatus {
        /// Maximum time for the query (> 0).
        timeout: Duration,
    },
    /// Request decommissioning; the executor fixes 5 min and one attempt.
    DecommissionControl,
    /// Poll until every component is decommissioned.
    WaitDecommissioned {
        /// Overall wait (> 0).
        timeout: Duration,
        /// Time between polls (> 0).
        poll_interval: Duration,
    },
}

impl Action {
    /// The action's name.
    pub fn name(&self) -> ActionName {
        match self {
            Action::Sleep { .. } => ActionName::Sleep,
            Action::PowerControl { .. } => ActionName::PowerControl,
            Action::FirmwareControl { .. } => ActionName::FirmwareControl,
            Action::VerifyPowerStatus { .. } => ActionName::VerifyPowerStatus,
            Action::VerifyReachability { .. } => ActionName::VerifyReachability,
            Action::GetPowerStatus { .. } => ActionName::GetPowerStatus,
            Action::DecommissionControl => ActionName::DecommissionControl,
            Action::WaitDecommissioned { .. } => ActionName::WaitDecommissioned,
        }
    }

    /// The firmware poll interval after defaults.
    pub fn firmware_poll_interval(poll_interval: Option<Duration>) -> Duration {
        poll_interval.unwrap_or(defaults::FIRMWARE_POLL_INTERVAL)
    }

    /// The firmware poll timeout after defaults.
    pub fn firmware_poll_timeout(poll_timeout: Option<Duration>) -> Duration {
        poll_timeout.unwrap_or(defaults::FIRMWARE_POLL_TIMEOUT)
    }
}
