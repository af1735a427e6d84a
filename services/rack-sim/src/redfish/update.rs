//! `UpdateService`, its firmware inventory, and the SimpleUpdate action.

use serde_json::{Map, Value, json};

use super::View;
use super::error::RedfishError;
use super::root::{collection, link};
use super::route::ROOT;
use crate::model::{Profile, version_from_image_uri};

/// The SimpleUpdate action's name in errors.
const ACTION: &str = "UpdateService.SimpleUpdate";

/// Transfer protocols SimpleUpdate accepts.
const TRANSFER_PROTOCOLS: [&str; 2] = ["HTTP", "HTTPS"];

/// The URI of firmware inventory member `id`.
pub(crate) fn member_uri(id: &str) -> String {
    format!("{ROOT}/UpdateService/FirmwareInventory/{id}")
}

/// The SimpleUpdate action's target.
pub(crate) fn simple_update_target() -> String {
    format!("{ROOT}/UpdateService/Actions/{ACTION}")
}

/// `GET /redfish/v1/UpdateService`.
pub(crate) fn update_service() -> Value {
    json!({
        "@odata.id": format!("{ROOT}/UpdateService"),
        "@odata.type": "#UpdateService.v1_11_0.UpdateService",
        "Id": "UpdateService",
        "Name": "Update Service",
        "ServiceEnabled": true,
        "Status": { "State": "Enabled", "Health": "OK" },
        "FirmwareInventory": link(format!("{ROOT}/UpdateService/FirmwareInventory")),
        "Actions": {
            "#UpdateService.SimpleUpdate": {
                "target": simple_update_target(),
                "TransferProtocol@Redfish.AllowableValues": TRANSFER_PROTOCOLS,
            }
        },
    })
}

/// `GET /redfish/v1/UpdateService/FirmwareInventory`.
pub(crate) fn firmware_inventory(view: &View<'_>) -> Value {
    collection(
        &format!("{ROOT}/UpdateService/FirmwareInventory"),
        "SoftwareInventoryCollection",
        "Firmware Inventory Collection",
        view.component
            .firmware
            .members()
            .iter()
            .map(|m| member_uri(m.id)),
    )
}

/// `GET /redfish/v1/UpdateService/FirmwareInventory/<id>`.
pub(crate) fn firmware_member(view: &View<'_>, id: &str) -> Option<Value> {
    let c = view.component;
    let member = c.firmware.member(id)?;
    let updating = c
        .tasks
        .iter()
        .any(|t| t.is_running() && t.targets.contains(&member.id));
    Some(json!({
        "@odata.id": member_uri(member.id),
        "@odata.type": "#SoftwareInventory.v1_4_0.SoftwareInventory",
        "Id": member.id,
        "Name": member.name,
        "Version": member.version,
        "Updateable": true,
        "Status": {
            "State": if updating { "Updating" } else { "Enabled" },
            "Health": "OK",
        },
    }))
}

/// A parsed SimpleUpdate request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UpdateRequest {
    /// The image.
    pub(crate) image_uri: String,
    /// The version it installs.
    pub(crate) version: String,
    /// Members to update (the primary one if none was named).
    pub(crate) targets: Vec<&'static str>,
}

/// Parses a SimpleUpdate body for a BMC of this profile.
///
/// # Errors
///
/// 400s: `ActionParameterMissing` (no JSON object or no `ImageURI`),
/// `ActionParameterValueFormatError` (wrong JSON types, an image name
/// without a version), `ActionParameterValueNotInList` (unknown protocol or
/// target).
pub(crate) fn parse_request(body: &[u8], profile: &Profile) -> Result<UpdateRequest, RedfishError> {
    let missing = RedfishError::ParameterMissing {
        action: ACTION,
        parameter: "ImageURI",
    };
    let fields: Map<String, Value> = match serde_json::from_slice(body) {
        Ok(Value::Object(fields)) => fields,
        _ => return Err(missing),
    };
    let format_error = |parameter: &'static str, value: &Value| RedfishError::ValueFormat {
        action: ACTION,
        parameter,
        value: value.to_string(),
    };
    let image_uri = match fields.get("ImageURI") {
        None | Some(Value::Null) => return Err(missing),
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_owned(),
        Some(other) => return Err(format_error("ImageURI", other)),
    };
    match fields.get("TransferProtocol") {
        None | Some(Value::Null) => {}
        Some(Value::String(p)) if TRANSFER_PROTOCOLS.contains(&p.as_str()) => {}
        Some(other) => {
            return Err(RedfishError::ValueNotInList {
                action: ACTION,
                parameter: "TransferProtocol",
                value: other
                    .as_str()
                    .map_or_else(|| other.to_string(), str::to_owned),
            });
        }
    }
    let mut targets: Vec<&'static str> = Vec::new();
    match fields.get("Targets") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for item in items {
                let Some(uri) = item.as_str() else {
                    return Err(format_error("Targets", item));
                };
                let member = uri
                    .trim_end_matches('/')
                    .strip_prefix(&member_uri(""))
                    .and_then(|id| profile.firmware.iter().find(|f| f.id == id))
                    .ok_or_else(|| RedfishError::ValueNotInList {
                        action: ACTION,
                        parameter: "Targets",
                        value: uri.to_owned(),
                    })?;
                if !targets.contains(&member.id) {
                    targets.push(member.id);
                }
            }
        }
        Some(other) => return Err(format_error("Targets", other)),
    }
    if targets.is_empty() {
        targets.push(profile.primary_firmware);
    }
    let version = version_from_image_uri(&image_uri).ok_or_else(|| RedfishError::ValueFormat {
        action: ACTION,
        parameter: "ImageURI",
        value: image_uri.clone(),
    })?;
    Ok(UpdateRequest {
        image_uri,
        version,
        targets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ComponentKind;

    fn parse(body: Value) -> Result<UpdateRequest, RedfishError> {
        parse_request(
            body.to_string().as_bytes(),
            ComponentKind::NvSwitch.profile(),
        )
    }

    #[test]
    fn requests_name_their_targets_or_get_the_primary_one() {
        let r = parse(json!({"ImageURI": "http://img/nvos-25.02.2200.bin"})).expect("ok");
        assert_eq!(r.targets, ["FW_NVOS_0"]);
        assert_eq!(r.version, "25.02.2200");
        let r = parse(json!({
            "ImageURI": "http://img/bmc-88.0002.1400.bin",
            "TransferProtocol": "HTTP",
            "Targets": ["/redfish/v1/UpdateService/FirmwareInventory/FW_BMC_0"],
        }))
        .expect("ok");
        assert_eq!(r.targets, ["FW_BMC_0"]);
    }

    #[test]
    fn bad_requests_get_the_right_message() {
        let id = |r: Result<UpdateRequest, RedfishError>| {
            r.expect_err("refused").body()["error"]["code"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(id(parse(json!({}))), "Base.1.15.0.ActionParameterMissing");
        assert_eq!(
            id(parse_request(b"not json", ComponentKind::Compute.profile())),
            "Base.1.15.0.ActionParameterMissing"
        );
        assert_eq!(
            id(parse(
                json!({"ImageURI": "http://i/a-1.bin", "Targets": ["/redfish/v1/UpdateService/FirmwareInventory/UEFI"]})
            )),
            "Base.1.15.0.ActionParameterValueNotInList"
        );
        assert_eq!(
            id(parse(
                json!({"ImageURI": "http://i/a-1.bin", "TransferProtocol": "FTP"})
            )),
            "Base.1.15.0.ActionParameterValueNotInList"
        );
        assert_eq!(
            id(parse(json!({"ImageURI": 7}))),
            "Base.1.15.0.ActionParameterValueFormatError"
        );
        assert_eq!(
            id(parse(json!({"ImageURI": "http://i/"}))),
            "Base.1.15.0.ActionParameterValueFormatError"
        );
    }
}
