//! Firmware: `UpdateService.SimpleUpdate`, then the task and the firmware
//! inventory. An update to the version already installed succeeds at once.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::conn::Session;
use crate::kind::Kind;
use flow_hardware::{
    FirmwareJob, FirmwareRequest, FirmwareStart, FirmwareState, FirmwareStatus, HardwareError,
};

const INVENTORY: &str = "/redfish/v1/UpdateService/FirmwareInventory";

/// The BMC's UpdateService, through nv-redfish.
async fn update_service(
    session: &Session<'_>,
) -> Result<nv_redfish::update_service::UpdateService<crate::conn::Bmc>, HardwareError> {
    let target = session.target;
    session
        .root()
        .await?
        .update_service()
        .await
        .map_err(|e| crate::conn::errors::nv_error(target, "read the update service", &e))?
        .ok_or_else(|| HardwareError::OperationNotSupported {
            component: target.name.clone(),
            component_type: target.component_type,
            operation: "firmware".to_owned(),
            reason: "the BMC has no UpdateService".to_owned(),
        })
}

/// Installed versions by inventory member ID, through nv-redfish.
async fn versions(session: &Session<'_>) -> Result<BTreeMap<String, String>, HardwareError> {
    let target = session.target;
    let service = update_service(session).await?;
    let items = service
        .firmware_inventories()
        .await
        .map_err(|e| crate::conn::errors::nv_error(target, "read the firmware inventory", &e))?
        .unwrap_or_default();
    Ok(items
        .iter()
        .map(|item| {
            let id = item.raw().id.clone();
            let version = item.version().map(|v| v.to_string()).unwrap_or_default();
            (id, version)
        })
        .collect())
}

/// The inventory members a request updates: those it names, its
/// sub-targets' members, or the kind's main firmware.
fn members(
    session: &Session<'_>,
    kind: Kind,
    request: &FirmwareRequest,
) -> Result<Vec<String>, HardwareError> {
    let target = session.target;
    if !request.targets.is_empty() {
        Ok(request.targets.clone())
    } else if !request.sub_targets.is_empty() {
        request
            .sub_targets
            .iter()
            .map(|s| {
                kind.sub_target_member(*s)
                    .map(str::to_owned)
                    .ok_or_else(|| HardwareError::InvalidState {
                        component: target.name.clone(),
                        message: format!("has no {s} firmware to update"),
                    })
            })
            .collect()
    } else {
        Ok(vec![kind.primary_firmware().to_owned()])
    }
}

/// Task states of an update still under way.
const UNDER_WAY: &[&str] = &[
    "New",
    "Starting",
    "Running",
    "Pending",
    "Suspended",
    "Interrupted",
    "Service",
    "Stopping",
];

/// Whether two image URIs name the same bytes: the same URI, or two
/// workers' store URLs of one digest (`…/images/sha256/<hex>/…`, see
/// `services/worker/src/images/`): an update one worker started is found
/// by another.
fn same_image(a: &str, b: &str) -> bool {
    a == b || matches!((store_digest(a), store_digest(b)), (Some(x), Some(y)) if x == y)
}

fn store_digest(uri: &str) -> Option<&str> {
    let (_, rest) = uri.split_once("/images/sha256/")?;
    let hex = rest.get(..64)?;
    hex.bytes().all(|b| b.is_ascii_hexdigit()).then_some(hex)
}

/// The update of `request` the BMC runs now: a task under way whose
/// payload asked for the same image on the same members. Redfish keeps the
/// request a task came from (`Payload.JsonBody`); a BMC that keeps none
/// shows nothing here.
pub async fn in_progress(
    session: &Session<'_>,
    kind: Kind,
    request: &FirmwareRequest,
) -> Result<Option<FirmwareJob>, HardwareError> {
    let targets = members(session, kind, request)?;
    let uris: Vec<String> = targets.iter().map(|t| format!("{INVENTORY}/{t}")).collect();
    let tasks = session
        .get_json("/redfish/v1/TaskService/Tasks", "list the update tasks")
        .await?;
    for id in crate::discover::member_ids(&tasks) {
        let task = session.get_json(&id, "read an update task").await?;
        let state = task["TaskState"].as_str().unwrap_or_default();
        if !UNDER_WAY.contains(&state) {
            continue;
        }
        let Some(body) = task["Payload"]["JsonBody"]
            .as_str()
            .and_then(|b| serde_json::from_str::<Value>(b).ok())
        else {
            continue;
        };
        let mut asked = crate::discover::strings(&body["Targets"]);
        asked.sort();
        let mut wanted = uris.clone();
        wanted.sort();
        if body["ImageURI"]
            .as_str()
            .is_some_and(|uri| same_image(uri, &request.image_uri))
            && asked == wanted
        {
            tracing::info!(task = %id, image = %request.image_uri, "found the update under way");
            return Ok(Some(FirmwareJob {
                task: id,
                targets,
                expected_version: request.version.clone(),
            }));
        }
    }
    Ok(None)
}

/// Starts an update, or reports the version already installed (the
/// inventory's steady record, read just before).
pub async fn start(
    session: &Session<'_>,
    kind: Kind,
    request: &FirmwareRequest,
) -> Result<FirmwareStart, HardwareError> {
    let target = session.target;
    let targets = members(session, kind, request)?;
    let installed = versions(session).await?;
    for t in &targets {
        if !installed.contains_key(t) {
            return Err(HardwareError::InvalidState {
                component: target.name.clone(),
                message: format!(
                    "has no firmware inventory member {t:?} (it has {})",
                    installed.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            });
        }
    }
    if let Some(version) = &request.version
        && targets.iter().all(|t| installed.get(t) == Some(version))
    {
        return Ok(FirmwareStart::AlreadyInstalled {
            version: version.clone(),
        });
    }
    let service = update_service(session).await?;
    let uris = targets.iter().map(|t| format!("{INVENTORY}/{t}")).collect();
    let response = service
        .simple_update(
            request.image_uri.clone(),
            None,
            Some(uris),
            None,
            None,
            None,
            None,
            None,
            None,
        )
        .await
        .map_err(|e| crate::conn::errors::nv_error(target, "SimpleUpdate", &e))?;
    let task = match response {
        nv_redfish::core::ModificationResponse::Task(t) => t
            .task
            .map(|id| id.to_string())
            .unwrap_or_else(|| t.location.0.to_string()),
        _ => String::new(),
    };
    tracing::info!(task = %task, image = %request.image_uri, "firmware update started");
    Ok(FirmwareStart::Started(FirmwareJob {
        task,
        targets,
        expected_version: request.version.clone(),
    }))
}

fn task_state(state: &str) -> FirmwareState {
    match state {
        "Completed" => FirmwareState::Completed,
        "Exception" | "Killed" | "Cancelled" => FirmwareState::Failed,
        "Running" | "Stopping" | "Suspended" | "Interrupted" | "Cancelling" => {
            FirmwareState::Running
        }
        _ => FirmwareState::Queued,
    }
}

fn last_message(task: &Value) -> String {
    task["Messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["Message"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Reads progress: the task (when there is a job) and the inventory.
pub async fn status(
    session: &Session<'_>,
    job: Option<&FirmwareJob>,
) -> Result<FirmwareStatus, HardwareError> {
    let Some(job) = job.filter(|j| !j.task.is_empty()) else {
        let versions = versions(session).await?;
        let done = job.is_none_or(|j| expected_installed(j, &versions));
        return Ok(FirmwareStatus {
            state: if done {
                FirmwareState::Completed
            } else {
                FirmwareState::Running
            },
            percent: None,
            message: String::new(),
            versions,
        });
    };
    let task = session.get_json(&job.task, "read the update task").await?;
    let mut state = task_state(task["TaskState"].as_str().unwrap_or_default());
    let percent = task["PercentComplete"]
        .as_u64()
        .and_then(|p| u8::try_from(p.min(100)).ok());
    let mut message = last_message(&task);
    let versions = versions(session).await?;
    if state == FirmwareState::Completed && !expected_installed(job, &versions) {
        state = FirmwareState::Failed;
        message = format!(
            "the task completed but the inventory does not show version {} on {}",
            job.expected_version.as_deref().unwrap_or_default(),
            job.targets.join(", ")
        );
    }
    Ok(FirmwareStatus {
        state,
        percent,
        message,
        versions,
    })
}

fn expected_installed(job: &FirmwareJob, versions: &BTreeMap<String, String>) -> bool {
    match &job.expected_version {
        Some(v) => job.targets.iter().all(|t| versions.get(t) == Some(v)),
        None => true,
    }
}
