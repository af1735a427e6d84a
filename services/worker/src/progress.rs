//! Keeping a job alive while it is worked on, and telling watchers how far
//! its step has come.

use std::time::Duration;

use async_nats::jetstream::{self, Message};
use flow_executor::checkpoint::ComponentStatus;
use flow_executor::{Checkpoint, Clock, SystemClock};
use flow_protocol::jobs::JobMessage;
use flow_protocol::task::{TaskEvent, TaskEventKind};

use crate::ack::{Disposition, ack_for};

/// How often a worker tells JetStream it is still working on a job, at
/// most (well inside the consumer's default 30 s ack wait). A shorter ack
/// wait (`FLOW_JOB_ACK_WAIT`) shortens it: see [`progress_every`].
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// The progress-ack interval for a consumer whose ack wait is `ack_wait`:
/// a third of it (so two acks may be lost before JetStream gives the job to
/// another worker), at most [`PROGRESS_EVERY`], at least 100 ms.
pub fn progress_every(ack_wait: Duration) -> Duration {
    (ack_wait / 3).clamp(Duration::from_millis(100), PROGRESS_EVERY)
}

/// Sends progress acks for a message every `every` until dropped. Aborted
/// on drop: if the job's future is dropped (its task aborted, a panic), no
/// orphan keeps acking a job nobody runs.
pub struct KeepAlive(tokio::task::JoinHandle<()>);

impl KeepAlive {
    /// Starts the acks.
    pub fn start(message: &Message, every: Duration) -> KeepAlive {
        let message = message.clone();
        KeepAlive(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if message
                    .ack_with(ack_for(Disposition::StillWorking))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }))
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where a step stands for watchers: the action, components done and
/// failed.
type Seen = (usize, usize, usize, Option<String>);

/// Publishes a `step_progress` event when the current action or the count
/// of finished components changed since `last` (best effort: progress is
/// for watchers; the outcome travels as a result).
pub async fn report(
    js: &jetstream::Context,
    job: &JobMessage,
    cp: &Checkpoint,
    last: &mut Option<Seen>,
) {
    let count = |status| {
        cp.components
            .values()
            .filter(|c| c.status == status)
            .count()
    };
    let (done, failed) = (count(ComponentStatus::Done), count(ComponentStatus::Failed));
    let active = || {
        cp.components
            .values()
            .filter(|c| c.status == ComponentStatus::Active)
    };
    let held = active().filter(|c| c.held.is_some()).count();
    let waiting = active().find_map(|c| c.held.clone());
    let now = (cp.action, done, failed, waiting.clone());
    if last.as_ref() == Some(&now) {
        return;
    }
    *last = Some(now);
    let event = TaskEvent::new(
        job.id.task,
        SystemClock.now_ms(),
        TaskEventKind::StepProgress {
            stage: job.stage,
            step_index: job.id.step_index,
            component_type: job.job.step.component_type,
            action: flow_executor::executor::action_label(&job.job, cp.action)
                .unwrap_or_else(|| "done".to_owned()),
            done,
            failed,
            total: job.job.components.len(),
            held,
            waiting,
        },
    );
    if let Ok(body) = serde_json::to_vec(&event) {
        let _ = js.client().publish(event.subject(), body.into()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_acks_come_three_times_per_ack_wait_at_most_every_ten_seconds() {
        let s = Duration::from_secs;
        assert_eq!(progress_every(s(30)), s(10));
        assert_eq!(progress_every(s(300)), s(10));
        assert_eq!(progress_every(s(6)), s(2));
        assert_eq!(
            progress_every(Duration::from_millis(90)),
            Duration::from_millis(100)
        );
    }
}
