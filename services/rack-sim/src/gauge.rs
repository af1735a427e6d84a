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

    #[test]
    fn requests_are_told_apart_by_what_they_are_for() {
        use axum::http::Method;
        let cases = [
            (Method::GET, "/redfish/v1/Systems/System_0", Purpose::Read),
            (Method::GET, "/redfish/v1/Chassis/powershelf", Purpose::Read),
            (
                Method::GET,
                "/redfish/v1/TaskService/Tasks/3",
                Purpose::Read,
            ),
            (
                Method::POST,
                "/redfish/v1/Systems/System_0/Actions/ComputerSystem.Reset",
                Purpose::Command,
            ),
            (
                Method::POST,
                "/redfish/v1/SessionService/Sessions",
                Purpose::Session,
            ),
            (
                Method::DELETE,
                "/redfish/v1/SessionService/Sessions/4",
                Purpose::Session,
            ),
            (Method::GET, "/redfish/v1", Purpose::Discovery),
            (Method::GET, "/redfish/v1/", Purpose::Discovery),
            (Method::GET, "/redfish/v1/Systems", Purpose::Discovery),
            (Method::GET, "/redfish/v1/EventService/SSE", Purpose::Events),
        ];
        for (method, path, want) in cases {
            assert_eq!(Purpose::of(&method, path), want, "{method} {path}");
        }
    }
}

/// Every Redfish request: how many arrived, and the most in flight at once
/// at any one BMC (from arrival, through any injected latency, to the
/// reply). Benchmarks read it to show what Flow asks of one BMC.
#[derive(Debug, Default)]
pub(crate) struct RequestGauge {
    total: std::sync::atomic::AtomicU64,
    peak_per_bmc: std::sync::atomic::AtomicUsize,
    /// By [`Purpose`], in its order.
    by_purpose: [std::sync::atomic::AtomicU64; Purpose::ALL.len()],
}

/// What a Redfish request is for, as the simulator can tell from its
/// method and path: what `flow-bench` splits the requests per component by
/// (`docs/benchmarks.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A resource's state (a power state, a task, a chassis).
    Read,
    /// An action or change (a reset, an update, a PATCH).
    Command,
    /// Logging in and out (`SessionService`).
    Session,
    /// Finding resources: the service root, collections, an ActionInfo,
    /// the metadata documents.
    Discovery,
    /// The event service and its stream.
    Events,
}

impl Purpose {
    /// Every purpose, in report order.
    pub const ALL: [Purpose; 5] = [
        Purpose::Read,
        Purpose::Command,
        Purpose::Session,
        Purpose::Discovery,
        Purpose::Events,
    ];

    /// Its name in the admin state.
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Read => "read",
            Purpose::Command => "command",
            Purpose::Session => "session",
            Purpose::Discovery => "discovery",
            Purpose::Events => "events",
        }
    }

    /// The purpose of a request.
    pub fn of(method: &axum::http::Method, path: &str) -> Purpose {
        const COLLECTIONS: [&str; 7] = [
            "Systems",
            "Chassis",
            "Managers",
            "FirmwareInventory",
            "Tasks",
            "PowerSupplies",
            "ResetActionInfo",
        ];
        let path = path.trim_end_matches('/');
        let last = path.rsplit('/').next().unwrap_or_default();
        if path.contains("/SessionService") {
            Purpose::Session
        } else if path.contains("/EventService") {
            Purpose::Events
        } else if method != axum::http::Method::GET && method != axum::http::Method::HEAD {
            Purpose::Command
        } else if matches!(path, "/redfish" | "/redfish/v1")
            || COLLECTIONS.contains(&last)
            || last.starts_with("$metadata")
            || last == "odata"
            || last == "UpdateService"
            || last == "TaskService"
        {
            Purpose::Discovery
        } else {
            Purpose::Read
        }
    }
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
        purpose: Purpose,
    ) -> BmcRequest<'a> {
        use std::sync::atomic::Ordering::Relaxed;
        self.total.fetch_add(1, Relaxed);
        if let Some(i) = Purpose::ALL.iter().position(|p| *p == purpose) {
            self.by_purpose[i].fetch_add(1, Relaxed);
        }
        let now = in_flight.fetch_add(1, Relaxed) + 1;
        self.peak_per_bmc.fetch_max(now, Relaxed);
        BmcRequest { in_flight }
    }

    /// Requests since start.
    pub(crate) fn total(&self) -> u64 {
        self.total.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Requests since start by purpose name.
    pub(crate) fn by_purpose(&self) -> std::collections::BTreeMap<String, u64> {
        Purpose::ALL
            .iter()
            .zip(&self.by_purpose)
            .map(|(p, n)| {
                (
                    p.as_str().to_owned(),
                    n.load(std::sync::atomic::Ordering::Relaxed),
                )
            })
            .collect()
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
