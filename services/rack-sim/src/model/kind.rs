//! The three kinds of rack component and what each one's BMC looks like: its
//! identity, resource ids, firmware inventory and reset values.

use flow_rules::ComponentType;
use serde::{Deserialize, Serialize};

use super::power::ResetType;

/// A kind of rack component the simulator serves a BMC for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ComponentKind {
    /// A LiteOn power shelf.
    PowerShelf,
    /// An NVLink switch tray.
    #[serde(rename = "NVSwitch")]
    NvSwitch,
    /// A GB200 compute tray.
    Compute,
}

/// Which resource carries a component's power state and reset action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerResource {
    /// `Systems/<id>` with `#ComputerSystem.Reset` (trays: the host).
    System,
    /// `Chassis/<id>` with `#Chassis.Reset` (the power shelf itself).
    Chassis,
}

/// One firmware inventory member as shipped.
#[derive(Debug, Clone, Copy)]
pub struct FirmwareSlot {
    /// Member id, e.g. `FW_BMC_0`.
    pub id: &'static str,
    /// Human-readable name.
    pub name: &'static str,
    /// Version at start.
    pub initial: &'static str,
}

/// What a kind's BMC serves, fixed per kind.
#[derive(Debug)]
pub struct Profile {
    /// Service root `Vendor` (absent on LiteOn shelves).
    pub vendor: Option<&'static str>,
    /// Service root `Product` (absent on LiteOn shelves).
    pub product: Option<&'static str>,
    /// Service root `RedfishVersion`.
    pub redfish_version: &'static str,
    /// Manufacturer, in the inventory and on the chassis.
    pub manufacturer: &'static str,
    /// Model, in the inventory and on the chassis.
    pub model: &'static str,
    /// The one ComputerSystem id, if the BMC has one.
    pub system: Option<&'static str>,
    /// The one Chassis id.
    pub chassis: &'static str,
    /// Its `ChassisType`.
    pub chassis_type: &'static str,
    /// The one Manager id.
    pub manager: &'static str,
    /// Firmware inventory members, in order.
    pub firmware: &'static [FirmwareSlot],
    /// The member updated when SimpleUpdate names no target.
    pub primary_firmware: &'static str,
    /// The member whose version is the Manager's `FirmwareVersion`.
    pub manager_firmware: &'static str,
    /// Where the power state and reset action live.
    pub power_resource: PowerResource,
    /// `ResetType@Redfish.AllowableValues` of that action.
    pub resets: &'static [ResetType],
    /// Whether the BMC has an EventService with an SSE stream (otherwise
    /// its conditions are only seen by reading the chassis).
    pub event_service: bool,
}

/// Reset values of ComputerSystem.Reset on both tray kinds.
const TRAY_RESETS: &[ResetType] = &[
    ResetType::On,
    ResetType::ForceOn,
    ResetType::GracefulShutdown,
    ResetType::ForceOff,
    ResetType::GracefulRestart,
    ResetType::ForceRestart,
    ResetType::PowerCycle,
];

static COMPUTE: Profile = Profile {
    vendor: Some("NVIDIA"),
    product: Some("GB200 NVL"),
    redfish_version: "1.17.0",
    manufacturer: "NVIDIA",
    model: "GB200 NVL",
    system: Some("System_0"),
    chassis: "BMC_0",
    chassis_type: "Module",
    manager: "BMC_0",
    firmware: &[
        FirmwareSlot {
            id: "FW_BMC_0",
            name: "BMC firmware",
            initial: "25.06-2",
        },
        FirmwareSlot {
            id: "UEFI",
            name: "UEFI firmware",
            initial: "02.04.12",
        },
    ],
    primary_firmware: "FW_BMC_0",
    manager_firmware: "FW_BMC_0",
    power_resource: PowerResource::System,
    resets: TRAY_RESETS,
    event_service: true,
};

static NVSWITCH: Profile = Profile {
    vendor: Some("NVIDIA"),
    product: Some("P3809"),
    redfish_version: "1.17.0",
    manufacturer: "NVIDIA",
    model: "P3809",
    system: Some("System_0"),
    chassis: "BMC_eeprom",
    chassis_type: "Module",
    manager: "BMC_0",
    firmware: &[
        FirmwareSlot {
            id: "FW_NVOS_0",
            name: "NVOS firmware",
            initial: "25.02.2141",
        },
        FirmwareSlot {
            id: "FW_BMC_0",
            name: "BMC firmware",
            initial: "88.0002.1333",
        },
    ],
    primary_firmware: "FW_NVOS_0",
    manager_firmware: "FW_BMC_0",
    power_resource: PowerResource::System,
    resets: TRAY_RESETS,
    event_service: true,
};

static POWERSHELF: Profile = Profile {
    vendor: None,
    product: None,
    redfish_version: "1.9.0",
    manufacturer: "LITE-ON TECHNOLOGY CORP.",
    model: "PF-1333-7R",
    system: None,
    chassis: "powershelf",
    chassis_type: "Shelf",
    manager: "bmc",
    firmware: &[FirmwareSlot {
        id: "FW_PMC_0",
        name: "PMC firmware",
        initial: "r1.3.9",
    }],
    primary_firmware: "FW_PMC_0",
    manager_firmware: "FW_PMC_0",
    power_resource: PowerResource::Chassis,
    resets: &[ResetType::On, ResetType::ForceOff],
    event_service: false,
};

/// Power supplies per shelf (`PowerSubsystem/PowerSupplies/0..5`).
pub const SHELF_POWER_SUPPLIES: u8 = 6;

impl ComponentKind {
    /// Every kind, in inventory order (shelves, switches, compute).
    pub const ALL: [ComponentKind; 3] = [
        ComponentKind::PowerShelf,
        ComponentKind::NvSwitch,
        ComponentKind::Compute,
    ];

    /// Its BMC's fixed shape.
    pub fn profile(self) -> &'static Profile {
        match self {
            ComponentKind::PowerShelf => &POWERSHELF,
            ComponentKind::NvSwitch => &NVSWITCH,
            ComponentKind::Compute => &COMPUTE,
        }
    }

    /// Flow's name for the kind.
    pub fn component_type(self) -> ComponentType {
        match self {
            ComponentKind::PowerShelf => ComponentType::PowerShelf,
            ComponentKind::NvSwitch => ComponentType::NVSwitch,
            ComponentKind::Compute => ComponentType::Compute,
        }
    }

    /// Component names are `<prefix>-01`, `<prefix>-02`, ….
    pub fn name_prefix(self) -> &'static str {
        match self {
            ComponentKind::PowerShelf => "powershelf",
            ComponentKind::NvSwitch => "nvswitch",
            ComponentKind::Compute => "compute",
        }
    }

    /// Whether its BMC serves an EventService (SSE): the trays do, the
    /// shelves are poll-only.
    pub fn has_event_service(self) -> bool {
        self.profile().event_service
    }

    /// Whether its BMC needs shelf power (trays) or has its own standby
    /// power (shelves).
    pub fn needs_shelf_power(self) -> bool {
        !matches!(self, ComponentKind::PowerShelf)
    }
}
