//! `Managers` and the BMC's manager.

use serde_json::{Value, json};

use super::View;
use super::root::{collection, link, status};
use super::route::ROOT;

/// `GET /redfish/v1/Managers`.
pub(crate) fn managers(view: &View<'_>) -> Value {
    collection(
        &format!("{ROOT}/Managers"),
        "ManagerCollection",
        "Manager Collection",
        [format!("{ROOT}/Managers/{}", view.ids.manager)],
    )
}

/// `GET /redfish/v1/Managers/<id>`.
pub(crate) fn manager(view: &View<'_>) -> Value {
    let c = view.component;
    let profile = c.kind.profile();
    let mut links =
        json!({ "ManagerForChassis": [link(format!("{ROOT}/Chassis/{}", view.ids.chassis))] });
    if let (Some(system), Some(fields)) = (view.ids.system.as_deref(), links.as_object_mut()) {
        fields.insert(
            "ManagerForServers".to_owned(),
            json!([link(format!("{ROOT}/Systems/{system}"))]),
        );
    }
    json!({
        "@odata.id": format!("{ROOT}/Managers/{}", view.ids.manager),
        "@odata.type": "#Manager.v1_19_0.Manager",
        "Id": view.ids.manager,
        "Name": "BMC",
        "ManagerType": "BMC",
        "FirmwareVersion": c.firmware.version(profile.manager_firmware).unwrap_or_default(),
        "UUID": view.uuid,
        "PowerState": "On",
        "Status": status(true),
        "Links": links,
    })
}
