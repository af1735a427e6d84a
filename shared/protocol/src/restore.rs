//! Restore epochs. JetStream drops a message whose `Nats-Msg-Id` it has
//! seen within its duplicate window (2 minutes on Flow's streams,
//! `shared/jetstream/src/topology.rs`). After Postgres is restored from a
//! backup, the scheduler sends again what the backup's state says is
//! running — jobs it had sent before, under the same IDs — and a copy
//! dropped as a repeat would leave its step waiting for a result that was
//! already consumed. So every database restore starts a new *epoch*
//! (`flow-scheduler --restored`, `docs/operating.md`, "Backup and
//! restore"): the scheduler publishes every message with its ID suffixed
//! `@e<epoch>`, and a worker answers a job with the result ID of the job's
//! epoch. Epoch 0 (never restored) adds nothing: the IDs are as before.
//!
//! The job's checkpoint key (`job.<task>.<step>.<generation>`) has no
//! epoch: a job sent again resumes from what its first delivery recorded,
//! and never repeats a command that record says went.

use crate::jobs::JobId;

/// The endpoint name the audit record of a restore carries (the
/// scheduler acting, `flow-scheduler --restored`).
pub const RESTORE_ENDPOINT: &str = "database.restored";

/// The marker between a message ID and its epoch.
const MARK: &str = "@e";

/// A message ID as sent in `epoch`.
pub fn in_epoch(msg_id: &str, epoch: u32) -> String {
    if epoch == 0 {
        msg_id.to_owned()
    } else {
        format!("{msg_id}{MARK}{epoch}")
    }
}

/// The epoch a message ID was sent in (0 when it names none, or names it
/// unreadably).
pub fn epoch_of(msg_id: &str) -> u32 {
    msg_id
        .rsplit_once(MARK)
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(0)
}

/// The `Nats-Msg-Id` of the result of job `id`, delivered with the
/// `Nats-Msg-Id` `job_msg_id` (none: an older publisher, epoch 0): one
/// result per job and epoch.
pub fn result_msg_id(id: &JobId, job_msg_id: Option<&str>) -> String {
    in_epoch(&format!("result/{id}"), job_msg_id.map_or(0, epoch_of))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskId;

    fn job() -> JobId {
        JobId {
            task: TaskId(uuid::Uuid::nil()),
            step_index: 2,
            generation: 1,
        }
    }

    #[test]
    fn epoch_zero_keeps_the_ids_of_before() {
        assert_eq!(in_epoch("job/x.1.1", 0), "job/x.1.1");
        assert_eq!(
            result_msg_id(&job(), Some("job/00000000-0000-0000-0000-000000000000.2.1")),
            "result/00000000-0000-0000-0000-000000000000.2.1"
        );
        assert_eq!(
            result_msg_id(&job(), None),
            "result/00000000-0000-0000-0000-000000000000.2.1"
        );
    }

    #[test]
    fn a_restored_epoch_gives_new_ids_and_the_result_follows_its_job() {
        let sent = in_epoch(&format!("job/{}", job()), 3);
        assert_eq!(sent, "job/00000000-0000-0000-0000-000000000000.2.1@e3");
        assert_eq!(epoch_of(&sent), 3);
        assert_eq!(
            result_msg_id(&job(), Some(&sent)),
            "result/00000000-0000-0000-0000-000000000000.2.1@e3"
        );
    }

    #[test]
    fn an_unreadable_epoch_is_zero() {
        assert_eq!(epoch_of("job/x.1.1@eleven"), 0);
        assert_eq!(epoch_of("job/x.1.1"), 0);
    }
}
