//! A job's checkpoint as one delivery knows it: what the bucket holds, at
//! which revision, and the writes to it — each a compare-and-set on that
//! revision, naming this delivery (`services/worker/src/checkpoint.rs`).
//! It is the step's journal (`shared/executor/src/journal.rs`): the
//! executor keeps the checkpoint here before and after every command.

use async_nats::jetstream::kv;
use flow_executor::{Checkpoint, Journal};

use crate::checkpoint;
use crate::metrics::WorkerMetrics;

/// The job's checkpoint in the job-state bucket: what it holds, as far as
/// this worker knows (`None`: nothing), at which revision, and the writes
/// to it — each a compare-and-set on that revision
/// (`services/worker/src/checkpoint.rs`). It is the step's [`Journal`]: the
/// executor keeps the checkpoint here before and after every command
/// (`shared/executor/src/command.rs`).
pub(crate) struct Stored<'a> {
    kv: kv::Store,
    key: String,
    /// This delivery's name in the checkpoints it writes.
    writer: String,
    metrics: &'a WorkerMetrics,
    state: std::sync::Mutex<StoredState>,
}

#[derive(Default)]
struct StoredState {
    /// What the bucket holds, as far as this delivery knows.
    held: Option<Checkpoint>,
    /// Its revision (0: the key was never written).
    revision: u64,
    /// Another delivery of the job wrote the checkpoint: this one stops.
    superseded: bool,
}

impl<'a> Stored<'a> {
    pub(crate) fn new(kv: kv::Store, key: String, metrics: &'a WorkerMetrics) -> Self {
        Stored {
            kv,
            key,
            writer: uuid::Uuid::new_v4().simple().to_string(),
            metrics,
            state: std::sync::Mutex::new(StoredState::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, StoredState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets what the bucket is known to hold (as read), and its revision.
    pub(crate) fn set(&self, cp: Option<Checkpoint>, revision: u64) {
        let mut state = self.state();
        state.held = cp;
        state.revision = revision;
    }

    /// Whether the bucket holds `cp` already.
    pub(crate) fn holds(&self, cp: &Checkpoint) -> bool {
        self.state().held.as_ref() == Some(cp)
    }

    /// Whether another delivery of the job wrote its checkpoint since this
    /// one read or wrote it.
    pub(crate) fn is_superseded(&self) -> bool {
        self.state().superseded
    }

    /// Saves `cp` if it sent a command since the stored copy, so no
    /// redelivery repeats it; polls since need no save (a redelivery
    /// repeats a read). Whether the commands are kept.
    pub(crate) async fn keep_commands(&self, cp: &Checkpoint) -> bool {
        let commanded = self
            .state()
            .held
            .as_ref()
            .map_or(cp.commands > 0, |s| s.commands != cp.commands);
        !commanded || self.save(cp).await
    }

    /// Saves `cp` unless the bucket holds it already; whether it is saved.
    /// A write that finds another revision looks at who wrote the key: this
    /// delivery (an earlier write whose answer was lost) — then this one is
    /// written, or tried again on that revision; anyone else — then this
    /// delivery is superseded and stops.
    pub(crate) async fn save(&self, cp: &Checkpoint) -> bool {
        if self.holds(cp) {
            return true;
        }
        if self.is_superseded() {
            return false;
        }
        let Some(bytes) = checkpoint::encode(cp, &self.writer, self.metrics) else {
            return false;
        };
        // At most: this write, then once more on the revision of an earlier
        // write of this delivery whose answer was lost.
        for _ in 0..2 {
            let revision = self.state().revision;
            match checkpoint::put(&self.kv, &self.key, bytes.clone(), revision, self.metrics).await
            {
                checkpoint::Put::Saved(revision) => {
                    let mut state = self.state();
                    state.held = Some(cp.clone());
                    state.revision = revision;
                    return true;
                }
                checkpoint::Put::Failed => return false,
                checkpoint::Put::Conflict => {
                    let Some(found) = checkpoint::current(&self.kv, &self.key).await else {
                        self.metrics.checkpoint_errors.inc();
                        return false;
                    };
                    let mut state = self.state();
                    if found.writer.as_deref() == Some(self.writer.as_str()) {
                        state.revision = found.revision;
                        if found.value == bytes {
                            state.held = Some(cp.clone());
                            return true;
                        }
                        // An earlier write of this one: what it held is
                        // not known here; write over it.
                        state.held = None;
                        continue;
                    }
                    if found.revision > revision {
                        state.superseded = true;
                    } else {
                        // An older read than the revision this delivery
                        // knows (a lagging replica): not known yet.
                        self.metrics.checkpoint_errors.inc();
                    }
                    return false;
                }
            }
        }
        false
    }
}

impl Journal for Stored<'_> {
    fn keep<'b>(&'b self, cp: &'b Checkpoint) -> futures::future::BoxFuture<'b, bool> {
        Box::pin(self.save(cp))
    }
}

#[cfg(test)]
mod tests {
    //! Against a real nats-server (`tests/src/lib.rs`), a bucket like
    //! `flow_job_state`.

    use super::*;
    use flow_tests::NatsServer;

    async fn bucket(server: &NatsServer) -> kv::Store {
        let client = async_nats::connect(server.url()).await.expect("NATS");
        async_nats::jetstream::new(client)
            .create_key_value(kv::Config {
                bucket: "t".into(),
                history: 1,
                ..Default::default()
            })
            .await
            .expect("a bucket")
    }

    fn checkpoint(commands: u64) -> Checkpoint {
        Checkpoint {
            action: 1,
            commands,
            ..Checkpoint::default()
        }
    }

    #[tokio::test]
    async fn of_two_deliveries_writing_the_same_bytes_from_one_revision_the_second_stops() {
        let server = NatsServer::start();
        let kv = bucket(&server).await;
        let metrics = WorkerMetrics::unregistered();
        let (a, b) = (
            Stored::new(kv.clone(), "job.x".into(), &metrics),
            Stored::new(kv.clone(), "job.x".into(), &metrics),
        );
        // Both read the same stored checkpoint, then record the same command
        // at the same millisecond: the same checkpoint, field for field.
        let first = checkpoint(0);
        assert!(a.save(&first).await);
        let revision = kv.entry("job.x").await.unwrap().unwrap().revision;
        a.set(Some(first.clone()), revision);
        b.set(Some(first), revision);
        let commanded = checkpoint(1);
        assert!(a.save(&commanded).await, "the first records its command");
        assert!(
            !b.save(&commanded).await,
            "the second must not take the first's write for its own"
        );
        assert!(b.is_superseded());
        assert!(!a.is_superseded());
        // It stays stopped, whatever it would write next.
        assert!(!b.save(&checkpoint(2)).await);
        // The first goes on.
        assert!(a.save(&checkpoint(2)).await);
    }

    #[tokio::test]
    async fn a_delivery_whose_write_landed_unanswered_takes_it_as_its_own() {
        let server = NatsServer::start();
        let kv = bucket(&server).await;
        let metrics = WorkerMetrics::unregistered();
        let a = Stored::new(kv.clone(), "job.y".into(), &metrics);
        assert!(a.save(&checkpoint(0)).await);
        // A write of this delivery that reached the bucket while its answer
        // was lost: the bucket moved on, the delivery's revision did not.
        let landed = checkpoint::encode(&checkpoint(1), &a.writer, &metrics).unwrap();
        kv.put("job.y", landed).await.unwrap();
        // The same write again: taken as written.
        assert!(a.save(&checkpoint(1)).await);
        assert!(!a.is_superseded());
        // And a newer one after another lost answer: written over it.
        let landed = checkpoint::encode(&checkpoint(2), &a.writer, &metrics).unwrap();
        kv.put("job.y", landed).await.unwrap();
        assert!(a.save(&checkpoint(3)).await);
        assert!(!a.is_superseded());
        let stored = kv.get("job.y").await.unwrap().unwrap();
        let stored: Checkpoint = serde_json::from_slice(&stored).unwrap();
        assert_eq!(stored.commands, 3);
        // Another writer's change since: superseded.
        let other = checkpoint::encode(&checkpoint(4), "someone else", &metrics).unwrap();
        kv.put("job.y", other).await.unwrap();
        assert!(!a.save(&checkpoint(5)).await);
        assert!(a.is_superseded());
    }
}
