//! `Systems` and a tray's `System_0` with its reset action.

use serde_json::{Value, json};

use axum::response::Response;

use super::View;
use super::error::RedfishError;
use super::root::{collection, link, status};
use super::route::ROOT;
use crate::model::PowerState;
use crate::vendor::{DPU_SYSTEM, VendorProfile};

/// `GET /redfish/v1/Systems` (empty on a power shelf); a `multi-system`
/// tray lists its DPU first.
pub(crate) fn systems(view: &View<'_>) -> Value {
    let dpu = (view.vendor == VendorProfile::MultiSystem && view.ids.system.is_some())
        .then(|| format!("{ROOT}/Systems/{DPU_SYSTEM}"));
    let host = view
        .ids
        .system
        .as_ref()
        .map(|id| format!("{ROOT}/Systems/{id}"));
    collection(
        &format!("{ROOT}/Systems"),
        "ComputerSystemCollection",
        "Computer System Collection",
        dpu.into_iter().chain(host),
    )
}

/// `GET /redfish/v1/Systems/DPU_0` (`multi-system`): a DPU, always on,
/// whose reset is accepted and changes nothing the simulator models.
pub(crate) fn dpu_system(view: &View<'_>) -> Value {
    json!({
        "@odata.id": format!("{ROOT}/Systems/{DPU_SYSTEM}"),
        "@odata.type": "#ComputerSystem.v1_22_0.ComputerSystem",
        "Id": DPU_SYSTEM,
        "Name": "BlueField DPU",
        "SystemType": "DPU",
        "Manufacturer": "NVIDIA",
        "SerialNumber": format!("{}-DPU", view.component.serial),
        "PowerState": "On",
        "Status": status(true),
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": format!("{ROOT}/Systems/{DPU_SYSTEM}/Actions/ComputerSystem.Reset"),
                "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "ForceRestart"],
            }
        },
    })
}

/// `POST …/DPU_0/Actions/ComputerSystem.Reset`: recorded nowhere (a
/// manager that resets the DPU instead of the host leaves the host as it
/// was, which is what a test sees).
pub(crate) fn dpu_reset(bmc: &super::Bmc, body: &[u8]) -> Result<Response, RedfishError> {
    let fields: serde_json::Map<String, Value> =
        serde_json::from_slice(body).map_err(|_| RedfishError::ParameterMissing {
            action: "ComputerSystem.Reset",
            parameter: "ResetType",
        })?;
    if !fields.contains_key("ResetType") {
        return Err(RedfishError::ParameterMissing {
            action: "ComputerSystem.Reset",
            parameter: "ResetType",
        });
    }
    tracing::info!(component = %bmc.world.component_name(bmc.at), "DPU reset accepted (no effect)");
    Ok(super::reset::accepted(bmc.world.vendor(bmc.at)))
}

/// `GET /redfish/v1/Systems/<id>`; `None` on a power shelf.
pub(crate) fn system(view: &View<'_>) -> Option<Value> {
    let c = view.component;
    let profile = c.kind.profile();
    let id = view.ids.system.as_deref()?;
    Some(json!({
        "@odata.id": format!("{ROOT}/Systems/{id}"),
        "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
        "Id": id,
        "Name": id,
        "SystemType": "Physical",
        "Manufacturer": profile.manufacturer,
        "Model": profile.model,
        "SerialNumber": c.serial,
        "UUID": view.uuid,
        "PowerState": view.power,
        "Status": status(view.power != PowerState::Off),
        "Links": {
            "Chassis": [link(format!("{ROOT}/Chassis/{}", view.ids.chassis))],
            "ManagedBy": [link(format!("{ROOT}/Managers/{}", view.ids.manager))],
        },
        "Actions": {
            "#ComputerSystem.Reset": super::reset::action(view, profile.resets),
        },
    }))
}
