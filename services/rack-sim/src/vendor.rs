//! Vendor profiles: the ways real BMC firmware departs from the
//! simulator's standard Redfish service, selected per rack or per
//! component (`--profile`), so that Flow's managers are tried against each
//! deviation they must tolerate. The kind of a component (its ids,
//! firmware, reset values: [`crate::model::Profile`]) stays; a vendor
//! profile changes only how its BMC presents them.
//!
//! | profile | what differs | seen in (public) |
//! |---|---|---|
//! | `standard` | nothing: a schema-conforming service; a reset answers `204 No Content` | DSP0266 allows `204` for a successful action |
//! | `no-links` | the service root has no `Links` (nor `Links/Sessions`) | required by the ServiceRoot schema, yet missing on the independent implementation the interoperability issue was tried against (`flow bmc … power`: `missing field 'Links'`) |
//! | `uuid-ids` | systems and chassis are named by UUID, not `System_0` | OpenStack sushy-tools (libvirt driver): each System's `Id` is its domain UUID |
//! | `multi-system` | a DPU system listed before the host (trays), a backplane chassis before the shelf (shelves) | ComputerSystem `SystemType` `DPU` (DMTF ComputerSystem v1.21); servers with BlueField DPUs list the DPU as a second system |
//! | `action-info` | `@Redfish.ActionInfo` instead of `ResetType@Redfish.AllowableValues` | OpenBMC bmcweb: `#ComputerSystem.Reset` points at `…/ResetActionInfo` |
//! | `session-only` | HTTP Basic is refused: only a Redfish session's `X-Auth-Token` is accepted | DSP0266 lets a service require sessions; OpenBMC bmcweb can turn Basic off (`AuthMethods` `BasicAuth` false) |
//! | `reset-200` | a reset answers `200` with a `Base.Success` message body | OpenBMC bmcweb answers actions `200` with `Base.1.x.Success` |
//! | `if-match` | the power resource carries an `ETag`; a reset without `If-Match` is answered `428`, one with a stale ETag `412` | DSP0266 ("ETags"): a service may require `If-Match` on a modifying request and answers `428 Precondition Required` without it; applied here to the reset, the one modifying request Flow sends to a system or chassis |

use std::fmt;
use std::str::FromStr;

/// How a BMC presents its resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VendorProfile {
    /// The simulator's own, schema-conforming service.
    #[default]
    Standard,
    /// A service root without `Links`.
    NoLinks,
    /// Systems and chassis named by UUID.
    UuidIds,
    /// A DPU system (trays) or backplane chassis (shelves) listed first.
    MultiSystem,
    /// Reset values through `@Redfish.ActionInfo`.
    ActionInfo,
    /// Only session tokens, no HTTP Basic.
    SessionOnly,
    /// `200` with a message body for a reset.
    Reset200,
    /// A reset needs `If-Match` with the power resource's ETag.
    IfMatch,
}

impl VendorProfile {
    /// Every profile, in the table's order.
    pub const ALL: [VendorProfile; 8] = [
        VendorProfile::Standard,
        VendorProfile::NoLinks,
        VendorProfile::UuidIds,
        VendorProfile::MultiSystem,
        VendorProfile::ActionInfo,
        VendorProfile::SessionOnly,
        VendorProfile::Reset200,
        VendorProfile::IfMatch,
    ];

    /// The name `--profile` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            VendorProfile::Standard => "standard",
            VendorProfile::NoLinks => "no-links",
            VendorProfile::UuidIds => "uuid-ids",
            VendorProfile::MultiSystem => "multi-system",
            VendorProfile::ActionInfo => "action-info",
            VendorProfile::SessionOnly => "session-only",
            VendorProfile::Reset200 => "reset-200",
            VendorProfile::IfMatch => "if-match",
        }
    }
}

impl fmt::Display for VendorProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for VendorProfile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        VendorProfile::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = VendorProfile::ALL.iter().map(|p| p.as_str()).collect();
                format!("unknown vendor profile {s:?} (known: {})", names.join(", "))
            })
    }
}

/// What a BMC's event stream announces (`--events`): which real BMCs it
/// stands for, and what Flow must get right under each
/// (`services/rack-sim/README.md`, "Event profiles").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EventProfile {
    /// DMTF `ResourceEvent` power events (`ResourcePoweredOn` /
    /// `ResourcePoweredOff`) and `TaskEvent`s.
    #[default]
    Standard,
    /// Power changes only as OpenBMC log events (`OpenBMC.0.1.DCPowerOn` /
    /// `DCPowerOff`, as phosphor-sel-logger's pulse monitor logs them);
    /// `TaskEvent`s.
    OpenbmcLog,
    /// No events at all: the stream opens and stays silent but for its
    /// keep-alives.
    None,
}

impl EventProfile {
    /// Every profile.
    pub const ALL: [EventProfile; 3] = [
        EventProfile::Standard,
        EventProfile::OpenbmcLog,
        EventProfile::None,
    ];

    /// The name `--events` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            EventProfile::Standard => "standard",
            EventProfile::OpenbmcLog => "openbmc-log",
            EventProfile::None => "none",
        }
    }
}

impl fmt::Display for EventProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventProfile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventProfile::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = EventProfile::ALL.iter().map(|p| p.as_str()).collect();
                format!("unknown event profile {s:?} (known: {})", names.join(", "))
            })
    }
}

/// One `--events` flag: `<profile>`, `<rack>=<profile>` or
/// `<rack>/<component>=<profile>`; later flags win.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventChoice {
    /// Where it applies.
    pub scope: ProfileScope,
    /// The profile.
    pub profile: EventProfile,
}

impl FromStr for EventChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (scope, name) = scope_of(s, "--events")?;
        Ok(EventChoice {
            scope,
            profile: name.parse()?,
        })
    }
}

/// The event profile of one component's BMC under `choices` (the last that
/// covers it wins; none: standard).
pub fn event_profile_of(choices: &[EventChoice], rack: &str, component: &str) -> EventProfile {
    choices
        .iter()
        .rev()
        .find(|c| c.scope.covers(rack, component))
        .map_or(EventProfile::Standard, |c| c.profile)
}

/// A flag's scope and the profile name after it.
fn scope_of<'a>(s: &'a str, flag: &str) -> Result<(ProfileScope, &'a str), String> {
    let Some((at, name)) = s.split_once('=') else {
        return Ok((ProfileScope::All, s));
    };
    let scope = match at.split_once('/') {
        None if !at.is_empty() => ProfileScope::Rack(at.to_owned()),
        Some((rack, component)) if !rack.is_empty() && !component.is_empty() => {
            ProfileScope::Component {
                rack: rack.to_owned(),
                component: component.to_owned(),
            }
        }
        _ => {
            return Err(format!(
                "{flag} {s:?}: expected <profile>, <rack>=<profile> or <rack>/<component>=<profile>"
            ));
        }
    };
    Ok((scope, name))
}

/// Which BMCs a profile applies to: every one, a rack's, or one component's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileScope {
    /// Every BMC.
    All,
    /// Every BMC of the rack named.
    Rack(String),
    /// One component's BMC.
    Component {
        /// Its rack.
        rack: String,
        /// Its name.
        component: String,
    },
}

impl ProfileScope {
    /// Whether it covers one component of one rack.
    pub fn covers(&self, rack: &str, component: &str) -> bool {
        match self {
            ProfileScope::All => true,
            ProfileScope::Rack(r) => r == rack,
            ProfileScope::Component {
                rack: r,
                component: n,
            } => r == rack && n == component,
        }
    }
}

/// One `--profile` flag: `<profile>`, `<rack>=<profile>` or
/// `<rack>/<component>=<profile>`. Later flags win over earlier ones for
/// the BMCs both cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileChoice {
    /// Where it applies.
    pub scope: ProfileScope,
    /// The profile.
    pub profile: VendorProfile,
}

impl FromStr for ProfileChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (scope, name) = scope_of(s, "--profile")?;
        Ok(ProfileChoice {
            scope,
            profile: name.parse()?,
        })
    }
}

/// The profile of one component's BMC under `choices` (the last that
/// covers it wins; none: standard).
pub fn profile_of(choices: &[ProfileChoice], rack: &str, component: &str) -> VendorProfile {
    choices
        .iter()
        .rev()
        .find(|c| c.scope.covers(rack, component))
        .map_or(VendorProfile::Standard, |c| c.profile)
}

/// The DPU system a `multi-system` tray lists before its host.
pub(crate) const DPU_SYSTEM: &str = "DPU_0";
/// The backplane chassis a `multi-system` shelf lists before itself.
pub(crate) const BACKPLANE_CHASSIS: &str = "Backplane_0";

/// The resource ids one BMC serves: its kind's, or UUIDs under `uuid-ids`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ids {
    /// The host's ComputerSystem id (none on a shelf).
    pub(crate) system: Option<String>,
    /// The component's own Chassis id.
    pub(crate) chassis: String,
    /// The Manager id.
    pub(crate) manager: &'static str,
}

impl Ids {
    /// The ids of a BMC of `kind` under `vendor`, whose UUID is `uuid`.
    pub(crate) fn of(kind: &crate::model::Profile, vendor: VendorProfile, uuid: &str) -> Ids {
        match vendor {
            VendorProfile::UuidIds => Ids {
                system: kind.system.map(|_| uuid.to_owned()),
                // Another UUID of the same BMC: its first digit changed.
                chassis: format!("c{}", uuid.get(1..).unwrap_or_default()),
                manager: kind.manager,
            },
            _ => Ids {
                system: kind.system.map(str::to_owned),
                chassis: kind.chassis.to_owned(),
                manager: kind.manager,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_and_the_last_covering_one_wins() {
        let choices: Vec<ProfileChoice> = [
            "no-links",
            "rack-02=uuid-ids",
            "rack-02/compute-03=reset-200",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        assert_eq!(
            profile_of(&choices, "rack-01", "compute-03"),
            VendorProfile::NoLinks
        );
        assert_eq!(
            profile_of(&choices, "rack-02", "compute-01"),
            VendorProfile::UuidIds
        );
        assert_eq!(
            profile_of(&choices, "rack-02", "compute-03"),
            VendorProfile::Reset200
        );
        assert_eq!(profile_of(&[], "rack-01", "x"), VendorProfile::Standard);
        for p in VendorProfile::ALL {
            assert_eq!(p.as_str().parse::<VendorProfile>(), Ok(p));
        }
        let e = "rack-01=acme".parse::<ProfileChoice>().unwrap_err();
        assert!(
            e.contains("unknown vendor profile \"acme\"") && e.contains("no-links"),
            "{e}"
        );
        let e = "=no-links".parse::<ProfileChoice>().unwrap_err();
        assert!(e.contains("expected <profile>"), "{e}");
    }
}
