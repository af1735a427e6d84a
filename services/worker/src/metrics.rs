//! The worker's Prometheus metrics (`flow_*`): jobs taken, resumed and
//! finished, redeliveries, naks, checkpoints, jobs in flight, the job
//! partitions pulled and the workers seen, waits held
//! for events and the ones an event cut short, and every hardware call by
//! component type, action and outcome with its latency.
//! `docs/operating.md`, "Metrics and alerts", lists them with what to alert
//! on.

use flow_metrics::{MetricsRegistry, call_buckets};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// `outcome` of a finished job: `completed`, `failed` or `cancelled`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// The step outcome.
    pub outcome: &'static str,
}

/// Why a job was handed back with a nak.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NakLabels {
    /// `wait` (a durable wait: Sleep, poll interval, backoff), `retry` (the
    /// checkpoint or the result could not be read or written now) or
    /// `handback` (the worker is stopping or has no free slot).
    pub reason: &'static str,
}

/// One hardware call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// `Compute`, `NVSwitch`, `PowerShelf`, …
    pub component_type: String,
    /// The manager method: `power_control`, `power_status`,
    /// `firmware_update`, `firmware_status`, `decommission`,
    /// `decommission_status`.
    pub action: &'static str,
    /// `ok`, `transient_error` or `permanent_error`.
    pub outcome: &'static str,
}

/// One hardware call's latency, by type and action.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    /// As in [`CallLabels`].
    pub component_type: String,
    /// As in [`CallLabels`].
    pub action: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn call_histogram() -> Histogram {
    Histogram::new(call_buckets())
}

/// The worker's metrics. Cheap to clone: every handle shares its value.
#[derive(Debug, Clone)]
pub struct WorkerMetrics {
    /// Deliveries that began a step (no checkpoint yet).
    pub jobs_started: Counter,
    /// Deliveries that resumed a step from its checkpoint.
    pub jobs_resumed: Counter,
    /// Results published, by outcome.
    pub jobs_finished: Family<OutcomeLabels, Counter>,
    /// Deliveries with a JetStream delivery count above 1 (resumptions
    /// after a nak count too; see `docs/operating.md`, "Metrics and alerts").
    pub job_redeliveries: Counter,
    /// Naks sent, by reason.
    pub job_naks: Family<NakLabels, Counter>,
    /// Checkpoints saved in the KV bucket.
    pub checkpoints_written: Counter,
    /// Checkpoints that could not be saved.
    pub checkpoint_errors: Counter,
    /// Deliveries that stopped because another delivery of the same job
    /// wrote its checkpoint since they read it.
    pub jobs_superseded: Counter,
    /// Jobs that did not decode and were terminated.
    pub jobs_parked: Counter,
    /// Jobs being worked on now.
    pub jobs_in_flight: Gauge,
    /// Job partitions this worker pulls now (`flow_protocol::partition`).
    pub job_partitions: Gauge,
    /// Workers this one counts as members when dividing the partitions
    /// (itself included).
    pub workers_seen: Gauge,
    /// Hardware calls by type, action and outcome.
    pub hardware_calls: Family<CallLabels, Counter>,
    /// Hardware call latency by type and action.
    pub hardware_call_duration: HistogramFamily<LatencyLabels>,
    /// Waits held in the worker for a device's events (instead of a
    /// durable wait).
    pub event_waits: Counter,
    /// Of those, the ones an event (or a feed's end) cut short: a poll
    /// made before its interval.
    pub event_wakes: Counter,
}

impl WorkerMetrics {
    /// Metrics that are counted but not registered (an embedded worker
    /// without a listener).
    pub fn unregistered() -> Self {
        WorkerMetrics {
            jobs_started: Counter::default(),
            jobs_resumed: Counter::default(),
            jobs_finished: Family::default(),
            job_redeliveries: Counter::default(),
            job_naks: Family::default(),
            checkpoints_written: Counter::default(),
            checkpoint_errors: Counter::default(),
            jobs_superseded: Counter::default(),
            jobs_parked: Counter::default(),
            jobs_in_flight: Gauge::default(),
            job_partitions: Gauge::default(),
            workers_seen: Gauge::default(),
            hardware_calls: Family::default(),
            hardware_call_duration: Family::new_with_constructor(call_histogram),
            event_waits: Counter::default(),
            event_wakes: Counter::default(),
        }
    }

    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut MetricsRegistry) -> Self {
        let m = Self::unregistered();
        let r = registry.registry_mut();
        r.register(
            "jobs_started",
            "Step jobs begun from scratch (no checkpoint)",
            m.jobs_started.clone(),
        );
        r.register(
            "jobs_resumed",
            "Step job deliveries resumed from a checkpoint",
            m.jobs_resumed.clone(),
        );
        r.register(
            "jobs_finished",
            "Step jobs finished (result published), by outcome",
            m.jobs_finished.clone(),
        );
        r.register(
            "job_redeliveries",
            "Job deliveries with a JetStream delivery count above 1",
            m.job_redeliveries.clone(),
        );
        r.register(
            "job_naks",
            "Jobs handed back with a nak, by reason",
            m.job_naks.clone(),
        );
        r.register(
            "checkpoints_written",
            "Step checkpoints saved in the flow_job_state bucket",
            m.checkpoints_written.clone(),
        );
        r.register(
            "checkpoint_errors",
            "Step checkpoints that could not be saved",
            m.checkpoint_errors.clone(),
        );
        r.register(
            "jobs_superseded",
            "Step job deliveries stopped because another delivery of the job wrote its checkpoint",
            m.jobs_superseded.clone(),
        );
        r.register(
            "jobs_parked",
            "Malformed jobs terminated without running",
            m.jobs_parked.clone(),
        );
        r.register(
            "jobs_in_flight",
            "Step jobs this worker is working on",
            m.jobs_in_flight.clone(),
        );
        r.register(
            "job_partitions",
            "Job partitions this worker pulls (each rack's jobs are on one)",
            m.job_partitions.clone(),
        );
        r.register(
            "workers_seen",
            "Workers this one divides the job partitions with, itself included",
            m.workers_seen.clone(),
        );
        r.register(
            "hardware_calls",
            "Component manager calls, by component type, action and outcome",
            m.hardware_calls.clone(),
        );
        r.register_with_unit(
            "hardware_call_duration",
            "Component manager call latency, by component type and action",
            prometheus_client::registry::Unit::Seconds,
            m.hardware_call_duration.clone(),
        );
        r.register(
            "event_waits",
            "Verification waits held in the worker for a device's events",
            m.event_waits.clone(),
        );
        r.register(
            "event_wakes",
            "Verification waits an event cut short (a poll before its interval)",
            m.event_wakes.clone(),
        );
        // Known label values start at zero, so that rate() sees the first
        // increment.
        for outcome in ["completed", "failed", "cancelled"] {
            let _ = m.jobs_finished.get_or_create(&OutcomeLabels { outcome });
        }
        for reason in ["wait", "retry", "handback"] {
            let _ = m.job_naks.get_or_create(&NakLabels { reason });
        }
        m
    }

    /// Counts a nak.
    pub fn nak(&self, reason: &'static str) {
        self.job_naks.get_or_create(&NakLabels { reason }).inc();
    }
}

/// The hardware watcher's metrics (`flow-worker --watch`,
/// [`crate::watch`]). Cheap to clone: every handle shares its value.
#[derive(Debug, Clone, Default)]
pub struct WatchMetrics {
    /// Job partitions whose racks this watcher watches.
    pub partitions: Gauge,
    /// Watchers this one divides the partitions with, itself included.
    pub watchers_seen: Gauge,
    /// BMCs this watcher watches.
    pub bmcs: Gauge,
    /// Of those, followed on an open event stream now.
    pub streams: Gauge,
    /// Of those, whose last read or stream failed.
    pub bmcs_failing: Gauge,
    /// Hardware event records published (a condition read again by a
    /// later poll is published again: JetStream and the store drop the
    /// repeat by its key).
    pub events_published: Counter,
}

impl WatchMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut MetricsRegistry) -> Self {
        let m = Self::default();
        let r = registry.registry_mut();
        r.register(
            "watch_partitions",
            "Job partitions whose racks' BMCs this watcher watches",
            m.partitions.clone(),
        );
        r.register(
            "watchers_seen",
            "Hardware watchers this one divides the partitions with, itself included",
            m.watchers_seen.clone(),
        );
        r.register("watch_bmcs", "BMCs this watcher watches", m.bmcs.clone());
        r.register(
            "watch_streams",
            "BMC event streams this watcher has open",
            m.streams.clone(),
        );
        r.register(
            "watch_bmcs_failing",
            "BMCs this watcher watches whose last read or stream failed",
            m.bmcs_failing.clone(),
        );
        r.register(
            "watch_events_published",
            "Hardware event records this watcher published (repeats of a condition included)",
            m.events_published.clone(),
        );
        m
    }
}
