//! `flow-hardware`: the hardware contract, apart from any adapter. A
//! [`ComponentManager`] per component type declares its [`Capability`]s
//! (power control and status, firmware control and status, decommission
//! control and status); asking for one it lacks is a typed error naming the
//! type, the manager and the capability. Every error has a class
//! ([`ErrorClass`]: transient, permanent, unsupported), so callers decide on
//! retries by type, never by text. [`catalog`] says what an installation's
//! managers declare, and checks a rule against it at submission.
//!
//! Whether a power command is sent is decided from the state read just
//! before it ([`command`]): a transition is never taken for its end state,
//! and a forced power-off is never held back.
//!
//! A manager may also offer a [`ChangeSignal`] per component (Redfish
//! events): a hint that lets a waiting verification poll before its
//! interval is up; polling stays the bound.
//!
//! No I/O: the Redfish managers, the lifecycle client and BMC credentials
//! are adapters in `flow-redfish` (`shared/redfish`).

pub mod capability;
pub mod catalog;
mod change;
pub mod command;
mod error;
pub mod manager;
pub mod registry;

pub use capability::{Capability, required_capabilities};
pub use change::{ChangeFeed, ChangeSignal, Signalled};
pub use error::{ErrorClass, HardwareError, classify_status};
pub use manager::{
    ComponentManager, ComponentTarget, DecommissionState, FirmwareJob, FirmwareRequest,
    FirmwareStart, FirmwareState, FirmwareStatus, ManagerDescriptor, PowerSent, PowerStatus,
};
pub use registry::ManagerRegistry;
