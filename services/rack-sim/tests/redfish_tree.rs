//! The resource tree of each kind, authentication, and the 404/405 shapes.

mod common;

use common::*;
use flow_rack_sim::InitialPower;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const TRAY_RESETS: [&str; 7] = [
    "On",
    "ForceOn",
    "GracefulShutdown",
    "ForceOff",
    "GracefulRestart",
    "ForceRestart",
    "PowerCycle",
];

fn members(body: &Value) -> Vec<String> {
    let list = body["Members"].as_array().expect("Members");
    assert_eq!(body["Members@odata.count"], json!(list.len()), "{body}");
    list.iter()
        .map(|m| m["@odata.id"].as_str().expect("member link").to_owned())
        .collect()
}

fn assert_resource(body: &Value, id: &str, odata_type: &str) {
    assert_eq!(body["@odata.id"], json!(id), "{body}");
    assert_eq!(body["@odata.type"], json!(odata_type), "{body}");
    assert!(body["Id"].is_string(), "{body}");
    assert!(body["Name"].is_string(), "{body}");
}

#[tokio::test]
async fn service_root_needs_no_credentials_and_everything_else_does() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    let http = client();
    let base = bmc(&sim, "compute-01");
    for path in ["/redfish/v1", "/redfish/v1/"] {
        let response = http
            .get(format!("{base}{path}"))
            .send()
            .await
            .expect("GET root");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-type"],
            "application/json",
            "content type"
        );
    }
    for (user, password) in [
        (None, None),
        (Some("root"), Some("wrong")),
        (Some("admin"), Some(PASSWORD)),
    ] {
        let mut request = http.get(format!("{base}{SYSTEM}"));
        if let Some(user) = user {
            request = request.basic_auth(user, password);
        }
        let response = request.send().await.expect("GET system");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            response.headers()["www-authenticate"],
            "Basic realm=\"flow-rack-sim\""
        );
        let body: Value = response.json().await.expect("error body");
        assert_eq!(
            body["error"]["code"],
            json!("Base.1.15.0.ResourceAtUriUnauthorized")
        );
        let info = &body["error"]["@Message.ExtendedInfo"][0];
        assert_eq!(info["@odata.type"], json!("#Message.v1_1_1.Message"));
        assert_eq!(info["Severity"], json!("Critical"));
        assert!(info["Resolution"].is_string());
    }
    let (status, _) = get(&http, &base, SYSTEM).await;
    assert_eq!(status, StatusCode::OK);
    sim.shutdown().await;
}

#[tokio::test]
async fn unknown_paths_are_404_and_wrong_methods_405_with_redfish_bodies() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    let http = client();
    let base = bmc(&sim, "compute-01");
    let (status, body) = get(&http, &base, "/redfish/v1/Systems/System_1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(message_id(&body), "Base.1.15.0.ResourceMissingAtURI");
    let (status, _) = get(&http, &base, "/redfish/v1/TaskService/Tasks/42").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let response = http
        .delete(format!("{base}{SYSTEM}"))
        .basic_auth(USER, Some(PASSWORD))
        .send()
        .await
        .expect("DELETE");
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(response.headers()["allow"], "GET");
    let body: Value = response.json().await.expect("error body");
    assert_eq!(message_id(&body), "Base.1.15.0.OperationNotAllowed");
    let (status, _) = call(&http, Method::GET, &format!("{base}{SYSTEM_RESET}"), None)
        .await
        .expect("GET action");
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    sim.shutdown().await;
}

#[tokio::test]
async fn compute_tray_tree() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    let http = client();
    let base = bmc(&sim, "compute-02");
    let (_, root) = get(&http, &base, "/redfish/v1").await;
    assert_resource(&root, "/redfish/v1", "#ServiceRoot.v1_15_0.ServiceRoot");
    assert_eq!(root["Id"], json!("RootService"));
    assert_eq!(root["Vendor"], json!("NVIDIA"));
    assert_eq!(root["Product"], json!("GB200 NVL"));
    assert_eq!(root["RedfishVersion"], json!("1.17.0"));
    assert!(root["UUID"].is_string());
    for (link, path) in [
        ("Systems", "Systems"),
        ("Chassis", "Chassis"),
        ("Managers", "Managers"),
        ("UpdateService", "UpdateService"),
        ("Tasks", "TaskService"),
        ("EventService", "EventService"),
    ] {
        assert_eq!(
            root[link]["@odata.id"],
            json!(format!("/redfish/v1/{path}")),
            "{link}"
        );
    }
    assert!(root.get("TaskService").is_none(), "{root}");

    let (_, systems) = get(&http, &base, "/redfish/v1/Systems/").await;
    assert_eq!(
        systems["@odata.type"],
        json!("#ComputerSystemCollection.ComputerSystemCollection")
    );
    assert_eq!(members(&systems), [SYSTEM]);
    let (_, system) = get(&http, &base, SYSTEM).await;
    assert_resource(&system, SYSTEM, "#ComputerSystem.v1_20_0.ComputerSystem");
    assert_eq!(system["Manufacturer"], json!("NVIDIA"));
    assert_eq!(system["PowerState"], json!("On"));
    assert_eq!(system["SerialNumber"], json!("SIM-rack-01-compute-02"));
    assert_eq!(
        system["Links"]["Chassis"][0]["@odata.id"],
        json!("/redfish/v1/Chassis/BMC_0")
    );
    let reset = &system["Actions"]["#ComputerSystem.Reset"];
    assert_eq!(reset["target"], json!(SYSTEM_RESET));
    assert_eq!(
        reset["ResetType@Redfish.AllowableValues"],
        json!(TRAY_RESETS)
    );

    let (_, chassis) = get(&http, &base, "/redfish/v1/Chassis").await;
    assert_eq!(members(&chassis), ["/redfish/v1/Chassis/BMC_0"]);
    let (_, chassis) = get(&http, &base, "/redfish/v1/Chassis/BMC_0").await;
    assert_resource(
        &chassis,
        "/redfish/v1/Chassis/BMC_0",
        "#Chassis.v1_25_0.Chassis",
    );
    assert_eq!(chassis["ChassisType"], json!("Module"));
    assert!(chassis.get("Actions").is_none(), "{chassis}");

    let (_, managers) = get(&http, &base, "/redfish/v1/Managers").await;
    assert_eq!(members(&managers), ["/redfish/v1/Managers/BMC_0"]);
    let (_, manager) = get(&http, &base, "/redfish/v1/Managers/BMC_0").await;
    assert_resource(
        &manager,
        "/redfish/v1/Managers/BMC_0",
        "#Manager.v1_19_0.Manager",
    );
    assert_eq!(manager["ManagerType"], json!("BMC"));
    assert_eq!(manager["FirmwareVersion"], json!("25.06-2"));

    let (_, update) = get(&http, &base, "/redfish/v1/UpdateService").await;
    assert_resource(
        &update,
        "/redfish/v1/UpdateService",
        "#UpdateService.v1_11_0.UpdateService",
    );
    assert_eq!(update["ServiceEnabled"], json!(true));
    let action = &update["Actions"]["#UpdateService.SimpleUpdate"];
    assert_eq!(
        action["target"],
        json!("/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate")
    );
    assert_eq!(
        action["TransferProtocol@Redfish.AllowableValues"],
        json!(["HTTP", "HTTPS"])
    );
    let (_, inventory) = get(&http, &base, "/redfish/v1/UpdateService/FirmwareInventory").await;
    assert_eq!(
        members(&inventory),
        [
            "/redfish/v1/UpdateService/FirmwareInventory/FW_BMC_0",
            "/redfish/v1/UpdateService/FirmwareInventory/UEFI"
        ]
    );
    let (_, uefi) = get(
        &http,
        &base,
        "/redfish/v1/UpdateService/FirmwareInventory/UEFI",
    )
    .await;
    assert_resource(
        &uefi,
        "/redfish/v1/UpdateService/FirmwareInventory/UEFI",
        "#SoftwareInventory.v1_4_0.SoftwareInventory",
    );
    assert_eq!(uefi["Version"], json!("02.04.12"));
    assert_eq!(uefi["Updateable"], json!(true));

    let (_, tasks) = get(&http, &base, "/redfish/v1/TaskService").await;
    assert_resource(
        &tasks,
        "/redfish/v1/TaskService",
        "#TaskService.v1_2_0.TaskService",
    );
    assert_eq!(
        tasks["Tasks"]["@odata.id"],
        json!("/redfish/v1/TaskService/Tasks")
    );
    let (_, list) = get(&http, &base, "/redfish/v1/TaskService/Tasks").await;
    assert!(members(&list).is_empty());
    sim.shutdown().await;
}

#[tokio::test]
async fn nvswitch_tray_tree() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    let http = client();
    let base = bmc(&sim, "nvswitch-01");
    let (_, root) = get(&http, &base, "/redfish/v1").await;
    assert_eq!(root["Vendor"], json!("NVIDIA"));
    assert_eq!(root["Product"], json!("P3809"));
    assert_eq!(root["RedfishVersion"], json!("1.17.0"));
    let (_, system) = get(&http, &base, SYSTEM).await;
    assert_eq!(system["PowerState"], json!("On"));
    assert_eq!(
        system["Actions"]["#ComputerSystem.Reset"]["ResetType@Redfish.AllowableValues"],
        json!(TRAY_RESETS)
    );
    assert_eq!(
        system["Links"]["Chassis"][0]["@odata.id"],
        json!("/redfish/v1/Chassis/BMC_eeprom")
    );
    let (status, chassis) = get(&http, &base, "/redfish/v1/Chassis/BMC_eeprom").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(chassis["Model"], json!("P3809"));
    let (_, manager) = get(&http, &base, "/redfish/v1/Managers/BMC_0").await;
    assert_eq!(manager["FirmwareVersion"], json!("88.0002.1333"));
    let (_, inventory) = get(&http, &base, "/redfish/v1/UpdateService/FirmwareInventory").await;
    assert_eq!(
        members(&inventory),
        [
            "/redfish/v1/UpdateService/FirmwareInventory/FW_NVOS_0",
            "/redfish/v1/UpdateService/FirmwareInventory/FW_BMC_0"
        ]
    );
    let (_, nvos) = get(
        &http,
        &base,
        "/redfish/v1/UpdateService/FirmwareInventory/FW_NVOS_0",
    )
    .await;
    assert_eq!(nvos["Version"], json!("25.02.2141"));
    sim.shutdown().await;
}

#[tokio::test]
async fn power_shelf_tree_has_no_vendor_and_no_systems() {
    let sim = start(small(InitialPower::Off, 0.01)).await;
    let http = client();
    let base = bmc(&sim, "powershelf-02");
    let (_, root) = get(&http, &base, "/redfish/v1").await;
    assert_eq!(root["RedfishVersion"], json!("1.9.0"));
    assert!(root.get("Vendor").is_none(), "{root}");
    assert!(root.get("Product").is_none(), "{root}");
    let (_, systems) = get(&http, &base, "/redfish/v1/Systems").await;
    assert!(members(&systems).is_empty());
    let (status, _) = get(&http, &base, SYSTEM).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (_, shelf) = get(&http, &base, SHELF).await;
    assert_resource(&shelf, SHELF, "#Chassis.v1_25_0.Chassis");
    assert_eq!(shelf["ChassisType"], json!("Shelf"));
    assert_eq!(shelf["Manufacturer"], json!("LITE-ON TECHNOLOGY CORP."));
    assert_eq!(shelf["Model"], json!("PF-1333-7R"));
    assert_eq!(shelf["SerialNumber"], json!("SIM-rack-01-powershelf-02"));
    assert_eq!(shelf["PowerState"], json!("Off"));
    let reset = &shelf["Actions"]["#Chassis.Reset"];
    assert_eq!(reset["target"], json!(SHELF_RESET));
    assert_eq!(
        reset["ResetType@Redfish.AllowableValues"],
        json!(["On", "ForceOff"])
    );
    let subsystem_uri = format!("{SHELF}/PowerSubsystem");
    assert_eq!(shelf["PowerSubsystem"]["@odata.id"], json!(subsystem_uri));
    let (_, subsystem) = get(&http, &base, &subsystem_uri).await;
    assert_resource(
        &subsystem,
        &subsystem_uri,
        "#PowerSubsystem.v1_1_3.PowerSubsystem",
    );
    let (_, psus) = get(&http, &base, &format!("{subsystem_uri}/PowerSupplies")).await;
    let psus = members(&psus);
    assert_eq!(psus.len(), 6);
    let (_, psu) = get(&http, &base, &psus[5]).await;
    assert_resource(&psu, &psus[5], "#PowerSupply.v1_5_0.PowerSupply");
    assert_eq!(
        psu["Status"],
        json!({"State": "StandbyOffline", "Health": "OK"})
    );

    let (_, managers) = get(&http, &base, "/redfish/v1/Managers").await;
    assert_eq!(members(&managers), ["/redfish/v1/Managers/bmc"]);
    let (_, manager) = get(&http, &base, "/redfish/v1/Managers/bmc").await;
    assert_eq!(manager["FirmwareVersion"], json!("r1.3.9"));
    let (_, pmc) = get(
        &http,
        &base,
        "/redfish/v1/UpdateService/FirmwareInventory/FW_PMC_0",
    )
    .await;
    assert_eq!(pmc["Version"], json!("r1.3.9"));
    sim.shutdown().await;
}

/// Every string value of `key` in `v`, nested documents included.
fn values_of(v: &Value, key: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(fields) => {
            if let Some(Value::String(s)) = fields.get(key) {
                out.push(s.clone());
            }
            fields.values().for_each(|x| values_of(x, key, out));
        }
        Value::Array(items) => items.iter().for_each(|x| values_of(x, key, out)),
        _ => {}
    }
}

#[tokio::test]
async fn metadata_is_public_and_names_the_namespace_of_every_type_served() {
    let mut config = small(InitialPower::On, 0.01);
    config.profiles = vec!["multi-system".parse().unwrap()];
    let sim = start(config).await;
    let http = client();
    for component in ["compute-01", "nvswitch-01", "powershelf-01"] {
        let base = bmc(&sim, component);
        let response = http
            .get(format!("{base}/redfish/v1/$metadata"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{component}");
        assert_eq!(response.headers()["content-type"], "application/xml");
        let xml = response.text().await.unwrap();
        let (status, odata) = {
            let r = http
                .get(format!("{base}/redfish/v1/odata"))
                .send()
                .await
                .unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        };
        assert_eq!(status, StatusCode::OK);
        assert_eq!(odata["value"][0]["url"], "/redfish/v1/Systems", "{odata}");
        // Walk the tree from the root; every type's namespace is included.
        let mut seen = std::collections::BTreeSet::new();
        let mut queue = vec!["/redfish/v1".to_owned()];
        let mut types = Vec::new();
        while let Some(path) = queue.pop() {
            let path = path.split('#').next().unwrap_or_default().to_owned();
            if !seen.insert(path.clone()) || path.contains("/EventService/SSE") {
                continue;
            }
            let (status, body) = get(&http, &base, &path).await;
            if status != StatusCode::OK {
                continue;
            }
            values_of(&body, "@odata.type", &mut types);
            values_of(&body, "@odata.id", &mut queue);
        }
        assert!(seen.len() > 10, "{component}: walked only {seen:?}");
        for t in &types {
            let namespace = t
                .trim_start_matches('#')
                .rsplit_once('.')
                .map_or(t.as_str(), |(ns, _)| ns);
            assert!(
                xml.contains(&format!("<edmx:Include Namespace=\"{namespace}\"/>")),
                "{component}: $metadata does not include {namespace} (of {t})"
            );
        }
    }
    sim.shutdown().await;
}
