//! Hardware conditions as a BMC reports them: a chassis' `Status` (its
//! `Health` and `Conditions`), and on BMCs with an EventService
//! (compute trays) `GET /redfish/v1/EventService` and its SSE stream
//! `GET /redfish/v1/EventService/SSE` (`text/event-stream`: one Redfish
//! `Event` per raised condition, per steady power state reached
//! (`ResourceEvent` `ResourcePoweredOn` / `ResourcePoweredOff`, origin the
//! power resource) and per update task ended (`TaskEvent`
//! `TaskCompletedOK` / `TaskAborted`, origin the task), `id:` its
//! `EventId`; a comment line every 10 s keeps the connection alive; the
//! stream ends when the BMC loses power, and while an `events_down` fault
//! targets the BMC it ends and new ones are refused with `503`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;
use tokio::sync::broadcast;

use super::Bmc;
use super::View;
use super::root::{link, status};
use super::route::ROOT;
use super::task::task_uri;
use crate::model::{Change, Component, Condition, PowerState};
use crate::vendor::Ids;
use crate::world::{Announced, ComponentRef, RaisedEvent, World};

/// How often an idle stream sends a comment line.
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// The SSE stream's URI.
pub(crate) const SSE_URI: &str = "/redfish/v1/EventService/SSE";

fn chassis_uri(ids: &Ids) -> String {
    format!("{ROOT}/Chassis/{}", ids.chassis)
}

fn timestamp(c: &Condition) -> String {
    c.since.format(&Rfc3339).unwrap_or_default()
}

/// A chassis' `Status`: `Health` `Critical` while it is in a condition,
/// with its `Conditions`.
pub(crate) fn chassis_status(view: &View<'_>) -> Value {
    let c = view.component;
    let mut body = status(true);
    if !c.conditions.is_empty()
        && let Some(fields) = body.as_object_mut()
    {
        fields.insert("Health".to_owned(), "Critical".into());
        let origin = chassis_uri(&view.ids);
        let conditions: Vec<Value> = c
            .conditions
            .iter()
            .map(|x| {
                json!({
                    "MessageId": x.kind.message_id(),
                    "Message": x.kind.message(&c.name),
                    "Severity": "Critical",
                    "Timestamp": timestamp(x),
                    "OriginOfCondition": link(origin.clone()),
                })
            })
            .collect();
        fields.insert("Conditions".to_owned(), conditions.into());
    }
    body
}

/// `GET /redfish/v1/EventService`.
pub(crate) fn event_service() -> Value {
    json!({
        "@odata.id": format!("{ROOT}/EventService"),
        "@odata.type": "#EventService.v1_10_0.EventService",
        "Id": "EventService",
        "Name": "Event Service",
        "ServiceEnabled": true,
        "Status": status(true),
        "ServerSentEventUri": SSE_URI,
        "EventFormatTypes": ["Event"],
        "Subscriptions": link(format!("{ROOT}/EventService/Subscriptions")),
    })
}

enum Next {
    Event(Arc<RaisedEvent>),
    KeepAlive,
    End,
}

/// The Redfish `Event` of one raised condition.
fn condition_record(component: &Component, ids: &Ids, condition: &Condition) -> Value {
    json!({
        "EventId": condition.id.to_string(),
        "EventTimestamp": timestamp(condition),
        "MessageId": condition.kind.message_id(),
        "Message": condition.kind.message(&component.name),
        "MessageSeverity": "Critical",
        "OriginOfCondition": link(chassis_uri(ids)),
    })
}

/// The record of one model change (`crate::model::Change`).
fn change_record(view: &View<'_>, id: u64, when: &str, change: Change) -> Value {
    let name = &view.component.name;
    let (message_id, message, severity, origin, args) = match change {
        Change::Power { state, .. } => {
            let (id, verb) = if state == PowerState::On {
                ("ResourceEvent.1.3.ResourcePoweredOn", "powered on")
            } else {
                ("ResourceEvent.1.3.ResourcePoweredOff", "powered off")
            };
            let origin = super::reset::resource_uri(view);
            (
                id,
                format!("The resource '{origin}' has {verb}."),
                "OK",
                origin.clone(),
                vec![origin],
            )
        }
        Change::TaskEnded {
            task, completed, ..
        } => {
            let (id, message, severity) = if completed {
                (
                    "TaskEvent.1.0.TaskCompletedOK",
                    format!("The task with Id '{task}' has completed."),
                    "OK",
                )
            } else {
                (
                    "TaskEvent.1.0.TaskAborted",
                    format!("The task with Id '{task}' has been aborted."),
                    "Critical",
                )
            };
            (
                id,
                message,
                severity,
                task_uri(task),
                vec![task.to_string()],
            )
        }
    };
    tracing::trace!(component = %name, message_id, "event");
    json!({
        "EventId": id.to_string(),
        "EventTimestamp": when,
        "MessageId": message_id,
        "Message": message,
        "MessageArgs": args,
        "MessageSeverity": severity,
        "OriginOfCondition": link(origin),
    })
}

/// The Redfish `Event` of one announcement.
fn event_body(world: &World, at: ComponentRef, raised: &RaisedEvent) -> Value {
    let record = world.with_rack(at.rack, |rack, now, _| {
        let component = &rack.components[at.component];
        match &raised.what {
            Announced::Condition(condition) => {
                condition_record(component, &world.ids(at), condition)
            }
            Announced::Change { id, when, change } => {
                let when = when.format(&Rfc3339).unwrap_or_default();
                change_record(&world.view(at, component, now), *id, &when, *change)
            }
        }
    });
    json!({
        "@odata.type": "#Event.v1_7_0.Event",
        "Id": raised.id().to_string(),
        "Name": "Event",
        "Events": [record],
    })
}

/// `GET /redfish/v1/EventService/SSE`: the BMC's conditions as they are
/// raised, from the moment of the request.
pub(crate) fn stream(bmc: &Bmc) -> Response {
    let world = Arc::clone(&bmc.world);
    let at = bmc.at;
    let events = world.events.subscribe();
    let reachable = world.reachability(at);
    let cuts = world.stream_cuts();
    let state = (world, events, reachable, cuts);
    let frames = futures::stream::unfold(
        state,
        move |(world, mut events, mut reachable, mut cuts)| async move {
            loop {
                let next = tokio::select! {
                    _ = cuts.changed() => {
                        if world.events_down(at) {
                            Next::End
                        } else {
                            continue;
                        }
                    }
                    received = events.recv() => match received {
                        Ok(raised) if raised.at == at => Next::Event(raised),
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => Next::End,
                    },
                    down = reachable.wait_for(|up| !*up) => {
                        drop(down);
                        Next::End
                    }
                    () = tokio::time::sleep(KEEP_ALIVE) => Next::KeepAlive,
                };
                let frame = match next {
                    Next::End => return None,
                    Next::KeepAlive => Bytes::from_static(b": keep-alive\n\n"),
                    Next::Event(raised) => {
                        let body = event_body(&world, at, &raised);
                        Bytes::from(format!("id: {}\ndata: {body}\n\n", raised.id()))
                    }
                };
                return Some((Ok::<_, Infallible>(frame), (world, events, reachable, cuts)));
            }
        },
    );
    let mut response = (StatusCode::OK, Body::from_stream(frames)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
