//! `flow-redfish`: the hardware adapters behind the contract of
//! `flow-hardware`. [`RedfishManager`] drives compute trays, NVLink switch
//! trays and power shelves through their BMCs with `nv-redfish` (and
//! reqwest where it falls short); [`lifecycle::LifecycleClient`] talks to
//! the lifecycle API for decommissioning; [`credentials`] resolves a
//! component's credential reference from the worker's own configuration,
//! never logging a password. Workers and `flow bmc` use this crate; the
//! engine and the scheduler know only the contract. [`sse`] frames a BMC's
//! event stream; the managers follow it (`events.rs`) to offer change
//! signals to waiting verifications.

mod conn;
pub mod credentials;
pub mod discover;
mod events;
mod firmware;
pub mod kind;
pub mod lifecycle;
mod manager;
mod power;
pub mod probe;
pub mod sse;

pub use conn::{Connections, EventStream, RequestCap};
pub use credentials::{AuthMode, BmcCredential, CredentialError, CredentialStore};
pub use manager::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONCURRENT_PER_BMC, DEFAULT_MAX_REQUESTS,
    DEFAULT_REQUEST_TIMEOUT, IDLE_CONNECTION_TIMEOUT, RedfishManager, RedfishSettings,
    error_message, registry, registry_with, snippet,
};
