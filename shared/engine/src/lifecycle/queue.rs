//! The decisions about a rack's tasks together: whether a new task may
//! start, wait or must be refused, and which waiting task starts (or
//! expires) when the rack is free. The store loads the rack's tasks under
//! its lock; these functions decide; the tasks' own transitions follow.

use std::time::Duration;

use flow_protocol::{TaskId, TaskStatus};
use flow_rules::OperationCode;

use super::event::Admission;

/// The most tasks that may wait for one rack.
pub const MAX_WAITING_PER_RACK: usize = 5;

/// A rack's open tasks, as a submission sees them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RackOccupancy {
    /// The oldest open task (waiting, pending or running), if any.
    pub oldest_open: Option<OpenTask>,
    /// How many tasks wait.
    pub waiting: usize,
}

/// An open task of a rack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenTask {
    /// The task.
    pub id: TaskId,
    /// Its status.
    pub status: TaskStatus,
    /// Its operation.
    pub operation: OperationCode,
}

/// Why a submission for a rack was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The rack has an open task and the request did not ask to queue.
    #[error(
        "rack {rack} already has task {} ({}, {}); wait for it, cancel it, or submit with the queue strategy",
        open.id, open.operation, open.status
    )]
    Busy {
        /// The rack's name.
        rack: String,
        /// Its oldest open task.
        open: OpenTask,
    },
    /// As many tasks wait as may.
    #[error("rack {rack} already has {waiting} queued tasks (at most {MAX_WAITING_PER_RACK})")]
    QueueFull {
        /// The rack's name.
        rack: String,
        /// How many wait.
        waiting: usize,
    },
}

/// Whether a new task for `rack` starts now, waits (when `queue_timeout`
/// is given), or is refused.
pub fn admit(
    rack: &str,
    occupancy: &RackOccupancy,
    queue_timeout: Option<Duration>,
    now_ms: u64,
) -> Result<Admission, Refusal> {
    let Some(open) = occupancy.oldest_open else {
        return Ok(Admission::Start);
    };
    let Some(timeout) = queue_timeout else {
        return Err(Refusal::Busy {
            rack: rack.to_owned(),
            open,
        });
    };
    if occupancy.waiting >= MAX_WAITING_PER_RACK {
        return Err(Refusal::QueueFull {
            rack: rack.to_owned(),
            waiting: occupancy.waiting,
        });
    }
    Ok(Admission::Queue {
        expires_ms: now_ms.saturating_add(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
    })
}

/// A rack's tasks as promotion sees them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RackQueue {
    /// A task holds the rack (pending or running).
    pub held: bool,
    /// Its waiting tasks, oldest first, with when each gives up (epoch ms).
    pub waiting: Vec<(TaskId, Option<u64>)>,
}

/// What to do with a rack's queue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueDecision {
    /// Waiting tasks whose time ran out.
    pub expire: Vec<TaskId>,
    /// The task that starts: the oldest one still waiting, if the rack is
    /// free.
    pub promote: Option<TaskId>,
}

/// Expires the waiting tasks past their time, and promotes the oldest one
/// left if nothing holds the rack (FIFO).
pub fn next_in_line(queue: &RackQueue, now_ms: u64) -> QueueDecision {
    let expired = |expires: &Option<u64>| expires.is_some_and(|at| now_ms >= at);
    QueueDecision {
        expire: queue
            .waiting
            .iter()
            .filter(|(_, at)| expired(at))
            .map(|(id, _)| *id)
            .collect(),
        promote: if queue.held {
            None
        } else {
            queue
                .waiting
                .iter()
                .find(|(_, at)| !expired(at))
                .map(|(id, _)| *id)
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> OpenTask {
        OpenTask {
            id: TaskId::new(),
            status: TaskStatus::Running,
            operation: "power_on".parse().unwrap(),
        }
    }

    #[test]
    fn a_free_rack_starts_a_busy_one_refuses_or_queues_up_to_five() {
        let free = RackOccupancy::default();
        assert_eq!(admit("r", &free, None, 0), Ok(Admission::Start));
        let busy = RackOccupancy {
            oldest_open: Some(open()),
            waiting: 0,
        };
        let e = admit("r", &busy, None, 0).unwrap_err();
        assert!(
            e.to_string().starts_with("rack r already has task ")
                && e.to_string().ends_with(
                    "(power_on, running); wait for it, cancel it, or submit with the queue strategy"
                ),
            "{e}"
        );
        assert_eq!(
            admit("r", &busy, Some(Duration::from_secs(60)), 1_000),
            Ok(Admission::Queue { expires_ms: 61_000 })
        );
        let full = RackOccupancy {
            waiting: MAX_WAITING_PER_RACK,
            ..busy
        };
        assert_eq!(
            admit("r", &full, Some(Duration::from_secs(60)), 0)
                .unwrap_err()
                .to_string(),
            "rack r already has 5 queued tasks (at most 5)"
        );
    }

    #[test]
    fn the_oldest_live_waiting_task_starts_when_the_rack_is_free() {
        let (a, b, c) = (TaskId::new(), TaskId::new(), TaskId::new());
        let queue = RackQueue {
            held: false,
            waiting: vec![(a, Some(100)), (b, Some(300)), (c, None)],
        };
        assert_eq!(
            next_in_line(&queue, 200),
            QueueDecision {
                expire: vec![a],
                promote: Some(b)
            }
        );
        let held = RackQueue {
            held: true,
            ..queue
        };
        assert_eq!(
            next_in_line(&held, 50),
            QueueDecision {
                expire: vec![],
                promote: None
            }
        );
    }
}
