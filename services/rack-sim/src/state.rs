//! The admin view of the whole simulator (`GET /admin/v1/state`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{CommandKind, ComponentKind, PowerState};
use crate::world::World;

/// Every rack's components as the simulator sees them (the truth, not what
/// a faulty BMC reports).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimState {
    /// Redfish requests served since start.
    #[serde(default)]
    pub requests_total: u64,
    /// The most Redfish requests in flight at once at any one BMC, since
    /// start or the last admin reset.
    #[serde(default)]
    pub peak_concurrent_requests_per_bmc: usize,
    /// Those requests by what they were for (`read`, `command`, `session`,
    /// `discovery`, `events`: `services/rack-sim/src/gauge.rs`).
    #[serde(default)]
    pub requests_by_purpose: BTreeMap<String, u64>,
    /// Redfish session logins since start.
    #[serde(default)]
    pub logins_total: u64,
    /// Redfish sessions open now, across every BMC.
    #[serde(default)]
    pub sessions_open: usize,
    /// Racks in order.
    pub racks: Vec<RackState>,
}

/// One rack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RackState {
    /// Rack name.
    pub name: String,
    /// The most power commands (reset requests) in flight at once, per
    /// component kind, since start or the last admin reset.
    #[serde(default)]
    pub peak_concurrent_resets: std::collections::BTreeMap<String, usize>,
    /// Components in inventory order.
    pub components: Vec<ComponentState>,
}

/// One component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentState {
    /// Component name.
    pub name: String,
    /// Its kind (`PowerShelf`, `NVSwitch`, `Compute`).
    #[serde(rename = "type")]
    pub kind: ComponentKind,
    /// Its BMC's base URL.
    pub bmc_url: String,
    /// Whether its BMC answers now.
    pub reachable: bool,
    /// Host power (trays) or shelf power (shelves); a `stuck_power` fault
    /// does not show here.
    pub power_state: PowerState,
    /// Firmware member id → installed version.
    pub firmware: BTreeMap<String, String>,
    /// Lifecycle state, e.g. `Ready` or `Decommissioning/Wiping`.
    pub lifecycle: String,
    /// Accepted commands, oldest first.
    pub commands: Vec<CommandRecord>,
    /// Requests the BMC refused or failed, oldest first: injected faults
    /// and refused commands, with the status answered.
    #[serde(default)]
    pub refused: Vec<RefusedRecord>,
}

/// One request the BMC answered with an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefusedRecord {
    /// When, RFC 3339.
    pub at: String,
    /// `GET`, `POST`, …
    pub method: String,
    /// The request path.
    pub path: String,
    /// The HTTP status answered.
    pub status: u16,
}

/// One accepted command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandRecord {
    /// When, RFC 3339.
    pub at: String,
    /// `reset`, `update` or `decommission`.
    pub kind: CommandKind,
    /// The ResetType, the ImageURI, or `decommission`.
    pub value: String,
    /// For an update: the `sha256:` digest of the image bytes the BMC
    /// received (absent: its fetch failed, and so did the update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// For an update: how many bytes it received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

impl SimState {
    /// One component by rack and component name.
    pub fn component(&self, rack: &str, component: &str) -> Option<&ComponentState> {
        self.racks
            .iter()
            .find(|r| r.name == rack)?
            .components
            .iter()
            .find(|c| c.name == component)
    }
}

impl ComponentState {
    /// How many accepted commands of `kind` it has logged.
    pub fn command_count(&self, kind: CommandKind) -> usize {
        self.commands.iter().filter(|c| c.kind == kind).count()
    }
}

/// Takes the snapshot, rack by rack.
pub(crate) fn snapshot(world: &World) -> SimState {
    let racks = (0..world.rack_count())
        .map(|r| {
            world.with_rack(r, |rack, _, _| RackState {
                name: rack.name.clone(),
                peak_concurrent_resets: world
                    .resets
                    .peaks(r)
                    .into_iter()
                    .map(|(kind, peak)| {
                        let name = serde_json::to_value(kind)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default();
                        (name, peak)
                    })
                    .collect(),
                components: world
                    .rack_components(r)
                    .map(|at| {
                        let c = &rack.components[at.component];
                        ComponentState {
                            name: c.name.clone(),
                            kind: c.kind,
                            bmc_url: world.url(at).to_owned(),
                            reachable: world.reachable_now(at, rack),
                            power_state: c.power.state(),
                            firmware: c
                                .firmware
                                .members()
                                .iter()
                                .map(|m| (m.id.to_owned(), m.version.clone()))
                                .collect(),
                            lifecycle: c.lifecycle.state().to_string(),
                            commands: c
                                .commands
                                .iter()
                                .map(|cmd| CommandRecord {
                                    at: world.clock.rfc3339(cmd.at),
                                    kind: cmd.kind,
                                    value: cmd.value.clone(),
                                    digest: cmd.fetched.as_ref().map(|f| f.digest.clone()),
                                    bytes: cmd.fetched.as_ref().map(|f| f.bytes),
                                })
                                .collect(),
                            refused: c
                                .refused
                                .iter()
                                .map(|r| RefusedRecord {
                                    at: world.clock.rfc3339(r.at),
                                    method: r.method.clone(),
                                    path: r.path.clone(),
                                    status: r.status,
                                })
                                .collect(),
                        }
                    })
                    .collect(),
            })
        })
        .collect();
    SimState {
        requests_total: world.requests.total(),
        peak_concurrent_requests_per_bmc: world.requests.peak_per_bmc(),
        requests_by_purpose: world.requests.by_purpose(),
        logins_total: world.sessions.logins(),
        sessions_open: world.sessions.open_count(),
        racks,
    }
}
