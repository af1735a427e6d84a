//! Verification waits held in the worker for a device's events (see
//! `flow_executor::wake`): while the job is held, a change signal from a
//! BMC's event stream ends the wait and the step polls at once. Holding a
//! job keeps its slot, so at most half the worker's slots are held this
//! way; the rest of the waits stay durable (a nak with a delay).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use flow_executor::wake::{Wake, Woken};

/// How often a held wait looks at the worker's stopping flag.
const STOP_CHECK: Duration = Duration::from_secs(1);

/// The count of held waits against their limit.
#[derive(Debug)]
pub(crate) struct Holds {
    held: AtomicUsize,
    limit: usize,
}

/// One held wait; its slot is given back on drop.
pub(crate) struct Hold<'a>(&'a Holds);

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Holds {
    /// At most `limit` held at once (0: none).
    pub(crate) fn new(limit: usize) -> Self {
        Holds {
            held: AtomicUsize::new(0),
            limit,
        }
    }

    /// A hold, if fewer than the limit are held.
    pub(crate) fn take(&self) -> Option<Hold<'_>> {
        self.held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .ok()
            .map(|_| Hold(self))
    }
}

/// Waits `delay` or until a signal of `wake` fires. `TimedOut` also when
/// the worker began to stop; `NoFeed` when no event can come any more.
pub(crate) async fn wait(wake: &mut Wake, delay: Duration, stopping: &AtomicBool) -> Woken {
    let until = tokio::time::Instant::now() + delay;
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() || stopping.load(Ordering::SeqCst) {
            return Woken::TimedOut;
        }
        match wake.wait(left.min(STOP_CHECK)).await {
            Woken::TimedOut => {}
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_stop_at_the_limit_and_come_back_on_drop() {
        let holds = Holds::new(2);
        let a = holds.take();
        let b = holds.take();
        assert!(a.is_some() && b.is_some());
        assert!(holds.take().is_none());
        drop(a);
        assert!(holds.take().is_some());
        assert!(Holds::new(0).take().is_none());
    }
}
