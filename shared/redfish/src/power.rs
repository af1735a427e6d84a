//! Power: read the state; map the operation code to a `ResetType` and POST
//! it to the action's target. Whether to send is not decided here: the
//! caller reads the state and decides (`shared/hardware/src/command.rs`).
//! Plain JSON, not nv-redfish: one request per read and one per command
//! once the resource is known (`discover`), and nothing read that Flow does
//! not use.

use std::sync::Arc;

use flow_rules::PowerOperation;

use crate::conn::Session;
use crate::discover::{KnownPower, PowerTarget, discover};
use crate::kind::Kind;
use flow_hardware::{HardwareError, PowerSent, PowerStatus};

/// Reads the power state of the BMC's power resource: one GET once it is
/// known; discovery first (once per BMC), and again when the known one is
/// gone (`404`: the BMC renamed or rebuilt its resources).
async fn read(session: &Session<'_>, kind: Kind) -> Result<Option<String>, HardwareError> {
    let known = session.handle.state::<KnownPower>().get();
    if let Some(target) = known {
        match session.get_json(&target.odata_id, "read power state").await {
            Ok(json) => return Ok(json["PowerState"].as_str().map(str::to_owned)),
            Err(HardwareError::Http { status: 404, .. }) => {
                tracing::info!(resource = %target.odata_id, "power resource gone (404); discovering again");
                crate::discover::forget(session);
            }
            Err(e) => return Err(e),
        }
    }
    let (_, json) = discover(session, kind).await?;
    Ok(json["PowerState"].as_str().map(str::to_owned))
}

/// Reads the power state.
pub async fn status(session: &Session<'_>, kind: Kind) -> Result<PowerStatus, HardwareError> {
    Ok(PowerStatus::from_redfish(
        read(session, kind).await?.as_deref(),
    ))
}

/// The power resource as known (no request), else discovered.
async fn resource(session: &Session<'_>, kind: Kind) -> Result<Arc<PowerTarget>, HardwareError> {
    let known = session.handle.state::<KnownPower>().get();
    match known {
        Some(target) => Ok(target),
        None => Ok(Arc::new(discover(session, kind).await?.0)),
    }
}

/// Sends the operation's reset now, without reading the state first: the
/// caller decided it goes (`shared/hardware/src/command.rs`). `Ok` only
/// when the BMC accepted it (any 2xx: a reset that answers with a task is
/// verified by reading the state, not by the task). A `404` means the BMC
/// rebuilt its resources and did nothing: the resource is found again and
/// the reset sent once more.
pub async fn control(
    session: &Session<'_>,
    kind: Kind,
    operation: PowerOperation,
) -> Result<PowerSent, HardwareError> {
    let target = session.target;
    let mut rediscovered = false;
    loop {
        let power = resource(session, kind).await?;
        let allowed = &power.allowed;
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
        let action = format!("{} reset", reset.as_str());
        let reply = session
            .post_action(
                &power.reset_target,
                &serde_json::json!({ "ResetType": reset.as_str() }),
                &action,
            )
            .await;
        match reply {
            Ok(reply) => {
                tracing::info!(
                    reset = reset.as_str(),
                    status = reply.status,
                    task = reply.location.as_deref().unwrap_or_default(),
                    "power command sent"
                );
                return Ok(PowerSent {
                    reset_type: reset.as_str().to_owned(),
                });
            }
            Err(HardwareError::Http { status: 404, .. }) if !rediscovered => {
                tracing::info!(resource = %power.odata_id, "reset target gone (404); discovering again");
                rediscovered = true;
                crate::discover::forget(session);
            }
            Err(e) => return Err(e),
        }
    }
}
