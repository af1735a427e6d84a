//! The reset actions: `ComputerSystem.Reset` on a tray's system and
//! `Chassis.Reset` on a power shelf.

use serde_json::Value;

use super::error::RedfishError;
use crate::model::{PowerResource, Profile, ResetType};

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
