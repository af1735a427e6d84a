//! Time, injected: checkpoints hold absolute times (milliseconds since the
//! Unix epoch) so that another worker, later, can resume them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// `ms + d`, saturating.
pub fn after(ms: u64, d: Duration) -> u64 {
    ms.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
