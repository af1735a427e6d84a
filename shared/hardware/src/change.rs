//! Change signals: how a manager that follows a device's events (Redfish
//! SSE) tells a waiting verification to poll now rather than at its next
//! interval. A signal is a hint, never a result: the poll that follows
//! decides, and the poll interval stays the bound when no event comes or
//! the feed is gone.

use tokio::sync::watch;

/// The sending side, kept by the manager per device: every event from the
/// device is one [`ChangeFeed::announce`] (the manager announces once when
/// its stream opens). Dropping it (the feed ended) wakes every signal:
/// after an announcement the stream may have missed a change, so waiters
/// poll ([`Signalled::Ended`]); a feed that never announced (its stream
/// never opened) missed nothing, and waiters just keep to their timer
/// ([`Signalled::NeverOpened`]).
#[derive(Debug)]
pub struct ChangeFeed {
    tx: watch::Sender<u64>,
}

impl Default for ChangeFeed {
    fn default() -> Self {
        ChangeFeed {
            tx: watch::Sender::new(0),
        }
    }
}

impl ChangeFeed {
    /// Tells every signal that something changed at the device.
    pub fn announce(&self) {
        self.tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A signal that fires at the next announcement (not at earlier ones).
    pub fn signal(&self) -> ChangeSignal {
        let mut rx = self.tx.subscribe();
        rx.mark_unchanged();
        ChangeSignal { rx }
    }

    /// Signals alive now.
    pub fn listeners(&self) -> usize {
        self.tx.receiver_count()
    }
}

/// The receiving side: waits for the next announcement of one device.
#[derive(Debug, Clone)]
pub struct ChangeSignal {
    rx: watch::Receiver<u64>,
}

/// What ended a [`ChangeSignal::changed`] wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signalled {
    /// The device announced a change.
    Changed,
    /// The feed ended after announcing (the stream dropped): poll, and
    /// rely on the timer from then on.
    Ended,
    /// The feed ended without ever announcing (its stream never opened):
    /// nothing was missed; rely on the timer.
    NeverOpened,
}

impl ChangeSignal {
    /// Waits for the next announcement, or for the feed's end.
    pub async fn changed(&mut self) -> Signalled {
        match self.rx.changed().await {
            Ok(()) => Signalled::Changed,
            Err(_) if *self.rx.borrow() == 0 => Signalled::NeverOpened,
            Err(_) => Signalled::Ended,
        }
    }

    /// Whether an announcement came since the signal was made or last
    /// waited on (or the feed ended).
    pub fn has_changed(&self) -> bool {
        self.rx.has_changed().unwrap_or(true)
    }

    /// Whether the feed is open now: it announced its opening and has not
    /// ended. A change at the device from now on reaches this signal.
    pub fn is_open(&self) -> bool {
        self.rx.has_changed().is_ok() && *self.rx.borrow() != 0
    }

    /// Whether the feed ended (its stream dropped or never opened).
    pub fn has_ended(&self) -> bool {
        self.rx.has_changed().is_err()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_feed_that_never_announced_ends_as_never_opened() {
        let feed = ChangeFeed::default();
        let mut signal = feed.signal();
        drop(feed);
        assert_eq!(signal.changed().await, Signalled::NeverOpened);
    }

    #[tokio::test]
    async fn a_signal_fires_on_the_next_announcement_only_and_on_the_feed_end() {
        let feed = ChangeFeed::default();
        feed.announce();
        let mut signal = feed.signal();
        assert!(
            !signal.has_changed(),
            "an earlier announcement does not count"
        );
        feed.announce();
        assert!(signal.has_changed());
        assert_eq!(signal.changed().await, Signalled::Changed);
        assert!(!signal.has_changed());
        assert_eq!(feed.listeners(), 1);
        drop(feed);
        assert!(signal.has_changed());
        assert_eq!(signal.changed().await, Signalled::Ended);
    }

    #[test]
    fn a_feed_is_open_from_its_first_announcement_until_it_ends() {
        let feed = ChangeFeed::default();
        let signal = feed.signal();
        assert!(!signal.is_open() && !signal.has_ended(), "still opening");
        feed.announce();
        let later = feed.signal();
        assert!(signal.is_open() && later.is_open());
        assert!(!later.has_changed(), "the opening was before it");
        drop(feed);
        assert!(!signal.is_open() && signal.has_ended());
    }
}
