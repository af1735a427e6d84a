//! The component-manager contract: what a manager declares and the calls a
//! worker makes. A manager carries out what it is asked: whether a command
//! is sent at all is decided above it, from the state read just before
//! (`shared/hardware/src/command.rs`) and from the step's own record of what
//! it sent (`shared/executor/src/command.rs`), never from a guess at the
//! hardware.

use std::collections::BTreeMap;

use async_trait::async_trait;
use flow_rules::{ComponentType, PowerOperation};
use serde::{Deserialize, Serialize};

use crate::{Capability, HardwareError};

/// Who a manager is and what it can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerDescriptor {
    /// The component type it serves.
    pub component_type: ComponentType,
    /// Its implementation name (e.g. `redfish`).
    pub name: &'static str,
    /// What it can do.
    pub capabilities: Vec<Capability>,
}

impl ManagerDescriptor {
    /// True when it declares the capability.
    pub fn has(&self, capability: Capability) -> bool {
        self.capabilities.contains(&capability)
    }

    /// An error naming the type, the manager and the capability, unless it
    /// has the capability.
    pub fn require(&self, capability: Capability) -> Result<(), HardwareError> {
        if self.has(capability) {
            Ok(())
        } else {
            Err(HardwareError::Unsupported {
                component_type: self.component_type,
                manager: self.name,
                capability,
            })
        }
    }
}

pub use flow_protocol::jobs::ComponentTarget;

/// Power state as Flow reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PowerStatus {
    /// Powered on (steady).
    On,
    /// Powered off (steady).
    Off,
    /// On its way to `On` (or through a restart).
    PoweringOn,
    /// On its way to `Off` (or through a restart).
    PoweringOff,
    /// Not reported, or a state Flow does not act on (`Paused`, …).
    Unknown,
}

impl PowerStatus {
    /// The Redfish spelling (`Unknown` for what is not reported).
    pub fn as_str(self) -> &'static str {
        match self {
            PowerStatus::On => "On",
            PowerStatus::Off => "Off",
            PowerStatus::PoweringOn => "PoweringOn",
            PowerStatus::PoweringOff => "PoweringOff",
            PowerStatus::Unknown => "Unknown",
        }
    }

    /// The state a Redfish `PowerState` value names.
    pub fn from_redfish(value: Option<&str>) -> Self {
        match value {
            Some("On") => PowerStatus::On,
            Some("Off") => PowerStatus::Off,
            Some("PoweringOn") => PowerStatus::PoweringOn,
            Some("PoweringOff") => PowerStatus::PoweringOff,
            _ => PowerStatus::Unknown,
        }
    }

    /// Whether it is moving (`PoweringOn` or `PoweringOff`).
    pub fn is_transition(self) -> bool {
        matches!(self, PowerStatus::PoweringOn | PowerStatus::PoweringOff)
    }
}

impl std::fmt::Display for PowerStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A power command the device accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PowerSent {
    /// What was sent (the Redfish `ResetType`).
    pub reset_type: String,
}

/// A firmware update request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirmwareRequest {
    /// Where the BMC fetches the image.
    pub image_uri: String,
    /// The version the image installs, when known: an update to the version
    /// already installed succeeds at once.
    pub version: Option<String>,
    /// Firmware inventory member IDs to update; empty = the component's main
    /// firmware (or its sub-targets).
    pub targets: Vec<String>,
    /// The firmware to update by what it is (the manager finds the members);
    /// used when `targets` is empty.
    #[serde(default)]
    pub sub_targets: Vec<flow_protocol::jobs::SubTarget>,
}

/// A started update, kept in the worker's checkpoint and polled later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirmwareJob {
    /// The BMC's task URI (`/redfish/v1/TaskService/Tasks/7`).
    pub task: String,
    /// The inventory members being updated.
    pub targets: Vec<String>,
    /// The version expected afterwards, when known.
    pub expected_version: Option<String>,
}

/// How an update request ended up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FirmwareStart {
    /// The version is already installed; nothing was started.
    AlreadyInstalled {
        /// The installed version.
        version: String,
    },
    /// An update is running.
    Started(FirmwareJob),
}

/// Update progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FirmwareState {
    /// Accepted, not yet running.
    Queued,
    /// Running.
    Running,
    /// Done, and the inventory shows the expected version when one was given.
    Completed,
    /// Failed; the message says why.
    Failed,
}

/// Update status of one component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirmwareStatus {
    /// The state.
    pub state: FirmwareState,
    /// Percent complete, when the BMC reports it.
    pub percent: Option<u8>,
    /// The BMC's last message.
    pub message: String,
    /// Installed versions by inventory member.
    pub versions: BTreeMap<String, String>,
}

/// Decommission state, as the lifecycle API reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DecommissionState {
    /// In service.
    Ready,
    /// In maintenance, with the reason.
    Maintenance(String),
    /// Being decommissioned, with the phase.
    Decommissioning(String),
    /// Out of service.
    Decommissioned,
    /// A state this version of Flow does not know (waiting fails on it).
    Other(String),
}

impl DecommissionState {
    /// Parses the lifecycle API's state text.
    pub fn parse(text: &str) -> Self {
        if text == "Ready" {
            DecommissionState::Ready
        } else if text == "Decommissioned" || text == "Decommissioning/Decommissioned" {
            DecommissionState::Decommissioned
        } else if let Some(phase) = text.strip_prefix("Decommissioning/") {
            DecommissionState::Decommissioning(phase.to_owned())
        } else if let Some(reason) = text
            .strip_prefix("Maintenance(")
            .and_then(|r| r.strip_suffix(')'))
        {
            DecommissionState::Maintenance(reason.to_owned())
        } else {
            DecommissionState::Other(text.to_owned())
        }
    }
}

/// A manager for one component type. Methods a manager does not support
/// return [`HardwareError::Unsupported`] (the defaults do).
#[async_trait]
pub trait ComponentManager: Send + Sync {
    /// Who it is and what it can do.
    fn descriptor(&self) -> &ManagerDescriptor;

    /// Sends a power operation's command now, whatever the state (the
    /// caller decided to send it: `shared/hardware/src/command.rs`); `Ok`
    /// only when the device accepted it.
    async fn power_control(
        &self,
        target: &ComponentTarget,
        operation: PowerOperation,
    ) -> Result<PowerSent, HardwareError> {
        let _ = (target, operation);
        Err(self.unsupported(Capability::PowerControl))
    }

    /// Reads the power state.
    async fn power_status(&self, target: &ComponentTarget) -> Result<PowerStatus, HardwareError> {
        let _ = target;
        Err(self.unsupported(Capability::PowerStatus))
    }

    /// Starts a firmware update (or nothing, when already installed).
    async fn firmware_update(
        &self,
        target: &ComponentTarget,
        request: &FirmwareRequest,
    ) -> Result<FirmwareStart, HardwareError> {
        let _ = (target, request);
        Err(self.unsupported(Capability::FirmwareControl))
    }

    /// The update of `request` the device is running now, if it keeps a
    /// record that shows one (a Redfish task whose payload names the image
    /// and the targets): how a step whose update request may have been sent
    /// by an earlier delivery finds it instead of asking twice. `None` (the
    /// default) when there is none or the manager cannot tell.
    async fn firmware_in_progress(
        &self,
        target: &ComponentTarget,
        request: &FirmwareRequest,
    ) -> Result<Option<FirmwareJob>, HardwareError> {
        let _ = (target, request);
        Ok(None)
    }

    /// Reads update progress (with a job) or just the installed versions.
    async fn firmware_status(
        &self,
        target: &ComponentTarget,
        job: Option<&FirmwareJob>,
    ) -> Result<FirmwareStatus, HardwareError> {
        let _ = (target, job);
        Err(self.unsupported(Capability::FirmwareStatus))
    }

    /// Requests decommissioning (idempotent).
    async fn decommission(
        &self,
        target: &ComponentTarget,
    ) -> Result<DecommissionState, HardwareError> {
        let _ = target;
        Err(self.unsupported(Capability::DecommissionControl))
    }

    /// Reads the decommission state.
    async fn decommission_status(
        &self,
        target: &ComponentTarget,
    ) -> Result<DecommissionState, HardwareError> {
        let _ = target;
        Err(self.unsupported(Capability::DecommissionStatus))
    }

    /// A signal that the component's state may have changed, when the
    /// manager follows its device's events and the feed is open now;
    /// `None` (the default) means "poll".
    fn change_signal(&self, target: &ComponentTarget) -> Option<crate::ChangeSignal> {
        let _ = target;
        None
    }

    /// Ends what the manager holds open at devices (Redfish sessions), once,
    /// when its process stops; nothing by default.
    async fn close(&self) {}

    /// The typed "not supported" error for this manager.
    fn unsupported(&self, capability: Capability) -> HardwareError {
        let d = self.descriptor();
        HardwareError::Unsupported {
            component_type: d.component_type,
            manager: d.name,
            capability,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle_states_parse() {
        assert_eq!(DecommissionState::parse("Ready"), DecommissionState::Ready);
        assert_eq!(
            DecommissionState::parse("Maintenance(disk swap)"),
            DecommissionState::Maintenance("disk swap".into())
        );
        assert_eq!(
            DecommissionState::parse("Decommissioning/Wiping"),
            DecommissionState::Decommissioning("Wiping".into())
        );
        assert_eq!(
            DecommissionState::parse("Decommissioning/Decommissioned"),
            DecommissionState::Decommissioned
        );
        assert_eq!(
            DecommissionState::parse("Decommissioned"),
            DecommissionState::Decommissioned
        );
        assert_eq!(
            DecommissionState::parse("Lost"),
            DecommissionState::Other("Lost".into())
        );
    }

    struct Bare(ManagerDescriptor);

    impl ComponentManager for Bare {
        fn descriptor(&self) -> &ManagerDescriptor {
            &self.0
        }
    }

    #[tokio::test]
    async fn a_missing_capability_names_type_manager_and_capability() {
        let m = Bare(ManagerDescriptor {
            component_type: ComponentType::Cdu,
            name: "none",
            capabilities: vec![],
        });
        let target = ComponentTarget {
            rack: "r".into(),
            name: "c".into(),
            component_type: ComponentType::Cdu,
            bmc_url: "https://x".into(),
            credential_ref: String::new(),
            resource_id: None,
        };
        let e = m.power_status(&target).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "the none manager for CDU does not support power status"
        );
        assert!(!e.is_transient());
        let e = m
            .descriptor()
            .require(Capability::FirmwareControl)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the none manager for CDU does not support firmware control"
        );
    }
}
