//! Power: read the state, map the operation code to a `ResetType`, skip the
//! command when the component already has (or is moving to) that state,
//! else POST the reset to the action's target. Plain JSON, not nv-redfish:
//! two requests per command once the resource is known (`discover`), and
//! nothing read that Flow does not use.

use std::sync::Arc;

use flow_rules::PowerOperation;

use crate::conn::Session;
use crate::discover::{PowerTarget, discover};
use crate::kind::Kind;
use flow_hardware::{HardwareError, PowerOutcome, PowerStatus};

/// The power resource and its state now.
struct PowerView {
    target: Arc<PowerTarget>,
    state: Option<String>,
}

/// Reads the power state of the BMC's power resource: one GET once it is
/// known; discovery first (once per BMC), and again when the known one is
/// gone (`404`: the BMC renamed or rebuilt its resources).
async fn read(session: &Session<'_>, kind: Kind) -> Result<PowerView, HardwareError> {
    let known = session
        .handle
        .power
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if let Some(target) = known {
        match session.get_json(&target.odata_id, "read power state").await {
            Ok(json) => {
                return Ok(PowerView {
                    state: json["PowerState"].as_str().map(str::to_owned),
                    target,
                });
            }
            Err(HardwareError::Http { status: 404, .. }) => {
                tracing::info!(resource = %target.odata_id, "power resource gone (404); discovering again");
                *session
                    .handle
                    .power
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = None;
            }
            Err(e) => return Err(e),
        }
    }
    let (target, json) = discover(session, kind).await?;
    Ok(PowerView {
        state: json["PowerState"].as_str().map(str::to_owned),
        target: Arc::new(target),
    })
}

fn status_of(state: Option<&str>) -> PowerStatus {
    match state {
        Some("On") => PowerStatus::On,
        Some("Off") => PowerStatus::Off,
        _ => PowerStatus::Unknown,
    }
}

/// Reads the power state.
pub async fn status(session: &Session<'_>, kind: Kind) -> Result<PowerStatus, HardwareError> {
    Ok(status_of(read(session, kind).await?.state.as_deref()))
}

/// Sends the operation unless the component already has its end state.
pub async fn control(
    session: &Session<'_>,
    kind: Kind,
    operation: PowerOperation,
) -> Result<PowerOutcome, HardwareError> {
    let target = session.target;
    let v = read(session, kind).await?;
    let allowed = &v.target.allowed;
    let reset = kind.reset_for(operation, allowed).map_err(|reason| {
        HardwareError::OperationNotSupported {
            component: target.name.clone(),
            component_type: target.component_type,
            operation: operation.as_str().to_owned(),
            reason: reason.to_owned(),
        }
    })?;
    if !allowed.is_empty() && !allowed.iter().any(|a| a == reset.as_str()) {
        return Err(HardwareError::OperationNotSupported {
            component: target.name.clone(),
            component_type: target.component_type,
            operation: operation.as_str().to_owned(),
            reason: format!(
                "the BMC does not offer ResetType {} (it offers {})",
                reset.as_str(),
                allowed.join(", ")
            ),
        });
    }
    let state = v.state.clone().unwrap_or_default();
    // Idempotent redelivery: already there, or already on the way.
    let already = match reset.end_state_on() {
        Some(true) => matches!(state.as_str(), "On" | "PoweringOn"),
        Some(false) => matches!(state.as_str(), "Off" | "PoweringOff"),
        None => matches!(state.as_str(), "PoweringOn" | "PoweringOff"),
    };
    if already {
        tracing::debug!(state = %state, reset = reset.as_str(), "already in the requested state");
        return Ok(PowerOutcome::AlreadyInState { state });
    }
    if reset.end_state_on().is_none()
        && state == "Off"
        && reset != crate::kind::ResetKind::PowerCycle
    {
        return Err(HardwareError::InvalidState {
            component: target.name.clone(),
            message: format!(
                "is Off: {} needs it On (use power_on, or cold_reset to cycle it)",
                operation.as_str()
            ),
        });
    }
    // Any 2xx: a reset that answers with a task is verified by polling the
    // state, not by the task.
    let action = format!("{} reset", reset.as_str());
    let reply = session
        .post_action(
            &v.target.reset_target,
            &serde_json::json!({ "ResetType": reset.as_str() }),
            &action,
        )
        .await?;
    tracing::info!(
        reset = reset.as_str(),
        status = reply.status,
        task = reply.location.as_deref().unwrap_or_default(),
        "power command sent"
    );
    Ok(PowerOutcome::Issued {
        reset_type: reset.as_str().to_owned(),
    })
}
