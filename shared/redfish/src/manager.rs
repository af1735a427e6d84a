//! The Redfish manager for compute trays, NVLink switch trays and power
//! shelves. `nv-redfish` reads the service root, discovers resources, sends
//! resets and firmware updates and reads the firmware inventory; plain
//! reqwest reads what nv-redfish does not expose (`@Redfish.AllowableValues`)
//! and polls update tasks by URI (a worker resumes them from a checkpoint).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flow_rules::{ComponentType, PowerOperation};
use serde_json::Value;

use flow_hardware::catalog::{self, MANAGED_TYPES};
use flow_hardware::{
    Capability, ComponentManager, ComponentTarget, DecommissionState, FirmwareJob, FirmwareRequest,
    FirmwareStart, FirmwareStatus, HardwareError, ManagerDescriptor, ManagerRegistry, PowerSent,
    PowerStatus,
};

use crate::conn::{self, Connections, RequestCap, Session};
use crate::kind::Kind;
use crate::lifecycle::LifecycleClient;
use crate::{CredentialStore, firmware, power};

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
            .redirect(conn::redirect_policy())
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

/// A registry with the Redfish manager of every type the installation
/// manages ([`MANAGED_TYPES`]),
/// sharing one credential store and, when given, one lifecycle client.
pub fn registry(
    settings: &RedfishSettings,
    credentials: Arc<CredentialStore>,
    lifecycle: Option<LifecycleClient>,
) -> Result<ManagerRegistry, HardwareError> {
    registry_with(
        settings,
        &Connections::new(settings, credentials)?,
        lifecycle,
    )
}

/// A registry as [`registry`] builds it, on `connections` (which the
/// caller may share with others who talk to the same BMCs).
pub fn registry_with(
    settings: &RedfishSettings,
    connections: &Connections,
    lifecycle: Option<LifecycleClient>,
) -> Result<ManagerRegistry, HardwareError> {
    let mut registry = ManagerRegistry::new();
    for t in MANAGED_TYPES {
        registry.register(Arc::new(RedfishManager::with_connections(
            t,
            settings,
            connections.clone(),
            lifecycle.clone(),
        )?));
    }
    Ok(registry)
}

/// The Redfish manager of one component type.
pub struct RedfishManager {
    descriptor: ManagerDescriptor,
    kind: Kind,
    connections: Connections,
    lifecycle: Option<LifecycleClient>,
    /// Follow BMCs' event streams (`RedfishSettings::events`).
    events: bool,
}

impl RedfishManager {
    /// A manager for `component_type` (Compute, NVSwitch or PowerShelf).
    /// With a lifecycle client it also declares the decommission
    /// capabilities.
    pub fn new(
        component_type: ComponentType,
        settings: &RedfishSettings,
        credentials: Arc<CredentialStore>,
        lifecycle: Option<LifecycleClient>,
    ) -> Result<Self, HardwareError> {
        let connections = Connections::new(settings, credentials)?;
        Self::with_connections(component_type, settings, connections, lifecycle)
    }

    /// A manager as [`Self::new`] builds it, on shared `connections`.
    pub fn with_connections(
        component_type: ComponentType,
        settings: &RedfishSettings,
        connections: Connections,
        lifecycle: Option<LifecycleClient>,
    ) -> Result<Self, HardwareError> {
        let kind = Kind::of(component_type).ok_or(HardwareError::NoManager { component_type })?;
        let capabilities = catalog::declared(component_type, lifecycle.is_some())
            .ok_or(HardwareError::NoManager { component_type })?;
        Ok(RedfishManager {
            descriptor: ManagerDescriptor {
                component_type,
                name: catalog::MANAGER_NAME,
                capabilities,
            },
            kind,
            connections,
            lifecycle,
            events: settings.events,
        })
    }

    async fn session<'a>(&self, target: &'a ComponentTarget) -> Result<Session<'a>, HardwareError> {
        self.connections.session(target).await
    }

    /// What Flow finds at the target's BMC (`flow bmc <url> probe`),
    /// within the per-BMC request cap like every other call.
    pub async fn probe(
        &self,
        target: &ComponentTarget,
    ) -> Result<crate::probe::Probe, HardwareError> {
        let session = self.session(target).await?;
        crate::probe::probe(&session, self.kind).await
    }

    fn lifecycle(&self, capability: Capability) -> Result<&LifecycleClient, HardwareError> {
        self.lifecycle
            .as_ref()
            .ok_or_else(|| self.unsupported(capability))
    }
}

#[async_trait]
impl ComponentManager for RedfishManager {
    fn descriptor(&self) -> &ManagerDescriptor {
        &self.descriptor
    }

    #[tracing::instrument(skip_all, fields(component = %target.name, rack = %target.rack, operation = operation.as_str()))]
    async fn power_control(
        &self,
        target: &ComponentTarget,
        operation: PowerOperation,
    ) -> Result<PowerSent, HardwareError> {
        let session = self.session(target).await?;
        power::control(&session, self.kind, operation).await
    }

    #[tracing::instrument(skip_all, fields(component = %target.name, rack = %target.rack))]
    async fn power_status(&self, target: &ComponentTarget) -> Result<PowerStatus, HardwareError> {
        let session = self.session(target).await?;
        power::status(&session, self.kind).await
    }

    #[tracing::instrument(skip_all, fields(component = %target.name, rack = %target.rack))]
    async fn firmware_update(
        &self,
        target: &ComponentTarget,
        request: &FirmwareRequest,
    ) -> Result<FirmwareStart, HardwareError> {
        let session = self.session(target).await?;
        match firmware::start(&session, self.kind, request).await {
            // A session the BMC dropped, met through nv-redfish: the
            // request was refused, not run; once more with a new login.
            Err(e) if refused_session(&e) && session.session_refused().await => {
                firmware::start(&session, self.kind, request).await
            }
            other => other,
        }
    }

    #[tracing::instrument(skip_all, fields(component = %target.name, rack = %target.rack))]
    async fn firmware_in_progress(
        &self,
        target: &ComponentTarget,
        request: &FirmwareRequest,
    ) -> Result<Option<FirmwareJob>, HardwareError> {
        let session = self.session(target).await?;
        firmware::in_progress(&session, self.kind, request).await
    }

    #[tracing::instrument(skip_all, fields(component = %target.name, rack = %target.rack))]
    async fn firmware_status(
        &self,
        target: &ComponentTarget,
        job: Option<&FirmwareJob>,
    ) -> Result<FirmwareStatus, HardwareError> {
        let session = self.session(target).await?;
        match firmware::status(&session, job).await {
            Err(e) if refused_session(&e) && session.session_refused().await => {
                firmware::status(&session, job).await
            }
            other => other,
        }
    }

    fn change_signal(&self, target: &ComponentTarget) -> Option<flow_hardware::ChangeSignal> {
        if !self.events {
            return None;
        }
        let credential = self.connections.credential(target).ok()?;
        crate::events::signal(&self.connections.pool, target, credential)
    }

    async fn close(&self) {
        let n = self.connections.logout_all().await;
        if n > 0 {
            tracing::info!(sessions = n, component_type = %self.descriptor.component_type, "logged out of Redfish sessions");
        }
    }

    async fn decommission(
        &self,
        target: &ComponentTarget,
    ) -> Result<DecommissionState, HardwareError> {
        self.lifecycle(Capability::DecommissionControl)?
            .decommission(target)
            .await
    }

    async fn decommission_status(
        &self,
        target: &ComponentTarget,
    ) -> Result<DecommissionState, HardwareError> {
        self.lifecycle(Capability::DecommissionStatus)?
            .status(target)
            .await
    }
}

/// Whether an error is a BMC's `401`.
fn refused_session(e: &HardwareError) -> bool {
    matches!(e, HardwareError::Http { status: 401, .. })
}

/// The message of a Redfish error body, or the start of any other body.
pub fn error_message(body: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return snippet(body);
    };
    let extended = v["error"]["@Message.ExtendedInfo"][0]["Message"].as_str();
    let message = v["error"]["message"].as_str();
    match (extended, message) {
        (Some(m), _) | (None, Some(m)) => m.to_owned(),
        _ => snippet(body),
    }
}

/// The first 200 characters of a body, for messages.
pub fn snippet(body: &str) -> String {
    let trimmed: String = body.chars().take(200).collect();
    if trimmed.is_empty() {
        "(empty body)".to_owned()
    } else {
        trimmed
    }
}

pub(crate) fn transport_error(
    target: &ComponentTarget,
    url: &url::Url,
    e: &reqwest::Error,
) -> HardwareError {
    match e.status() {
        Some(status) => HardwareError::Http {
            component: target.name.clone(),
            action: format!("request to {}", url.path()),
            status: status.as_u16(),
            message: e.to_string(),
        },
        None => {
            let detail = flow_telemetry::chain(e);
            let url = format!("{}{}", target.bmc_url, url.path());
            if detail.contains("certificate") || detail.contains("UnknownIssuer") {
                HardwareError::Tls {
                    component: target.name.clone(),
                    url,
                    detail,
                }
            } else if e.is_connect() || e.is_builder() {
                // The request never left.
                HardwareError::Unreachable {
                    component: target.name.clone(),
                    url,
                    detail,
                }
            } else {
                // It left: a timeout or a connection dropped before the
                // answer. The BMC may have carried it out.
                HardwareError::NoAnswer {
                    component: target.name.clone(),
                    url,
                    detail,
                }
            }
        }
    }
}

/// Classifies an nv-redfish error.
pub(crate) fn nv_error(
    target: &ComponentTarget,
    action: &str,
    e: &nv_redfish::Error<conn::Bmc>,
) -> HardwareError {
    use nv_redfish::bmc_http::reqwest::BmcError;
    match e {
        nv_redfish::Error::Bmc(BmcError::ReqwestError(re)) => {
            let url = re.url().cloned().unwrap_or_else(|| {
                url::Url::parse(&target.bmc_url).unwrap_or_else(|_| {
                    url::Url::parse("http://invalid").expect("static URL parses")
                })
            });
            transport_error(target, &url, re)
        }
        nv_redfish::Error::Bmc(BmcError::InvalidResponse { status, text, .. }) => {
            HardwareError::Http {
                component: target.name.clone(),
                action: action.to_owned(),
                status: status.as_u16(),
                message: error_message(text),
            }
        }
        nv_redfish::Error::ActionNotAvailable
        | nv_redfish::Error::Bmc(BmcError::ActionNotSupported) => {
            HardwareError::OperationNotSupported {
                component: target.name.clone(),
                component_type: target.component_type,
                operation: action.to_owned(),
                reason: "the BMC does not advertise this action".to_owned(),
            }
        }
        other => HardwareError::Protocol {
            component: target.name.clone(),
            action: action.to_owned(),
            detail: other.to_string(),
        },
    }
}
