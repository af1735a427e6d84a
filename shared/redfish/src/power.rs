//! Power: read the state, map the operation code to a `ResetType`, skip the
//! command when the component already has (or is moving to) that state.

use flow_rules::PowerOperation;
use serde_json::Value;

use crate::conn::Session;
use crate::kind::{Kind, PowerResource};
use flow_hardware::{ComponentTarget, HardwareError, PowerOutcome, PowerStatus};

/// A resource's power state and reset action, read raw.
struct PowerView {
    odata_id: String,
    state: Option<String>,
    allowed: Vec<String>,
    has_reset: bool,
}

fn view(odata_id: String, json: &Value, resource: PowerResource) -> PowerView {
    let action = &json["Actions"][resource.action_key()];
    PowerView {
        odata_id,
        state: json["PowerState"].as_str().map(str::to_owned),
        allowed: action["ResetType@Redfish.AllowableValues"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        has_reset: action.is_object(),
    }
}

/// Finds (once per BMC) and reads the resource that carries power: the
/// component's resource ID if given, else the first member of the
/// collection with a power state and a reset action.
async fn read(session: &Session<'_>, kind: Kind) -> Result<PowerView, HardwareError> {
    let resource = kind.power_resource();
    let known = session
        .handle
        .power_resource
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let known = known.or_else(|| {
        session
            .target
            .resource_id
            .as_ref()
            .map(|id| format!("{}/{id}", resource.collection()))
    });
    if let Some(id) = known {
        let json = session.get_json(&id, "read power state").await?;
        return Ok(view(id, &json, resource));
    }
    let collection = session
        .get_json(resource.collection(), "list power resources")
        .await?;
    let members: Vec<String> = collection["Members"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|v| v["@odata.id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    for id in members {
        let json = session.get_json(&id, "read power state").await?;
        let v = view(id, &json, resource);
        if v.state.is_some() && v.has_reset {
            *session
                .handle
                .power_resource
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(v.odata_id.clone());
            return Ok(v);
        }
    }
    Err(HardwareError::Protocol {
        component: session.target.name.clone(),
        action: "find the power resource".to_owned(),
        detail: format!(
            "no member of {} has a PowerState and a {} action",
            resource.collection(),
            resource.action_key()
        ),
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
    let reset = kind.reset_for(operation, &v.allowed).map_err(|reason| {
        HardwareError::OperationNotSupported {
            component: target.name.clone(),
            component_type: target.component_type,
            operation: operation.as_str().to_owned(),
            reason: reason.to_owned(),
        }
    })?;
    if !v.allowed.is_empty() && !v.allowed.iter().any(|a| a == reset.as_str()) {
        return Err(HardwareError::OperationNotSupported {
            component: target.name.clone(),
            component_type: target.component_type,
            operation: operation.as_str().to_owned(),
            reason: format!(
                "the BMC does not offer ResetType {} (it offers {})",
                reset.as_str(),
                v.allowed.join(", ")
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
    let root = session.root().await?;
    let action = format!("{} reset", reset.as_str());
    let result = match kind.power_resource() {
        PowerResource::System => {
            let systems = root
                .systems()
                .await
                .map_err(|e| crate::manager::nv_error(target, "list systems", &e))?
                .ok_or_else(|| missing(target, "Systems"))?;
            let members = systems
                .members()
                .await
                .map_err(|e| crate::manager::nv_error(target, "read systems", &e))?;
            let system = members
                .into_iter()
                .find(|s| s.raw().odata_id.to_string() == v.odata_id)
                .ok_or_else(|| missing(target, &v.odata_id))?;
            system.reset(Some(reset.to_nv())).await
        }
        PowerResource::Chassis => {
            let chassis = root
                .chassis()
                .await
                .map_err(|e| crate::manager::nv_error(target, "list chassis", &e))?
                .ok_or_else(|| missing(target, "Chassis"))?;
            let members = chassis
                .members()
                .await
                .map_err(|e| crate::manager::nv_error(target, "read chassis", &e))?;
            let shelf = members
                .into_iter()
                .find(|c| c.raw().odata_id.to_string() == v.odata_id)
                .ok_or_else(|| missing(target, &v.odata_id))?;
            shelf.reset(Some(reset.to_nv())).await
        }
    };
    // A reset may answer with a task; the state is verified by polling, not by the task.
    let _response = result.map_err(|e| crate::manager::nv_error(target, &action, &e))?;
    tracing::info!(reset = reset.as_str(), "power command sent");
    Ok(PowerOutcome::Issued {
        reset_type: reset.as_str().to_owned(),
    })
}

fn missing(target: &ComponentTarget, what: &str) -> HardwareError {
    HardwareError::Protocol {
        component: target.name.clone(),
        action: "find the power resource".to_owned(),
        detail: format!("{what} is missing from the service root"),
    }
}
