//! The SessionService: login (`POST …/Sessions` with `UserName` and
//! `Password` → `201`, `X-Auth-Token` and `Location`), the sessions, logout
//! (`DELETE` of the session), and which requests are authorized: a valid
//! `X-Auth-Token` of this BMC, or HTTP Basic unless the BMC's profile is
//! `session-only`.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::RedfishError;
use super::root::collection;
use super::route::ROOT;
use super::{Bmc, basic_auth_ok, json_response};
use crate::sessions::Session;
use crate::vendor::VendorProfile;

/// The session collection's URI.
pub(crate) const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";
/// `SessionTimeout` the service advertises, seconds (sessions end only by
/// logout or the admin API: the simulator enforces no timeout).
const SESSION_TIMEOUT_S: u64 = 1800;

/// Whether the request carries credentials this BMC accepts.
pub(crate) fn authorized(bmc: &Bmc, headers: &HeaderMap) -> bool {
    if let Some(token) = headers.get("X-Auth-Token").and_then(|v| v.to_str().ok()) {
        return bmc.world.sessions.valid(bmc.at, token);
    }
    let config = bmc.world.config();
    bmc.world.vendor(bmc.at) != VendorProfile::SessionOnly
        && basic_auth_ok(headers, &config.user, &config.password)
}

/// `GET /redfish/v1/SessionService`.
pub(crate) fn session_service() -> Value {
    json!({
        "@odata.id": format!("{ROOT}/SessionService"),
        "@odata.type": "#SessionService.v1_1_9.SessionService",
        "Id": "SessionService",
        "Name": "Session Service",
        "ServiceEnabled": true,
        "SessionTimeout": SESSION_TIMEOUT_S,
        "Sessions": { "@odata.id": SESSIONS },
    })
}

fn session_uri(id: u64) -> String {
    format!("{SESSIONS}/{id}")
}

fn session_body(s: &Session) -> Value {
    json!({
        "@odata.id": session_uri(s.id),
        "@odata.type": "#Session.v1_7_0.Session",
        "Id": s.id.to_string(),
        "Name": "User Session",
        "UserName": s.user,
    })
}

/// `GET …/Sessions`.
pub(crate) fn sessions(open: &[Session]) -> Value {
    collection(
        SESSIONS,
        "SessionCollection",
        "Session Collection",
        open.iter().map(|s| session_uri(s.id)),
    )
}

/// `GET …/Sessions/<n>`.
pub(crate) fn session(open: &[Session], id: u64) -> Option<Value> {
    open.iter().find(|s| s.id == id).map(session_body)
}

/// `POST …/Sessions`: a login with the BMC's credentials.
pub(crate) fn login(bmc: &Bmc, body: &[u8]) -> Result<Response, RedfishError> {
    let fields: serde_json::Map<String, Value> = serde_json::from_slice(body).unwrap_or_default();
    let text = |k: &str| fields.get(k).and_then(Value::as_str);
    let (Some(user), Some(password)) = (text("UserName"), text("Password")) else {
        return Err(RedfishError::ParameterMissing {
            action: "Session login",
            parameter: if text("UserName").is_none() {
                "UserName"
            } else {
                "Password"
            },
        });
    };
    let config = bmc.world.config();
    if user != config.user || password != config.password {
        return Err(RedfishError::Unauthorized {
            uri: SESSIONS.to_owned(),
        });
    }
    let session = bmc.world.sessions.create(bmc.at, user);
    tracing::info!(component = %bmc.world.component_name(bmc.at), session = session.id, "session created");
    let mut response = json_response(StatusCode::CREATED, &session_body(&session));
    let headers = response.headers_mut();
    if let Ok(token) = HeaderValue::from_str(&session.token) {
        headers.insert("X-Auth-Token", token);
    }
    if let Ok(location) = HeaderValue::from_str(&session_uri(session.id)) {
        headers.insert(header::LOCATION, location);
    }
    Ok(response)
}

/// `DELETE …/Sessions/<n>`: a logout.
pub(crate) fn logout(bmc: &Bmc, id: u64, path: &str) -> Result<Response, RedfishError> {
    if !bmc.world.sessions.remove(bmc.at, id) {
        return Err(RedfishError::NotFound {
            uri: path.to_owned(),
        });
    }
    tracing::info!(component = %bmc.world.component_name(bmc.at), session = id, "session deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}
