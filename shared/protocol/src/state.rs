//! What a hardware watcher last saw of a component: its power state and
//! whether its BMC answered. Published on
//! `flow.state.component.<rack>.<component>` (names as subject tokens,
//! [`subject_token`]) into `FLOW_STATE`, which keeps the last message of
//! each subject, so a reader (the console) learns every component's state
//! from the stream alone. Published when it changes, not on every read.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::status::status_enum;

status_enum!(
    /// A component's power as its BMC reports it.
    PowerState, "power", "on, off, powering_on, powering_off, unknown" {
        /// Powered on.
        On => "on",
        /// Powered off.
        Off => "off",
        /// On its way to on (or through a restart).
        PoweringOn => "powering_on",
        /// On its way to off (or through a restart).
        PoweringOff => "powering_off",
        /// Not reported, or never read.
        Unknown => "unknown",
    }
);

status_enum!(
    /// Who saw a component's power, and how: what an observation is worth
    /// (`docs/operating-safety.md`, "What counts").
    ObservationSource, "observation source", "watcher, event, read, verify, command, telemetry" {
        /// The hardware watcher's read of the BMC (a poll, or once its
        /// event stream opened).
        Watcher => "watcher",
        /// The hardware watcher's read after the BMC announced a change.
        Event => "event",
        /// A worker's read just before deciding a command.
        Read => "read",
        /// A worker's verification poll.
        Verify => "verify",
        /// A command Flow sent and the device accepted (the state it leads
        /// to; counted from when it was reported sent).
        Command => "command",
        /// A measured draw (Redfish power metrics), with the state read.
        Telemetry => "telemetry",
    }
);

/// Where workers publish what they read of components' power (core NATS:
/// a lost message leaves the component as last known, or unknown once
/// that is stale — never counted lower). Watchers publish on
/// [`STREAM_STATE`].
pub const OBSERVED_SUBJECT: &str = "flow.power.observed";

/// A batch of observations on [`OBSERVED_SUBJECT`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    /// Message schema (1).
    pub schema: u32,
    /// What was seen.
    pub states: Vec<ComponentState>,
}

/// The stream of component states (one message kept per subject).
pub const STREAM_STATE: &str = "FLOW_STATE";
/// Its subjects.
pub const STATE_SUBJECTS: &str = "flow.state.>";
/// Every component's state subject, for subscribers.
pub const COMPONENT_STATES: &str = "flow.state.component.>";

/// What a watcher (or a worker) saw of one component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentState {
    /// Message schema (1).
    pub schema: u32,
    /// The rack (name).
    pub rack: String,
    /// The component (name).
    pub component: String,
    /// Its power.
    pub power: PowerState,
    /// Whether its BMC answered the last read.
    pub reachable: bool,
    /// Why it did not (empty when it did).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// When it was seen so.
    #[serde(with = "crate::task::timestamp")]
    pub observed_at: OffsetDateTime,
    /// Who saw it (absent: the watcher, as before sources were told).
    #[serde(default = "watcher", skip_serializing_if = "is_watcher")]
    pub source: ObservationSource,
    /// Its draw as the BMC measured it, W, when it reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_w: Option<u32>,
}

fn watcher() -> ObservationSource {
    ObservationSource::Watcher
}

fn is_watcher(source: &ObservationSource) -> bool {
    *source == ObservationSource::Watcher
}

impl ComponentState {
    /// Its subject.
    pub fn subject(&self) -> String {
        format!(
            "flow.state.component.{}.{}",
            subject_token(&self.rack),
            subject_token(&self.component)
        )
    }
}

/// A name as one subject token, reversibly: ASCII letters, digits, `-` and
/// `_` stay; every other byte becomes `~` and two hex digits (so `a.b` and
/// `a_b` stay apart).
pub fn subject_token(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("~{b:02x}"));
        }
    }
    if out.is_empty() {
        out.push('~');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_distinct_single_tokens() {
        assert_eq!(subject_token("compute-01"), "compute-01");
        assert_eq!(subject_token("a.b"), "a~2eb");
        assert_ne!(subject_token("a.b"), subject_token("a_b"));
        assert_eq!(subject_token("x y*>"), "x~20y~2a~3e");
        let s = ComponentState {
            schema: 1,
            rack: "rack.01".into(),
            component: "c 1".into(),
            power: PowerState::On,
            reachable: true,
            error: String::new(),
            observed_at: OffsetDateTime::UNIX_EPOCH,
            source: ObservationSource::Watcher,
            measured_w: None,
        };
        assert_eq!(s.subject(), "flow.state.component.rack~2e01.c~201");
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["power"], "on");
        assert!(json.get("error").is_none());
    }
}
