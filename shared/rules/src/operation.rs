//! Operation types and codes (`docs/rule-format.md`, "Operation types and
//! codes", with Flow's `decommission` type).

use std::fmt;
use std::str::FromStr;

/// A family of operations. A rule is bound to one type and one code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OperationType {
    /// Power on/off/reset.
    PowerControl,
    /// Firmware upgrade/downgrade/rollback.
    FirmwareControl,
    /// Taking components out of service.
    Decommission,
}

impl OperationType {
    /// Every operation type.
    pub const ALL: [OperationType; 3] = [
        OperationType::PowerControl,
        OperationType::FirmwareControl,
        OperationType::Decommission,
    ];

    /// The wire name (`power_control`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            OperationType::PowerControl => "power_control",
            OperationType::FirmwareControl => "firmware_control",
            OperationType::Decommission => "decommission",
        }
    }

    /// The codes of this type.
    pub fn codes(self) -> &'static [OperationCode] {
        match self {
            OperationType::PowerControl => &POWER_CODES,
            OperationType::FirmwareControl => &FIRMWARE_CODES,
            OperationType::Decommission => &[OperationCode::Decommission],
        }
    }

    /// The codes a YAML batch must contain for this type when the batch has
    /// any rule of the type (`docs/rule-format.md`, "Batch files"; Flow adds
    /// `decommission`).
    pub fn required_codes(self) -> &'static [OperationCode] {
        match self {
            OperationType::PowerControl => &[
                OperationCode::Power(PowerOperation::PowerOn),
                OperationCode::Power(PowerOperation::PowerOff),
            ],
            OperationType::FirmwareControl => {
                &[OperationCode::Firmware(FirmwareOperation::Upgrade)]
            }
            OperationType::Decommission => &[OperationCode::Decommission],
        }
    }

    /// Parses a code that must belong to this type.
    pub fn parse_code(self, code: &str) -> Result<OperationCode, InvalidOperation> {
        self.codes()
            .iter()
            .copied()
            .find(|c| c.as_str() == code)
            .ok_or_else(|| InvalidOperation::CodeNotInType {
                code: code.to_owned(),
                operation_type: self,
            })
    }
}

impl fmt::Display for OperationType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OperationType {
    type Err = InvalidOperation;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OperationType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| InvalidOperation::UnknownType(s.to_owned()))
    }
}

/// The eight power operation codes; also the values of `PowerControl`'s
/// `operation` parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PowerOperation {
    /// Graceful power on.
    PowerOn,
    /// Power on without waiting for dependencies to settle.
    ForcePowerOn,
    /// Graceful shutdown.
    PowerOff,
    /// Immediate power off.
    ForcePowerOff,
    /// Graceful restart.
    Restart,
    /// Immediate restart.
    ForceRestart,
    /// Reset with power kept.
    WarmReset,
    /// Power cycle.
    ColdReset,
}

impl PowerOperation {
    /// All eight codes.
    pub const ALL: [PowerOperation; 8] = [
        PowerOperation::PowerOn,
        PowerOperation::ForcePowerOn,
        PowerOperation::PowerOff,
        PowerOperation::ForcePowerOff,
        PowerOperation::Restart,
        PowerOperation::ForceRestart,
        PowerOperation::WarmReset,
        PowerOperation::ColdReset,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            PowerOperation::PowerOn => "power_on",
            PowerOperation::ForcePowerOn => "force_power_on",
            PowerOperation::PowerOff => "power_off",
            PowerOperation::ForcePowerOff => "force_power_off",
            PowerOperation::Restart => "restart",
            PowerOperation::ForceRestart => "force_restart",
            PowerOperation::WarmReset => "warm_reset",
            PowerOperation::ColdReset => "cold_reset",
        }
    }
}

impl FromStr for PowerOperation {
    type Err = InvalidOperation;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PowerOperation::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| InvalidOperation::CodeNotInType {
                code: s.to_owned(),
                operation_type: OperationType::PowerControl,
            })
    }
}

/// The firmware operation codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FirmwareOperation {
    /// Install a newer image.
    Upgrade,
    /// Install an older image.
    Downgrade,
    /// Return to the previously installed image.
    Rollback,
}

impl FirmwareOperation {
    /// All three codes.
    pub const ALL: [FirmwareOperation; 3] = [
        FirmwareOperation::Upgrade,
        FirmwareOperation::Downgrade,
        FirmwareOperation::Rollback,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            FirmwareOperation::Upgrade => "upgrade",
            FirmwareOperation::Downgrade => "downgrade",
            FirmwareOperation::Rollback => "rollback",
        }
    }
}

impl FromStr for FirmwareOperation {
    type Err = InvalidOperation;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FirmwareOperation::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| InvalidOperation::CodeNotInType {
                code: s.to_owned(),
                operation_type: OperationType::FirmwareControl,
            })
    }
}

/// An operation code; each code belongs to exactly one type, so the code
/// alone identifies the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OperationCode {
    /// A `power_control` code.
    Power(PowerOperation),
    /// A `firmware_control` code.
    Firmware(FirmwareOperation),
    /// The `decommission` code.
    Decommission,
}

const POWER_CODES: [OperationCode; 8] = [
    OperationCode::Power(PowerOperation::PowerOn),
    OperationCode::Power(PowerOperation::ForcePowerOn),
    OperationCode::Power(PowerOperation::PowerOff),
    OperationCode::Power(PowerOperation::ForcePowerOff),
    OperationCode::Power(PowerOperation::Restart),
    OperationCode::Power(PowerOperation::ForceRestart),
    OperationCode::Power(PowerOperation::WarmReset),
    OperationCode::Power(PowerOperation::ColdReset),
];

const FIRMWARE_CODES: [OperationCode; 3] = [
    OperationCode::Firmware(FirmwareOperation::Upgrade),
    OperationCode::Firmware(FirmwareOperation::Downgrade),
    OperationCode::Firmware(FirmwareOperation::Rollback),
];

impl OperationCode {
    /// Every code of every type.
    pub fn all() -> impl Iterator<Item = OperationCode> {
        OperationType::ALL
            .into_iter()
            .flat_map(|t| t.codes().iter().copied())
    }

    /// The type this code belongs to.
    pub fn operation_type(self) -> OperationType {
        match self {
            OperationCode::Power(_) => OperationType::PowerControl,
            OperationCode::Firmware(_) => OperationType::FirmwareControl,
            OperationCode::Decommission => OperationType::Decommission,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationCode::Power(p) => p.as_str(),
            OperationCode::Firmware(f) => f.as_str(),
            OperationCode::Decommission => "decommission",
        }
    }
}

impl fmt::Display for OperationCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OperationCode {
    type Err = InvalidOperation;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OperationCode::all()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| InvalidOperation::UnknownCode(s.to_owned()))
    }
}

fn join_codes(codes: &[OperationCode]) -> String {
    codes
        .iter()
        .map(|c| c.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn all_codes() -> String {
    OperationCode::all()
        .map(|c| c.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A type or code that is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidOperation {
    /// Not one of the operation types.
    #[error("unknown operation type {0:?}; allowed: power_control, firmware_control, decommission")]
    UnknownType(String),
    /// Not a code of any type.
    #[error("unknown operation code {0:?}; allowed: {codes}", codes = all_codes())]
    UnknownCode(String),
    /// A code that does not belong to the given type.
    #[error(
        "operation {code:?} is not a {operation_type} operation; allowed: {codes}",
        codes = join_codes(operation_type.codes())
    )]
    CodeNotInType {
        /// The code as written.
        code: String,
        /// The type it was checked against.
        operation_type: OperationType,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_belongs_to_its_type() {
        assert_eq!(OperationCode::all().count(), 12);
        for code in OperationCode::all() {
            assert_eq!(code.as_str().parse(), Ok(code));
            assert_eq!(code.operation_type().parse_code(code.as_str()), Ok(code));
        }
    }

    #[test]
    fn a_code_of_another_type_is_refused() {
        let err = OperationType::PowerControl
            .parse_code("upgrade")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "operation \"upgrade\" is not a power_control operation; allowed: power_on, \
             force_power_on, power_off, force_power_off, restart, force_restart, warm_reset, \
             cold_reset"
        );
        assert!("Power_Control".parse::<OperationType>().is_err());
        assert!("".parse::<OperationCode>().is_err());
    }
}
