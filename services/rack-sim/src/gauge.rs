//! Peak concurrency of power commands per rack and component kind: how many
//! reset requests were in flight at once (from arrival, through any injected
//! latency, to the reply). Fault drills and `max_parallel` tests read it.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::model::ComponentKind;

/// In-flight and peak reset requests per (rack index, kind).
#[derive(Debug, Default)]
pub(crate) struct ResetGauge {
    counts: Mutex<HashMap<(usize, ComponentKind), (usize, usize)>>,
}

/// Holds one in-flight reset; leaving on drop.
pub(crate) struct InFlight<'a> {
    gauge: &'a ResetGauge,
    key: (usize, ComponentKind),
}

impl ResetGauge {
    /// A reset request arrives.
    pub(crate) fn enter(&self, rack: usize, kind: ComponentKind) -> InFlight<'_> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let entry = counts.entry((rack, kind)).or_default();
        entry.0 += 1;
        entry.1 = entry.1.max(entry.0);
        InFlight {
            gauge: self,
            key: (rack, kind),
        }
    }

    /// The peak per kind for a rack.
    pub(crate) fn peaks(&self, rack: usize) -> Vec<(ComponentKind, usize)> {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let mut peaks: Vec<_> = counts
            .iter()
            .filter(|((r, _), _)| *r == rack)
            .map(|((_, kind), (_, peak))| (*kind, *peak))
            .collect();
        peaks.sort_by_key(|(k, _)| *k as u8);
        peaks
    }

    /// Forgets the peaks (in-flight counts stay).
    pub(crate) fn clear_peaks(&self) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        for (now, peak) in counts.values_mut() {
            *peak = *now;
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut counts = self.gauge.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = counts.get_mut(&self.key) {
            entry.0 = entry.0.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_track_the_most_at_once() {
        let g = ResetGauge::default();
        let a = g.enter(0, ComponentKind::Compute);
        let b = g.enter(0, ComponentKind::Compute);
        drop(a);
        let _c = g.enter(0, ComponentKind::Compute);
        drop(b);
        let _d = g.enter(1, ComponentKind::PowerShelf);
        assert_eq!(g.peaks(0), [(ComponentKind::Compute, 2)]);
        g.clear_peaks();
        assert_eq!(g.peaks(0), [(ComponentKind::Compute, 1)]);
    }
}

/// Every Redfish request: how many arrived, and the most in flight at once
/// at any one BMC (from arrival, through any injected latency, to the
/// reply). Benchmarks read it to show what Flow asks of one BMC.
#[derive(Debug, Default)]
pub(crate) struct RequestGauge {
    total: std::sync::atomic::AtomicU64,
    peak_per_bmc: std::sync::atomic::AtomicUsize,
}

/// Holds one in-flight request of one BMC; leaves on drop.
pub(crate) struct BmcRequest<'a> {
    in_flight: &'a std::sync::atomic::AtomicUsize,
}

impl RequestGauge {
    /// A request arrives at the BMC whose in-flight counter is `in_flight`.
    pub(crate) fn enter<'a>(
        &self,
        in_flight: &'a std::sync::atomic::AtomicUsize,
    ) -> BmcRequest<'a> {
        use std::sync::atomic::Ordering::Relaxed;
        self.total.fetch_add(1, Relaxed);
        let now = in_flight.fetch_add(1, Relaxed) + 1;
        self.peak_per_bmc.fetch_max(now, Relaxed);
        BmcRequest { in_flight }
    }

    /// Requests since start.
    pub(crate) fn total(&self) -> u64 {
        self.total.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The most requests in flight at once at one BMC since start or the
    /// last admin reset.
    pub(crate) fn peak_per_bmc(&self) -> usize {
        self.peak_per_bmc.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Forgets the peak.
    pub(crate) fn clear_peak(&self) {
        self.peak_per_bmc
            .store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for BmcRequest<'_> {
    fn drop(&mut self) {
        self.in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
