//! `flow-jetstream`: the NATS and JetStream plumbing Flow's services share:
//! connecting with the configured authentication and TLS ([`connect`]), and
//! keeping a message a consumer refuses on `FLOW_PARKED` ([`park()`]).

pub mod connect;
pub mod park;

pub use connect::{InitialConnect, connect_nats};
pub use park::{PARK_RETRY_DELAY, park};
