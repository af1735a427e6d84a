//! Protocol headers (DSP0266 "Request headers" and "Response headers"):
//! the request's `OData-Version` precondition; `OData-Version` and
//! `Cache-Control` on every answer; `Allow` (the methods of the URI) and
//! `Link: <JSON schema>; rel=describedby` (the schema of its
//! `@odata.type`) on every successful read.

use axum::http::{HeaderMap, HeaderValue, header};
use serde_json::Value;

use super::error::RedfishError;
use super::metadata::DMTF_SCHEMAS;
use super::route::Route;

/// The OData version every BMC speaks.
const ODATA_VERSION: &str = "4.0";
/// Nothing a BMC answers may be reused: power states, tasks and sessions
/// change under it, and login answers carry a token.
const CACHE_CONTROL: &str = "no-store";

/// Refuses a request whose `OData-Version` is not [`ODATA_VERSION`] (absent
/// is fine).
pub(crate) fn check_odata_version(request: &HeaderMap) -> Result<(), RedfishError> {
    match request.get("OData-Version") {
        Some(value) if value.as_bytes() != ODATA_VERSION.as_bytes() => {
            Err(RedfishError::UnsupportedODataVersion {
                version: String::from_utf8_lossy(value.as_bytes()).into_owned(),
            })
        }
        _ => Ok(()),
    }
}

/// `OData-Version` and `Cache-Control`, for every answer.
pub(crate) fn protocol(headers: &mut HeaderMap) {
    headers.insert("OData-Version", HeaderValue::from_static(ODATA_VERSION));
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
}

/// `Allow` and, for a typed `body`, `Link`: for a successful read of `route`.
pub(crate) fn read(headers: &mut HeaderMap, route: Route, body: Option<&Value>) {
    if let Ok(allow) = HeaderValue::from_str(&route.allow()) {
        headers.insert(header::ALLOW, allow);
    }
    let link = body
        .and_then(|b| b.get("@odata.type"))
        .and_then(Value::as_str)
        .and_then(schema_file)
        .and_then(|file| {
            HeaderValue::from_str(&format!("<{DMTF_SCHEMAS}/{file}>; rel=describedby")).ok()
        });
    if let Some(link) = link {
        headers.insert(header::LINK, link);
    }
}

/// The JSON schema file of an `@odata.type`: `#Task.v1_7_0.Task` →
/// `Task.v1_7_0.json` (versioned, as the type), `#TaskCollection.TaskCollection`
/// → `TaskCollection.json`.
fn schema_file(odata_type: &str) -> Option<String> {
    let (namespace, _) = odata_type.strip_prefix('#')?.rsplit_once('.')?;
    (!namespace.is_empty()).then(|| format!("{namespace}.json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_file_keeps_the_version_of_the_type() {
        assert_eq!(
            schema_file("#ServiceRoot.v1_15_0.ServiceRoot").as_deref(),
            Some("ServiceRoot.v1_15_0.json")
        );
        assert_eq!(
            schema_file("#TaskCollection.TaskCollection").as_deref(),
            Some("TaskCollection.json")
        );
        assert_eq!(schema_file("Task"), None);
        assert_eq!(schema_file("#.Task"), None);
    }

    #[test]
    fn only_odata_version_4_0_passes() {
        let mut request = HeaderMap::new();
        assert!(check_odata_version(&request).is_ok());
        request.insert("OData-Version", HeaderValue::from_static("4.0"));
        assert!(check_odata_version(&request).is_ok());
        request.insert("OData-Version", HeaderValue::from_static("4.1"));
        assert_eq!(
            check_odata_version(&request),
            Err(RedfishError::UnsupportedODataVersion {
                version: "4.1".to_owned()
            })
        );
    }
}
