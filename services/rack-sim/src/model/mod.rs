//! The simulated hardware: component kinds, power state machines, firmware
//! tasks, lifecycle, and the rack physics that ties them together. No I/O.

mod component;
mod condition;
mod firmware;
mod kind;
mod lifecycle;
mod power;
mod rack;
mod version;

pub use component::{CommandKind, Component, Refused};
pub use condition::{Condition, ConditionKind};
pub use firmware::{TaskState, UpdateTask};
pub use kind::{ComponentKind, PowerResource, Profile, SHELF_POWER_SUPPLIES};
pub use lifecycle::DecommissionStart;
pub use power::{PowerState, ResetType};
pub use rack::{Change, Ctx, PowerNote, Rack, ResetOutcome};
pub use version::version_from_image_uri;
