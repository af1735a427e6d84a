//! `flow-jetstream`: the NATS and JetStream plumbing Flow's services share:
//! connecting with the configured authentication and TLS ([`connect`]),
//! the streams, consumers and buckets ([`topology`]), opening a bucket
//! through a NATS restart ([`open_bucket()`]), pulling from a durable
//! consumer for as long as a service runs ([`consume()`]), and keeping a
//! message a consumer refuses on `FLOW_PARKED` ([`park()`]).

pub mod bucket;
pub mod connect;
pub mod consume;
pub mod park;
pub mod topology;

pub use bucket::open_bucket;
pub use connect::{InitialConnect, connect_nats};
pub use consume::{Source, consume};
pub use park::{PARK_RETRY_DELAY, park};
pub use topology::{Topology, TopologyError};
