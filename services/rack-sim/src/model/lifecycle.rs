//! The lifecycle (decommission) state machine of one component.

use std::fmt;

use serde::{Serialize, Serializer};
use tokio::time::Instant;

/// A decommission phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecommissionPhase {
    /// Workloads are moved away.
    Draining,
    /// Storage is wiped.
    Wiping,
    /// The component is released from its rack.
    Releasing,
}

impl DecommissionPhase {
    fn as_str(self) -> &'static str {
        match self {
            DecommissionPhase::Draining => "Draining",
            DecommissionPhase::Wiping => "Wiping",
            DecommissionPhase::Releasing => "Releasing",
        }
    }
}

/// Where a component is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LifecycleState {
    /// In service.
    Ready,
    /// Out of service for a reason.
    Maintenance(String),
    /// Being decommissioned.
    Decommissioning(DecommissionPhase),
    /// Gone.
    Decommissioned,
}

impl fmt::Display for LifecycleState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LifecycleState::Ready => f.write_str("Ready"),
            LifecycleState::Maintenance(reason) => write!(f, "Maintenance({reason})"),
            LifecycleState::Decommissioning(phase) => {
                write!(f, "Decommissioning/{}", phase.as_str())
            }
            LifecycleState::Decommissioned => f.write_str("Decommissioned"),
        }
    }
}

impl Serialize for LifecycleState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Whether a decommission request started something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecommissionStart {
    /// It began now.
    Started,
    /// It was already under way or done.
    AlreadyUnderWay,
}

/// A lifecycle state with its next timed phase change.
#[derive(Debug, Clone)]
pub struct Lifecycle {
    state: LifecycleState,
    updated_at: Instant,
    next: Option<Instant>,
    stalled: bool,
}

impl Lifecycle {
    /// A component that is `Ready` since `now`.
    pub fn new(now: Instant) -> Self {
        Lifecycle {
            state: LifecycleState::Ready,
            updated_at: now,
            next: None,
            stalled: false,
        }
    }

    /// The current state.
    pub fn state(&self) -> &LifecycleState {
        &self.state
    }

    /// When the state last changed.
    pub fn updated_at(&self) -> Instant {
        self.updated_at
    }

    /// When the next phase change is due.
    pub fn next_change(&self) -> Option<Instant> {
        self.next
    }

    /// Whether a stall fault holds it in `Wiping`.
    pub fn is_stalled(&self) -> bool {
        self.stalled
    }

    fn set(&mut self, state: LifecycleState, at: Instant, next: Option<Instant>) {
        self.state = state;
        self.updated_at = at;
        self.next = next;
        self.stalled = false;
    }

    /// Starts decommissioning unless it is already under way or done.
    pub fn decommission(&mut self, now: Instant, phase: std::time::Duration) -> DecommissionStart {
        match self.state {
            LifecycleState::Decommissioning(_) | LifecycleState::Decommissioned => {
                DecommissionStart::AlreadyUnderWay
            }
            LifecycleState::Ready | LifecycleState::Maintenance(_) => {
                self.set(
                    LifecycleState::Decommissioning(DecommissionPhase::Draining),
                    now,
                    Some(now + phase),
                );
                DecommissionStart::Started
            }
        }
    }

    /// Puts it in maintenance (cancelling any decommission).
    pub fn maintenance(&mut self, reason: String, now: Instant) {
        self.set(LifecycleState::Maintenance(reason), now, None);
    }

    /// Makes it `Ready` (cancelling any decommission).
    pub fn ready(&mut self, now: Instant) {
        self.set(LifecycleState::Ready, now, None);
    }

    /// Applies the phase change due at `at`. `stall` says whether a stall
    /// fault holds the component in `Wiping`.
    pub fn advance(&mut self, at: Instant, phase: std::time::Duration, stall: bool) {
        use DecommissionPhase::{Draining, Releasing, Wiping};
        match self.state {
            LifecycleState::Decommissioning(Draining) => {
                self.set(
                    LifecycleState::Decommissioning(Wiping),
                    at,
                    Some(at + phase),
                );
            }
            LifecycleState::Decommissioning(Wiping) if stall => {
                self.next = None;
                self.stalled = true;
            }
            LifecycleState::Decommissioning(Wiping) => {
                self.set(
                    LifecycleState::Decommissioning(Releasing),
                    at,
                    Some(at + phase),
                );
            }
            LifecycleState::Decommissioning(Releasing) => {
                self.set(LifecycleState::Decommissioned, at, None);
            }
            LifecycleState::Ready | LifecycleState::Maintenance(_) => self.next = None,
            LifecycleState::Decommissioned => self.next = None,
        }
    }

    /// Lets a stalled decommission go on at `now` (its stall fault is gone).
    pub fn resume(&mut self, now: Instant) {
        if self.stalled {
            self.stalled = false;
            self.next = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn phases_run_in_order_and_a_stall_holds_wiping() {
        let phase = Duration::from_secs(5);
        let t0 = Instant::now();
        let mut l = Lifecycle::new(t0);
        assert_eq!(l.decommission(t0, phase), DecommissionStart::Started);
        assert_eq!(
            l.decommission(t0, phase),
            DecommissionStart::AlreadyUnderWay
        );
        assert_eq!(l.state().to_string(), "Decommissioning/Draining");
        l.advance(t0 + phase, phase, false);
        assert_eq!(l.state().to_string(), "Decommissioning/Wiping");
        l.advance(t0 + phase * 2, phase, true);
        assert!(l.is_stalled());
        assert_eq!(l.next_change(), None);
        l.resume(t0 + phase * 3);
        assert_eq!(l.next_change(), Some(t0 + phase * 3));
        l.advance(t0 + phase * 3, phase, false);
        assert_eq!(l.state().to_string(), "Decommissioning/Releasing");
        l.advance(t0 + phase * 4, phase, false);
        assert_eq!(l.state(), &LifecycleState::Decommissioned);
        l.maintenance("fans".into(), t0);
        assert_eq!(l.state().to_string(), "Maintenance(fans)");
    }
}
