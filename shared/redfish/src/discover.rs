//! Discovery of the resource that carries a component's power: found once
//! per BMC through the service root's collection (or the default path when
//! the root does not link it), kept, and found again when it answers `404`.
//!
//! The rule (`docs/hardware.md`, "Which member carries power"): the member
//! named by the component's `resource_id` when it has one; otherwise the
//! first member, in collection order, with a `PowerState` and a reset
//! action, skipping systems whose `SystemType` says they are not the host
//! (`DPU`, `OS`, `Virtual`, `VirtuallyPartitioned`). The reset values come
//! from `ResetType@Redfish.AllowableValues` or, where the action points at
//! one, its `@Redfish.ActionInfo`.

use serde_json::Value;

use crate::conn::Session;
use crate::kind::{Kind, PowerResource};
use flow_hardware::HardwareError;

/// The Redfish service root.
pub use crate::conn::ROOT;

/// Systems that are not the host a tray's power operations mean.
const NOT_THE_HOST: &[&str] = &["DPU", "OS", "Virtual", "VirtuallyPartitioned"];

/// A BMC's power resource once discovered, kept on its handle
/// ([`crate::conn::BmcHandle::state`]).
#[derive(Debug, Default)]
pub(crate) struct KnownPower(std::sync::Mutex<Option<std::sync::Arc<PowerTarget>>>);

impl KnownPower {
    /// The resource, if discovered.
    pub(crate) fn get(&self) -> Option<std::sync::Arc<PowerTarget>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, power: Option<std::sync::Arc<PowerTarget>>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = power;
    }
}

/// Forgets what discovery found at the session's BMC, and the root it read:
/// the next call discovers again (the BMC answered `404` for the resource
/// it had: it renamed or rebuilt its resources).
pub(crate) fn forget(session: &Session<'_>) {
    session.handle.state::<KnownPower>().set(None);
    session.forget_root();
}

/// The resource that carries power, and its reset action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowerTarget {
    /// Its `@odata.id`.
    pub odata_id: String,
    /// The reset action's `target`.
    pub reset_target: String,
    /// The reset values it offers (empty: it says nothing).
    pub allowed: Vec<String>,
}

/// A member as read, before its reset values are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    odata_id: String,
    reset_target: String,
    allowed: Vec<String>,
    action_info: Option<String>,
}

/// The `@odata.id`s of a collection's `Members`, in order.
pub(crate) fn member_ids(collection: &Value) -> Vec<String> {
    collection["Members"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|v| v["@odata.id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The last path segment of an `@odata.id`.
pub(crate) fn last_segment(odata_id: &str) -> &str {
    odata_id
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default()
}

/// The strings of a JSON array (none: empty).
pub(crate) fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `json` (a member with `odata_id`) is the one `resource_id` names.
fn named(odata_id: &str, json: &Value, resource_id: &str) -> bool {
    json["Id"].as_str() == Some(resource_id) || last_segment(odata_id) == resource_id
}

/// The member's reset action, if it is a candidate under the rule.
pub(crate) fn candidate(
    odata_id: &str,
    json: &Value,
    resource: PowerResource,
    configured: bool,
) -> Option<Candidate> {
    let action = &json["Actions"][resource.action_key()];
    let target = action["target"].as_str()?;
    json["PowerState"].as_str()?;
    if !configured
        && resource == PowerResource::System
        && json["SystemType"]
            .as_str()
            .is_some_and(|t| NOT_THE_HOST.contains(&t))
    {
        return None;
    }
    Some(Candidate {
        odata_id: odata_id.to_owned(),
        reset_target: target.to_owned(),
        allowed: strings(&action["ResetType@Redfish.AllowableValues"]),
        action_info: action["@Redfish.ActionInfo"].as_str().map(str::to_owned),
    })
}

/// The `AllowableValues` of the `ResetType` parameter of an ActionInfo.
pub(crate) fn action_info_values(info: &Value) -> Vec<String> {
    info["Parameters"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["Name"] == "ResetType"))
        .map(|p| strings(&p["AllowableValues"]))
        .unwrap_or_default()
}

/// The collection to search: the root's link, or the default path.
pub(crate) fn collection_of(root: &Value, resource: PowerResource) -> String {
    let key = match resource {
        PowerResource::System => "Systems",
        PowerResource::Chassis => "Chassis",
    };
    root[key]["@odata.id"]
        .as_str()
        .map_or_else(|| resource.collection().to_owned(), str::to_owned)
}

/// Finds the power resource of the session's BMC (reading the root, the
/// collection, its members and an ActionInfo), returns it with the
/// member's JSON as read, and keeps it on the BMC's handle.
pub(crate) async fn discover(
    session: &Session<'_>,
    kind: Kind,
) -> Result<(PowerTarget, Value), HardwareError> {
    let target = session.target;
    let resource = kind.power_resource();
    let root = session.root_json().await?;
    let collection_id = collection_of(&root, resource);
    let collection = session
        .get_json(&collection_id, "list power resources")
        .await?;
    let mut members = member_ids(&collection);
    let configured = target.resource_id.as_deref();
    if let Some(want) = configured {
        // The member whose path ends in the id first: usually the only read.
        members.sort_by_key(|id| last_segment(id) != want);
    }
    let mut seen = Vec::new();
    for id in members {
        let json = session.get_json(&id, "read power state").await?;
        if let Some(want) = configured
            && !named(&id, &json, want)
        {
            seen.push(id);
            continue;
        }
        let Some(found) = candidate(&id, &json, resource, configured.is_some()) else {
            if configured.is_some() {
                return Err(no_power(
                    session,
                    format!(
                        "{id} (resource_id {:?}) has no PowerState and {} action",
                        configured.unwrap_or_default(),
                        resource.action_key()
                    ),
                ));
            }
            seen.push(id);
            continue;
        };
        let allowed = match (&found.action_info, found.allowed.is_empty()) {
            (Some(info), true) => action_info_values(
                &session
                    .get_json(info, "read the reset action's ActionInfo")
                    .await?,
            ),
            _ => found.allowed.clone(),
        };
        let power = PowerTarget {
            odata_id: found.odata_id,
            reset_target: found.reset_target,
            allowed,
        };
        session
            .handle
            .state::<KnownPower>()
            .set(Some(std::sync::Arc::new(power.clone())));
        tracing::debug!(resource = %power.odata_id, "power resource discovered");
        return Ok((power, json));
    }
    // DSP2046's power shelves live under PowerEquipment and are driven
    // through outlets and supplies, not a Chassis reset: say so.
    let equipment = if resource == PowerResource::Chassis && root.get("PowerEquipment").is_some() {
        "; the BMC has PowerEquipment (power shelves as DSP2046 models them), which Flow does not drive"
    } else {
        ""
    };
    Err(no_power(
        session,
        match configured {
            Some(want) => format!("no member of {collection_id} is named {want:?} (resource_id)"),
            None => format!(
                "no member of {collection_id} has a PowerState and a {} action{}{equipment}",
                resource.action_key(),
                if seen.is_empty() {
                    " (it has no members)".to_owned()
                } else {
                    format!(" (read {})", seen.join(", "))
                }
            ),
        },
    ))
}

fn no_power(session: &Session<'_>, detail: String) -> HardwareError {
    HardwareError::Protocol {
        component: session.target.name.clone(),
        action: "find the power resource".to_owned(),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn system(system_type: &str) -> Value {
        json!({"Id": "x", "SystemType": system_type, "PowerState": "Off", "Actions": {
            "#ComputerSystem.Reset": {"target": "/t", "ResetType@Redfish.AllowableValues": ["On"]}}})
    }

    #[test]
    fn the_host_is_chosen_and_a_dpu_skipped_unless_configured() {
        let r = PowerResource::System;
        assert!(candidate("/s/DPU_0", &system("DPU"), r, false).is_none());
        assert!(candidate("/s/DPU_0", &system("DPU"), r, true).is_some());
        let host = candidate("/s/1", &system("Physical"), r, false).unwrap();
        assert_eq!(host.reset_target, "/t");
        assert_eq!(host.allowed, vec!["On"]);
        // No PowerState or no action: not a candidate.
        assert!(candidate("/s/1", &json!({"Actions": {}}), r, false).is_none());
        assert!(named("/redfish/v1/Systems/abc", &json!({}), "abc"));
        assert!(named("/x/y", &json!({"Id": "abc"}), "abc"));
        assert!(!named("/x/y", &json!({"Id": "abd"}), "abc"));
    }

    #[test]
    fn reset_values_come_from_an_action_info_and_the_collection_from_the_root() {
        let info = json!({"Parameters": [{"Name": "Other"},
            {"Name": "ResetType", "AllowableValues": ["On", "ForceOff"]}]});
        assert_eq!(action_info_values(&info), vec!["On", "ForceOff"]);
        assert!(action_info_values(&json!({})).is_empty());
        let root = json!({"Systems": {"@odata.id": "/redfish/v1/Systems"}});
        assert_eq!(
            collection_of(&root, PowerResource::System),
            "/redfish/v1/Systems"
        );
        // A root without the link: the default path.
        assert_eq!(
            collection_of(&json!({}), PowerResource::Chassis),
            "/redfish/v1/Chassis"
        );
        let cand = candidate(
            "/c/1",
            &json!({"PowerState": "On", "Actions": {"#Chassis.Reset": {"target": "/c/1/r",
                "@Redfish.ActionInfo": "/c/1/ResetActionInfo"}}}),
            PowerResource::Chassis,
            false,
        )
        .unwrap();
        assert_eq!(cand.action_info.as_deref(), Some("/c/1/ResetActionInfo"));
        assert!(cand.allowed.is_empty());
    }
}
