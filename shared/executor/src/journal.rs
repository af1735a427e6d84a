//! Where a step's record of its commands is kept: the executor hands the
//! [`Checkpoint`] to a [`Journal`] before it sends a batch of commands
//! (each component's [`crate::checkpoint::CommandRecord`] written as
//! unconfirmed) and again once the devices answered (accepted, or removed
//! when refused). A command whose record could not be kept is not sent.
//! A worker keeps it in the job-state bucket (`services/worker/src/job.rs`);
//! [`MemoryJournal`] keeps it in memory, for tests and tools.

use std::sync::Mutex;

use futures::future::BoxFuture;

use crate::Checkpoint;

/// Durable storage for a step's checkpoint, as the executor writes it
/// around its commands.
pub trait Journal: Send + Sync {
    /// Records `cp` so that a later delivery of the job resumes from it;
    /// whether it is recorded.
    fn keep<'a>(&'a self, cp: &'a Checkpoint) -> BoxFuture<'a, bool>;
}

/// A journal in memory: the last checkpoint kept and how many were.
#[derive(Debug, Default)]
pub struct MemoryJournal {
    kept: Mutex<(Option<Checkpoint>, usize)>,
}

impl MemoryJournal {
    /// The last checkpoint kept, as a resumed delivery would read it.
    pub fn last(&self) -> Option<Checkpoint> {
        self.kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    /// How many times a checkpoint was kept.
    pub fn writes(&self) -> usize {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).1
    }
}

impl Journal for MemoryJournal {
    fn keep<'a>(&'a self, cp: &'a Checkpoint) -> BoxFuture<'a, bool> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.0 = Some(cp.clone());
        kept.1 += 1;
        Box::pin(async { true })
    }
}
