//! A job's checkpoint in the job-state bucket (`job.<task>.<step>.<gen>`):
//! read when a delivery starts, written before and after every command,
//! before every wait and at the end.

use async_nats::jetstream::kv;
use flow_executor::Checkpoint;
use flow_protocol::jobs::JobId;
use flow_telemetry::ErrorChain;

use crate::metrics::WorkerMetrics;

/// The bucket key of a job's checkpoint.
pub fn key(id: &JobId) -> String {
    format!("job.{id}")
}

/// What a delivery found in the bucket.
#[derive(Debug)]
pub enum Loaded {
    /// Nothing: a first delivery.
    None,
    /// The step's checkpoint.
    Some(Box<Checkpoint>),
    /// A checkpoint this worker cannot decode (another version?), with
    /// why: what the step sent is not known.
    Unreadable(String),
}

/// Reads a job's checkpoint; `Err` when the bucket cannot be read now (the
/// checkpoint may exist: do not run blind). A checkpoint this worker
/// cannot decode is [`Loaded::Unreadable`]: the step is not started over,
/// since that could repeat a command its record would have said went.
pub async fn load(
    kv: &kv::Store,
    key: &str,
    metrics: &WorkerMetrics,
) -> Result<Loaded, kv::EntryError> {
    match kv.get(key).await? {
        None => {
            metrics.jobs_started.inc();
            Ok(Loaded::None)
        }
        Some(bytes) => match serde_json::from_slice(&bytes) {
            Ok(cp) => {
                metrics.jobs_resumed.inc();
                Ok(Loaded::Some(Box::new(cp)))
            }
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), key, "unreadable checkpoint: the step fails rather than repeat what it may have sent");
                Ok(Loaded::Unreadable(error.to_string()))
            }
        },
    }
}

/// Writes a job's checkpoint; false when it could not be saved (counted and
/// logged).
pub async fn save(kv: &kv::Store, key: &str, cp: &Checkpoint, metrics: &WorkerMetrics) -> bool {
    let bytes = match serde_json::to_vec(cp) {
        Ok(bytes) => bytes,
        Err(error) => {
            metrics.checkpoint_errors.inc();
            tracing::error!(error = %ErrorChain(&error), "checkpoint not encodable");
            return false;
        }
    };
    match kv.put(key, bytes.into()).await {
        Ok(_) => {
            metrics.checkpoints_written.inc();
            true
        }
        Err(error) => {
            metrics.checkpoint_errors.inc();
            tracing::warn!(error = %ErrorChain(&error), "checkpoint not saved");
            false
        }
    }
}
