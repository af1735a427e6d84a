//! `Managers` and the BMC's manager.

use serde_json::{Value, json};

use super::View;
use super::root::{collection, link, status};
use super::route::ROOT;

/// `GET /redfish/v1/Managers`.
pub(crate) fn managers(view: &View<'_>) -> Value {
    let profile = view.component.kind.profile();
    collection(
        &format!("{ROOT}/Managers"),
        "ManagerCollection",
        "Manager Collection",
        [format!("{ROOT}/Managers/{}", profile.manager)],
    )
}

/// `GET /redfish/v1/Managers/<id>`.
pub(crate) fn manager(view: &View<'_>) -> Value {
    let c = view.component;
    let profile = c.kind.profile();
    let mut links =
        json!({ "ManagerForChassis": [link(format!("{ROOT}/Chassis/{}", profile.chassis))] });
    if let (Some(system), Some(fields)) = (profile.system, links.as_object_mut()) {
        fields.insert(
            "ManagerForServers".to_owned(),
            json!([link(format!("{ROOT}/Systems/{system}"))]),
        );
    }
    json!({
        "@odata.id": format!("{ROOT}/Managers/{}", profile.manager),
        "@odata.type": "#Manager.v1_19_0.Manager",
        "Id": profile.manager,
        "Name": "BMC",
        "ManagerType": "BMC",
        "FirmwareVersion": c.firmware.version(profile.manager_firmware).unwrap_or_default(),
        "UUID": view.uuid,
        "PowerState": "On",
        "Status": status(true),
        "Links": links,
    })
}
