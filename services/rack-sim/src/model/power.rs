//! Power states, reset types and the per-component power state machine.
//!
//! A [`PowerMachine`] holds the current state and a plan of timed steps; a
//! reset replaces the plan, and the rack applies due steps in time order.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::config::Timings;

/// DMTF `PowerState` values the simulator produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PowerState {
    /// Powered.
    On,
    /// Unpowered.
    Off,
    /// On its way to `On`.
    PoweringOn,
    /// On its way to `Off`.
    PoweringOff,
}

impl PowerState {
    /// The DMTF spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PowerState::On => "On",
            PowerState::Off => "Off",
            PowerState::PoweringOn => "PoweringOn",
            PowerState::PoweringOff => "PoweringOff",
        }
    }
}

impl fmt::Display for PowerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// DMTF `ResetType` values the simulator accepts somewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ResetType {
    /// Turn on.
    On,
    /// Turn on (same as `On` here).
    ForceOn,
    /// Orderly shutdown.
    GracefulShutdown,
    /// Immediate power off.
    ForceOff,
    /// Orderly shutdown, then on.
    GracefulRestart,
    /// Immediate off, then on.
    ForceRestart,
    /// Off for a while, then on; from `Off` it simply turns on.
    PowerCycle,
}

impl ResetType {
    /// The DMTF spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ResetType::On => "On",
            ResetType::ForceOn => "ForceOn",
            ResetType::GracefulShutdown => "GracefulShutdown",
            ResetType::ForceOff => "ForceOff",
            ResetType::GracefulRestart => "GracefulRestart",
            ResetType::ForceRestart => "ForceRestart",
            ResetType::PowerCycle => "PowerCycle",
        }
    }
}

impl fmt::Display for ResetType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ResetType {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "On" => ResetType::On,
            "ForceOn" => ResetType::ForceOn,
            "GracefulShutdown" => ResetType::GracefulShutdown,
            "ForceOff" => ResetType::ForceOff,
            "GracefulRestart" => ResetType::GracefulRestart,
            "ForceRestart" => ResetType::ForceRestart,
            "PowerCycle" => ResetType::PowerCycle,
            _ => return Err(()),
        })
    }
}

/// What is powered by a machine: a tray's host or a whole shelf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerDomain {
    /// A tray's host (ComputerSystem.Reset).
    Host,
    /// A power shelf (Chassis.Reset).
    Shelf,
}

/// Why a reset cannot be carried out now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ResetRefused {
    /// A transition is in progress.
    #[error("a power transition is in progress ({0})")]
    InTransition(PowerState),
    /// Asked to turn on what is on.
    #[error("the power is already On")]
    AlreadyOn,
    /// Asked to turn off or restart what is off.
    #[error("the power is Off")]
    AlreadyOff,
}

/// Current power state plus the timed steps still to come.
#[derive(Debug, Clone)]
pub struct PowerMachine {
    state: PowerState,
    plan: VecDeque<(Instant, PowerState)>,
}

impl PowerMachine {
    /// A machine resting in `state`.
    pub fn new(state: PowerState) -> Self {
        PowerMachine {
            state,
            plan: VecDeque::new(),
        }
    }

    /// The state as of the last applied step.
    pub fn state(&self) -> PowerState {
        self.state
    }

    /// Whether a transition is in progress.
    pub fn in_transition(&self) -> bool {
        !self.plan.is_empty()
            || matches!(self.state, PowerState::PoweringOn | PowerState::PoweringOff)
    }

    /// When the next step is due.
    pub fn next_step(&self) -> Option<Instant> {
        self.plan.front().map(|(at, _)| *at)
    }

    /// Applies the next step; returns the new state.
    pub fn take_step(&mut self) -> Option<PowerState> {
        let (_, state) = self.plan.pop_front()?;
        self.state = state;
        Some(state)
    }

    /// Sets the state at once, dropping any plan (power loss, reset).
    pub fn force(&mut self, state: PowerState) {
        self.state = state;
        self.plan.clear();
    }

    /// Checks the state rules: no reset during a transition but `ForceOff`
    /// (a BMC cuts the power whatever the host is doing), no `On` while on,
    /// no off or restart while off (`PowerCycle` while off turns on).
    ///
    /// # Errors
    ///
    /// [`ResetRefused`] saying why.
    pub fn check(&self, reset: ResetType) -> Result<(), ResetRefused> {
        if self.in_transition() {
            if reset == ResetType::ForceOff {
                return Ok(());
            }
            return Err(ResetRefused::InTransition(self.state));
        }
        match (reset, self.state) {
            (ResetType::On | ResetType::ForceOn, PowerState::On) => Err(ResetRefused::AlreadyOn),
            (
                ResetType::GracefulShutdown
                | ResetType::ForceOff
                | ResetType::GracefulRestart
                | ResetType::ForceRestart,
                PowerState::Off,
            ) => Err(ResetRefused::AlreadyOff),
            _ => Ok(()),
        }
    }

    /// Starts `reset` at `now` with the (already scaled) timings. Does not
    /// check the state rules: call [`PowerMachine::check`] first.
    pub fn start(&mut self, reset: ResetType, domain: PowerDomain, now: Instant, t: &Timings) {
        if reset == ResetType::ForceOff && self.state == PowerState::Off {
            // Off already, on its way back (a power cycle): it stays off.
            self.force(PowerState::Off);
            return;
        }
        let (first, steps) = plan(reset, domain, t);
        self.state = first;
        self.plan.clear();
        let mut at = now;
        for (after, state) in steps {
            at += after;
            self.plan.push_back((at, state));
        }
    }
}

/// The immediate state and the timed steps (each relative to the previous)
/// of a reset.
fn plan(
    reset: ResetType,
    domain: PowerDomain,
    t: &Timings,
) -> (PowerState, Vec<(Duration, PowerState)>) {
    use PowerState::{Off, On, PoweringOff, PoweringOn};
    if domain == PowerDomain::Shelf {
        return match reset {
            ResetType::On | ResetType::ForceOn => (PoweringOn, vec![(t.shelf_on, On)]),
            _ => (PoweringOff, vec![(t.shelf_off, Off)]),
        };
    }
    match reset {
        ResetType::On | ResetType::ForceOn => (PoweringOn, vec![(t.power_on, On)]),
        ResetType::GracefulShutdown => (PoweringOff, vec![(t.graceful_shutdown, Off)]),
        ResetType::ForceOff => (PoweringOff, vec![(t.force_off, Off)]),
        ResetType::GracefulRestart => {
            (PoweringOff, vec![(t.restart, PoweringOn), (t.power_on, On)])
        }
        ResetType::ForceRestart => (
            PoweringOff,
            vec![(t.force_restart, PoweringOn), (t.power_on, On)],
        ),
        ResetType::PowerCycle => (Off, vec![(t.power_cycle, PoweringOn), (t.power_on, On)]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_to_end(m: &mut PowerMachine) -> Vec<PowerState> {
        let mut seen = vec![m.state()];
        while m.take_step().is_some() {
            seen.push(m.state());
        }
        seen
    }

    #[test]
    fn state_rules() {
        let on = PowerMachine::new(PowerState::On);
        let off = PowerMachine::new(PowerState::Off);
        assert_eq!(on.check(ResetType::On), Err(ResetRefused::AlreadyOn));
        assert_eq!(on.check(ResetType::ForceOn), Err(ResetRefused::AlreadyOn));
        assert_eq!(
            off.check(ResetType::ForceOff),
            Err(ResetRefused::AlreadyOff)
        );
        assert_eq!(
            off.check(ResetType::GracefulRestart),
            Err(ResetRefused::AlreadyOff)
        );
        assert_eq!(off.check(ResetType::PowerCycle), Ok(()));
        assert_eq!(on.check(ResetType::PowerCycle), Ok(()));
        let mut busy = PowerMachine::new(PowerState::Off);
        busy.start(
            ResetType::PowerCycle,
            PowerDomain::Host,
            Instant::now(),
            &Timings::default(),
        );
        assert_eq!(busy.state(), PowerState::Off);
        assert_eq!(
            busy.check(ResetType::On),
            Err(ResetRefused::InTransition(PowerState::Off))
        );
    }

    #[test]
    fn a_forced_power_off_cuts_any_transition_short() {
        use PowerState::*;
        let t = Timings::default();
        let now = Instant::now();
        // A restart on its way down, then up: ForceOff is taken at once and
        // the restart's way back on is dropped.
        for step in [0, 1] {
            let mut m = PowerMachine::new(On);
            m.start(ResetType::GracefulRestart, PowerDomain::Host, now, &t);
            for _ in 0..step {
                m.take_step();
            }
            assert!(m.in_transition());
            assert_eq!(
                m.check(ResetType::GracefulShutdown),
                Err(ResetRefused::InTransition(m.state()))
            );
            assert_eq!(m.check(ResetType::ForceOff), Ok(()));
            m.start(ResetType::ForceOff, PowerDomain::Host, now, &t);
            assert_eq!(run_to_end(&mut m), vec![PoweringOff, Off]);
        }
        // A power cycle in its off part: it stays off.
        let mut m = PowerMachine::new(On);
        m.start(ResetType::PowerCycle, PowerDomain::Host, now, &t);
        assert_eq!(m.state(), Off);
        assert_eq!(m.check(ResetType::ForceOff), Ok(()));
        m.start(ResetType::ForceOff, PowerDomain::Host, now, &t);
        assert!(!m.in_transition());
        assert_eq!(m.state(), Off);
    }

    #[test]
    fn plans_step_through_the_expected_states() {
        use PowerState::*;
        let t = Timings::default();
        let now = Instant::now();
        let mut m = PowerMachine::new(On);
        m.start(ResetType::GracefulRestart, PowerDomain::Host, now, &t);
        assert_eq!(m.next_step(), Some(now + t.restart));
        assert_eq!(run_to_end(&mut m), vec![PoweringOff, PoweringOn, On]);
        m.start(ResetType::ForceOff, PowerDomain::Host, now, &t);
        assert_eq!(run_to_end(&mut m), vec![PoweringOff, Off]);
        m.start(ResetType::PowerCycle, PowerDomain::Host, now, &t);
        assert_eq!(run_to_end(&mut m), vec![Off, PoweringOn, On]);
        m.start(ResetType::ForceOff, PowerDomain::Shelf, now, &t);
        assert_eq!(m.next_step(), Some(now + t.shelf_off));
        assert_eq!(run_to_end(&mut m), vec![PoweringOff, Off]);
    }
}
