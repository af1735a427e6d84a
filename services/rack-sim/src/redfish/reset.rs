//! The reset actions: `ComputerSystem.Reset` on a tray's system and
//! `Chassis.Reset` on a power shelf.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::View;
use super::error::RedfishError;
use super::route::ROOT;
use crate::model::{PowerResource, Profile, ResetType};
use crate::vendor::VendorProfile;

/// The URI of the power resource (the tray's system, the shelf's chassis).
pub(crate) fn resource_uri(view: &View<'_>) -> String {
    match view.component.kind.profile().power_resource {
        PowerResource::System => format!(
            "{ROOT}/Systems/{}",
            view.ids.system.as_deref().unwrap_or_default()
        ),
        PowerResource::Chassis => format!("{ROOT}/Chassis/{}", view.ids.chassis),
    }
}

/// The reset action's entry in the resource's `Actions`: its target and
/// its values, listed inline or (`action-info`) through an ActionInfo.
pub(crate) fn action(view: &View<'_>, resets: &[ResetType]) -> Value {
    let uri = resource_uri(view);
    let target = format!(
        "{uri}/Actions/{}",
        action_name(view.component.kind.profile())
    );
    let allowed: Vec<&str> = resets.iter().map(|r| r.as_str()).collect();
    match view.vendor {
        VendorProfile::ActionInfo => json!({
            "target": target,
            "@Redfish.ActionInfo": format!("{uri}/ResetActionInfo"),
        }),
        _ => json!({
            "target": target,
            "ResetType@Redfish.AllowableValues": allowed,
        }),
    }
}

/// `GET …/ResetActionInfo` (`action-info`): the reset's parameters.
pub(crate) fn action_info(view: &View<'_>) -> Value {
    let allowed: Vec<&str> = view
        .component
        .kind
        .profile()
        .resets
        .iter()
        .map(|r| r.as_str())
        .collect();
    json!({
        "@odata.id": format!("{}/ResetActionInfo", resource_uri(view)),
        "@odata.type": "#ActionInfo.v1_4_0.ActionInfo",
        "Id": "ResetActionInfo",
        "Name": "Reset Action Info",
        "Parameters": [{
            "Name": "ResetType",
            "Required": true,
            "DataType": "String",
            "AllowableValues": allowed,
        }],
    })
}

/// The answer to an accepted reset: `204`, or under `reset-200` a `200`
/// with a `Base.Success` message.
pub(crate) fn accepted(vendor: VendorProfile) -> Response {
    match vendor {
        VendorProfile::Reset200 => super::json_response(
            StatusCode::OK,
            &json!({
                "@Message.ExtendedInfo": [{
                    "@odata.type": "#Message.v1_1_1.Message",
                    "MessageId": "Base.1.15.0.Success",
                    "Message": "The request completed successfully.",
                    "MessageArgs": [],
                    "MessageSeverity": "OK",
                    "Resolution": "None",
                }]
            }),
        ),
        _ => StatusCode::NO_CONTENT.into_response(),
    }
}

/// The action's name, as errors cite it.
pub(crate) fn action_name(profile: &Profile) -> &'static str {
    match profile.power_resource {
        PowerResource::System => "ComputerSystem.Reset",
        PowerResource::Chassis => "Chassis.Reset",
    }
}

/// Parses `{"ResetType": "<value>"}` against the allowable values.
///
/// # Errors
///
/// `ActionParameterMissing` for a body that is not a JSON object or has no
/// `ResetType`; `ActionParameterValueNotInList` for any other value that is
/// not allowed.
pub(crate) fn parse_reset(body: &[u8], profile: &Profile) -> Result<ResetType, RedfishError> {
    let action = action_name(profile);
    let missing = RedfishError::ParameterMissing {
        action,
        parameter: "ResetType",
    };
    let fields = match serde_json::from_slice(body) {
        Ok(Value::Object(fields)) => fields,
        _ => return Err(missing),
    };
    let not_in_list = |value: String| RedfishError::ValueNotInList {
        action,
        parameter: "ResetType",
        value,
    };
    match fields.get("ResetType") {
        None | Some(Value::Null) => Err(missing),
        Some(Value::String(value)) => value
            .parse::<ResetType>()
            .ok()
            .filter(|r| profile.resets.contains(r))
            .ok_or_else(|| not_in_list(value.clone())),
        Some(other) => Err(not_in_list(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ComponentKind;

    #[test]
    fn values_are_checked_against_the_kind() {
        let shelf = ComponentKind::PowerShelf.profile();
        let tray = ComponentKind::Compute.profile();
        assert_eq!(
            parse_reset(br#"{"ResetType":"On"}"#, shelf),
            Ok(ResetType::On)
        );
        assert!(matches!(
            parse_reset(br#"{"ResetType":"PowerCycle"}"#, shelf),
            Err(RedfishError::ValueNotInList { .. })
        ));
        assert_eq!(
            parse_reset(br#"{"ResetType":"PowerCycle"}"#, tray),
            Ok(ResetType::PowerCycle)
        );
        assert!(matches!(
            parse_reset(br#"{"ResetType":"Nmi"}"#, tray),
            Err(RedfishError::ValueNotInList { .. })
        ));
        assert!(matches!(
            parse_reset(b"", tray),
            Err(RedfishError::ParameterMissing { .. })
        ));
        assert!(matches!(
            parse_reset(br#"{"Other":1}"#, tray),
            Err(RedfishError::ParameterMissing { .. })
        ));
    }
}
