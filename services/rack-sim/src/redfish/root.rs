//! The version document, the service root and the collection shape.

use serde_json::{Value, json};

use super::View;
use super::route::ROOT;

/// `{"@odata.id": id}`.
pub(crate) fn link(id: impl Into<String>) -> Value {
    json!({ "@odata.id": id.into() })
}

/// A Redfish collection of `members` (their `@odata.id`s).
pub(crate) fn collection(
    id: &str,
    type_name: &str,
    name: &str,
    members: impl IntoIterator<Item = String>,
) -> Value {
    let members: Vec<Value> = members.into_iter().map(link).collect();
    json!({
        "@odata.id": id,
        "@odata.type": format!("#{type_name}.{type_name}"),
        "Name": name,
        "Members@odata.count": members.len(),
        "Members": members,
    })
}

/// `Status` of a resource that is enabled when `on`.
pub(crate) fn status(on: bool) -> Value {
    json!({ "State": if on { "Enabled" } else { "StandbyOffline" }, "Health": "OK" })
}

/// `GET /redfish`.
pub(crate) fn versions() -> Value {
    json!({ "v1": format!("{ROOT}/") })
}

/// `GET /redfish/v1`.
pub(crate) fn service_root(view: &View<'_>) -> Value {
    let profile = view.component.kind.profile();
    let mut root = json!({
        "@odata.id": ROOT,
        "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
        "Id": "RootService",
        "Name": "Root Service",
        "RedfishVersion": profile.redfish_version,
        "UUID": view.uuid,
        "Systems": link(format!("{ROOT}/Systems")),
        "Chassis": link(format!("{ROOT}/Chassis")),
        "Managers": link(format!("{ROOT}/Managers")),
        "UpdateService": link(format!("{ROOT}/UpdateService")),
        // The ServiceRoot schema names the link `Tasks` (the URI keeps the
        // resource's name).
        "Tasks": link(format!("{ROOT}/TaskService")),
        "SessionService": link(format!("{ROOT}/SessionService")),
        "Links": { "Sessions": link(format!("{ROOT}/SessionService/Sessions")) },
    });
    if let Some(fields) = root.as_object_mut() {
        if view.vendor == crate::vendor::VendorProfile::NoLinks {
            fields.remove("Links");
        }
        if let Some(vendor) = profile.vendor {
            fields.insert("Vendor".to_owned(), vendor.into());
        }
        if let Some(product) = profile.product {
            fields.insert("Product".to_owned(), product.into());
        }
        if profile.event_service {
            fields.insert(
                "EventService".to_owned(),
                link(format!("{ROOT}/EventService")),
            );
        }
    }
    root
}
