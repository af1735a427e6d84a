//! The scheduler's background passes: the outbox publisher and sweeps
//! ([`crate::outbox`]), the schedule, run and event-action dispatchers
//! ([`crate::schedules`], [`crate::runs`], [`crate::events`]) and the gauge
//! refresh ([`crate::metrics`]) are each one pass that [`drive`] runs at
//! once, then every period or at once when poked, until the scheduler
//! stops. A failed pass is logged and the next one comes as usual.

use std::time::Duration;

use flow_telemetry::ErrorChain;
use tokio::sync::Notify;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// When a pass comes without a poke.
#[derive(Debug, Clone, Copy)]
pub enum Period {
    /// On a clock of this period that pokes do not move: a pass that must
    /// run on time whatever the pokes (the outbox's sweeps, poked on every
    /// commit) is never put off by them. A tick missed by a long pass comes
    /// at once, and the clock goes on from there.
    Clock(Duration),
    /// This long after the end of the last pass, whatever started it.
    Rest(Duration),
}

/// What started a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The start, or the period.
    Tick,
    /// A poke, or the last pass asking for another at once.
    Poke,
}

/// What a pass asks for after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The next tick or poke.
    Wait,
    /// Another pass at once (there is more to do).
    Again,
}

/// One background pass by name, its period and what pokes it.
#[derive(Debug, Clone, Copy)]
pub struct Driver<'a> {
    /// The pass's name in the log (`outbox`, `runs`, …).
    pub name: &'static str,
    /// When it comes unpoked.
    pub period: Period,
    /// What wakes it at once, if anything does.
    pub poke: Option<&'a Notify>,
}

impl Driver<'_> {
    /// Runs `pass` at once, then on each tick or poke (or at once again
    /// when it asks for it), until `stop`. A failed pass is logged with the
    /// driver's name and the error's chain; the next one comes as usual. A
    /// poke that comes during a pass is kept: the next pass follows it.
    pub async fn drive<F, Fut, E>(self, stop: &CancellationToken, mut pass: F)
    where
        F: FnMut(Wake) -> Fut,
        Fut: Future<Output = Result<Next, E>>,
        E: std::error::Error,
    {
        let every = match self.period {
            Period::Clock(every) | Period::Rest(every) => every,
        };
        let mut clock = tokio::time::interval_at(Instant::now() + every, every);
        clock.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut wake = Wake::Tick;
        loop {
            let next = match pass(wake).await {
                Ok(next) => next,
                Err(error) => {
                    tracing::warn!(pass = self.name, error = %ErrorChain(&error), "background pass failed; trying again");
                    Next::Wait
                }
            };
            if next == Next::Again && !stop.is_cancelled() {
                wake = Wake::Poke;
                continue;
            }
            if let Period::Rest(_) = self.period {
                clock.reset();
            }
            wake = tokio::select! {
                // Cancel-safe: all only wait (a poke not taken stays
                // stored in the `Notify`).
                () = stop.cancelled() => return,
                () = poked(self.poke) => Wake::Poke,
                _ = clock.tick() => Wake::Tick,
            };
        }
    }
}

/// Waits for a poke on `poke`; never ends without one.
async fn poked(poke: Option<&Notify>) {
    match poke {
        Some(poke) => poke.notified().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("pass failed")]
    struct Failed;

    /// Drives a pass that records its wakes until the task is stopped
    /// after `for_ms` of paused time, poking it at `poke_at_ms`.
    async fn wakes(period: Period, poke_at_ms: &[u64], for_ms: u64) -> Vec<(u64, Wake)> {
        let start = Instant::now();
        let seen = Mutex::new(Vec::new());
        let poke = Notify::new();
        let stop = CancellationToken::new();
        let driver = Driver {
            name: "test",
            period,
            poke: Some(&poke),
        };
        let pokes = async {
            for &at in poke_at_ms {
                tokio::time::sleep_until(start + Duration::from_millis(at)).await;
                poke.notify_one();
            }
            tokio::time::sleep_until(start + Duration::from_millis(for_ms)).await;
            stop.cancel();
        };
        let driven = driver.drive(&stop, |wake| {
            let at = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
            seen.lock().unwrap().push((at, wake));
            // Every other pass fails: the next comes as usual.
            let fail = seen.lock().unwrap().len() % 2 == 0;
            async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if fail { Err(Failed) } else { Ok(Next::Wait) }
            }
        });
        tokio::join!(pokes, driven);
        seen.into_inner().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_clock_keeps_its_ticks_through_pokes() {
        let seen = wakes(Period::Clock(Duration::from_secs(1)), &[500, 1500], 2050).await;
        assert_eq!(
            seen,
            vec![
                (0, Wake::Tick),
                (500, Wake::Poke),
                (1000, Wake::Tick),
                (1500, Wake::Poke),
                (2000, Wake::Tick),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_rest_counts_from_the_end_of_each_pass() {
        let seen = wakes(Period::Rest(Duration::from_secs(1)), &[500], 2750).await;
        assert_eq!(
            seen,
            vec![
                (0, Wake::Tick),
                (500, Wake::Poke),
                (1600, Wake::Tick),
                (2700, Wake::Tick)
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_asking_again_runs_at_once_until_stopped() {
        let stop = CancellationToken::new();
        let mut passes = 0;
        Driver {
            name: "test",
            period: Period::Rest(Duration::from_secs(3600)),
            poke: None,
        }
        .drive(&stop, |wake| {
            passes += 1;
            assert_eq!(wake, if passes == 1 { Wake::Tick } else { Wake::Poke });
            if passes == 3 {
                stop.cancel();
            }
            async { Ok::<_, Failed>(Next::Again) }
        })
        .await;
        assert_eq!(passes, 3);
    }
}
