//! What differs between compute trays, NVLink switch trays and power
//! shelves: where power lives, which `ResetType` each operation code maps
//! to (`docs/hardware.md`, "ResetType mapping"), and the main firmware
//! member (`docs/hardware.md`, "Redfish adapter").

use flow_rules::{ComponentType, PowerOperation};

/// The Redfish `ResetType` values Flow sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetKind {
    /// `On`.
    On,
    /// `ForceOn`.
    ForceOn,
    /// `GracefulShutdown`.
    GracefulShutdown,
    /// `ForceOff`.
    ForceOff,
    /// `GracefulRestart`.
    GracefulRestart,
    /// `ForceRestart`.
    ForceRestart,
    /// `PowerCycle`.
    PowerCycle,
}

impl ResetKind {
    /// The DMTF name.
    pub fn as_str(self) -> &'static str {
        match self {
            ResetKind::On => "On",
            ResetKind::ForceOn => "ForceOn",
            ResetKind::GracefulShutdown => "GracefulShutdown",
            ResetKind::ForceOff => "ForceOff",
            ResetKind::GracefulRestart => "GracefulRestart",
            ResetKind::ForceRestart => "ForceRestart",
            ResetKind::PowerCycle => "PowerCycle",
        }
    }

    /// The nv-redfish value.
    pub fn to_nv(self) -> nv_redfish::resource::ResetType {
        use nv_redfish::resource::ResetType as R;
        match self {
            ResetKind::On => R::On,
            ResetKind::ForceOn => R::ForceOn,
            ResetKind::GracefulShutdown => R::GracefulShutdown,
            ResetKind::ForceOff => R::ForceOff,
            ResetKind::GracefulRestart => R::GracefulRestart,
            ResetKind::ForceRestart => R::ForceRestart,
            ResetKind::PowerCycle => R::PowerCycle,
        }
    }

    /// The state a successful reset leads to (`None` for restarts, which
    /// end where they began).
    pub fn end_state_on(self) -> Option<bool> {
        match self {
            ResetKind::On | ResetKind::ForceOn => Some(true),
            ResetKind::GracefulShutdown | ResetKind::ForceOff => Some(false),
            _ => None,
        }
    }
}

/// Which Redfish resource carries a kind's power state and reset action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerResource {
    /// A `ComputerSystem` (`#ComputerSystem.Reset`).
    System,
    /// A `Chassis` (`#Chassis.Reset`).
    Chassis,
}

impl PowerResource {
    /// The collection under the service root.
    pub fn collection(self) -> &'static str {
        match self {
            PowerResource::System => "/redfish/v1/Systems",
            PowerResource::Chassis => "/redfish/v1/Chassis",
        }
    }

    /// The key of the reset action in `Actions`.
    pub fn action_key(self) -> &'static str {
        match self {
            PowerResource::System => "#ComputerSystem.Reset",
            PowerResource::Chassis => "#Chassis.Reset",
        }
    }
}

/// The kind of BMC a component type has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// GB200 compute tray.
    ComputeTray,
    /// NVLink switch tray.
    SwitchTray,
    /// Power shelf.
    PowerShelf,
}

/// A mapping result: the reset to send, or why there is none.
pub type Mapping = Result<ResetKind, &'static str>;

impl Kind {
    /// The kind for a component type, if Flow drives it over Redfish.
    pub fn of(component_type: ComponentType) -> Option<Kind> {
        match component_type {
            ComponentType::Compute => Some(Kind::ComputeTray),
            ComponentType::NVSwitch => Some(Kind::SwitchTray),
            ComponentType::PowerShelf => Some(Kind::PowerShelf),
            _ => None,
        }
    }

    /// Where power lives.
    pub fn power_resource(self) -> PowerResource {
        match self {
            Kind::ComputeTray | Kind::SwitchTray => PowerResource::System,
            Kind::PowerShelf => PowerResource::Chassis,
        }
    }

    /// The firmware inventory member updated when a request names none.
    pub fn primary_firmware(self) -> &'static str {
        match self {
            Kind::ComputeTray => "FW_BMC_0",
            Kind::SwitchTray => "FW_NVOS_0",
            Kind::PowerShelf => "FW_PMC_0",
        }
    }

    /// The firmware inventory member of a sub-target, on BMCs shaped like
    /// the GB200 parts (`docs/hardware.md`); `None` when the kind has no
    /// such firmware.
    pub fn sub_target_member(self, sub: flow_protocol::jobs::SubTarget) -> Option<&'static str> {
        use flow_protocol::jobs::SubTarget as S;
        match (self, sub) {
            (Kind::SwitchTray, S::Bmc) => Some("FW_BMC_0"),
            (Kind::SwitchTray, S::Cpld) => Some("FW_CPLD_0"),
            (Kind::SwitchTray, S::Bios) => Some("FW_BIOS_0"),
            (Kind::SwitchTray, S::Nvos) => Some("FW_NVOS_0"),
            (Kind::PowerShelf, S::Pmc) => Some("FW_PMC_0"),
            (Kind::PowerShelf, S::Psu) => Some("FW_PSU_0"),
            _ => None,
        }
    }

    /// The `ResetType` for an operation code (`docs/hardware.md`, "ResetType
    /// mapping").
    /// `allowed` is the resource's `ResetType@Redfish.AllowableValues`
    /// (empty when it advertises none); a forced power-on falls back to `On`
    /// only when `ForceOn` is not offered.
    pub fn reset_for(self, operation: PowerOperation, allowed: &[String]) -> Mapping {
        use PowerOperation as P;
        let offers = |r: ResetKind| allowed.is_empty() || allowed.iter().any(|a| a == r.as_str());
        match self {
            Kind::ComputeTray | Kind::SwitchTray => Ok(match operation {
                P::PowerOn => ResetKind::On,
                P::ForcePowerOn if offers(ResetKind::ForceOn) => ResetKind::ForceOn,
                P::ForcePowerOn => ResetKind::On,
                P::PowerOff => ResetKind::GracefulShutdown,
                P::ForcePowerOff => ResetKind::ForceOff,
                P::Restart => ResetKind::GracefulRestart,
                // A warm reset keeps power: the same Redfish value as a forced restart.
                P::ForceRestart | P::WarmReset => ResetKind::ForceRestart,
                P::ColdReset => ResetKind::PowerCycle,
            }),
            Kind::PowerShelf => match operation {
                P::PowerOn | P::ForcePowerOn => Ok(ResetKind::On),
                // Shelves have no graceful off: both offs are a plain off.
                P::PowerOff | P::ForcePowerOff => Ok(ResetKind::ForceOff),
                P::ColdReset if offers(ResetKind::PowerCycle) && !allowed.is_empty() => {
                    Ok(ResetKind::PowerCycle)
                }
                P::ColdReset => Err(
                    "the shelf offers no PowerCycle; use a rule with power_off, a Sleep for \
                     discharge, then power_on",
                ),
                P::Restart | P::ForceRestart | P::WarmReset => {
                    Err("power shelves cannot restart; use power_off then power_on")
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(values: &[&str]) -> Vec<String> {
        values.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn tray_mapping_follows_the_reference_table() {
        let allowed = all(&[
            "On",
            "ForceOn",
            "GracefulShutdown",
            "ForceOff",
            "GracefulRestart",
            "ForceRestart",
            "PowerCycle",
        ]);
        let cases = [
            (PowerOperation::PowerOn, "On"),
            (PowerOperation::ForcePowerOn, "ForceOn"),
            (PowerOperation::PowerOff, "GracefulShutdown"),
            (PowerOperation::ForcePowerOff, "ForceOff"),
            (PowerOperation::Restart, "GracefulRestart"),
            (PowerOperation::ForceRestart, "ForceRestart"),
            (PowerOperation::WarmReset, "ForceRestart"),
            (PowerOperation::ColdReset, "PowerCycle"),
        ];
        for (op, reset) in cases {
            assert_eq!(
                Kind::ComputeTray.reset_for(op, &allowed).unwrap().as_str(),
                reset
            );
            assert_eq!(
                Kind::SwitchTray.reset_for(op, &allowed).unwrap().as_str(),
                reset
            );
        }
        let no_force_on = all(&["On", "ForceOff"]);
        assert_eq!(
            Kind::ComputeTray
                .reset_for(PowerOperation::ForcePowerOn, &no_force_on)
                .unwrap(),
            ResetKind::On
        );
    }

    #[test]
    fn shelves_only_switch_on_and_off() {
        let allowed = all(&["On", "ForceOff"]);
        assert_eq!(
            Kind::PowerShelf.reset_for(PowerOperation::PowerOff, &allowed),
            Ok(ResetKind::ForceOff)
        );
        assert_eq!(
            Kind::PowerShelf.reset_for(PowerOperation::ForcePowerOn, &allowed),
            Ok(ResetKind::On)
        );
        for op in [
            PowerOperation::Restart,
            PowerOperation::ForceRestart,
            PowerOperation::WarmReset,
            PowerOperation::ColdReset,
        ] {
            assert!(Kind::PowerShelf.reset_for(op, &allowed).is_err(), "{op:?}");
        }
        let cycling = all(&["On", "ForceOff", "PowerCycle"]);
        assert_eq!(
            Kind::PowerShelf.reset_for(PowerOperation::ColdReset, &cycling),
            Ok(ResetKind::PowerCycle)
        );
    }
}
