//! One component's simulated state: host or shelf power, BMC availability,
//! firmware, update tasks, lifecycle and the log of accepted commands.

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::firmware::{FirmwareInventory, UpdateTask, prune_tasks};
use super::kind::ComponentKind;
use super::lifecycle::Lifecycle;
use super::power::{PowerMachine, PowerState};

/// Accepted commands kept per component; older ones are dropped. Drills
/// count a handful of commands; a benchmark must not grow without bound.
pub const MAX_COMMANDS: usize = 1000;

/// Whether a BMC answers the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BmcStatus {
    /// Serving.
    Up,
    /// Powered, booting until this instant.
    Booting {
        /// When it is up.
        until: Instant,
    },
    /// Unpowered.
    Down,
}

/// The kind of an accepted command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandKind {
    /// A ComputerSystem.Reset or Chassis.Reset (value: the ResetType).
    Reset,
    /// A SimpleUpdate (value: the ImageURI).
    Update,
    /// A decommission that started (value: `decommission`).
    Decommission,
}

/// One accepted command.
#[derive(Debug, Clone)]
pub struct Command {
    /// When it was accepted.
    pub at: Instant,
    /// What it was.
    pub kind: CommandKind,
    /// Its argument.
    pub value: String,
    /// For an update: what the BMC received for its image.
    pub fetched: Option<crate::origin::Fetched>,
}

/// One simulated component.
#[derive(Debug, Clone)]
pub struct Component {
    /// Name, unique in its rack, e.g. `compute-01`.
    pub name: String,
    /// Its kind.
    pub kind: ComponentKind,
    /// 1-based index within its kind.
    pub slot: u32,
    /// Serial number.
    pub serial: String,
    /// Host power (trays) or shelf power (shelves).
    pub power: PowerMachine,
    /// Whether its BMC is up.
    pub bmc: BmcStatus,
    /// Firmware versions.
    pub firmware: FirmwareInventory,
    /// Update tasks, oldest first.
    pub tasks: Vec<UpdateTask>,
    next_task_id: u32,
    /// Decommission state.
    pub lifecycle: Lifecycle,
    /// Accepted commands, oldest first.
    pub commands: Vec<Command>,
    /// Requests the BMC refused or failed (an injected fault, a refused
    /// command), oldest first.
    pub refused: Vec<Refused>,
    /// Hardware conditions it is in (a leak, an over-temperature), oldest
    /// first; at most one of each kind.
    pub conditions: Vec<super::Condition>,
}

/// A request the BMC answered with an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// When.
    pub at: Instant,
    /// `GET`, `POST`, …
    pub method: String,
    /// The request path.
    pub path: String,
    /// The HTTP status answered.
    pub status: u16,
}

impl Component {
    /// A component as shipped.
    pub fn new(
        rack: &str,
        kind: ComponentKind,
        slot: u32,
        power: PowerState,
        bmc: BmcStatus,
        now: Instant,
    ) -> Self {
        let name = format!("{}-{slot:02}", kind.name_prefix());
        Component {
            serial: format!("SIM-{rack}-{name}"),
            name,
            kind,
            slot,
            power: PowerMachine::new(power),
            bmc,
            firmware: FirmwareInventory::new(kind.profile()),
            tasks: Vec::new(),
            next_task_id: 1,
            lifecycle: Lifecycle::new(now),
            commands: Vec::new(),
            refused: Vec::new(),
            conditions: Vec::new(),
        }
    }

    /// Whether its BMC is up as far as power goes (faults aside).
    pub fn bmc_up(&self) -> bool {
        self.bmc == BmcStatus::Up
    }

    /// Logs an accepted command.
    pub fn record(&mut self, at: Instant, kind: CommandKind, value: impl Into<String>) {
        if self.commands.len() >= MAX_COMMANDS {
            self.commands.remove(0);
        }
        self.commands.push(Command {
            at,
            kind,
            value: value.into(),
            fetched: None,
        });
    }

    /// Logs an accepted update and what its BMC received for the image.
    pub fn record_update(&mut self, at: Instant, image_uri: &str, fetched: crate::origin::Fetched) {
        self.record(at, CommandKind::Update, image_uri);
        if let Some(last) = self.commands.last_mut() {
            last.fetched = Some(fetched);
        }
    }

    /// Logs a request the BMC refused or failed.
    pub fn record_refused(&mut self, refused: Refused) {
        if self.refused.len() >= MAX_COMMANDS {
            self.refused.remove(0);
        }
        self.refused.push(refused);
    }

    /// Adds a task and returns its id.
    pub fn add_task(&mut self, make: impl FnOnce(u32) -> UpdateTask) -> u32 {
        let id = self.next_task_id;
        self.next_task_id += 1;
        self.tasks.push(make(id));
        prune_tasks(&mut self.tasks);
        id
    }

    /// One task by id.
    pub fn task(&self, id: u32) -> Option<&UpdateTask> {
        self.tasks.iter().find(|t| t.id == id)
    }
}
