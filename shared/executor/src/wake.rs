//! Event-driven polls: a step that waits for its next verification poll
//! may be woken by the components' [`ChangeSignal`]s (Redfish events) and
//! poll at once. The wait itself is the worker's; this module says which
//! waits a signal may cut short ([`wake_for`]) and marks the signalled
//! components due ([`poll_now`]). A signal only moves a poll earlier: the
//! poll decides, and the interval stays the bound when no event comes.

use std::time::Duration;

use flow_hardware::{ChangeSignal, ManagerRegistry, Signalled};
use flow_rules::Action;

use crate::checkpoint::{ComponentState, ComponentStatus};
use crate::executor::actions;
use crate::{Checkpoint, StepJob};

/// The signals of the components a step's current action waits to poll.
pub struct Wake {
    signals: Vec<(String, ChangeSignal)>,
}

/// Whether a component of the current action waits to read a state its
/// device announces: a power-state verification's poll, a started firmware
/// update's task, or a command held until its component stops moving
/// (`shared/executor/src/command.rs`).
fn waits_for_announced_state(action: &Action, state: &ComponentState) -> bool {
    match action {
        Action::VerifyPowerStatus { .. } => true,
        Action::FirmwareControl { .. } => state.firmware_job.is_some(),
        Action::PowerControl { .. } => state.awaiting.is_some(),
        _ => false,
    }
}

/// The wake-up for the step's current wait: the change signals of its
/// active components waiting to read an announced state, or `None` when
/// none does or no component has a feed. The signals of `previous`
/// (the step's last wait) are kept for the components still waiting, so a
/// change announced while the step polled others is not lost.
pub fn wake_for(
    job: &StepJob,
    cp: &Checkpoint,
    hardware: &ManagerRegistry,
    previous: Option<Wake>,
) -> Option<Wake> {
    let list = actions(job);
    let (_, action) = list.get(cp.action)?;
    let manager = hardware.get(job.step.component_type).ok()?;
    let mut kept = previous.map(|w| w.signals).unwrap_or_default();
    let signals: Vec<(String, ChangeSignal)> = job
        .components
        .iter()
        .filter(|c| {
            cp.components.get(&c.name).is_some_and(|s| {
                s.status == ComponentStatus::Active && waits_for_announced_state(action, s)
            })
        })
        .filter_map(|c| {
            let signal = match kept.iter().position(|(n, _)| *n == c.name) {
                Some(i) => kept.swap_remove(i).1,
                None => manager.change_signal(c)?,
            };
            Some((c.name.clone(), signal))
        })
        .collect();
    (!signals.is_empty()).then_some(Wake { signals })
}

/// What ended a [`Wake::wait`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Woken {
    /// These components' devices announced a change, or their stream
    /// dropped (a change may have been missed): poll them now.
    Poll(Vec<String>),
    /// The time ran out.
    TimedOut,
    /// Every feed ended without ever opening: no event will come, keep to
    /// the timer (a durable wait) for the rest.
    NoFeed,
}

impl Wake {
    /// Waits at most `limit` for a signal. A feed that ended leaves the
    /// wait (the next [`wake_for`] asks the manager again); one that never
    /// opened wakes nobody (nothing was missed).
    pub async fn wait(&mut self, limit: Duration) -> Woken {
        let until = tokio::time::Instant::now() + limit;
        let mut poll: Vec<String> = Vec::new();
        loop {
            // Everything ready now, without waiting.
            let mut gone = Vec::new();
            for (i, (name, signal)) in self.signals.iter_mut().enumerate() {
                if !signal.has_changed() {
                    continue;
                }
                let why = signal.changed().await;
                if why != Signalled::NeverOpened && !poll.contains(name) {
                    poll.push(name.clone());
                }
                if why != Signalled::Changed {
                    gone.push(i);
                }
            }
            for i in gone.into_iter().rev() {
                self.signals.swap_remove(i);
            }
            if !poll.is_empty() {
                return Woken::Poll(poll);
            }
            if self.signals.is_empty() {
                return Woken::NoFeed;
            }
            let any = futures::future::select_all(
                self.signals
                    .iter_mut()
                    .map(|(_, s)| Box::pin(async move { s.changed().await })),
            );
            let outcome = tokio::time::timeout_at(until, any)
                .await
                .map(|(why, index, _rest)| (why, index));
            match outcome {
                Err(_) => return Woken::TimedOut,
                Ok((why, index)) => {
                    if why == Signalled::Ended {
                        tracing::debug!(component = %self.signals[index].0, "event feed ended; polling");
                    }
                    if why != Signalled::NeverOpened {
                        poll.push(self.signals[index].0.clone());
                    }
                    if why != Signalled::Changed {
                        self.signals.swap_remove(index);
                    }
                }
            }
        }
    }
}

/// Makes the named active components due at `now`: their next poll is now.
pub fn poll_now(cp: &mut Checkpoint, names: &[String], now: u64) {
    for name in names {
        if let Some(state) = cp.components.get_mut(name)
            && state.status == ComponentStatus::Active
            && state.next_at_ms > now
        {
            state.next_at_ms = now;
        }
    }
}
