//! `GET /redfish/v1/EventService/Subscriptions` (BMCs with an
//! EventService): one `EventDestination` (`SubscriptionType` `SSE`) per
//! open event stream, from the moment the stream's answer is sent until it
//! ends (`crate::destinations`); a `DELETE` of it ends the stream (DSP0266:
//! deleting an SSE stream's EventDestination closes the connection). Push
//! subscriptions are not taken: a POST is `405` with `Allow: GET`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Bmc;
use super::error::RedfishError;

use super::root::{collection, status};
use super::route::ROOT;
use crate::destinations::Destination;
use crate::world::{ComponentRef, World};

fn subscriptions_uri() -> String {
    format!("{ROOT}/EventService/Subscriptions")
}

fn destination_uri(id: u64) -> String {
    format!("{}/{id}", subscriptions_uri())
}

/// `GET …/Subscriptions`.
pub(crate) fn subscriptions(open: &[Destination]) -> Value {
    collection(
        &subscriptions_uri(),
        "EventDestinationCollection",
        "Event Subscriptions",
        open.iter().map(|d| destination_uri(d.id)),
    )
}

/// `GET …/Subscriptions/<n>`, if that stream is open.
pub(crate) fn subscription(open: &[Destination], id: u64) -> Option<Value> {
    let d = open.iter().find(|d| d.id == id)?;
    let mut body = json!({
        "@odata.id": destination_uri(d.id),
        "@odata.type": "#EventDestination.v1_15_0.EventDestination",
        "Id": d.id.to_string(),
        "Name": format!("Event stream {}", d.id),
        "Protocol": "Redfish",
        "SubscriptionType": "SSE",
        "EventFormatType": "Event",
        "Context": d.context,
        "Status": status(true),
    });
    // The EventDestination schema: an SSE destination is
    // `redfish-sse://ip:port` of the client.
    if let (Some(peer), Some(fields)) = (d.peer, body.as_object_mut()) {
        fields.insert(
            "Destination".to_owned(),
            format!("redfish-sse://{peer}").into(),
        );
    }
    Some(body)
}

/// `DELETE …/Subscriptions/<n>`: ends that stream (`204`).
pub(crate) fn delete(bmc: &Bmc, id: u64, path: &str) -> Result<Response, RedfishError> {
    if !bmc.world.destinations.delete(bmc.at, id) {
        return Err(RedfishError::NotFound {
            uri: path.to_owned(),
        });
    }
    tracing::info!(component = %bmc.world.component_name(bmc.at), destination = id, "event stream closed by a DELETE");
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// An open stream's EventDestination: listed while this lives (it lives in
/// the stream, which is dropped when the stream ends or the client goes).
pub(crate) struct Listed {
    world: Arc<World>,
    at: ComponentRef,
    id: u64,
}

impl Listed {
    /// Lists a stream opened at `at` by `peer`.
    pub(crate) fn open(world: Arc<World>, at: ComponentRef, peer: Option<SocketAddr>) -> Listed {
        let id = world.destinations.open(at, peer).id;
        Listed { world, at, id }
    }

    /// Its EventDestination's number.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        self.world.destinations.close(self.at, self.id);
    }
}
