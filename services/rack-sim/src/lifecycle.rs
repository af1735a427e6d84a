//! The lifecycle (decommission) API on the admin port, with the BMCs' HTTP
//! Basic credentials.
//!
//! | request | reply |
//! |---|---|
//! | `GET /lifecycle/v1/racks/{rack}/components/{component}` | `200` [`LifecycleStatus`] |
//! | `POST …/decommission` | `202` (started) or `200` (already decommissioning or decommissioned) |
//! | `POST …/maintenance` `{"reason": "…"}` | `200`, state `Maintenance(<reason>)` |
//! | `POST …/ready` | `200`, state `Ready` |
//!
//! Unknown rack or component → `404 {"error":{"code":"NotFound",…}}`; no or
//! wrong credentials → `401`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::api_error::ApiError;
use crate::model::{Component, DecommissionStart};
use crate::redfish::basic_auth_ok;
use crate::world::{ComponentRef, World};

/// A component's lifecycle as the API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleStatus {
    /// Rack name.
    pub rack: String,
    /// Component name.
    pub component: String,
    /// `Ready`, `Maintenance(<reason>)`, `Decommissioning/<phase>` or
    /// `Decommissioned`.
    pub state: String,
    /// When the state last changed, RFC 3339.
    pub updated_at: String,
}

/// Proof that the request carried the BMC credentials.
struct Authorized;

impl FromRequestParts<Arc<World>> for Authorized {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        world: &Arc<World>,
    ) -> Result<Self, Self::Rejection> {
        let config = world.config();
        if basic_auth_ok(&parts.headers, &config.user, &config.password) {
            Ok(Authorized)
        } else {
            Err(ApiError::Unauthorized)
        }
    }
}

const COMPONENT: &str = "/lifecycle/v1/racks/{rack}/components/{component}";

/// The lifecycle routes (state supplied by the admin router).
pub(crate) fn router() -> Router<Arc<World>> {
    Router::new()
        .route(COMPONENT, get(show))
        .route(&format!("{COMPONENT}/decommission"), post(decommission))
        .route(&format!("{COMPONENT}/maintenance"), post(maintenance))
        .route(&format!("{COMPONENT}/ready"), post(ready))
}

fn locate(world: &World, rack: &str, component: &str) -> Result<ComponentRef, ApiError> {
    world
        .locate(rack, component)
        .ok_or_else(|| ApiError::NotFound(format!("no component {component:?} in rack {rack:?}")))
}

fn status(world: &World, at: ComponentRef, c: &Component) -> LifecycleStatus {
    LifecycleStatus {
        rack: world.rack_name(at).to_owned(),
        component: c.name.clone(),
        state: c.lifecycle.state().to_string(),
        updated_at: world.clock.rfc3339(c.lifecycle.updated_at()),
    }
}

async fn show(
    _: Authorized,
    State(world): State<Arc<World>>,
    Path((rack, component)): Path<(String, String)>,
) -> Result<Json<LifecycleStatus>, ApiError> {
    let at = locate(&world, &rack, &component)?;
    Ok(Json(world.with_rack(at.rack, |r, _, _| {
        status(&world, at, &r.components[at.component])
    })))
}

async fn decommission(
    _: Authorized,
    State(world): State<Arc<World>>,
    Path((rack, component)): Path<(String, String)>,
) -> Result<(StatusCode, Json<LifecycleStatus>), ApiError> {
    let at = locate(&world, &rack, &component)?;
    let (start, body) = world.with_rack(at.rack, |r, now, ctx| {
        let start = r.decommission(at.component, now, ctx);
        (start, status(&world, at, &r.components[at.component]))
    });
    let code = match start {
        DecommissionStart::Started => {
            tracing::info!(%rack, %component, "decommission started");
            StatusCode::ACCEPTED
        }
        DecommissionStart::AlreadyUnderWay => StatusCode::OK,
    };
    Ok((code, Json(body)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MaintenanceRequest {
    reason: String,
}

async fn maintenance(
    _: Authorized,
    State(world): State<Arc<World>>,
    Path((rack, component)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<LifecycleStatus>, ApiError> {
    let at = locate(&world, &rack, &component)?;
    let request: MaintenanceRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("expected {{\"reason\": \"…\"}}: {e}")))?;
    Ok(Json(world.with_rack(at.rack, |r, now, _| {
        let c = &mut r.components[at.component];
        c.lifecycle.maintenance(request.reason, now);
        status(&world, at, c)
    })))
}

async fn ready(
    _: Authorized,
    State(world): State<Arc<World>>,
    Path((rack, component)): Path<(String, String)>,
) -> Result<Json<LifecycleStatus>, ApiError> {
    let at = locate(&world, &rack, &component)?;
    Ok(Json(world.with_rack(at.rack, |r, now, _| {
        let c = &mut r.components[at.component];
        c.lifecycle.ready(now);
        status(&world, at, c)
    })))
}
