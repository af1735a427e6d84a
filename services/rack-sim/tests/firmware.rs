//! SimpleUpdate, tasks and inventory versions.

mod common;

use common::*;
use flow_rack_sim::{CommandKind, FaultKind, FaultSpec, InitialPower};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

const SIMPLE_UPDATE: &str = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate";
const INVENTORY: &str = "/redfish/v1/UpdateService/FirmwareInventory";

/// Posts an update and returns the task's path from `Location`.
async fn update(http: &Client, base: &str, body: Value) -> (String, Value) {
    let response = http
        .post(format!("{base}{SIMPLE_UPDATE}"))
        .basic_auth(USER, Some(PASSWORD))
        .json(&body)
        .send()
        .await
        .expect("SimpleUpdate");
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let location = response.headers()["location"]
        .to_str()
        .expect("Location")
        .to_owned();
    let task: Value = response.json().await.expect("task body");
    (location, task)
}

/// Polls a task until it leaves New/Running; returns the last body.
async fn finished(http: &Client, base: &str, location: &str) -> Value {
    eventually("task finished", || async {
        let (status, task) = get(http, base, location).await;
        assert_eq!(status, StatusCode::OK);
        let state = task["TaskState"].as_str().unwrap_or_default();
        (state != "New" && state != "Running").then_some(task)
    })
    .await
}

#[tokio::test]
async fn an_update_runs_to_completion_and_changes_the_version() {
    let mut config = small(InitialPower::On, 0.01);
    // These images are on no origin: the update API alone.
    config.fetch_images = false;
    // 100 s × 0.01 = 1 s per update: time to see it running.
    config.timings.firmware_update = std::time::Duration::from_secs(100);
    let sim = start(config).await;
    let http = client();
    let base = bmc(&sim, "compute-01");
    let (location, task) = update(
        &http,
        &base,
        json!({"ImageURI": "http://images/compute-bmc-25.09-1.bin", "TransferProtocol": "HTTP"}),
    )
    .await;
    assert_eq!(location, "/redfish/v1/TaskService/Tasks/1");
    assert_eq!(task["@odata.id"], json!(location));
    assert_eq!(task["@odata.type"], json!("#Task.v1_7_0.Task"));
    assert_eq!(task["Id"], json!("1"));
    assert_eq!(task["TaskState"], json!("New"));
    assert!(task["StartTime"].is_string());

    let (status, body) = get(&http, &base, &location).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["TaskState"], json!("Running"), "{body}");
    assert_eq!(
        body["Messages"][0]["MessageId"],
        json!("Update.1.0.UpdateInProgress")
    );
    let (_, member) = get(&http, &base, &format!("{INVENTORY}/FW_BMC_0")).await;
    assert_eq!(member["Status"]["State"], json!("Updating"));

    let done = finished(&http, &base, &location).await;
    assert_eq!(done["TaskState"], json!("Completed"), "{done}");
    assert_eq!(done["TaskStatus"], json!("OK"));
    assert_eq!(done["PercentComplete"], json!(100));
    assert!(done["EndTime"].is_string());
    assert_eq!(
        done["Messages"][0]["MessageId"],
        json!("Update.1.0.UpdateSuccessful")
    );

    let (_, member) = get(&http, &base, &format!("{INVENTORY}/FW_BMC_0")).await;
    assert_eq!(member["Version"], json!("25.09-1"));
    let (_, uefi) = get(&http, &base, &format!("{INVENTORY}/UEFI")).await;
    assert_eq!(
        uefi["Version"],
        json!("02.04.12"),
        "untargeted members keep their version"
    );
    let (_, manager) = get(&http, &base, "/redfish/v1/Managers/BMC_0").await;
    assert_eq!(manager["FirmwareVersion"], json!("25.09-1"));

    // Targets and ?version= pick member and version; ids increase.
    let (location, _) = update(
        &http,
        &base,
        json!({
            "ImageURI": "https://images/uefi.bin?version=02.05.00",
            "Targets": ["/redfish/v1/UpdateService/FirmwareInventory/UEFI"],
        }),
    )
    .await;
    assert_eq!(location, "/redfish/v1/TaskService/Tasks/2");
    let done = finished(&http, &base, &location).await;
    assert_eq!(done["TaskState"], json!("Completed"));
    let (_, uefi) = get(&http, &base, &format!("{INVENTORY}/UEFI")).await;
    assert_eq!(uefi["Version"], json!("02.05.00"));
    let (_, tasks) = get(&http, &base, "/redfish/v1/TaskService/Tasks").await;
    assert_eq!(tasks["Members@odata.count"], json!(2));

    let state = sim.state();
    let tray = state.component("rack-01", "compute-01").expect("tray");
    assert_eq!(tray.firmware["FW_BMC_0"], "25.09-1");
    assert_eq!(tray.command_count(CommandKind::Update), 2);
    assert_eq!(
        tray.commands[0].value,
        "http://images/compute-bmc-25.09-1.bin"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn updates_work_with_the_host_off_and_on_shelves() {
    let sim = start(flow_rack_sim::SimConfig {
        fetch_images: false,
        ..small(InitialPower::On, 0.01)
    })
    .await;
    let http = client();
    let tray = bmc(&sim, "nvswitch-01");
    let (status, _) = post(&http, &tray, SYSTEM_RESET, json!({"ResetType": "ForceOff"})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (location, _) = update(
        &http,
        &tray,
        json!({"ImageURI": "http://images/nvos_25.02.2200.fwpkg"}),
    )
    .await;
    assert_eq!(
        finished(&http, &tray, &location).await["TaskState"],
        json!("Completed")
    );
    let (_, nvos) = get(&http, &tray, &format!("{INVENTORY}/FW_NVOS_0")).await;
    assert_eq!(nvos["Version"], json!("25.02.2200"));

    let shelf = bmc(&sim, "powershelf-01");
    let (location, _) = update(
        &http,
        &shelf,
        json!({"ImageURI": "http://images/pmc-r1.4.0.tar.gz"}),
    )
    .await;
    assert_eq!(
        finished(&http, &shelf, &location).await["TaskState"],
        json!("Completed")
    );
    let (_, manager) = get(&http, &shelf, "/redfish/v1/Managers/bmc").await;
    assert_eq!(manager["FirmwareVersion"], json!("r1.4.0"));
    sim.shutdown().await;
}

#[tokio::test]
async fn bad_update_requests_are_400_and_a_busy_member_409() {
    let mut config = small(InitialPower::On, 0.01);
    // These images are on no origin: the update API alone.
    config.fetch_images = false;
    config.timings.firmware_update = std::time::Duration::from_secs(1000);
    let sim = start(config).await;
    let http = client();
    let base = bmc(&sim, "compute-02");
    let (status, error) = post(
        &http,
        &base,
        SIMPLE_UPDATE,
        json!({"TransferProtocol": "HTTP"}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(message_id(&error), "Base.1.15.0.ActionParameterMissing");
    let (status, error) = post(
        &http,
        &base,
        SIMPLE_UPDATE,
        json!({"ImageURI": "http://i/bmc-1.0.bin", "Targets": ["/redfish/v1/UpdateService/FirmwareInventory/FW_NVOS_0"]}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        message_id(&error),
        "Base.1.15.0.ActionParameterValueNotInList"
    );

    let (_, _) = update(&http, &base, json!({"ImageURI": "http://i/bmc-1.0.bin"})).await;
    let (status, error) = post(
        &http,
        &base,
        SIMPLE_UPDATE,
        json!({"ImageURI": "http://i/bmc-1.1.bin"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(message_id(&error), "Base.1.15.0.ResourceInUse");
    sim.shutdown().await;
}

#[tokio::test]
async fn an_injected_failure_ends_the_task_in_exception() {
    let sim = start(flow_rack_sim::SimConfig {
        fetch_images: false,
        ..small(InitialPower::On, 0.01)
    })
    .await;
    sim.set_fault(FaultSpec {
        target: "rack-01/compute-01".into(),
        kind: FaultKind::FirmwareFails {
            message: "signature check failed".into(),
        },
    })
    .expect("fault");
    let http = client();
    let base = bmc(&sim, "compute-01");
    let (location, _) = update(
        &http,
        &base,
        json!({"ImageURI": "http://i/compute-bmc-26.01.bin"}),
    )
    .await;
    let done = finished(&http, &base, &location).await;
    assert_eq!(done["TaskState"], json!("Exception"), "{done}");
    assert_eq!(done["TaskStatus"], json!("Critical"));
    assert_eq!(done["PercentComplete"], json!(50));
    let message = &done["Messages"][0];
    assert_eq!(message["MessageId"], json!("Update.1.0.ApplyFailed"));
    assert!(
        message["Message"]
            .as_str()
            .unwrap_or_default()
            .contains("signature check failed"),
        "{message}"
    );
    let (_, member) = get(&http, &base, &format!("{INVENTORY}/FW_BMC_0")).await;
    assert_eq!(member["Version"], json!("25.06-2"));
    sim.shutdown().await;
}

#[tokio::test]
async fn losing_shelf_power_fails_a_running_update() {
    let mut config = small(InitialPower::On, 0.01);
    // These images are on no origin: the update API alone.
    config.fetch_images = false;
    config.timings.firmware_update = std::time::Duration::from_secs(300);
    let sim = start(config).await;
    let http = client();
    let base = bmc(&sim, "compute-01");
    let (location, _) = update(
        &http,
        &base,
        json!({"ImageURI": "http://i/compute-bmc-26.01.bin"}),
    )
    .await;
    for shelf in ["powershelf-01", "powershelf-02"] {
        let (status, _) = post(
            &http,
            &bmc(&sim, shelf),
            SHELF_RESET,
            json!({"ResetType": "ForceOff"}),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
    }
    eventually("tray down", || async {
        refused(&http, &base).await.then_some(())
    })
    .await;
    for shelf in ["powershelf-01", "powershelf-02"] {
        let (status, _) = post(
            &http,
            &bmc(&sim, shelf),
            SHELF_RESET,
            json!({"ResetType": "On"}),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
    }
    eventually("tray back", || async {
        (!refused(&http, &base).await).then_some(())
    })
    .await;
    let (_, task) = get(&http, &base, &location).await;
    assert_eq!(task["TaskState"], json!("Exception"), "{task}");
    assert!(
        task["Messages"][0]["Message"]
            .as_str()
            .unwrap_or_default()
            .contains("power lost")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_bmc_fetches_the_image_hashes_what_it_got_and_fails_an_update_it_cannot_fetch() {
    let sim = start(small(InitialPower::On, 0.01)).await;
    let http = client();
    let admin = sim.admin_url();
    let bytes = b"compute bmc firmware 26.05\n".repeat(100);
    let put: Value = http
        .put(format!("{admin}/admin/v1/files/fw/compute-bmc-26.05.bin"))
        .body(bytes.clone())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let digest = put["digest"].as_str().unwrap().to_owned();
    assert_eq!(digest, flow_rack_sim::origin::sha256(&bytes));
    assert_eq!(put["bytes"], bytes.len());

    let tray = bmc(&sim, "compute-01");
    let image = format!("{admin}/files/fw/compute-bmc-26.05.bin");
    let (location, _) = update(&http, &tray, json!({"ImageURI": image})).await;
    let task = finished(&http, &tray, &location).await;
    assert_eq!(task["TaskState"], "Completed", "{task}");
    let state = sim.state();
    let c = state.component("rack-01", "compute-01").unwrap();
    let last = c.commands.last().unwrap();
    assert_eq!(last.value, image);
    assert_eq!(last.digest.as_deref(), Some(digest.as_str()), "{last:?}");
    assert_eq!(last.bytes, Some(bytes.len() as u64));
    assert_eq!(c.firmware["FW_BMC_0"], "26.05");

    // An image no one serves: accepted, then the task fails saying why,
    // and the version stays.
    let missing = format!("{admin}/files/fw/compute-bmc-26.06.bin");
    let (location, _) = update(&http, &tray, json!({"ImageURI": missing})).await;
    let task = finished(&http, &tray, &location).await;
    assert_eq!(task["TaskState"], "Exception", "{task}");
    assert!(
        task.to_string().contains("could not fetch the image") && task.to_string().contains("404"),
        "{task}"
    );
    let state = sim.state();
    let c = state.component("rack-01", "compute-01").unwrap();
    assert_eq!(c.commands.last().unwrap().digest, None);
    assert_eq!(c.firmware["FW_BMC_0"], "26.05");
    sim.shutdown().await;
}
