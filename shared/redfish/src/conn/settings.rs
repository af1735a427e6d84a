//! How the Redfish managers talk to BMCs: limits, timeouts, TLS and
//! whether to follow event streams, and the HTTP client they describe.

use std::path::PathBuf;
use std::time::Duration;

use flow_hardware::HardwareError;

use super::RequestCap;

/// Requests in flight per BMC when nothing says otherwise: BMCs are small
/// controllers that serve few requests at once (`docs/hardware.md`,
/// "Connections and timeouts").
pub const DEFAULT_MAX_CONCURRENT_PER_BMC: usize = 4;
/// Calls in flight at once across every BMC when nothing says otherwise:
/// what one worker's connections, sockets and memory comfortably carry (a
/// call is almost all waiting on a BMC, so this, not a number of jobs,
/// bounds a worker; `docs/hardware.md`, "Connections and timeouts").
pub const DEFAULT_MAX_REQUESTS: usize = 512;
/// One HTTP request's limit when nothing says otherwise.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// TCP/TLS connect limit.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A kept-alive connection to a BMC is closed after this long unused. Long
/// enough to span a step's back-to-back calls and its verification polls
/// (5 s apart in the built-in rules), no longer: a worker keeps one
/// connection (and its buffers, ~22 KiB) per BMC it talked to within this
/// time, and a probe such as `VerifyReachability` touches every tray of a
/// rack once and is done. At 1,000 racks (35,000 BMCs, 4 workers) 20 s kept
/// 8,600-13,500 sockets per worker and 223-261 MiB; 6 s keeps 3,900-5,300
/// and 137-173 MiB (`services/bench/results/JOURNAL.md`, "Worker memory and where the
/// CPU goes at site scale"). BMCs accept few connections, too.
pub const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(6);

/// How the Redfish managers talk to BMCs.
#[derive(Debug, Clone)]
pub struct RedfishSettings {
    /// At most this many requests at once per BMC.
    pub max_concurrent_per_bmc: usize,
    /// At most this many requests at once across every BMC, shared by
    /// every manager built from these settings.
    pub max_requests: RequestCap,
    /// Limit of one HTTP request.
    pub request_timeout: Duration,
    /// Connect limit.
    pub connect_timeout: Duration,
    /// Extra CA certificates (PEM) to trust for BMC TLS.
    pub ca_file: Option<PathBuf>,
    /// Skip TLS verification (labs only; off by default).
    pub insecure: bool,
    /// A kept-alive connection unused this long is closed
    /// ([`IDLE_CONNECTION_TIMEOUT`] unless set).
    pub idle_connection_timeout: Duration,
    /// Follow BMCs' event streams (SSE) so that a verification polls when
    /// an event comes (`shared/redfish/src/events.rs`); polling only when
    /// off.
    pub events: bool,
}

impl Default for RedfishSettings {
    fn default() -> Self {
        RedfishSettings {
            max_concurrent_per_bmc: DEFAULT_MAX_CONCURRENT_PER_BMC,
            max_requests: RequestCap::new(DEFAULT_MAX_REQUESTS),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            idle_connection_timeout: IDLE_CONNECTION_TIMEOUT,
            ca_file: None,
            insecure: false,
            events: true,
        }
    }
}

impl RedfishSettings {
    /// The HTTP client these settings describe. Redirects are followed only
    /// within the BMC's origin, so credentials never leave it.
    pub fn http_client(&self) -> Result<reqwest::Client, HardwareError> {
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(self.request_timeout)
            .connect_timeout(self.connect_timeout)
            .pool_idle_timeout(self.idle_connection_timeout)
            .pool_max_idle_per_host(self.max_concurrent_per_bmc.max(1))
            .redirect(super::redirect_policy())
            .user_agent(concat!("flow/", env!("CARGO_PKG_VERSION")));
        if let Some(ca) = &self.ca_file {
            let pem = std::fs::read(ca).map_err(|e| {
                HardwareError::Config(format!("cannot read BMC CA file {}: {e}", ca.display()))
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                HardwareError::Config(format!("BMC CA file {} is not PEM: {e}", ca.display()))
            })?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        if self.insecure {
            builder = builder.danger_accept_invalid_certs(true);
        }
        builder
            .build()
            .map_err(|e| HardwareError::Config(format!("cannot build the HTTP client: {e}")))
    }
}
