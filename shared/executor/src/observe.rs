//! What the executor reads of components' power, told as it reads it: the
//! decision's read before a command, a verification's poll, a status read,
//! a reachability probe. A worker passes it on to the schedulers, who count
//! each component against its power domains by what is known of it
//! (`services/worker/src/observer.rs`, `shared/store/src/observed.rs`).

use flow_hardware::{ComponentTarget, PowerStatus};
use flow_protocol::state::ObservationSource;

/// Where the executor tells what it read.
pub trait Observer: Send + Sync {
    /// `target`'s power as read at `at_ms` (epoch ms): `None` when its BMC
    /// did not answer.
    fn observed(
        &self,
        target: &ComponentTarget,
        power: Option<PowerStatus>,
        at_ms: u64,
        source: ObservationSource,
    );
}

/// An observer that keeps nothing: for tools and tests that do not count
/// power.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unobserved;

impl Observer for Unobserved {
    fn observed(&self, _: &ComponentTarget, _: Option<PowerStatus>, _: u64, _: ObservationSource) {}
}

/// One read a call made, to be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    /// What was read (`None`: no answer).
    pub power: Option<PowerStatus>,
    /// What read it.
    pub source: ObservationSource,
}

impl Seen {
    pub(crate) fn read<E>(result: &Result<PowerStatus, E>, source: ObservationSource) -> Self {
        Seen {
            power: result.as_ref().ok().copied(),
            source,
        }
    }
}
