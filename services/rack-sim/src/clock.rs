//! Simulated time: every duration is scaled by the time scale, and wall-clock
//! timestamps are derived from tokio's clock so that paused-time tests see
//! consistent RFC 3339 times.

use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::time::Instant;

use crate::config::Timings;

/// Maps tokio instants to wall-clock time and scales durations.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    time_scale: f64,
    epoch: Instant,
    epoch_wall: OffsetDateTime,
}

impl Clock {
    /// A clock whose instant "now" is the wall time "now".
    pub(crate) fn new(time_scale: f64) -> Self {
        Clock {
            time_scale,
            epoch: Instant::now(),
            epoch_wall: OffsetDateTime::now_utc(),
        }
    }

    /// `d` in simulated time.
    pub(crate) fn scale(&self, d: Duration) -> Duration {
        d.mul_f64(self.time_scale)
    }

    /// Every timing scaled.
    pub(crate) fn scale_timings(&self, t: &Timings) -> Timings {
        Timings {
            power_on: self.scale(t.power_on),
            graceful_shutdown: self.scale(t.graceful_shutdown),
            force_off: self.scale(t.force_off),
            restart: self.scale(t.restart),
            force_restart: self.scale(t.force_restart),
            power_cycle: self.scale(t.power_cycle),
            shelf_on: self.scale(t.shelf_on),
            shelf_off: self.scale(t.shelf_off),
            bmc_boot: self.scale(t.bmc_boot),
            firmware_update: self.scale(t.firmware_update),
            decommission_phase: self.scale(t.decommission_phase),
        }
    }

    /// The wall-clock time of `at`.
    pub(crate) fn wall(&self, at: Instant) -> OffsetDateTime {
        if at >= self.epoch {
            self.epoch_wall + (at - self.epoch)
        } else {
            self.epoch_wall - (self.epoch - at)
        }
    }

    /// `at` as RFC 3339, e.g. `2025-06-01T12:00:00.123Z`.
    pub(crate) fn rfc3339(&self, at: Instant) -> String {
        self.wall(at)
            .format(&Rfc3339)
            .unwrap_or_else(|_| self.epoch_wall.unix_timestamp().to_string())
    }
}
