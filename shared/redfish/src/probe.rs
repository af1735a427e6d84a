//! `flow bmc <url> probe`: what Flow finds at a BMC — its service root,
//! systems, chassis, reset types, update service, session support and
//! events — read as plain JSON with the rules the managers use
//! (`discover`), and which of the simulator's vendor profiles it resembles
//! (`services/rack-sim/src/vendor.rs`).

use serde::Serialize;
use serde_json::Value;

use crate::conn::Session;
use crate::discover::{
    action_info_values, candidate, collection_of, last_segment, member_ids, strings,
};
use crate::kind::{Kind, PowerResource};
use flow_hardware::HardwareError;

/// A member of `Systems` or `Chassis`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Member {
    /// Its `@odata.id`.
    pub odata_id: String,
    /// `SystemType` or `ChassisType`.
    pub kind: Option<String>,
    /// `PowerState`.
    pub power_state: Option<String>,
    /// The reset values it offers (inline or through its ActionInfo);
    /// `None`: no reset action.
    pub reset_types: Option<Vec<String>>,
    /// Whether the reset values came from an ActionInfo.
    pub action_info: bool,
}

/// What Flow found at a BMC.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Probe {
    /// `Vendor` of the service root.
    pub vendor: Option<String>,
    /// `Product`.
    pub product: Option<String>,
    /// `RedfishVersion`.
    pub redfish_version: Option<String>,
    /// Whether the root has `Links` (the schema requires it).
    pub root_links: bool,
    /// Systems, in collection order.
    pub systems: Vec<Member>,
    /// Chassis, in collection order.
    pub chassis: Vec<Member>,
    /// The member that carries power for the kind probed, by Flow's rule.
    pub power_resource: Option<String>,
    /// `UpdateService.SimpleUpdate` is offered.
    pub simple_update: bool,
    /// Firmware inventory member ids.
    pub firmware: Vec<String>,
    /// Sessions: where the root links them and whether that answers.
    pub sessions: String,
    /// How Flow's requests authenticated: `session` (a Redfish session
    /// login) or `basic` (HTTP Basic: the credential says so, or the BMC
    /// has no SessionService).
    pub auth: &'static str,
    /// Whether a read with HTTP Basic is accepted (`false`: the BMC takes
    /// only sessions).
    pub basic_accepted: bool,
    /// The EventService's `ServerSentEventUri`, if it has one.
    pub events: Option<String>,
    /// The simulator profile it resembles most.
    pub resembles: &'static str,
}

/// Whether an id is a UUID (8-4-4-4-12 hexadecimal digits).
fn is_uuid(id: &str) -> bool {
    let parts: Vec<&str> = id.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The simulator profile findings resemble: the first deviation seen.
/// (`reset-200` cannot be told without a reset, which a probe never sends.)
pub fn resembles(probe: &Probe) -> &'static str {
    let members = || probe.systems.iter().chain(&probe.chassis);
    if !probe.root_links {
        "no-links"
    } else if members().any(|m| is_uuid(last_segment(&m.odata_id))) {
        "uuid-ids"
    } else if probe.systems.len() > 1 {
        "multi-system"
    } else if members().any(|m| m.action_info) {
        "action-info"
    } else if !probe.basic_accepted {
        "session-only"
    } else {
        "standard"
    }
}

/// The members of a collection, and the first that would carry power by
/// the managers' rule.
async fn members(
    session: &Session<'_>,
    collection: &str,
    resource: PowerResource,
    kind_key: &str,
) -> Result<(Vec<Member>, Option<String>), HardwareError> {
    let list = match session.get_json(collection, "list members").await {
        Ok(list) => list,
        Err(HardwareError::Http { status: 404, .. }) => return Ok((Vec::new(), None)),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    let mut power = None;
    for id in member_ids(&list) {
        let json = session.get_json(&id, "read a member").await?;
        if power.is_none() && candidate(&id, &json, resource, false).is_some() {
            power = Some(id.clone());
        }
        let action = &json["Actions"][resource.action_key()];
        let info = action["@Redfish.ActionInfo"].as_str();
        let inline = action["ResetType@Redfish.AllowableValues"].as_array();
        let reset_types = match (action.is_object(), inline, info) {
            (false, _, _) => None,
            (true, Some(_), _) => Some(strings(&action["ResetType@Redfish.AllowableValues"])),
            (true, None, Some(info)) => Some(action_info_values(
                &session.get_json(info, "read an ActionInfo").await?,
            )),
            (true, None, None) => Some(Vec::new()),
        };
        out.push(Member {
            kind: json[kind_key].as_str().map(str::to_owned),
            power_state: json["PowerState"].as_str().map(str::to_owned),
            action_info: inline.is_none() && info.is_some(),
            reset_types,
            odata_id: id,
        });
    }
    Ok((out, power))
}

/// Where the root links sessions, and whether that link answers.
async fn sessions(session: &Session<'_>, root: &Value) -> String {
    let link = root["Links"]["Sessions"]["@odata.id"]
        .as_str()
        .or_else(|| root["SessionService"]["@odata.id"].as_str());
    match link {
        None => "none linked".to_owned(),
        Some(uri) => match session.get_json(uri, "read the sessions").await {
            Ok(_) => uri.to_owned(),
            Err(HardwareError::Http { status, .. }) => {
                format!("{uri} linked, but it answers HTTP {status}")
            }
            Err(e) => format!("{uri} linked, but unreadable: {e}"),
        },
    }
}

/// Reads what [`Probe`] lists from the session's BMC, for a component of
/// `kind`.
pub(crate) async fn probe(session: &Session<'_>, kind: Kind) -> Result<Probe, HardwareError> {
    let root = session.root_json().await?;
    let text = |k: &str| root[k].as_str().map(str::to_owned);
    let (systems, system_power) = members(
        session,
        &collection_of(&root, PowerResource::System),
        PowerResource::System,
        "SystemType",
    )
    .await?;
    let (chassis, chassis_power) = members(
        session,
        &collection_of(&root, PowerResource::Chassis),
        PowerResource::Chassis,
        "ChassisType",
    )
    .await?;
    let power_resource = match kind.power_resource() {
        PowerResource::System => system_power,
        PowerResource::Chassis => chassis_power,
    };
    let update_id = root["UpdateService"]["@odata.id"]
        .as_str()
        .unwrap_or("/redfish/v1/UpdateService")
        .to_owned();
    let (simple_update, firmware) = match session
        .get_json(&update_id, "read the update service")
        .await
    {
        Ok(service) => {
            let inventory = service["FirmwareInventory"]["@odata.id"]
                .as_str()
                .map(str::to_owned);
            let firmware = match inventory {
                Some(inv) => member_ids(
                    &session
                        .get_json(&inv, "list the firmware inventory")
                        .await?,
                )
                .iter()
                .map(|id| last_segment(id).to_owned())
                .collect(),
                None => Vec::new(),
            };
            (
                service["Actions"]["#UpdateService.SimpleUpdate"]["target"].is_string(),
                firmware,
            )
        }
        Err(HardwareError::Http { status: 404, .. }) => (false, Vec::new()),
        Err(e) => return Err(e),
    };
    let events = match root["EventService"]["@odata.id"].as_str() {
        Some(id) => session.get_json(id, "read the event service").await?["ServerSentEventUri"]
            .as_str()
            .map(str::to_owned),
        None => None,
    };
    let mut found = Probe {
        vendor: text("Vendor"),
        product: text("Product"),
        redfish_version: text("RedfishVersion"),
        root_links: root.get("Links").is_some(),
        systems,
        chassis,
        power_resource,
        simple_update,
        firmware,
        sessions: sessions(session, &root).await,
        auth: session.auth_in_use().await,
        basic_accepted: session
            .basic_status(&collection_of(&root, kind.power_resource()))
            .await?
            != 401,
        events,
        resembles: "standard",
    };
    found.resembles = resembles(&found);
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_told_from_names() {
        assert!(is_uuid("f1000000-5140-4000-8000-000000000001"));
        assert!(!is_uuid("System_0"));
        assert!(!is_uuid("f1000000-5140-4000-8000-00000000000g"));
        assert_eq!(last_segment("/redfish/v1/Systems/abc/"), "abc");
    }
}
