//! The rack endpoints' requests and replies (`rack.*`).

use flow_rules::ComponentType;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::ids::{ComponentId, RackId, RackRef};
use crate::rack::RackSpec;
use crate::rule_api::Association;

// ---- requests ---------------------------------------------------------------

/// `rack.create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RackCreate {
    /// The rack document.
    pub rack: RackSpec,
}

/// `rack.get`, `rack.delete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RackByRef {
    /// The rack, by ID or name.
    pub rack: RackRef,
}

/// `rack.list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RackList {
    /// Only racks carrying every one of these labels.
    #[serde(default, skip_serializing_if = "crate::labels::Labels::is_empty")]
    pub labels: crate::labels::Labels,
}

/// `rack.label`: sets and removes labels of a rack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RackLabel {
    /// The rack, by ID or name.
    pub rack: RackRef,
    /// Labels to set (a key it has already gets the new value).
    #[serde(default)]
    pub set: crate::labels::Labels,
    /// Keys to remove (a key it does not have is no error).
    #[serde(default)]
    pub remove: Vec<String>,
}

/// `rack.component_status`: sets the status of components.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComponentStatusSet {
    /// The components: IDs, `<rack>/<name>`, or names one rack has.
    pub components: Vec<String>,
    /// Their new status.
    pub status: crate::readiness::ComponentStatus,
}

/// `rack.component_status` reply: each component as it is now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ComponentStatusReply {
    /// (rack, component, status), in the order named.
    pub components: Vec<ComponentStatusEntry>,
}

/// One component's status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ComponentStatusEntry {
    /// Its rack's name.
    pub rack: String,
    /// Its name.
    pub component: String,
    /// Its status.
    pub status: crate::readiness::ComponentStatus,
}

// ---- replies ------------------------------------------------------------------

/// A stored component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ComponentRecord {
    /// ID.
    pub id: ComponentId,
    /// Type.
    #[serde(rename = "type")]
    pub component_type: ComponentType,
    /// Name.
    pub name: String,
    /// Slot or tray position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// Vendor.
    pub manufacturer: String,
    /// Model.
    pub model: String,
    /// Serial.
    pub serial: String,
    /// Firmware version, as last known.
    pub firmware_version: String,
    /// BMC base URL.
    pub bmc_url: String,
    /// Credential reference.
    pub credential_ref: String,
    /// Its operator-set status (the readiness gate waits on it).
    #[serde(default)]
    pub status: crate::readiness::ComponentStatus,
}

/// A stored rack with its components.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RackRecord {
    /// ID.
    pub id: RackId,
    /// Unique name.
    pub name: String,
    /// Vendor.
    pub manufacturer: String,
    /// Model.
    pub model: String,
    /// Serial.
    pub serial: String,
    /// Location.
    pub location: String,
    /// Labels.
    #[serde(default)]
    pub labels: crate::labels::Labels,
    /// The power domains it belongs to.
    #[serde(default)]
    pub power_domains: Vec<crate::power::DomainName>,
    /// Components, by type then slot then name.
    pub components: Vec<ComponentRecord>,
    /// Rules bound to it.
    #[serde(default)]
    pub associations: Vec<Association>,
    /// Created.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// A rack in a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RackSummary {
    /// ID.
    pub id: RackId,
    /// Name.
    pub name: String,
    /// Model.
    pub model: String,
    /// Location.
    pub location: String,
    /// Labels.
    #[serde(default)]
    pub labels: crate::labels::Labels,
    /// How many components of each type.
    pub components: Vec<(ComponentType, u32)>,
    /// Created.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// `rack.list` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RackListReply {
    /// Racks by name.
    pub racks: Vec<RackSummary>,
}

/// `rack.delete` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RackDeleteReply {
    /// False when no such rack existed.
    pub deleted: bool,
}
