//! `flow-hardware`: how Flow drives rack hardware. A [`ComponentManager`]
//! per component type declares its [`Capability`]s (power control and
//! status, firmware control and status, decommission control and status);
//! asking for one it lacks is a typed error naming the type, the manager and
//! the capability. The Redfish managers ([`redfish`]) drive compute trays,
//! NVLink switch trays and power shelves through their BMCs with `nv-redfish`
//! (and reqwest where it falls short); decommissioning goes through the
//! lifecycle API ([`lifecycle`]). Every error says whether a retry can help
//! ([`HardwareError::is_transient`]). BMC credentials are resolved by
//! reference from the worker's own configuration ([`credentials`]) and never
//! logged.

pub mod capability;
pub mod credentials;
mod error;
pub mod lifecycle;
pub mod manager;
pub mod redfish;
pub mod registry;

pub use capability::{Capability, required_capabilities};
pub use credentials::{BmcCredential, CredentialStore};
pub use error::{ErrorClass, HardwareError};
pub use manager::{
    ComponentManager, ComponentTarget, DecommissionState, FirmwareJob, FirmwareRequest,
    FirmwareStart, FirmwareState, FirmwareStatus, ManagerDescriptor, PowerOutcome, PowerStatus,
};
pub use registry::ManagerRegistry;
