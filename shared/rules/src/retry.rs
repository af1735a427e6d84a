//! The step retry policy and the delays it yields. Callers never write their
//! own backoff loops: they ask the policy for the delay before an attempt.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::defaults;

/// A validated retry policy (`docs/rule-format.md`, "Retry policy").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts including the first (≥ 1).
    pub max_attempts: NonZeroU32,
    /// Wait before the first retry (> 0).
    pub initial_interval: Duration,
    /// Multiplier for each later wait (≥ 1.0, finite).
    pub backoff_coefficient: f64,
    /// Cap on any wait; `None` means no cap.
    pub max_interval: Option<Duration>,
}

impl RetryPolicy {
    /// The policy used when a step has no `retry`: 3 attempts, 1 s, ×2, 1 min
    /// cap (see [`defaults`]).
    pub fn step_default() -> Self {
        RetryPolicy {
            max_attempts: NonZeroU32::new(defaults::RETRY_MAX_ATTEMPTS).unwrap_or(NonZeroU32::MIN),
            initial_interval: defaults::RETRY_INITIAL_INTERVAL,
            backoff_coefficient: defaults::RETRY_BACKOFF_COEFFICIENT,
            max_interval: Some(defaults::RETRY_MAX_INTERVAL),
        }
    }

    /// A policy of exactly one attempt (no retries).
    pub fn single_attempt() -> Self {
        RetryPolicy {
            max_attempts: NonZeroU32::MIN,
            ..Self::step_default()
        }
    }

    /// The wait before attempt `attempt` (1-based; the first attempt has no
    /// wait), or `None` when the policy allows no such attempt.
    /// Wait before attempt k ≥ 2 = min(initial × coefficient^(k−2), cap).
    pub fn delay_before(&self, attempt: u32) -> Option<Duration> {
        if attempt == 0 || attempt > self.max_attempts.get() {
            return None;
        }
        if attempt == 1 {
            return Some(Duration::ZERO);
        }
        let exponent = i32::try_from(attempt - 2).unwrap_or(i32::MAX);
        let secs = self.initial_interval.as_secs_f64() * self.backoff_coefficient.powi(exponent);
        let raw = Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX);
        Some(match self.max_interval {
            Some(cap) => raw.min(cap),
            None => raw,
        })
    }

    /// The waits between attempts, in order: `max_attempts − 1` values.
    pub fn delays(&self) -> impl Iterator<Item = Duration> + '_ {
        (2..=self.max_attempts.get()).filter_map(|k| self.delay_before(k))
    }

    /// Sum of all waits between attempts (saturating).
    pub fn total_delay(&self) -> Duration {
        let mut total = Duration::ZERO;
        let mut previous = None;
        for attempt in 2..=self.max_attempts.get() {
            let delay = self.delay_before(attempt).unwrap_or(Duration::ZERO);
            // Once a wait stops growing (cap reached, or coefficient 1), every
            // later wait equals it: finish in closed form.
            if previous == Some(delay) {
                let remaining = self.max_attempts.get() - attempt + 1;
                return total.saturating_add(delay.saturating_mul(remaining));
            }
            total = total.saturating_add(delay);
            previous = Some(delay);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy_waits_one_then_two_seconds() {
        let p = RetryPolicy::step_default();
        let delays: Vec<_> = p.delays().collect();
        assert_eq!(delays, [Duration::from_secs(1), Duration::from_secs(2)]);
        assert_eq!(p.delay_before(1), Some(Duration::ZERO));
        assert_eq!(p.delay_before(4), None);
        assert_eq!(p.total_delay(), Duration::from_secs(3));
    }

    #[test]
    fn the_cap_bounds_every_wait() {
        let p = RetryPolicy {
            max_attempts: NonZeroU32::new(6).unwrap(),
            initial_interval: Duration::from_secs(10),
            backoff_coefficient: 3.0,
            max_interval: Some(Duration::from_secs(60)),
        };
        let delays: Vec<_> = p.delays().map(|d| d.as_secs()).collect();
        assert_eq!(delays, [10, 30, 60, 60, 60]);
    }

    #[test]
    fn huge_growth_saturates_instead_of_panicking() {
        let p = RetryPolicy {
            max_attempts: NonZeroU32::new(u32::MAX).unwrap(),
            initial_interval: Duration::from_secs(1),
            backoff_coefficient: 1e300,
            max_interval: None,
        };
        assert_eq!(p.delay_before(5), Some(Duration::MAX));
        assert_eq!(p.delay_before(u32::MAX), Some(Duration::MAX));
        assert_eq!(p.total_delay(), Duration::MAX);
    }

    #[test]
    fn total_delay_matches_the_sum_of_delays() {
        let p = RetryPolicy {
            max_attempts: NonZeroU32::new(40).unwrap(),
            initial_interval: Duration::from_millis(300),
            backoff_coefficient: 1.7,
            max_interval: Some(Duration::from_secs(45)),
        };
        let sum: Duration = p.delays().sum();
        assert_eq!(p.total_delay(), sum);
    }

    #[test]
    fn one_attempt_has_no_delays() {
        assert_eq!(RetryPolicy::single_attempt().delays().count(), 0);
    }
}
