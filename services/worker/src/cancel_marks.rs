//! The tasks whose cancel marks (`cancel.<task>` in the job-state bucket)
//! this worker has seen: a job checks them at every action boundary.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::kv;
use flow_protocol::TaskId;
use flow_telemetry::ErrorChain;
use futures::StreamExt;

/// First pause before watching cancel marks again after the watch failed
/// (doubling up to [`WATCH_RETRY_MAX`]).
const WATCH_RETRY_MIN: Duration = Duration::from_millis(250);
/// Longest pause between attempts to watch cancel marks again.
const WATCH_RETRY_MAX: Duration = Duration::from_secs(5);

/// The cancelled tasks seen so far. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct CancelMarks {
    seen: Arc<Mutex<HashSet<TaskId>>>,
}

impl CancelMarks {
    /// Whether `task` was cancelled.
    pub fn contains(&self, task: TaskId) -> bool {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&task)
    }

    fn insert(&self, task: TaskId) {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(task);
    }

    /// Keeps the set from the bucket's marks for as long as the worker
    /// runs: a watch that fails or ends (the server restarted) is started
    /// again, and as it replays every mark no cancel is missed. A worker
    /// that stopped watching would run a cancelled task's power commands.
    pub async fn watch(self, kv: kv::Store) {
        let mut pause = WATCH_RETRY_MIN;
        loop {
            match kv.watch_with_history("cancel.>").await {
                Ok(mut watch) => loop {
                    match watch.next().await {
                        Some(Ok(entry)) => {
                            pause = WATCH_RETRY_MIN;
                            if let Some(id) = entry
                                .key
                                .strip_prefix("cancel.")
                                .and_then(|k| k.parse().ok())
                            {
                                self.insert(id);
                            }
                        }
                        Some(Err(error)) => {
                            tracing::warn!(error = %ErrorChain(&error), "cancel-mark watch failed; watching again");
                            break;
                        }
                        None => {
                            tracing::warn!("cancel-mark watch ended; watching again");
                            break;
                        }
                    }
                },
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&error), "cannot watch cancel marks; retrying");
                }
            }
            // Watching again replays every mark (with history): none is missed.
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(WATCH_RETRY_MAX);
        }
    }
}
