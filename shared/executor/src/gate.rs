//! Where the executor asks before a power command and tells once it was
//! sent: the [`PowerGate`] a worker implements over `power.admit` and
//! `power.sent` (`services/worker/src/admit.rs`); the decision itself is
//! `flow_decisions::admission`'s. A grant's inrush is counted from the
//! grant until it is reported sent and its settle time has passed (one
//! never reported expires): the report shortens what the grant holds.

use futures::future::BoxFuture;

use flow_hardware::PowerStatus;
use flow_protocol::power::{Admission, SentCommand};
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
    /// What was read of the component just before, and when (epoch ms).
    pub observed: Option<(PowerStatus, u64)>,
    /// The start of this command's reservation that passed unsent (epoch
    /// ms): its grant is released, not counted beside the new one.
    pub replaces_ms: Option<u64>,
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

    /// Tells that the devices accepted these admitted commands of the
    /// step's rack `rack`, and when. Best effort: an error only leaves the
    /// grants held until they expire.
    fn sent<'a>(
        &'a self,
        job: &'a StepJob,
        rack: &'a str,
        sent: Vec<SentCommand>,
    ) -> BoxFuture<'a, Result<(), String>> {
        let _ = (job, rack, sent);
        Box::pin(async { Ok(()) })
    }
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
