//! The admin API (no auth): state, faults and reset. Also mounts the
//! lifecycle API.
//!
//! | request | reply |
//! |---|---|
//! | `GET /admin/v1/state` | `200` [`SimState`](crate::SimState) |
//! | `GET /admin/v1/faults` | `200` list of [`Fault`] |
//! | `POST /admin/v1/faults` (one [`FaultSpec`]) | `200` the new list; `400` if invalid |
//! | `DELETE /admin/v1/faults` | `200` `[]` |
//! | `DELETE /admin/v1/faults/{id}` | `200` the new list; `404` if absent |
//! | `POST /admin/v1/reset` | `204`; every component back to its initial state; every power domain's peak, trips, power-on log and shelves-off peak start again |
//! | `POST /admin/v1/sessions/expire` | `200` `{"expired": n}`: every BMC drops its Redfish sessions |
//! | `POST /admin/v1/racks/{rack}/components/{component}/conditions` (`{"kind": "leak" \| "over_temperature"}`) | `200` the [`Condition`] (the one already raised, if any); `400` if invalid; `404` for an unknown component |
//! | `DELETE /admin/v1/racks/{rack}/components/{component}/conditions` | `200` `{"cleared": n}` |
//! | `GET /admin/v1/power` | `200` [`PowerReport`]: `{"domains": [{"name", "racks", "breaker_kw", "draw_kw", "peak_kw", "peak_at_ms", "trips": [{"at_ms", "draw_kw", "rack", "component"}], "power_ons": [{"rack", "component", "at_ms"}], "shelves_off_peak", "shelves_off"}]}` |
//! | `GET /admin/v1/power/domains/{name}` | `200` one [`DomainReport`]; `404` for an unknown domain |
//! | `PUT /admin/v1/power/domains/{name}` (`{"racks": ["rack-01", …], "breaker_kw": 120.0 \| null}`) | `200` the new [`DomainReport`] (created, or replaced: its records start afresh); `400` naming the bad field; `404` naming an unknown rack |
//! | `DELETE /admin/v1/power/domains/{name}` | `204`; `404` for an unknown domain |
//!
//! Power domains (`services/rack-sim/src/domains.rs`): `draw_kw` is the
//! domain's total now, `peak_kw` its highest total since it was set or the
//! simulator reset (evaluated exactly at each power-on instant), `trips` its
//! breaker trips (a total over `breaker_kw` at a power-on instant: every
//! component of every rack of the domain loses power), `power_ons` every
//! accepted `On`/`ForceOn`/`GracefulRestart`/`ForceRestart`/`PowerCycle`
//! with the wall-clock epoch milliseconds it was received at,
//! `shelves_off` the power shelves drawing nothing now and
//! `shelves_off_peak` the most at once since it was set or reset.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};

use crate::api_error::ApiError;
use crate::domains::{DomainError, DomainReport, PowerReport};
use crate::faults::{Fault, FaultError, FaultId, FaultSpec};
use crate::model::{Condition, ConditionKind};
use crate::world::World;
use crate::{lifecycle, state};

/// The admin listener's router.
pub(crate) fn router(world: Arc<World>) -> Router {
    Router::new()
        .route("/admin/v1/state", get(show_state))
        .route(
            "/admin/v1/faults",
            get(list_faults).post(add_fault).delete(clear_faults),
        )
        .route("/admin/v1/faults/{id}", delete(remove_fault))
        .route("/admin/v1/reset", post(reset))
        .route("/admin/v1/sessions/expire", post(expire_sessions))
        .route("/admin/v1/power", get(power_report))
        .route(
            "/admin/v1/power/domains/{name}",
            get(show_domain).put(set_domain).delete(remove_domain),
        )
        .route(
            "/admin/v1/racks/{rack}/components/{component}/conditions",
            post(raise_condition).delete(clear_conditions),
        )
        .merge(lifecycle::router())
        .merge(crate::origin::router())
        .fallback(|| async { ApiError::NotFound("no such admin or lifecycle path".to_owned()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .with_state(world)
}

async fn expire_sessions(State(world): State<Arc<World>>) -> Response {
    let expired = world.sessions.expire_all();
    tracing::info!(expired, "sessions expired");
    Json(serde_json::json!({ "expired": expired })).into_response()
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RaiseRequest {
    kind: ConditionKind,
}

async fn raise_condition(
    State(world): State<Arc<World>>,
    Path((rack, component)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Condition>, ApiError> {
    let request: RaiseRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("invalid condition: {e}")))?;
    world
        .raise(&rack, &component, request.kind)
        .map(Json)
        .map_err(|e| ApiError::NotFound(e.to_string()))
}

async fn clear_conditions(
    State(world): State<Arc<World>>,
    Path((rack, component)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let cleared = world
        .clear_conditions(&rack, &component)
        .map_err(|e| ApiError::NotFound(e.to_string()))?;
    Ok(Json(serde_json::json!({ "cleared": cleared })).into_response())
}

async fn power_report(State(world): State<Arc<World>>) -> Json<PowerReport> {
    Json(world.power_report())
}

async fn show_domain(
    State(world): State<Arc<World>>,
    Path(name): Path<String>,
) -> Result<Json<DomainReport>, ApiError> {
    world
        .power_report()
        .domains
        .into_iter()
        .find(|d| d.name == name)
        .map(Json)
        .ok_or_else(|| ApiError::NotFound(DomainError::UnknownDomain(name).to_string()))
}

/// A `PUT /admin/v1/power/domains/{name}` body, checked field by field so
/// every refusal names its field.
fn parse_domain(body: &[u8]) -> Result<(Vec<String>, Option<f64>), ApiError> {
    let bad = |field: &str, reason: &str| ApiError::BadRequest(format!("{field}: {reason}"));
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("body: not JSON ({e})")))?;
    let serde_json::Value::Object(fields) = value else {
        return Err(bad(
            "body",
            "must be an object {\"racks\": [...], \"breaker_kw\": n | null}",
        ));
    };
    if let Some(unknown) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), "racks" | "breaker_kw"))
    {
        return Err(ApiError::BadRequest(format!(
            "{unknown}: unknown field (known: racks, breaker_kw)"
        )));
    }
    let racks = match fields.get("racks") {
        None => return Err(bad("racks", "missing: name the domain's racks")),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| bad("racks", &format!("{item} is not a rack name (a string)")))
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(bad(
                "racks",
                &format!("must be an array of rack names, got {other}"),
            ));
        }
    };
    let breaker_kw = match fields.get("breaker_kw") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Number(n)) => n.as_f64(),
        Some(other) => {
            return Err(bad(
                "breaker_kw",
                &format!("must be a number of kW or null, got {other}"),
            ));
        }
    };
    Ok((racks, breaker_kw))
}

async fn set_domain(
    State(world): State<Arc<World>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<DomainReport>, ApiError> {
    let (racks, breaker_kw) = parse_domain(&body)?;
    world
        .set_domain(&name, &racks, breaker_kw)
        .map(Json)
        .map_err(domain_error)
}

async fn remove_domain(
    State(world): State<Arc<World>>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    world
        .remove_domain(&name)
        .map(|()| StatusCode::NO_CONTENT)
        .map_err(domain_error)
}

fn domain_error(e: DomainError) -> ApiError {
    match e {
        DomainError::Invalid { .. } => ApiError::BadRequest(e.to_string()),
        DomainError::UnknownRack(_) | DomainError::UnknownDomain(_) => {
            ApiError::NotFound(e.to_string())
        }
    }
}

async fn show_state(State(world): State<Arc<World>>) -> Response {
    Json(state::snapshot(&world)).into_response()
}

async fn list_faults(State(world): State<Arc<World>>) -> Json<Vec<Fault>> {
    Json(world.faults.list())
}

async fn add_fault(State(world): State<Arc<World>>, body: Bytes) -> Result<Response, ApiError> {
    let spec: FaultSpec = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("invalid fault: {e}")))?;
    let fault = world
        .faults
        .add(spec)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    tracing::info!(id = %fault.id, target = %fault.target, kind = ?fault.kind, "fault installed");
    if matches!(fault.kind, crate::faults::FaultKind::EventsDown {}) {
        // Open streams look at the faults again and the targeted ones end.
        world.cut_streams();
    }
    settle(&world).await;
    Ok(Json(world.faults.list()).into_response())
}

async fn clear_faults(State(world): State<Arc<World>>) -> Json<Vec<Fault>> {
    world.faults.clear();
    tracing::info!("all faults removed");
    settle(&world).await;
    Json(Vec::new())
}

async fn remove_fault(
    State(world): State<Arc<World>>,
    Path(id): Path<String>,
) -> Result<Json<Vec<Fault>>, ApiError> {
    let id = id
        .parse()
        .map(FaultId)
        .map_err(|_| ApiError::NotFound(format!("no fault with id {id:?}")))?;
    world.faults.remove(id).map_err(|e| match e {
        FaultError::NotFound(_) | FaultError::Invalid(_) => ApiError::NotFound(e.to_string()),
    })?;
    tracing::info!(%id, "fault removed");
    settle(&world).await;
    Ok(Json(world.faults.list()))
}

async fn reset(State(world): State<Arc<World>>) -> StatusCode {
    world.reset();
    settle(&world).await;
    StatusCode::NO_CONTENT
}

/// How long a fault change waits for the BMC listeners to follow it.
const SETTLE_WITHIN: Duration = Duration::from_secs(5);

/// Applies a fault change to every rack now and answers only once the BMC
/// listeners have opened or closed accordingly (bounded by
/// [`SETTLE_WITHIN`]; a listener still rebinding is logged and waited for
/// no longer).
async fn settle(world: &World) {
    world.refresh();
    world.listeners_settled(SETTLE_WITHIN).await;
}
