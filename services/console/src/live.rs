//! Live updates for the browser: `GET /live?topic=…` is a server-sent event
//! stream fed from NATS.
//!
//! * `task:<id>` follows `flow.events.task.<id>` (the scheduler's events,
//!   also kept in `FLOW_EVENTS`) and `flow.progress.task.<id>` (workers'
//!   live progress): each progress record becomes a `progress` event the
//!   page moves its bars with; every other event a `changed` event, on
//!   which the page fetches its content again.
//! * any other topic (`site`, `tasks`, `runs`, `schedules`, `run:<id>`,
//!   `schedule:<id>`) follows every task's events and every component
//!   state the console applied ([`crate::states`]), and sends `changed`, at
//!   most one per [`COALESCE`]: a site of hundreds of racks changes many
//!   times a second, a page needs to know once.
//!
//! The stream says what changed, never what a page shows: the page reads
//! that through `flow.api` as on first load, so a browser that missed
//! events (a dropped stream, the console restarted) catches up on the next
//! `changed` or when its stream opens again.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use flow_protocol::ids::TaskId;
use flow_protocol::task::{TaskEvent, TaskEventKind};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// The least time between two `changed` events of a broad topic.
pub const COALESCE: Duration = Duration::from_millis(500);

/// What a stream follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topic {
    /// One task, with its live progress.
    Task(TaskId),
    /// Any task (the site, lists, runs, schedules).
    Tasks,
}

impl Topic {
    /// Reads `task:<id>` or any other page topic.
    pub fn parse(text: &str) -> Result<Topic, String> {
        match text.split_once(':') {
            Some(("task", id)) => id
                .parse()
                .map(Topic::Task)
                .map_err(|_| format!("topic {text:?}: {id:?} is not a task ID")),
            _ if text.len() <= 64 && !text.is_empty() => Ok(Topic::Tasks),
            _ => Err(format!("topic {text:?} is not one the console serves")),
        }
    }
}

/// What a NATS message means to a page.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// Fetch the content again.
    Changed(&'static str),
    /// Move a step's bar: the JSON the page reads.
    Progress(serde_json::Value),
}

/// Reads a task event; anything else (another schema, a malformed body) is
/// a change too: the page reads the truth from `flow.api` anyway.
pub fn update_of(payload: &[u8]) -> Update {
    match serde_json::from_slice::<TaskEvent>(payload) {
        Ok(TaskEvent {
            kind:
                TaskEventKind::StepProgress {
                    stage,
                    step_index,
                    action,
                    done,
                    failed,
                    total,
                    held,
                    waiting,
                    ..
                },
            ..
        }) => Update::Progress(serde_json::json!({
            "stage": stage, "step_index": step_index, "action": action,
            "done": done, "failed": failed, "total": total,
            "held": held, "waiting": waiting,
        })),
        Ok(TaskEvent { kind, .. }) => Update::Changed(match kind {
            TaskEventKind::StageStarted { .. } => "stage_started",
            TaskEventKind::StepFinished { .. } => "step_finished",
            TaskEventKind::TaskFinished { .. } => "task_finished",
            TaskEventKind::StepProgress { .. } => "step_progress",
        }),
        Err(_) => Update::Changed("event"),
    }
}

fn event(update: Update) -> Event {
    match update {
        Update::Changed(kind) => Event::default().event("changed").data(kind),
        Update::Progress(v) => Event::default().event("progress").data(v.to_string()),
    }
}

/// The SSE response for `topic`: subscribes, then forwards until the
/// browser goes (the subscription ends with it). `state_changes` tells
/// when the console applied a component state.
pub async fn stream(
    nats: async_nats::Client,
    state_changes: tokio::sync::broadcast::Receiver<()>,
    topic: Topic,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, async_nats::SubscribeError> {
    let (tx, rx) = mpsc::channel::<Event>(64);
    match topic {
        Topic::Task(id) => {
            let events = nats
                .subscribe(flow_protocol::jobs::event_subject(id))
                .await?;
            let progress = nats
                .subscribe(flow_protocol::jobs::progress_subject(id))
                .await?;
            tokio::spawn(forward(
                updates(futures::stream::select(events, progress)),
                tx,
                None,
            ));
        }
        Topic::Tasks => {
            let events = nats.subscribe("flow.events.task.*").await?;
            // A component state the console has applied reads as a task
            // event would: something to fetch again.
            let changes = tokio_stream::wrappers::BroadcastStream::new(state_changes)
                .map(|_| Update::Changed("component_state"));
            tokio::spawn(forward(
                futures::stream::select(updates(events), changes),
                tx,
                Some(COALESCE),
            ));
        }
    }
    let hello = futures::stream::once(async { Event::default().event("hello").data("live") });
    let stream = hello.chain(ReceiverStream::new(rx)).map(Ok);
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

fn updates(
    messages: impl Stream<Item = async_nats::Message> + Unpin,
) -> impl Stream<Item = Update> + Unpin {
    messages.map(|m| update_of(&m.payload))
}

/// Forwards updates as events until the browser's side closes. With
/// `coalesce`, `changed` events are sent at most once per that time (the
/// last of a burst is never lost: one is sent after the quiet time).
async fn forward(
    mut updates: impl Stream<Item = Update> + Unpin,
    tx: mpsc::Sender<Event>,
    coalesce: Option<Duration>,
) {
    let mut pending = false;
    let mut quiet_until: Option<tokio::time::Instant> = None;
    loop {
        let wake = async {
            match quiet_until {
                Some(t) if pending => tokio::time::sleep_until(t).await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tx.closed() => return,
            () = wake => {
                pending = false;
                quiet_until = coalesce.map(|d| tokio::time::Instant::now() + d);
                if tx.send(event(Update::Changed("tasks"))).await.is_err() {
                    return;
                }
            }
            update = updates.next() => {
                let Some(update) = update else { return };
                match (update, coalesce) {
                    (Update::Changed(_), Some(d)) => {
                        let now = tokio::time::Instant::now();
                        if quiet_until.is_some_and(|t| t > now) {
                            pending = true;
                            continue;
                        }
                        quiet_until = Some(now + d);
                        if tx.send(event(Update::Changed("tasks"))).await.is_err() {
                            return;
                        }
                    }
                    (update, _) => {
                        if tx.send(event(update)).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_protocol::status::TaskStatus;

    #[test]
    fn progress_moves_bars_and_other_events_are_changes() {
        let task = TaskId::new();
        let progress = TaskEvent::new(
            task,
            1,
            TaskEventKind::StepProgress {
                stage: 1,
                step_index: 2,
                component_type: flow_rules::ComponentType::Compute,
                action: "main_operation (PowerControl)".into(),
                done: 3,
                failed: 1,
                total: 18,
                held: 2,
                waiting: Some("waiting for power budget in row=B: 1,180 of 1,200 kW".into()),
            },
        );
        let Update::Progress(v) = update_of(&serde_json::to_vec(&progress).unwrap()) else {
            panic!("not progress");
        };
        assert_eq!(v["step_index"], 2);
        assert_eq!(v["done"], 3);
        assert_eq!(v["total"], 18);
        assert_eq!(v["held"], 2);
        assert_eq!(
            v["waiting"],
            "waiting for power budget in row=B: 1,180 of 1,200 kW"
        );
        let finished = TaskEvent::new(
            task,
            2,
            TaskEventKind::TaskFinished {
                status: TaskStatus::Completed,
                message: String::new(),
            },
        );
        assert_eq!(
            update_of(&serde_json::to_vec(&finished).unwrap()),
            Update::Changed("task_finished")
        );
        assert_eq!(update_of(b"not json"), Update::Changed("event"));
    }

    #[test]
    fn topics_are_a_task_or_the_site() {
        let id = TaskId::new();
        assert_eq!(Topic::parse(&format!("task:{id}")), Ok(Topic::Task(id)));
        assert_eq!(Topic::parse("site"), Ok(Topic::Tasks));
        assert!(
            Topic::parse("task:nope")
                .unwrap_err()
                .contains("not a task ID")
        );
        assert!(Topic::parse("").is_err());
    }
}
