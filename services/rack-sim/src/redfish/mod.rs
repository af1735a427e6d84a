//! The Redfish service of one BMC: faults, then authentication, then the
//! typed route, then the resource or action.
//!
//! Order per request: the body is read whole (every answer, refusals
//! included, comes after it); injected latency is slept and injected
//! failures answer first (they hit every request, authenticated or not,
//! like a failing BMC would); then an `OData-Version` other than `4.0` is
//! `412`; then authentication (all but the public reads and the login);
//! then 404 for an unknown path and 405 for a wrong method; then the
//! handler, which sees the rack advanced to "now". Headers: `headers`.

mod auth;
mod chassis;
mod error;
mod etag;
mod event;
mod headers;
mod manager;
mod metadata;
mod reset;
mod root;
mod route;
mod session;
mod subscription;
mod system;
mod task;
mod update;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

pub(crate) use auth::basic_auth_ok;
pub(crate) use error::{AUTH_CHALLENGE, RedfishError};
use route::Route;

use crate::model::ResetOutcome;
use crate::server::Peer;
use crate::vendor::VendorProfile;
pub(crate) use crate::world::ComponentView as View;
use crate::world::{BmcDown, ComponentRef, World};

/// Largest request body read.
const MAX_BODY: usize = 64 * 1024;

/// A JSON reply with Redfish headers.
pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers::protocol(headers);
    response
}

/// One BMC's request context.
#[derive(Clone)]
pub(crate) struct Bmc {
    world: Arc<World>,
    at: ComponentRef,
    /// Requests in flight at this BMC now.
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
}

/// The router of one BMC: every request goes to [`handle`].
pub(crate) fn router(world: Arc<World>, at: ComponentRef) -> Router {
    Router::new().fallback(handle).with_state(Bmc {
        world,
        at,
        in_flight: Arc::default(),
    })
}

async fn handle(State(bmc): State<Bmc>, request: Request) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let _request = bmc
        .world
        .requests
        .enter(&bmc.in_flight, crate::gauge::Purpose::of(&method, &path));
    // Count power commands in flight, latency included.
    let _in_flight = (method == Method::POST && path.trim_end_matches('/').ends_with(".Reset"))
        .then(|| bmc.world.resets.enter(bmc.at.rack, bmc.world.kind(bmc.at)));
    match serve(&bmc, request).await {
        Ok(response) => {
            tracing::debug!(rack = %bmc.world.rack_name(bmc.at), component = %bmc.world.component_name(bmc.at), %method, %path, status = response.status().as_u16(), "redfish");
            response
        }
        Err(error) => {
            tracing::debug!(rack = %bmc.world.rack_name(bmc.at), component = %bmc.world.component_name(bmc.at), %method, %path, error = %flow_telemetry::ErrorChain(&error), "redfish request refused");
            let response = error.into_response();
            // Logged for the admin API's state: fault tests count attempts
            // from it.
            let status = response.status().as_u16();
            bmc.world.with_rack(bmc.at.rack, |rack, now, _| {
                rack.components[bmc.at.component].record_refused(crate::model::Refused {
                    at: now,
                    method: method.to_string(),
                    path: path.clone(),
                    status,
                });
            });
            response
        }
    }
}

async fn serve(bmc: &Bmc, request: Request) -> Result<Response, RedfishError> {
    let (request, body) = request.into_parts();
    // The whole body is read before any answer, refusals included: an
    // answer sent while the client is still sending makes hyper drop the
    // connection, and a client that reuses it sees a reset
    // (`tests/protocol.rs`).
    let body = axum::body::to_bytes(body, MAX_BODY)
        .await
        .unwrap_or_default();
    let world = &bmc.world;
    let (rack, component) = (world.rack_name(bmc.at), world.component_name(bmc.at));
    let effects = world.faults.on_request(rack, component);
    if !effects.latency.is_zero() {
        tokio::time::sleep(effects.latency).await;
    }
    if let Some(status) = effects.fail_with {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return Err(RedfishError::Injected(status));
    }
    headers::check_odata_version(&request.headers)?;

    let raw_path = request.uri.path();
    let path = if raw_path.len() > 1 {
        raw_path.trim_end_matches('/')
    } else {
        raw_path
    }
    .to_owned();
    let method = request.method.clone();
    let profile = world.kind(bmc.at).profile();
    let route = Route::parse(&path, profile, &world.ids(bmc.at), world.vendor(bmc.at));
    // A login is made without credentials, as the service root is read.
    let public = (method == Method::GET && route.is_some_and(Route::is_public))
        || (method == Method::POST && route.is_some_and(Route::is_login));
    if !public && !session::authorized(bmc, &request.headers) {
        return Err(RedfishError::Unauthorized { uri: path });
    }
    let route = route.ok_or_else(|| RedfishError::NotFound { uri: path.clone() })?;
    if !route.methods().contains(&method) {
        return Err(RedfishError::MethodNotAllowed {
            uri: path,
            method,
            allowed: route.allow(),
        });
    }
    if let Route::Session(id) = route
        && method == Method::DELETE
    {
        world.read(bmc.at, |_| ())?;
        return session::logout(bmc, id, &path);
    }
    if let Route::Subscription(id) = route
        && method == Method::DELETE
    {
        world.read(bmc.at, |_| ())?;
        return subscription::delete(bmc, id, &path);
    }
    if route == Route::Metadata {
        world.read(bmc.at, |_| ())?;
        let mut response = (StatusCode::OK, metadata::metadata()).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/xml"),
        );
        headers::protocol(headers);
        headers::read(headers, route, None);
        return Ok(response);
    }
    if route == Route::EventStream {
        // Served only while up: a stream to a BMC that is down ends.
        world.read(bmc.at, |_| ())?;
        if world.events_down(bmc.at) {
            return Err(RedfishError::Unavailable);
        }
        let peer = request.extensions.get::<Peer>().map(|p| p.0);
        return Ok(event::stream(bmc, peer));
    }
    if method == Method::GET {
        let listed = Listed {
            sessions: world.sessions.list(bmc.at),
            destinations: world.destinations.list(bmc.at),
        };
        let body = world.read(bmc.at, |view| get(route, &path, view, &listed))??;
        let mut response = json_response(StatusCode::OK, &body);
        headers::read(response.headers_mut(), route, Some(&body));
        if world.vendor(bmc.at) == VendorProfile::IfMatch
            && matches!(route, Route::System | Route::Chassis)
            && let Ok(tag) = HeaderValue::from_str(&etag::of(&body))
        {
            response.headers_mut().insert(header::ETAG, tag);
        }
        return Ok(response);
    }
    match route {
        Route::Sessions | Route::SessionsMembers => {
            world.read(bmc.at, |_| ())?;
            session::login(bmc, &body)
        }
        Route::SystemReset | Route::ChassisReset => {
            if world.vendor(bmc.at) == VendorProfile::IfMatch {
                check_if_match(bmc, route, &path, &request.headers)?;
            }
            reset(bmc, &path, &body)
        }
        Route::DpuReset => system::dpu_reset(bmc, &body),
        Route::SimpleUpdate => simple_update(bmc, &body).await,
        _ => Err(RedfishError::MethodNotAllowed {
            uri: path,
            method,
            allowed: route.allow(),
        }),
    }
}

/// What the BMC keeps outside its rack model, listed for a GET.
struct Listed {
    sessions: Vec<crate::sessions::Session>,
    destinations: Vec<crate::destinations::Destination>,
}

/// Builds the body of a GET.
impl From<BmcDown> for RedfishError {
    fn from(_: BmcDown) -> Self {
        RedfishError::Unavailable
    }
}

fn get(route: Route, path: &str, view: &View<'_>, listed: &Listed) -> Result<Value, RedfishError> {
    let not_found = || RedfishError::NotFound {
        uri: path.to_owned(),
    };
    Ok(match route {
        Route::Versions => root::versions(),
        Route::ServiceRoot => root::service_root(view),
        Route::Systems => system::systems(view),
        Route::System => system::system(view).ok_or_else(not_found)?,
        Route::ChassisCollection => chassis::chassis_collection(view),
        Route::Chassis => chassis::chassis(view),
        Route::PowerSubsystem => chassis::power_subsystem(view),
        Route::PowerSupplies => chassis::power_supplies(view),
        Route::PowerSupply(n) => chassis::power_supply(view, n),
        Route::PowerSupplyMetrics(n) => chassis::power_supply_metrics(view, n),
        Route::EnvironmentMetrics => chassis::environment_metrics(view),
        Route::Managers => manager::managers(view),
        Route::Manager => manager::manager(view),
        Route::UpdateService => update::update_service(),
        Route::FirmwareInventory => update::firmware_inventory(view),
        Route::FirmwareMember(id) => update::firmware_member(view, id).ok_or_else(not_found)?,
        Route::TaskService => task::task_service(),
        Route::EventService => event::event_service(),
        Route::EventStream | Route::Metadata => return Err(not_found()),
        Route::OData => metadata::odata(view.component.kind.profile().event_service),
        Route::ResetActionInfo => reset::action_info(view),
        Route::DpuSystem => system::dpu_system(view),
        Route::BackplaneChassis => chassis::backplane(view),
        Route::SessionService => session::session_service(),
        Route::Sessions => session::sessions(&listed.sessions),
        Route::Session(id) => session::session(&listed.sessions, id).ok_or_else(not_found)?,
        Route::Subscriptions => subscription::subscriptions(&listed.destinations),
        Route::Subscription(id) => {
            subscription::subscription(&listed.destinations, id).ok_or_else(not_found)?
        }
        Route::Tasks => task::tasks(view),
        Route::Task(id) => task::task(view, id).ok_or_else(not_found)?,
        Route::SystemReset
        | Route::ChassisReset
        | Route::DpuReset
        | Route::SimpleUpdate
        | Route::SessionsMembers => {
            return Err(not_found());
        }
    })
}

/// Profile `if-match`: the reset carries the power resource's ETag.
fn check_if_match(
    bmc: &Bmc,
    route: Route,
    path: &str,
    headers: &axum::http::HeaderMap,
) -> Result<(), RedfishError> {
    let resource_route = if route == Route::SystemReset {
        Route::System
    } else {
        Route::Chassis
    };
    let resource = path.split("/Actions/").next().unwrap_or(path);
    let listed = Listed {
        sessions: Vec::new(),
        destinations: Vec::new(),
    };
    let current = bmc
        .world
        .read(bmc.at, |view| get(resource_route, resource, view, &listed))??;
    match headers.get(header::IF_MATCH).and_then(|v| v.to_str().ok()) {
        None => Err(RedfishError::PreconditionRequired {
            uri: path.to_owned(),
        }),
        Some(sent) if sent == "*" || sent == etag::of(&current) => Ok(()),
        Some(sent) => Err(RedfishError::PreconditionFailed {
            uri: path.to_owned(),
            sent: sent.to_owned(),
        }),
    }
}

fn reset(bmc: &Bmc, path: &str, body: &[u8]) -> Result<Response, RedfishError> {
    let world = &bmc.world;
    let reset = reset::parse_reset(body, world.kind(bmc.at).profile())?;
    let outcome = world.change(bmc.at, |rack, i, now, ctx| {
        rack.reset(i, reset, now, ctx)
            .map_err(|refused| RedfishError::InUse {
                uri: path.to_owned(),
                reason: refused.to_string(),
            })
    })??;
    tracing::info!(
        rack = %world.rack_name(bmc.at),
        component = %world.component_name(bmc.at),
        %reset,
        stuck = outcome == ResetOutcome::Stuck,
        "reset accepted"
    );
    Ok(reset::accepted(world.vendor(bmc.at)))
}

async fn simple_update(bmc: &Bmc, body: &[u8]) -> Result<Response, RedfishError> {
    let world = &bmc.world;
    let request = update::parse_request(body, world.kind(bmc.at).profile())?;
    // The BMC fetches the image before its task starts: what it received
    // (its digest) is kept with the command; a fetch that fails fails the
    // task.
    let fetched = if world.config().fetch_images {
        Some(crate::origin::fetch(&world.fetcher, &request.image_uri).await)
    } else {
        None
    };
    let digest = fetched
        .as_ref()
        .and_then(|f| f.as_ref().ok())
        .map(|f| f.digest.clone());
    let (id, task) = world.change(bmc.at, |rack, i, now, ctx| {
        let id = rack
            .start_update(
                i,
                &request.image_uri,
                request.version.clone(),
                request.targets.clone(),
                fetched.clone(),
                now,
                ctx,
            )
            .map_err(|refused| RedfishError::InUse {
                uri: update::simple_update_target(),
                reason: refused.to_string(),
            })?;
        let view = world.view(bmc.at, &rack.components[i], now);
        let body = view
            .component
            .task(id)
            .map(|t| task::task_body(&view, t))
            .unwrap_or_default();
        Ok::<_, RedfishError>((id, body))
    })??;
    tracing::info!(
        rack = %world.rack_name(bmc.at),
        component = %world.component_name(bmc.at),
        task = id,
        image_uri = %request.image_uri,
        version = %request.version,
        digest = digest.as_deref().unwrap_or("not fetched"),
        "update accepted"
    );
    let mut response = json_response(StatusCode::ACCEPTED, &task);
    if let Ok(location) = HeaderValue::from_str(&task::task_uri(id)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}
