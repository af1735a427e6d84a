//! Capabilities a component manager may declare, and which ones each rule
//! action needs (so a task is refused up front when a targeted type's
//! manager cannot run its rule).

use std::fmt;

use flow_rules::Action;

/// One thing a manager can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    /// Issue power commands.
    PowerControl,
    /// Read power state.
    PowerStatus,
    /// Start firmware updates.
    FirmwareControl,
    /// Read firmware update progress and versions.
    FirmwareStatus,
    /// Request decommissioning.
    DecommissionControl,
    /// Read decommission state.
    DecommissionStatus,
}

impl Capability {
    /// The name used in messages and configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::PowerControl => "power control",
            Capability::PowerStatus => "power status",
            Capability::FirmwareControl => "firmware control",
            Capability::FirmwareStatus => "firmware status",
            Capability::DecommissionControl => "decommission control",
            Capability::DecommissionStatus => "decommission status",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The capabilities an action needs from the manager of the step's
/// component type (`docs/hardware.md`, "Capabilities"; unlike the reference
/// system's map, it covers the decommission actions).
pub fn required_capabilities(action: &Action) -> &'static [Capability] {
    match action {
        Action::Sleep { .. } => &[],
        Action::PowerControl { .. } => &[Capability::PowerControl],
        Action::VerifyPowerStatus { .. }
        | Action::GetPowerStatus { .. }
        | Action::VerifyReachability { .. } => &[Capability::PowerStatus],
        Action::FirmwareControl { .. } => {
            &[Capability::FirmwareControl, Capability::FirmwareStatus]
        }
        Action::DecommissionControl => &[Capability::DecommissionControl],
        Action::WaitDecommissioned { .. } => &[Capability::DecommissionStatus],
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn every_action_maps_to_its_capabilities() {
        assert!(
            required_capabilities(&Action::Sleep {
                duration: Duration::from_secs(1)
            })
            .is_empty()
        );
        assert_eq!(
            required_capabilities(&Action::DecommissionControl),
            [Capability::DecommissionControl]
        );
        assert_eq!(
            required_capabilities(&Action::WaitDecommissioned {
                timeout: Duration::from_secs(1),
                poll_interval: Duration::from_secs(1)
            }),
            [Capability::DecommissionStatus]
        );
    }
}
