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
//!
//! The crate is built in layers, each using only those below it, so a
//! reader can start at the bottom:
//!
//! 1. `credentials`, `kind`, [`sse`]: what a component's BMC is and how it
//!    is reached; no requests.
//! 2. `conn`: connections, sessions, request caps, and what an answer or
//!    failure means (`conn/errors.rs`); it keeps per-BMC state for the
//!    layers above without knowing their types (`BmcHandle::state`).
//! 3. [`discover`] (a BMC's power resource) and `events` (its event
//!    stream), on `conn`.
//! 4. `power`, `firmware`, [`probe`]: operations, on discovery; and
//!    [`lifecycle`] (the lifecycle API, for decommissioning).
//! 5. `manager` (the `ComponentManager`s and their registry) on top.
//!
//! `tests/layers.rs` reads the sources and fails on a use that reaches up.

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

pub use conn::errors::{error_message, snippet};
pub use conn::settings::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONCURRENT_PER_BMC, DEFAULT_MAX_REQUESTS,
    DEFAULT_REQUEST_TIMEOUT, IDLE_CONNECTION_TIMEOUT, RedfishSettings,
};
pub use conn::{Connections, EventStream, RequestCap};
pub use credentials::{AuthMode, BmcCredential, CredentialError, CredentialStore};
pub use manager::{RedfishManager, registry, registry_with};
