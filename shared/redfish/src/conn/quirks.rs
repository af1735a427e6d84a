//! Flow's repairs of what real firmware leaves out, applied by nv-redfish's
//! quirks support to the documents Flow reads through it.

use nv_redfish::bmc_http::HttpBmc;
use nv_redfish::bmc_http::reqwest::Client as NvClient;
use nv_redfish::quirks::{IdPattern, Match, RulesBmc, UserRule};
use serde_json::Value;

use super::SESSIONS_PATH;

/// The nv-redfish transport Flow uses: HTTP, with Flow's repairs of what
/// real firmware leaves out ([`repairs`]).
pub type Bmc = RulesBmc<HttpBmc<NvClient>>;

/// The repairs Flow asks of nv-redfish for documents it reads through it
/// (its quirks support), each for a property Flow does not use that real
/// firmware gets wrong (`docs/hardware.md`, "What Flow tolerates"):
///
/// * a service root without `Links` (required by the schema; missing on
///   some firmware) is read as one with the default session link. The root
///   is matched by its type and, for services that name types the pre-1.0
///   way (`#ServiceRoot.1.0.0.ServiceRoot`), by its `@odata.id`;
/// * a firmware inventory member whose `ReleaseDate` is not an RFC 3339
///   date-time with an offset (`2017-08-22T12:00:00`, `00:00:00Z`) is read
///   without it: one bad date would otherwise fail the whole inventory.
pub(super) fn repairs() -> Vec<UserRule> {
    vec![
        UserRule::new(
            "service root without Links",
            Match::Type("ServiceRoot".to_owned()),
            add_links,
        ),
        UserRule::new(
            "service root without Links (by path)",
            Match::Id(IdPattern::new("/redfish/v1")),
            add_links,
        ),
        UserRule::new(
            "service root without Links (by path, trailing slash)",
            Match::Id(IdPattern::new("/redfish/v1/")),
            add_links,
        ),
        UserRule::new(
            "firmware ReleaseDate that is no RFC 3339 date-time",
            Match::Type("SoftwareInventory".to_owned()),
            drop_bad_release_date,
        ),
        UserRule::new(
            "firmware ReleaseDate that is no RFC 3339 date-time (by path)",
            Match::Id(IdPattern::new(
                "/redfish/v1/UpdateService/FirmwareInventory/*",
            )),
            drop_bad_release_date,
        ),
    ]
}

/// A service root without `Links` gets the default session link.
pub(super) fn add_links(mut root: Value) -> Value {
    if let Some(fields) = root.as_object_mut()
        && !fields.contains_key("Links")
    {
        fields.insert(
            "Links".to_owned(),
            serde_json::json!({ "Sessions": { "@odata.id": SESSIONS_PATH } }),
        );
    }
    root
}

/// A `ReleaseDate` that is not an RFC 3339 date-time is dropped.
pub(super) fn drop_bad_release_date(mut member: Value) -> Value {
    if let Some(fields) = member.as_object_mut()
        && fields.get("ReleaseDate").is_some_and(|d| !is_rfc3339(d))
    {
        fields.remove("ReleaseDate");
    }
    member
}

/// Whether a JSON value is an RFC 3339 date-time with an offset (what the
/// schema's `Edm.DateTimeOffset` asks for).
pub(super) fn is_rfc3339(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).is_ok()
    })
}
