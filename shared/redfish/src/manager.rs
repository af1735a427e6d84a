//! The Redfish manager for compute trays, NVLink switch trays and power
//! shelves. `nv-redfish` reads the service root, discovers resources, sends
//! resets and firmware updates and reads the firmware inventory; plain
//! reqwest reads what nv-redfish does not expose (`@Redfish.AllowableValues`)
//! and polls update tasks by URI (a worker resumes them from a checkpoint).

use std::sync::Arc;

use async_trait::async_trait;
use flow_rules::{ComponentType, PowerOperation};

use flow_hardware::catalog::{self, MANAGED_TYPES};
use flow_hardware::{
    Capability, ComponentManager, ComponentTarget, DecommissionState, FirmwareJob, FirmwareRequest,
    FirmwareStart, FirmwareStatus, HardwareError, ManagerDescriptor, ManagerRegistry, PowerSent,
    PowerStatus,
};

use crate::conn::settings::RedfishSettings;
use crate::conn::{Connections, Session};
use crate::kind::Kind;
use crate::lifecycle::LifecycleClient;
use crate::{CredentialStore, firmware, power};

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
