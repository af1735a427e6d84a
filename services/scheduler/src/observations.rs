//! What workers and watchers read of components' power, recorded for
//! power admission (`shared/store/src/observed.rs`): a queue subscription
//! on `flow.power.observed` shared by every scheduler (each batch is
//! recorded by one), gathered for up to [`GATHER`] into one write. Core
//! NATS: a batch lost while no scheduler runs leaves its components as last
//! known, or not known once that is stale — never counted lower.

use std::time::Duration;

use flow_protocol::state::{ComponentState, OBSERVED_SUBJECT, Observed};
use flow_store::Store;
use flow_telemetry::ErrorChain;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

/// The queue group every scheduler subscribes in.
const QUEUE: &str = "flow-scheduler";
/// How long batches are gathered into one write.
const GATHER: Duration = Duration::from_millis(100);
/// The most states gathered into one write.
const MOST: usize = 5_000;

/// Records observations until `stop`.
pub async fn run(client: async_nats::Client, store: Store, stop: CancellationToken) {
    let mut subscription = loop {
        match client
            .queue_subscribe(OBSERVED_SUBJECT, QUEUE.to_owned())
            .await
        {
            Ok(s) => break s,
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "cannot subscribe to observations; trying again");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    };
    loop {
        let first = tokio::select! {
            () = stop.cancelled() => return,
            message = subscription.next() => match message {
                Some(m) => m,
                None => return,
            },
        };
        let mut states: Vec<ComponentState> = Vec::new();
        take(&first.payload, &mut states);
        let until = tokio::time::Instant::now() + GATHER;
        while states.len() < MOST {
            match tokio::time::timeout_at(until, subscription.next()).await {
                Ok(Some(m)) => take(&m.payload, &mut states),
                Ok(None) | Err(_) => break,
            }
        }
        if let Err(error) = store.record_power(&states).await {
            tracing::warn!(error = %ErrorChain(&error), states = states.len(), "observations not recorded");
        }
    }
}

/// Adds a batch's states; a malformed one is logged and dropped (it is a
/// hint, and its components stay as last known).
fn take(payload: &[u8], states: &mut Vec<ComponentState>) {
    match flow_protocol::decode::message::<Observed>(payload) {
        Ok(batch) => states.extend(batch.states),
        Err(error) => {
            tracing::warn!(error = %error, "an observation batch is not readable; dropped");
        }
    }
}
