//! A job's checkpoint in the job-state bucket (`job.<task>.<step>.<gen>`):
//! read when a delivery starts, written before every wait and at the end.

use async_nats::jetstream::kv;
use flow_executor::Checkpoint;
use flow_protocol::jobs::JobId;
use flow_telemetry::ErrorChain;

use crate::metrics::WorkerMetrics;

/// The bucket key of a job's checkpoint.
pub fn key(id: &JobId) -> String {
    format!("job.{id}")
}

/// Reads a job's checkpoint: `Ok(None)` when it has none (a first
/// delivery), `Err` when the bucket cannot be read now (the checkpoint may
/// exist: do not run blind). A checkpoint this worker cannot decode
/// (another version?) starts the step over: that repeats only idempotent
/// calls.
pub async fn load(
    kv: &kv::Store,
    key: &str,
    metrics: &WorkerMetrics,
) -> Result<Option<Checkpoint>, kv::EntryError> {
    match kv.get(key).await? {
        None => {
            metrics.jobs_started.inc();
            Ok(None)
        }
        Some(bytes) => match serde_json::from_slice(&bytes) {
            Ok(cp) => {
                metrics.jobs_resumed.inc();
                Ok(Some(cp))
            }
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), key, "unreadable checkpoint: starting the step over");
                Ok(None)
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
