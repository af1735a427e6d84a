//! `GET /redfish/v1/$metadata` (the CSDL document that names the DMTF
//! schemas every resource of the BMC is typed by, DSP0266 "Service
//! metadata") and `GET /redfish/v1/odata` (the OData service document).
//! Both are served without credentials, as the service root is.

use serde_json::{Value, json};

use super::route::ROOT;

/// Where DMTF publishes its schemas (CSDL `…/<File>.xml`, JSON
/// `…/<Namespace>.json`).
pub(crate) const DMTF_SCHEMAS: &str = "http://redfish.dmtf.org/schemas/v1";

/// Each schema file and the namespaces the BMC's `@odata.type`s use of it.
const SCHEMAS: &[(&str, &[&str])] = &[
    ("ServiceRoot_v1", &["ServiceRoot", "ServiceRoot.v1_15_0"]),
    ("ComputerSystemCollection_v1", &["ComputerSystemCollection"]),
    (
        "ComputerSystem_v1",
        &[
            "ComputerSystem",
            "ComputerSystem.v1_20_0",
            "ComputerSystem.v1_22_0",
        ],
    ),
    ("ChassisCollection_v1", &["ChassisCollection"]),
    ("Chassis_v1", &["Chassis", "Chassis.v1_25_0"]),
    (
        "PowerSubsystem_v1",
        &["PowerSubsystem", "PowerSubsystem.v1_1_3"],
    ),
    ("PowerSupplyCollection_v1", &["PowerSupplyCollection"]),
    ("PowerSupply_v1", &["PowerSupply", "PowerSupply.v1_5_0"]),
    (
        "PowerSupplyMetrics_v1",
        &["PowerSupplyMetrics", "PowerSupplyMetrics.v1_1_0"],
    ),
    (
        "EnvironmentMetrics_v1",
        &["EnvironmentMetrics", "EnvironmentMetrics.v1_3_0"],
    ),
    ("ManagerCollection_v1", &["ManagerCollection"]),
    ("Manager_v1", &["Manager", "Manager.v1_19_0"]),
    (
        "UpdateService_v1",
        &["UpdateService", "UpdateService.v1_11_0"],
    ),
    (
        "SoftwareInventoryCollection_v1",
        &["SoftwareInventoryCollection"],
    ),
    (
        "SoftwareInventory_v1",
        &["SoftwareInventory", "SoftwareInventory.v1_4_0"],
    ),
    ("TaskService_v1", &["TaskService", "TaskService.v1_2_0"]),
    ("TaskCollection_v1", &["TaskCollection"]),
    ("Task_v1", &["Task", "Task.v1_7_0"]),
    ("EventService_v1", &["EventService", "EventService.v1_10_0"]),
    (
        "EventDestinationCollection_v1",
        &["EventDestinationCollection"],
    ),
    (
        "EventDestination_v1",
        &["EventDestination", "EventDestination.v1_15_0"],
    ),
    ("Event_v1", &["Event", "Event.v1_7_0"]),
    (
        "SessionService_v1",
        &["SessionService", "SessionService.v1_1_9"],
    ),
    ("SessionCollection_v1", &["SessionCollection"]),
    ("Session_v1", &["Session", "Session.v1_7_0"]),
    ("ActionInfo_v1", &["ActionInfo", "ActionInfo.v1_4_0"]),
    ("Message_v1", &["Message", "Message.v1_1_1"]),
    ("RedfishExtensions_v1", &["RedfishExtensions.v1_0_0"]),
];

/// The `$metadata` document.
pub(crate) fn metadata() -> String {
    let mut xml = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <edmx:Edmx xmlns:edmx=\"http://docs.oasis-open.org/odata/ns/edmx\" Version=\"4.0\">\n",
    );
    for (file, namespaces) in SCHEMAS {
        xml.push_str(&format!(
            "  <edmx:Reference Uri=\"{DMTF_SCHEMAS}/{file}.xml\">\n"
        ));
        for ns in *namespaces {
            xml.push_str(&format!("    <edmx:Include Namespace=\"{ns}\"/>\n"));
        }
        xml.push_str("  </edmx:Reference>\n");
    }
    xml.push_str(
        "  <edmx:DataServices>\n    <Schema xmlns=\"http://docs.oasis-open.org/odata/ns/edm\" Namespace=\"Service\">\n      <EntityContainer Name=\"Service\" Extends=\"ServiceRoot.v1_15_0.ServiceContainer\"/>\n    </Schema>\n  </edmx:DataServices>\n</edmx:Edmx>\n",
    );
    xml
}

/// The OData service document: the root's top-level resources, named as
/// the ServiceContainer names them (the TaskService is `Tasks`).
pub(crate) fn odata(event_service: bool) -> Value {
    let mut singletons = vec![
        ("Systems", "Systems"),
        ("Chassis", "Chassis"),
        ("Managers", "Managers"),
        ("UpdateService", "UpdateService"),
        ("Tasks", "TaskService"),
        ("SessionService", "SessionService"),
    ];
    if event_service {
        singletons.push(("EventService", "EventService"));
    }
    let value: Vec<Value> = singletons
        .iter()
        .map(|(name, path)| json!({ "name": name, "kind": "Singleton", "url": format!("{ROOT}/{path}") }))
        .collect();
    json!({
        "@odata.context": format!("{ROOT}/$metadata"),
        "value": value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_names_every_schema_once_and_the_service_container() {
        let xml = metadata();
        for (file, _) in SCHEMAS {
            assert_eq!(xml.matches(&format!("/{file}.xml\"")).count(), 1, "{file}");
        }
        assert!(xml.contains("Extends=\"ServiceRoot.v1_15_0.ServiceContainer\""));
        assert_eq!(
            xml.matches("<edmx:Reference ").count(),
            xml.matches("</edmx:Reference>").count()
        );
    }
}
