//! A [`ComponentManager`] decorator that counts and times every call of
//! the manager it wraps ([`WorkerMetrics::hardware_calls`],
//! [`WorkerMetrics::hardware_call_duration`]) and logs it at debug level in
//! a span naming the component. The worker wraps every manager of its
//! registry, so the engine needs to know nothing about metrics.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use flow_hardware::{
    ComponentManager, ComponentTarget, DecommissionState, FirmwareJob, FirmwareRequest,
    FirmwareStart, FirmwareStatus, HardwareError, ManagerDescriptor, ManagerRegistry, PowerSent,
    PowerStatus,
};
use flow_rules::PowerOperation;
use tracing::Instrument;

use crate::metrics::{CallLabels, LatencyLabels, WorkerMetrics};

/// A manager whose calls are counted and timed.
pub struct Instrumented {
    inner: Arc<dyn ComponentManager>,
    metrics: WorkerMetrics,
}

/// The same managers, each wrapped in [`Instrumented`].
pub fn instrument(registry: &ManagerRegistry, metrics: &WorkerMetrics) -> ManagerRegistry {
    let mut out = ManagerRegistry::new();
    for component_type in registry.types() {
        if let Ok(inner) = registry.get(component_type) {
            out.register(Arc::new(Instrumented {
                inner: Arc::clone(inner),
                metrics: metrics.clone(),
            }));
        }
    }
    out
}

impl Instrumented {
    async fn observe<T>(
        &self,
        target: &ComponentTarget,
        action: &'static str,
        call: impl Future<Output = Result<T, HardwareError>>,
    ) -> Result<T, HardwareError> {
        let span = tracing::debug_span!("hardware_call", component = %target.name, action);
        let start = Instant::now();
        let result = call.instrument(span.clone()).await;
        let seconds = start.elapsed().as_secs_f64();
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) if e.is_transient() => "transient_error",
            Err(_) => "permanent_error",
        };
        let component_type = self.inner.descriptor().component_type.to_string();
        self.metrics
            .hardware_calls
            .get_or_create(&CallLabels {
                component_type: component_type.clone(),
                action,
                outcome,
            })
            .inc();
        self.metrics
            .hardware_call_duration
            .get_or_create(&LatencyLabels {
                component_type,
                action,
            })
            .observe(seconds);
        span.in_scope(|| match &result {
            Ok(_) => tracing::debug!(outcome, latency_ms = seconds * 1e3, "hardware call"),
            Err(error) => tracing::debug!(
                outcome,
                latency_ms = seconds * 1e3,
                error = error as &dyn std::error::Error,
                "hardware call failed"
            ),
        });
        result
    }
}

#[async_trait]
impl ComponentManager for Instrumented {
    fn descriptor(&self) -> &ManagerDescriptor {
        self.inner.descriptor()
    }

    fn change_signal(&self, target: &ComponentTarget) -> Option<flow_hardware::ChangeSignal> {
        self.inner.change_signal(target)
    }

    async fn power_control(
        &self,
        target: &ComponentTarget,
        operation: PowerOperation,
    ) -> Result<PowerSent, HardwareError> {
        self.observe(
            target,
            "power_control",
            self.inner.power_control(target, operation),
        )
        .await
    }

    async fn power_status(&self, target: &ComponentTarget) -> Result<PowerStatus, HardwareError> {
        self.observe(target, "power_status", self.inner.power_status(target))
            .await
    }

    async fn firmware_update(
        &self,
        target: &ComponentTarget,
        request: &FirmwareRequest,
    ) -> Result<FirmwareStart, HardwareError> {
        self.observe(
            target,
            "firmware_update",
            self.inner.firmware_update(target, request),
        )
        .await
    }

    async fn firmware_status(
        &self,
        target: &ComponentTarget,
        job: Option<&FirmwareJob>,
    ) -> Result<FirmwareStatus, HardwareError> {
        self.observe(
            target,
            "firmware_status",
            self.inner.firmware_status(target, job),
        )
        .await
    }

    async fn decommission(
        &self,
        target: &ComponentTarget,
    ) -> Result<DecommissionState, HardwareError> {
        self.observe(target, "decommission", self.inner.decommission(target))
            .await
    }

    async fn decommission_status(
        &self,
        target: &ComponentTarget,
    ) -> Result<DecommissionState, HardwareError> {
        self.observe(
            target,
            "decommission_status",
            self.inner.decommission_status(target),
        )
        .await
    }
}
