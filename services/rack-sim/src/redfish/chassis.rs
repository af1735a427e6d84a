//! `Chassis`, a chassis, and a power shelf's reset action, power subsystem
//! and power supplies; every chassis' measured draw (`EnvironmentMetrics`
//! `PowerWatts`, from the draw model) and a shelf's supplies' output
//! (`PowerSupplyMetrics`: the rack's draw shared by the shelves' supplies).

use serde_json::{Value, json};

use super::View;
use super::root::{collection, link, status};
use super::route::ROOT;
use crate::model::{PowerResource, PowerState, SHELF_POWER_SUPPLIES};
use crate::vendor::{BACKPLANE_CHASSIS, VendorProfile};

/// Power supply model in a LiteOn PF-1333-7R shelf.
const PSU_MODEL: &str = "PS-2641-5Q";

fn chassis_uri(view: &View<'_>) -> String {
    format!("{ROOT}/Chassis/{}", view.ids.chassis)
}

/// Whether a shelf's outputs are up (they stay up while powering off).
fn output_up(power: PowerState) -> bool {
    matches!(power, PowerState::On | PowerState::PoweringOff)
}

/// `GET /redfish/v1/Chassis`; a `multi-system` shelf lists a backplane
/// first.
pub(crate) fn chassis_collection(view: &View<'_>) -> Value {
    let shelf = view.component.kind.profile().power_resource == PowerResource::Chassis;
    let backplane = (shelf && view.vendor == VendorProfile::MultiSystem)
        .then(|| format!("{ROOT}/Chassis/{BACKPLANE_CHASSIS}"));
    collection(
        &format!("{ROOT}/Chassis"),
        "ChassisCollection",
        "Chassis Collection",
        backplane.into_iter().chain([chassis_uri(view)]),
    )
}

/// `GET /redfish/v1/Chassis/Backplane_0` (`multi-system` shelves): a
/// passive backplane with a power state but no reset.
pub(crate) fn backplane(view: &View<'_>) -> Value {
    json!({
        "@odata.id": format!("{ROOT}/Chassis/{BACKPLANE_CHASSIS}"),
        "@odata.type": "#Chassis.v1_25_0.Chassis",
        "Id": BACKPLANE_CHASSIS,
        "Name": "Power Distribution Backplane",
        "ChassisType": "Component",
        "SerialNumber": format!("{}-BP", view.component.serial),
        "PowerState": "On",
        "Status": status(true),
    })
}

/// `GET /redfish/v1/Chassis/<id>`.
pub(crate) fn chassis(view: &View<'_>) -> Value {
    let c = view.component;
    let profile = c.kind.profile();
    let uri = chassis_uri(view);
    let mut links = json!({ "ManagedBy": [link(format!("{ROOT}/Managers/{}", view.ids.manager))] });
    if let (Some(system), Some(fields)) = (view.ids.system.as_deref(), links.as_object_mut()) {
        fields.insert(
            "ComputerSystems".to_owned(),
            json!([link(format!("{ROOT}/Systems/{system}"))]),
        );
    }
    let mut body = json!({
        "@odata.id": uri,
        "@odata.type": "#Chassis.v1_25_0.Chassis",
        "Id": view.ids.chassis,
        "Name": view.ids.chassis,
        "ChassisType": profile.chassis_type,
        "Manufacturer": profile.manufacturer,
        "Model": profile.model,
        "PartNumber": profile.model,
        "SerialNumber": c.serial,
        "Status": super::event::chassis_status(view),
        "Links": links,
        "EnvironmentMetrics": link(format!("{uri}/EnvironmentMetrics")),
    });
    if profile.power_resource == PowerResource::Chassis
        && let Some(fields) = body.as_object_mut()
    {
        fields.insert("PowerState".to_owned(), json!(view.power));
        fields.insert(
            "PowerSubsystem".to_owned(),
            link(format!("{uri}/PowerSubsystem")),
        );
        fields.insert(
            "Actions".to_owned(),
            json!({ "#Chassis.Reset": super::reset::action(view, profile.resets) }),
        );
    }
    body
}

/// `GET …/PowerSubsystem`.
pub(crate) fn power_subsystem(view: &View<'_>) -> Value {
    let uri = format!("{}/PowerSubsystem", chassis_uri(view));
    json!({
        "@odata.id": uri,
        "@odata.type": "#PowerSubsystem.v1_1_3.PowerSubsystem",
        "Id": "PowerSubsystem",
        "Name": "Power Subsystem",
        "Status": status(output_up(view.power)),
        "PowerSupplies": link(format!("{uri}/PowerSupplies")),
    })
}

/// `GET …/PowerSubsystem/PowerSupplies`.
pub(crate) fn power_supplies(view: &View<'_>) -> Value {
    let uri = format!("{}/PowerSubsystem/PowerSupplies", chassis_uri(view));
    collection(
        &uri,
        "PowerSupplyCollection",
        "Power Supply Collection",
        (0..SHELF_POWER_SUPPLIES).map(|n| format!("{uri}/{n}")),
    )
}

/// `GET …/PowerSubsystem/PowerSupplies/<n>`.
pub(crate) fn power_supply(view: &View<'_>, n: u8) -> Value {
    let uri = format!("{}/PowerSubsystem/PowerSupplies/{n}", chassis_uri(view));
    json!({
        "@odata.id": uri,
        "@odata.type": "#PowerSupply.v1_5_0.PowerSupply",
        "Id": n.to_string(),
        "Name": format!("Power Supply {n}"),
        "Manufacturer": view.component.kind.profile().manufacturer,
        "Model": PSU_MODEL,
        "SerialNumber": format!("{}-PSU{n}", view.component.serial),
        "PowerSupplyType": "AC",
        "Status": status(output_up(view.power)),
        "Metrics": link(format!("{uri}/Metrics")),
    })
}

/// Watts as a sensor reading: to the watt.
fn reading(watts: f64) -> Value {
    json!({ "Reading": watts.round() })
}

/// `GET …/EnvironmentMetrics`: what the component draws now.
pub(crate) fn environment_metrics(view: &View<'_>) -> Value {
    json!({
        "@odata.id": format!("{}/EnvironmentMetrics", chassis_uri(view)),
        "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
        "Id": "EnvironmentMetrics",
        "Name": "Environment Metrics",
        "PowerWatts": reading(view.watts),
    })
}

/// `GET …/PowerSupplies/<n>/Metrics`: a supply's share of what its rack
/// draws (the rack's draw over every shelf's supplies), while its output is
/// up.
pub(crate) fn power_supply_metrics(view: &View<'_>, n: u8) -> Value {
    let uri = format!(
        "{}/PowerSubsystem/PowerSupplies/{n}/Metrics",
        chassis_uri(view)
    );
    let share = if output_up(view.power) {
        view.rack_watts / f64::from(SHELF_POWER_SUPPLIES) / f64::from(view.shelves_on.max(1))
    } else {
        0.0
    };
    json!({
        "@odata.id": uri,
        "@odata.type": "#PowerSupplyMetrics.v1_1_0.PowerSupplyMetrics",
        "Id": "Metrics",
        "Name": format!("Power Supply {n} Metrics"),
        "OutputPowerWatts": reading(share),
    })
}
