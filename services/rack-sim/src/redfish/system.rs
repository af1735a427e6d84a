//! `Systems` and a tray's `System_0` with its reset action.

use serde_json::{Value, json};

use super::View;
use super::root::{collection, link, status};
use super::route::ROOT;
use crate::model::PowerState;

/// `GET /redfish/v1/Systems` (empty on a power shelf).
pub(crate) fn systems(view: &View<'_>) -> Value {
    let profile = view.component.kind.profile();
    collection(
        &format!("{ROOT}/Systems"),
        "ComputerSystemCollection",
        "Computer System Collection",
        profile.system.map(|id| format!("{ROOT}/Systems/{id}")),
    )
}

/// The reset action's target on the system.
pub(crate) fn reset_target(system: &str) -> String {
    format!("{ROOT}/Systems/{system}/Actions/ComputerSystem.Reset")
}

/// `GET /redfish/v1/Systems/<id>`; `None` on a power shelf.
pub(crate) fn system(view: &View<'_>) -> Option<Value> {
    let c = view.component;
    let profile = c.kind.profile();
    let id = profile.system?;
    let allowed: Vec<&str> = profile.resets.iter().map(|r| r.as_str()).collect();
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
            "Chassis": [link(format!("{ROOT}/Chassis/{}", profile.chassis))],
            "ManagedBy": [link(format!("{ROOT}/Managers/{}", profile.manager))],
        },
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": reset_target(id),
                "ResetType@Redfish.AllowableValues": allowed,
            }
        },
    }))
}
