//! Component types a rule step can target: "Compute", "NVSwitch",
//! "PowerShelf", "ToRSwitch", "UMS", "CDU", case-insensitive
//! (`docs/rule-format.md`, "Component types").

use std::fmt;
use std::str::FromStr;

/// The kind of rack component a step acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ComponentType {
    /// A compute tray (its BMC and host).
    Compute,
    /// An NVLink switch tray. Older rule files say `NVLSwitch`.
    NVSwitch,
    /// A power shelf.
    PowerShelf,
    /// A top-of-rack switch (accepted in rules; no manager yet).
    ToRSwitch,
    /// A UMS unit (accepted in rules; no manager yet).
    Ums,
    /// A coolant distribution unit (accepted in rules; no manager yet).
    Cdu,
}

impl ComponentType {
    /// Every component type, in the order of `docs/rule-format.md`,
    /// "Component types".
    pub const ALL: [ComponentType; 6] = [
        ComponentType::Compute,
        ComponentType::NVSwitch,
        ComponentType::PowerShelf,
        ComponentType::ToRSwitch,
        ComponentType::Ums,
        ComponentType::Cdu,
    ];

    /// The canonical name, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            ComponentType::Compute => "Compute",
            ComponentType::NVSwitch => "NVSwitch",
            ComponentType::PowerShelf => "PowerShelf",
            ComponentType::ToRSwitch => "ToRSwitch",
            ComponentType::Ums => "UMS",
            ComponentType::Cdu => "CDU",
        }
    }

    /// The lower-case form used in NATS subjects and configuration keys.
    pub fn subject_token(self) -> &'static str {
        match self {
            ComponentType::Compute => "compute",
            ComponentType::NVSwitch => "nvswitch",
            ComponentType::PowerShelf => "powershelf",
            ComponentType::ToRSwitch => "torswitch",
            ComponentType::Ums => "ums",
            ComponentType::Cdu => "cdu",
        }
    }

    /// The accepted spellings, for error messages.
    pub const ALLOWED: &'static str =
        "Compute, NVSwitch (or NVLSwitch), PowerShelf, ToRSwitch, UMS, CDU (any case)";
}

impl fmt::Display for ComponentType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no component type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown component type {0:?}; allowed: {allowed}", allowed = ComponentType::ALLOWED)]
pub struct UnknownComponentType(pub String);

impl FromStr for ComponentType {
    type Err = UnknownComponentType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("nvlswitch") {
            return Ok(ComponentType::NVSwitch);
        }
        ComponentType::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownComponentType(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_any_case_and_the_old_switch_name() {
        assert_eq!("compute".parse(), Ok(ComponentType::Compute));
        assert_eq!("NVSWITCH".parse(), Ok(ComponentType::NVSwitch));
        assert_eq!("NVLSwitch".parse(), Ok(ComponentType::NVSwitch));
        assert_eq!("nvlswitch".parse(), Ok(ComponentType::NVSwitch));
        assert_eq!("powerShelf".parse(), Ok(ComponentType::PowerShelf));
        assert_eq!("ums".parse(), Ok(ComponentType::Ums));
        assert_eq!("Cdu".parse(), Ok(ComponentType::Cdu));
        assert_eq!("torswitch".parse(), Ok(ComponentType::ToRSwitch));
        for bad in ["", "unknown", "power_shelf", "switch", "nvl_switch"] {
            assert!(bad.parse::<ComponentType>().is_err(), "{bad}");
        }
    }

    #[test]
    fn canonical_names_parse_back() {
        for t in ComponentType::ALL {
            assert_eq!(t.as_str().parse(), Ok(t));
            assert_eq!(t.subject_token().parse(), Ok(t));
        }
    }
}
