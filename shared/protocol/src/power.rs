//! Power domains, draw models and admission: the requests and replies of
//! `power_domain.*`, `power_model.*`, `rack.power_domains` and
//! `power.admit` (`docs/operating-safety.md`).
//!
//! A rack names the domains it belongs to (`site`, `row=B`, a PDU); each
//! domain may carry a budget (kW), a cap on power shelves off at once and
//! a minimum spacing between power-on commands. Before a worker sends a
//! power-on or a reset it asks `power.admit`; the answer is a grant, a
//! wait (until when, and why) or a refusal (the budget can never fit).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use flow_rules::{ComponentType, PowerOperation};

use crate::TaskId;
use crate::ids::RackRef;

/// A domain's name: label-like, 1–64 characters of `a-z A-Z 0-9 . _ - = /
/// :`, starting with a letter or digit (`site`, `row=B`, `pdu/3`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DomainName(String);

impl DomainName {
    /// The name as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for DomainName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl JsonSchema for DomainName {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DomainName".into()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        concat!(module_path!(), "::DomainName").into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A power domain's name: 1 to 64 letters, digits and . _ - = / :, starting with a letter or digit (`site`, `row=B`, `pdu/3`).",
            "type": "string",
            "pattern": "^[A-Za-z0-9][A-Za-z0-9._=/:-]{0,63}$",
        })
    }
}

impl TryFrom<String> for DomainName {
    type Error = String;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        let ok_char =
            |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '=' | '/' | ':');
        if name.is_empty() || name.len() > 64 {
            return Err(format!(
                "power domain name {name:?} must be 1 to 64 characters"
            ));
        }
        if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) || !name.chars().all(ok_char) {
            return Err(format!(
                "power domain name {name:?} may hold only letters, digits and . _ - = / : and must start with a letter or digit"
            ));
        }
        Ok(DomainName(name))
    }
}

impl std::str::FromStr for DomainName {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DomainName::try_from(s.to_owned())
    }
}

impl From<DomainName> for String {
    fn from(name: DomainName) -> String {
        name.0
    }
}

/// `power_domain.set`: creates a domain or replaces its limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerDomainSet {
    /// The domain.
    pub name: DomainName,
    /// Its budget in kW (`None`: no budget).
    #[serde(default)]
    pub budget_kw: Option<f64>,
    /// How many power shelves may be off at once (`None`: no cap).
    #[serde(default)]
    pub max_shelves_off: Option<u32>,
    /// The least time between two power-on commands in the domain, ms.
    #[serde(default)]
    pub min_spacing_ms: Option<u64>,
}

/// `power_domain.get`, `power_domain.delete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerDomainByName {
    /// The domain.
    pub name: DomainName,
}

/// `power_domain.list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerDomainList {}

/// A domain as it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PowerDomainRecord {
    /// Its name.
    pub name: DomainName,
    /// Its budget, kW.
    pub budget_kw: Option<f64>,
    /// The cap on shelves off at once.
    pub max_shelves_off: Option<u32>,
    /// The spacing between power-on commands, ms.
    pub min_spacing_ms: Option<u64>,
    /// Racks that name it.
    pub racks: Vec<String>,
    /// Every component of those racks at its steady draw, kW: the draw
    /// with everything on.
    pub steady_kw: f64,
    /// What those components count for now, kW: known on at their draw,
    /// known off or unpowered at none, not known at steady draw
    /// (`docs/operating-safety.md`, "What counts").
    #[serde(default)]
    pub counted_kw: f64,
    /// How many of them are not known.
    #[serde(default)]
    pub unknown: u32,
    /// Inrush granted and not yet settled, kW.
    pub inrush_kw: f64,
    /// Power shelves Flow turned off and has not turned on again.
    pub shelves_off: u32,
    /// Commands waiting for it now.
    pub waiting: u32,
    /// Last changed.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

impl PowerDomainRecord {
    /// What is counted against the budget now, kW.
    pub fn in_use_kw(&self) -> f64 {
        self.counted_kw + self.inrush_kw
    }
}

/// `power_domain.list` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PowerDomainListReply {
    /// Domains by name.
    pub domains: Vec<PowerDomainRecord>,
}

/// `power_domain.delete` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PowerDomainDeleteReply {
    /// False when no such domain existed.
    pub deleted: bool,
}

/// `power_model.set`: the draw of a component type (for one rack model,
/// or every model when `rack_model` is empty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerModelSet {
    /// The component type.
    pub component_type: ComponentType,
    /// The rack model it applies to (`""`: every model without its own).
    #[serde(default)]
    pub rack_model: String,
    /// Peak draw at power-on, W.
    pub inrush_w: u32,
    /// Draw once settled, W.
    pub steady_w: u32,
    /// How long the inrush lasts, ms.
    pub settle_ms: u32,
}

/// `power_model.list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerModelList {}

/// `power_model.list` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PowerModelListReply {
    /// Models by type, then rack model (`""` first).
    pub models: Vec<PowerModelSet>,
}

/// `rack.power_domains`: replaces the domains a rack belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RackPowerDomains {
    /// The rack, by ID or name.
    pub rack: RackRef,
    /// Its domains (empty: none).
    pub domains: Vec<DomainName>,
}

/// `power.admit`: may this command go now? Asked by workers before a
/// power-on or a reset (budget, spacing) and before a power shelf's
/// power-off (the shelves-off cap).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerAdmit {
    /// The task sending it.
    pub task: TaskId,
    /// The component's rack (name).
    pub rack: String,
    /// The component (name).
    pub component: String,
    /// Its type.
    pub component_type: ComponentType,
    /// The command.
    pub operation: PowerOperation,
    /// The domains of the rack, as the task's plan read them.
    pub domains: Vec<DomainName>,
    /// An emergency (a task of an event rule, e.g. a leak's power-off): not
    /// held by the shelves-off cap.
    #[serde(default)]
    pub emergency: bool,
    /// What the worker read of the component just before asking (its
    /// power, when): recorded before the decision, as any observation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<SeenPower>,
    /// The start (epoch ms) of this command's reservation that passed
    /// unsent (the worker came after its send-by): the command was not sent
    /// under it, so its grant is released before this ask is decided,
    /// rather than counted beside the new one until it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces_ms: Option<u64>,
}

/// A component's power as read at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SeenPower {
    /// What was read.
    pub power: crate::state::PowerState,
    /// When (epoch ms).
    pub at_ms: u64,
}

/// `power.sent`: the commands of a step the devices accepted, and when.
/// A granted inrush is counted from its grant until it is reported sent,
/// then for its settle time from the send; one never reported expires
/// (`docs/operating-safety.md`, "What counts").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerSent {
    /// The task that sent them.
    pub task: TaskId,
    /// The rack (name).
    pub rack: String,
    /// Each component and when its command was accepted (epoch ms).
    pub sent: Vec<SentCommand>,
}

/// One command a device accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SentCommand {
    /// The component (name).
    pub component: String,
    /// The operation sent.
    pub operation: PowerOperation,
    /// When the device accepted it (epoch ms).
    pub at_ms: u64,
}

/// `power.sent` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PowerSentReply {
    /// Grants whose inrush is now counted from the send.
    pub grants: u32,
}

/// `rack.power`: each component's power as Flow knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RackPowerRequest {
    /// The rack, by ID or name.
    pub rack: RackRef,
}

/// How a component is counted against its domains' budgets now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Counted {
    /// Known off (read off recently, by a source that can say so): 0 W.
    Off,
    /// Unpowered: every power shelf of its rack is known off: 0 W.
    Unpowered,
    /// Known on: its steady draw, or its measured draw where fresher and
    /// higher.
    On,
    /// A power-on granted and not yet settled: its steady draw, and the
    /// grant's inrush.
    Granted,
    /// Not known (never read, read too long ago, unreachable, moving): its
    /// steady draw.
    Unknown,
}

/// One component's power, as Flow knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ComponentPower {
    /// The component.
    pub component: String,
    /// Its type.
    pub component_type: ComponentType,
    /// Its power as last observed (`unknown`: never).
    pub power: crate::state::PowerState,
    /// Whether its BMC answered that read.
    pub reachable: bool,
    /// Who observed it.
    pub source: Option<crate::state::ObservationSource>,
    /// When.
    #[schemars(with = "Option<crate::contract::Timestamp>")]
    #[serde(with = "time::serde::rfc3339::option")]
    pub observed_at: Option<OffsetDateTime>,
    /// How long ago, seconds.
    pub age_s: Option<f64>,
    /// Its draw as last measured by its BMC, W.
    pub measured_w: Option<u32>,
    /// Its draw model's steady draw, W.
    pub steady_w: u32,
    /// How it is counted against its domains.
    pub counted: Counted,
    /// What it counts for now, W (steady, measured or 0; a grant's inrush
    /// is shown apart).
    pub counted_w: u32,
    /// The power it is meant to reach: the operation of the rack's open
    /// task, when that task acts on it.
    pub desired: Option<crate::state::PowerState>,
    /// A power-on granted and not yet settled: its inrush over steady, W.
    pub inrush_w: Option<u32>,
    /// A command held by power admission, and why.
    pub held: Option<String>,
}

/// `rack.power` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RackPowerReply {
    /// The rack.
    pub rack: String,
    /// Its power domains.
    pub domains: Vec<DomainName>,
    /// How long an observation counts as known, seconds.
    pub known_for_s: u64,
    /// Its open task, if any (the one `desired` comes from).
    pub task: Option<TaskId>,
    /// Every component with a BMC, by name.
    pub components: Vec<ComponentPower>,
}

/// `power.admit` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", tag = "decision")]
pub enum Admission {
    /// Send it now: a command that draws no inrush (a power shelf's
    /// power-off the shelves-off cap lets go). A power-on is always given a
    /// slot (`reserved`, from now if there is room) with its send-by.
    Granted,
    /// Reserved: send it at `at_ms` (epoch ms) without asking again, and
    /// no later than `send_by_ms` — a command later than that asks anew
    /// (its reservation no longer covers its inrush).
    Reserved {
        /// When it may be sent.
        at_ms: u64,
        /// The last moment its reservation covers a send.
        send_by_ms: u64,
        /// Why not now, for the operator: `waiting for power budget in row=B: 1,180 of 1,200 kW`.
        reason: String,
    },
    /// Ask again at `until_ms` (epoch ms): the shelves-off cap, which has
    /// no expiry to reserve by.
    Wait {
        /// When to ask again.
        until_ms: u64,
        /// Why, for the operator: `waiting for power budget in row=B: 1,180 of 1,200 kW`.
        reason: String,
    },
    /// It can never be admitted as the domain stands (its budget is below
    /// the steady draw plus this inrush with nothing else in flight).
    Refused {
        /// Why, naming the domain.
        reason: String,
    },
}

/// Whether `op` on a component of `component_type` asks admission: every
/// inrush, and a power shelf's power-off (the shelves-off cap).
pub fn gated(component_type: ComponentType, op: PowerOperation) -> bool {
    draws_inrush(op) || component_type == ComponentType::PowerShelf
}

/// Whether a power operation draws an inrush (a power-on or any reset):
/// such commands take a share of their domains' budgets.
pub fn draws_inrush(op: PowerOperation) -> bool {
    !matches!(op, PowerOperation::PowerOff | PowerOperation::ForcePowerOff)
}

/// One command waiting for a domain, for `task show`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PowerWait {
    /// The component.
    pub component: String,
    /// Why it waits.
    pub reason: String,
    /// Since when.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "time::serde::rfc3339")]
    pub since: OffsetDateTime,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_names_are_label_like() {
        for ok in ["site", "row=B", "pdu/3", "busway-2.a", "zone:east"] {
            assert!(ok.parse::<DomainName>().is_ok(), "{ok}");
        }
        for bad in ["", "=B", "row B", "row;B", &"x".repeat(65)] {
            let e = bad.parse::<DomainName>().unwrap_err();
            assert!(e.contains("power domain name"), "{e}");
        }
    }

    #[test]
    fn offs_draw_no_inrush_and_every_other_command_does() {
        let drawing: Vec<_> = PowerOperation::ALL
            .into_iter()
            .filter(|op| draws_inrush(*op))
            .collect();
        assert_eq!(drawing.len(), 6);
        assert!(!draws_inrush(PowerOperation::ForcePowerOff));
    }

    #[test]
    fn admission_is_tagged_by_decision() {
        let wait = Admission::Wait {
            until_ms: 5,
            reason: "r".into(),
        };
        let json = serde_json::to_value(&wait).unwrap();
        assert_eq!(json["decision"], "wait");
        assert_eq!(serde_json::from_value::<Admission>(json).unwrap(), wait);
    }
}
