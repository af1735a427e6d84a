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
//! targets the BMC it ends and new ones are refused with `503`). While a
//! stream is open it is listed in `…/EventService/Subscriptions`
//! (`super::subscription`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;
use tokio::sync::{broadcast, watch};

use super::Bmc;
use super::View;
use super::root::{link, status};
use super::route::ROOT;
use super::subscription::Listed;
use super::task::task_uri;
use crate::model::{Change, Component, Condition, PowerState};
use crate::vendor::{EventProfile, Ids};
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

/// The Redfish `Event` of one announcement under the BMC's event profile,
/// or `None` when the profile announces nothing of it.
fn event_body(
    world: &World,
    at: ComponentRef,
    raised: &RaisedEvent,
    profile: EventProfile,
) -> Option<Value> {
    if profile == EventProfile::None {
        return None;
    }
    let record = world.with_rack(at.rack, |rack, now, _| {
        let component = &rack.components[at.component];
        match &raised.what {
            Announced::Condition(condition) => {
                condition_record(component, &world.ids(at), condition)
            }
            Announced::Change { id, when, change } => {
                let when = when.format(&Rfc3339).unwrap_or_default();
                let view = world.view(at, component, now);
                match (profile, change) {
                    (EventProfile::OpenbmcLog, Change::Power { state, .. }) => {
                        log_record(&view, *id, &when, *state)
                    }
                    _ => change_record(&view, *id, &when, *change),
                }
            }
        }
    });
    Some(json!({
        "@odata.type": "#Event.v1_7_0.Event",
        "Id": raised.id().to_string(),
        "Name": "Event",
        "Events": [record],
    }))
}

/// A power change as an OpenBMC image with phosphor-sel-logger's pulse
/// monitor logs it: `OpenBMC.0.1.DCPowerOn` when the host reaches running,
/// `DCPowerOff` when it is off; no `OriginOfCondition`.
fn log_record(view: &View<'_>, id: u64, when: &str, state: PowerState) -> Value {
    let (message_id, message) = if state == PowerState::On {
        ("OpenBMC.0.1.DCPowerOn", "Host system DC power is on")
    } else {
        ("OpenBMC.0.1.DCPowerOff", "Host system DC power is off")
    };
    tracing::trace!(component = %view.component.name, message_id, "log event");
    json!({
        "EventId": id.to_string(),
        "EventTimestamp": when,
        "EventType": "Event",
        "MessageId": message_id,
        "Message": message,
        "MessageArgs": [],
        "MessageSeverity": "OK",
    })
}

/// One open stream: what it waits on, and its listing.
struct Stream {
    world: Arc<World>,
    at: ComponentRef,
    events: broadcast::Receiver<Arc<RaisedEvent>>,
    reachable: watch::Receiver<bool>,
    cuts: watch::Receiver<u64>,
    deletions: watch::Receiver<u64>,
    listed: Listed,
}

impl Stream {
    /// The next frame, or `None` when the stream ends: the BMC goes down,
    /// an `events_down` fault targets it, or its EventDestination is
    /// deleted. Cancel-safe: every arm is a channel receive or a sleep.
    async fn next(&mut self) -> Option<Bytes> {
        let at = self.at;
        loop {
            let next = tokio::select! {
                _ = self.cuts.changed() => {
                    if self.world.events_down(at) {
                        Next::End
                    } else {
                        continue;
                    }
                }
                _ = self.deletions.changed() => {
                    if self.world.destinations.is_open(at, self.listed.id()) {
                        continue;
                    }
                    Next::End
                }
                received = self.events.recv() => match received {
                    Ok(raised) if raised.at == at => Next::Event(raised),
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => Next::End,
                },
                down = self.reachable.wait_for(|up| !*up) => {
                    drop(down);
                    Next::End
                }
                () = tokio::time::sleep(KEEP_ALIVE) => Next::KeepAlive,
            };
            return match next {
                Next::End => None,
                Next::KeepAlive => Some(Bytes::from_static(b": keep-alive\n\n")),
                Next::Event(raised) => {
                    // Announced as the BMC's profile says, or not at all.
                    let Some(profile) = self.world.announces(at) else {
                        continue;
                    };
                    let Some(body) = event_body(&self.world, at, &raised, profile) else {
                        continue;
                    };
                    Some(Bytes::from(format!(
                        "id: {}\ndata: {body}\n\n",
                        raised.id()
                    )))
                }
            };
        }
    }
}

/// `GET /redfish/v1/EventService/SSE` from `peer`: the BMC's conditions as
/// they are raised, from the moment of the request; listed as an
/// EventDestination before the answer is sent, until the stream ends.
pub(crate) fn stream(bmc: &Bmc, peer: Option<SocketAddr>) -> Response {
    let world = Arc::clone(&bmc.world);
    let at = bmc.at;
    let state = Stream {
        events: world.events.subscribe(),
        reachable: world.reachability(at),
        cuts: world.stream_cuts(),
        deletions: world.destinations.deletions(),
        listed: Listed::open(Arc::clone(&world), at, peer),
        world,
        at,
    };
    let frames = futures::stream::unfold(state, |mut stream| async move {
        let frame = stream.next().await?;
        Some((Ok::<_, Infallible>(frame), stream))
    });
    let mut response = (StatusCode::OK, Body::from_stream(frames)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
