//! The step job a worker runs (defined with the other messages in
//! `flow-protocol`).

pub use flow_protocol::jobs::{FirmwareImage, StepJob};
