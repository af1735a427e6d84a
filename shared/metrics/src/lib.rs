//! `flow-metrics`: what the Flow services share to expose Prometheus
//! metrics. A [`MetricsRegistry`] holds every metric of a process under the
//! `flow_` prefix; [`serve`] answers `GET /metrics` with it in the
//! Prometheus text exposition format (version 0.0.4) on the address of
//! [`MetricsListen`] (`--metrics-listen` / `FLOW_METRICS_LISTEN`, or `off`).
//! The metrics themselves are defined by each service, which registers them
//! here; `prometheus-client` is re-exported so that all use one version.

mod listen;
mod server;

pub use listen::MetricsListen;
pub use prometheus_client;
pub use server::{MetricsServer, serve, start};

use prometheus_client::registry::Registry;

/// Every metric name starts with this (`flow_tasks`, `flow_jobs_started_total`).
pub const PREFIX: &str = "flow";

/// Errors of the metrics layer.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The listen setting is neither `off` nor an `ip:port`.
    #[error(
        "{value:?} is not a metrics listen address: expected ip:port (port 0 = any free port) or off"
    )]
    BadListen {
        /// The value given.
        value: String,
    },
    /// The listener could not be bound.
    #[error("cannot listen for metrics on {addr}")]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The metrics of one process, named `flow_*`.
#[derive(Debug)]
pub struct MetricsRegistry {
    registry: Registry,
}

impl Default for MetricsRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl MetricsRegistry {
    /// An empty registry whose metrics get the [`PREFIX`].
    pub fn new() -> Self {
        MetricsRegistry {
            registry: Registry::with_prefix(PREFIX),
        }
    }

    /// The `prometheus-client` registry, to register metrics in. Counter
    /// names go without `_total`: the encoding adds it.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Every metric in the Prometheus text exposition format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry);
        text
    }
}

/// Histogram buckets (seconds) for one hardware call: a Redfish request
/// answers in milliseconds on the simulator and in up to tens of seconds
/// on a busy BMC (the activity timeout is minutes).
pub fn call_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.005, 2.5, 12)
}

/// Histogram buckets (seconds) for steps and stages: from a second (a fast
/// power command) to hours (a firmware update, a decommission wait).
pub fn duration_buckets() -> impl Iterator<Item = f64> {
    [
        1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0,
    ]
    .into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn names_get_the_prefix_and_counters_the_total_suffix() {
        let mut registry = MetricsRegistry::new();
        let counter: Counter = Counter::default();
        registry
            .registry_mut()
            .register("things", "Things seen", counter.clone());
        counter.inc_by(3);
        let text = registry.encode();
        assert!(text.contains("# TYPE flow_things_total counter"), "{text}");
        assert!(text.contains("\nflow_things_total 3\n"), "{text}");
        assert!(!text.contains("# EOF"), "Prometheus text, not OpenMetrics");
    }

    #[test]
    fn bucket_bounds_ascend() {
        for buckets in [
            call_buckets().collect::<Vec<_>>(),
            duration_buckets().collect(),
        ] {
            assert!(buckets.windows(2).all(|w| w[0] < w[1]), "{buckets:?}");
        }
    }
}
