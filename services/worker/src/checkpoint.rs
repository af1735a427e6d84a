//! A job's checkpoint in the job-state bucket (`job.<task>.<step>.<gen>`):
//! read when a delivery starts, written before and after every command,
//! before every wait and at the end.
//!
//! Every write is a compare-and-set on the revision the delivery read (or
//! last wrote): two deliveries of one job at once — a redelivery while the
//! first still runs, or a job sent again after a database restore
//! (`shared/protocol/src/restore.rs`) — cannot both record a command. The
//! one whose write finds a newer revision it did not make stops
//! ([`Put::Conflict`], `services/worker/src/job.rs`), and the other goes on.
//!
//! Each write names its delivery (`writer`, beside the checkpoint's own
//! fields; a reader of an older release ignores it): two deliveries woken
//! at the same instant from the same checkpoint compute the same bytes, so
//! only the name tells a delivery's own write, whose answer was lost, from
//! the other's.

use async_nats::jetstream::kv;
use bytes::Bytes;
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

/// Reads a job's checkpoint and its revision (0: the key was never
/// written); `Err` when the bucket cannot be read now (the checkpoint may
/// exist: do not run blind). A checkpoint this worker cannot decode is
/// [`Loaded::Unreadable`]: the step is not started over, since that could
/// repeat a command its record would have said went.
pub async fn load(
    kv: &kv::Store,
    key: &str,
    metrics: &WorkerMetrics,
) -> Result<(Loaded, u64), kv::EntryError> {
    let entry = match kv.entry(key).await? {
        // Deleted or purged: written over from its marker's revision.
        Some(e) if e.operation != kv::Operation::Put => {
            metrics.jobs_started.inc();
            return Ok((Loaded::None, e.revision));
        }
        Some(e) => e,
        None => {
            metrics.jobs_started.inc();
            return Ok((Loaded::None, 0));
        }
    };
    let loaded = match serde_json::from_slice(&entry.value) {
        Ok(cp) => {
            metrics.jobs_resumed.inc();
            Loaded::Some(Box::new(cp))
        }
        Err(error) => {
            tracing::warn!(error = %ErrorChain(&error), key, "unreadable checkpoint: the step fails rather than repeat what it may have sent");
            Loaded::Unreadable(error.to_string())
        }
    };
    Ok((loaded, entry.revision))
}

/// A checkpoint as written: its fields and the delivery that wrote it.
#[derive(serde::Serialize)]
struct Written<'a> {
    #[serde(flatten)]
    checkpoint: &'a Checkpoint,
    writer: &'a str,
}

/// Who wrote a stored checkpoint (none: a worker of an older release).
#[derive(serde::Deserialize)]
struct Writer {
    #[serde(default)]
    writer: Option<String>,
}

/// A checkpoint as `writer` (one delivery of the job) writes it.
pub fn encode(cp: &Checkpoint, writer: &str, metrics: &WorkerMetrics) -> Option<Bytes> {
    let written = Written {
        checkpoint: cp,
        writer,
    };
    match serde_json::to_vec(&written) {
        Ok(bytes) => Some(bytes.into()),
        Err(error) => {
            metrics.checkpoint_errors.inc();
            tracing::error!(error = %ErrorChain(&error), "checkpoint not encodable");
            None
        }
    }
}

/// How a compare-and-set write went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    /// Written: its new revision.
    Saved(u64),
    /// The key has another revision than the one given: someone wrote it
    /// since (another delivery, or this one with its answer lost).
    Conflict,
    /// Not written, or not known to be (JetStream did not answer).
    Failed,
}

/// Writes `bytes` under `key` if the key is still at `revision` (0: never
/// written).
pub async fn put(
    kv: &kv::Store,
    key: &str,
    bytes: Bytes,
    revision: u64,
    metrics: &WorkerMetrics,
) -> Put {
    match kv.update(key, bytes, revision).await {
        Ok(revision) => {
            metrics.checkpoints_written.inc();
            Put::Saved(revision)
        }
        Err(error) if error.kind() == kv::UpdateErrorKind::WrongLastRevision => Put::Conflict,
        Err(error) => {
            metrics.checkpoint_errors.inc();
            tracing::warn!(error = %ErrorChain(&error), "checkpoint not saved");
            Put::Failed
        }
    }
}

/// What the key holds now.
#[derive(Debug)]
pub struct Current {
    /// The stored bytes.
    pub value: Bytes,
    /// Their revision.
    pub revision: u64,
    /// The delivery that wrote them (none: unnamed, an older release).
    pub writer: Option<String>,
}

/// The key's value, revision and writer now (`None`: absent, deleted or
/// not readable now).
pub async fn current(kv: &kv::Store, key: &str) -> Option<Current> {
    match kv.entry(key).await {
        Ok(Some(e)) if e.operation == kv::Operation::Put => Some(Current {
            writer: serde_json::from_slice::<Writer>(&e.value)
                .ok()
                .and_then(|w| w.writer),
            value: e.value,
            revision: e.revision,
        }),
        Ok(_) => None,
        Err(error) => {
            tracing::warn!(error = %ErrorChain(&error), key, "checkpoint not readable now");
            None
        }
    }
}
