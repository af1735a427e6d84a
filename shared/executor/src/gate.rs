//! Where the executor asks before a power command: the [`PowerGate`] a
//! worker implements over `power.admit` (`services/worker/src/admit.rs`);
//! the decision itself is `flow_decisions::admission`'s.

use futures::future::BoxFuture;

use flow_protocol::power::Admission;
use flow_rules::{ComponentType, PowerOperation};

use crate::StepJob;

/// A power command a step is about to send, for its gate.
#[derive(Debug, Clone, Copy)]
pub struct GateRequest<'a> {
    /// The component's rack.
    pub rack: &'a str,
    /// The component.
    pub component: &'a str,
    /// Its type.
    pub component_type: ComponentType,
    /// The command.
    pub operation: PowerOperation,
}

/// Where a worker asks before a power command (a power-on, a reset, a
/// power shelf's power-off) of a step whose rack is in a power domain.
pub trait PowerGate: Send + Sync {
    /// Granted, wait, or refused; an error holds the command too.
    fn admit<'a>(
        &'a self,
        job: &'a StepJob,
        request: GateRequest<'a>,
    ) -> BoxFuture<'a, Result<Admission, String>>;
}

/// A gate that grants everything: for racks in no domain, and tests of
/// the executor alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ungated;

impl PowerGate for Ungated {
    fn admit<'a>(
        &'a self,
        _job: &'a StepJob,
        _request: GateRequest<'a>,
    ) -> BoxFuture<'a, Result<Admission, String>> {
        Box::pin(async { Ok(Admission::Granted) })
    }
}
