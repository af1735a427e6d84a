//! Event-driven polls: a step that waits for its next verification poll
//! may be woken by the components' [`ChangeSignal`]s (Redfish events) and
//! poll at once. The wait itself is the worker's; this module says which
//! waits a signal may cut short ([`wake_for`]) and marks the signalled
//! components due ([`poll_now`]). A signal only moves a poll earlier: the
//! poll decides, and the interval stays the bound when no event comes.
//!
//! [`Listening`] is the other half: it takes each component's signal
//! *before* its power command goes (waiting, briefly, for a feed that is
//! still opening). A feed that was open before the send and has said
//! nothing since has seen no change at the device, so the verification
//! after it need not read at once a state still moving: its first read is
//! the event's, or the rule's poll interval's (`docs/hardware.md`, "Events:
//! change signals").

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use flow_hardware::{ChangeSignal, ComponentManager, ComponentTarget, ManagerRegistry, Signalled};
use flow_rules::Action;

use crate::checkpoint::{ComponentState, ComponentStatus};
use crate::executor::actions;
use crate::{Checkpoint, StepJob};

/// How long a command waits for its BMC's event feed to open (the first
/// command at a BMC: its stream is found and opened meanwhile). A feed not
/// open by then is simply not relied on: the verification reads at once.
pub const FEED_OPEN_WAIT: Duration = Duration::from_millis(500);

/// Signals taken just before commands were sent, by component (kept by
/// the worker for one run of a step job; a resumed job has none and reads
/// at once).
#[derive(Debug, Default)]
pub struct Listening {
    signals: Mutex<BTreeMap<String, ChangeSignal>>,
}

impl Listening {
    /// Nothing taken yet.
    pub const fn new() -> Self {
        Listening {
            signals: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ChangeSignal>> {
        self.signals.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the targets' signals before their commands go: waits up to
    /// `wait` for feeds still opening (none for an urgent command), then
    /// keeps a fresh signal of each feed open now.
    pub async fn before_send(
        &self,
        manager: &dyn ComponentManager,
        targets: &[&ComponentTarget],
        wait: Duration,
    ) {
        let mut opening: Vec<ChangeSignal> = targets
            .iter()
            .filter_map(|t| manager.change_signal(t))
            .filter(|s| !s.is_open() && !s.has_ended())
            .collect();
        if !opening.is_empty() && !wait.is_zero() {
            // The opening announces once, or the feed ends: either way it
            // is no longer opening.
            let all = futures::future::join_all(opening.iter_mut().map(|s| s.changed()));
            let _ = tokio::time::timeout(wait, all).await;
        }
        let mut kept = self.lock();
        for target in targets {
            match manager.change_signal(target).filter(ChangeSignal::is_open) {
                Some(signal) => kept.insert(target.name.clone(), signal),
                None => kept.remove(&target.name),
            };
        }
    }

    /// Whether the component's feed has been open since just before its
    /// command was sent and announced nothing since: its device has not
    /// changed, and an event will say when it does.
    pub fn quiet_since_send(&self, name: &str) -> bool {
        self.lock()
            .get(name)
            .is_some_and(|s| s.is_open() && !s.has_changed())
    }

    /// The component's signal, for the wait that follows (an event since
    /// the send is then not lost).
    fn take(&self, name: &str) -> Option<ChangeSignal> {
        self.lock().remove(name)
    }
}

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
/// (the step's last wait), and those `listening` took before the
/// components' commands, are kept for the components still waiting, so a
/// change announced while the step polled others (or since the send) is
/// not lost.
pub fn wake_for(
    job: &StepJob,
    cp: &Checkpoint,
    hardware: &ManagerRegistry,
    listening: &Listening,
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
                None => match listening.take(&c.name) {
                    Some(signal) => signal,
                    None => manager.change_signal(c)?,
                },
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
