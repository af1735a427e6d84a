//! The decisions about a rack's tasks together: whether a new task may
//! start, wait or must be refused, and which waiting tasks start (or
//! expire) when a task lets go. The store loads the rack's tasks under its
//! lock; these functions decide, with the conflict table
//! ([`super::conflict`]); the tasks' own transitions follow.
//!
//! Tasks that do not conflict run side by side. A task never starts ahead
//! of an older waiting task it conflicts with: a new one queues behind it,
//! and promotion walks the waiting tasks oldest first, starting each that
//! conflicts with nothing running and nothing older still waiting.

use std::time::Duration;

use flow_protocol::{TaskId, TaskStatus};

use super::conflict::{Conflict, Footprint, conflict};
use super::event::Admission;
use super::state::Window;

/// The most tasks that may wait for one rack.
pub const MAX_WAITING_PER_RACK: usize = 5;

/// An open task of a rack (waiting, pending or running).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenTask {
    /// The task.
    pub id: TaskId,
    /// Its status.
    pub status: TaskStatus,
    /// What it occupies.
    pub footprint: Footprint,
    /// When it gives up waiting (epoch ms), for a waiting task.
    pub expires_ms: Option<u64>,
    /// When its window opens (epoch ms): until then it neither starts nor
    /// stands in anyone's way.
    pub not_before_ms: Option<u64>,
}

impl OpenTask {
    fn due(&self, now_ms: u64) -> bool {
        self.not_before_ms.is_none_or(|t| now_ms >= t)
    }
}

impl OpenTask {
    fn operation_text(&self) -> String {
        self.footprint
            .operation
            .map_or_else(|| "unknown operation".to_owned(), |o| o.to_string())
    }
}

/// A rack's open tasks, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RackTasks {
    /// Every open task, oldest first.
    pub open: Vec<OpenTask>,
}

impl RackTasks {
    /// How many tasks wait.
    pub fn waiting_count(&self) -> usize {
        self.waiting().count()
    }

    fn waiting(&self) -> impl Iterator<Item = &OpenTask> {
        self.open.iter().filter(|t| t.status == TaskStatus::Waiting)
    }

    fn holding(&self) -> impl Iterator<Item = &OpenTask> {
        self.open.iter().filter(|t| t.status.holds_rack())
    }
}

/// Why a submission for a rack was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A conflicting task is open and the request did not ask to queue.
    #[error(
        "rack {rack} already has a conflicting task {} ({}, {}): {conflict}; wait for it, cancel it, or submit with the queue strategy",
        open.id, open.operation_text(), open.status
    )]
    Busy {
        /// The rack's name.
        rack: String,
        /// The oldest conflicting task.
        open: Box<OpenTask>,
        /// Why they conflict.
        conflict: Conflict,
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

/// Whether a new task (`footprint`) for `rack` starts now, waits (when
/// `queue_timeout` is given), or is refused: it starts when it conflicts
/// with no open task, running or waiting (tasks whose window has not opened
/// do not count). A task whose window opens later always waits, until its
/// window's end (or the queue timeout after its start, 1 h without one),
/// without holding anything; a wait never outlasts the window's end.
pub fn admit(
    rack: &str,
    footprint: &Footprint,
    window: Window,
    tasks: &RackTasks,
    queue_timeout: Option<Duration>,
    now_ms: u64,
) -> Result<Admission, Refusal> {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let waiting = tasks.waiting_count();
    let full = || Refusal::QueueFull {
        rack: rack.to_owned(),
        waiting,
    };
    let capped = |expires: u64| window.not_after_ms.map_or(expires, |end| expires.min(end));
    if !window.open_at(now_ms) {
        if waiting >= MAX_WAITING_PER_RACK {
            return Err(full());
        }
        let start = window.not_before_ms.unwrap_or(now_ms);
        let wait = queue_timeout.unwrap_or(DEFAULT_WINDOW_WAIT);
        return Ok(Admission::Queue {
            expires_ms: window
                .not_after_ms
                .unwrap_or_else(|| start.saturating_add(ms(wait))),
        });
    }
    let Some((open, why)) = tasks
        .open
        .iter()
        .filter(|t| t.due(now_ms))
        .find_map(|t| conflict(footprint, &t.footprint).map(|c| (t, c)))
    else {
        return Ok(Admission::Start);
    };
    let Some(timeout) = queue_timeout else {
        return Err(Refusal::Busy {
            rack: rack.to_owned(),
            open: Box::new(open.clone()),
            conflict: why,
        });
    };
    if waiting >= MAX_WAITING_PER_RACK {
        return Err(full());
    }
    Ok(Admission::Queue {
        expires_ms: capped(now_ms.saturating_add(ms(timeout))),
    })
}

/// The open tasks a task that goes first (`footprint`, a hardware event's
/// power-off) cancels so that it can start at once: every task open on the
/// rack, running or waiting, that it conflicts with — except forced
/// power-offs, which do what it does (cancelling one would only leave a
/// tray on longer).
pub fn preempted(footprint: &Footprint, tasks: &RackTasks) -> Vec<TaskId> {
    use flow_rules::{OperationCode, PowerOperation};
    tasks
        .open
        .iter()
        .filter(|t| {
            t.footprint.operation != Some(OperationCode::Power(PowerOperation::ForcePowerOff))
        })
        .filter(|t| conflict(footprint, &t.footprint).is_some())
        .map(|t| t.id)
        .collect()
}

/// How long after its window opens a task without an end or queue timeout
/// may wait for its components.
pub const DEFAULT_WINDOW_WAIT: Duration = Duration::from_secs(3600);

/// What to do with a rack's queue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueDecision {
    /// Waiting tasks whose time ran out.
    pub expire: Vec<TaskId>,
    /// The tasks that start, oldest first.
    pub promote: Vec<TaskId>,
}

/// Expires the waiting tasks past their time, and starts, oldest first,
/// each one left whose window is open that conflicts with no task holding
/// the rack (those started in this pass included) and no older task still
/// waiting.
pub fn next_in_line(tasks: &RackTasks, now_ms: u64) -> QueueDecision {
    let expired = |t: &OpenTask| t.expires_ms.is_some_and(|at| now_ms >= at);
    let mut decision = QueueDecision::default();
    let mut blocking: Vec<&Footprint> = tasks.holding().map(|t| &t.footprint).collect();
    for task in tasks.waiting() {
        if expired(task) {
            decision.expire.push(task.id);
            continue;
        }
        if !task.due(now_ms) {
            // Its window has not opened: it waits, and nobody waits for it.
            continue;
        }
        if blocking
            .iter()
            .all(|b| conflict(&task.footprint, b).is_none())
        {
            decision.promote.push(task.id);
        }
        // Started or still waiting, it is in the way of the younger ones
        // it conflicts with.
        blocking.push(&task.footprint);
    }
    decision
}

#[cfg(test)]
mod tests {
    use flow_rules::ComponentType::{Compute, NVSwitch, PowerShelf};

    use super::*;

    fn open(
        status: TaskStatus,
        op: &str,
        components: &[(flow_rules::ComponentType, &str)],
    ) -> OpenTask {
        OpenTask {
            id: TaskId::new(),
            status,
            footprint: Footprint::new(op.parse().unwrap(), components.iter().copied()),
            expires_ms: None,
            not_before_ms: None,
        }
    }

    fn whole_rack(op: &str) -> Footprint {
        Footprint::new(
            op.parse().unwrap(),
            [
                (PowerShelf, "p1"),
                (NVSwitch, "s1"),
                (Compute, "c1"),
                (Compute, "c2"),
            ],
        )
    }

    #[test]
    fn a_preempting_power_off_cancels_what_it_conflicts_with_but_not_other_power_offs() {
        let flash = open(TaskStatus::Running, "upgrade", &[(Compute, "c1")]);
        let queued = open(TaskStatus::Waiting, "power_on", &[(Compute, "c1")]);
        let elsewhere = open(TaskStatus::Running, "power_on", &[(Compute, "c2")]);
        let other_leak = open(TaskStatus::Running, "force_power_off", &[(Compute, "c1")]);
        let tasks = RackTasks {
            open: vec![flash.clone(), queued.clone(), elsewhere.clone(), other_leak],
        };
        let tray = Footprint::new("force_power_off".parse().unwrap(), [(Compute, "c1")]);
        assert_eq!(preempted(&tray, &tasks), [flash.id, queued.id]);
        // The whole rack, shelves included, holds every component.
        let rack = whole_rack("force_power_off");
        assert_eq!(
            preempted(&rack, &tasks),
            [flash.id, queued.id, elsewhere.id]
        );
    }

    #[test]
    fn a_free_rack_starts_a_busy_one_refuses_or_queues_up_to_five() {
        let task = whole_rack("power_on");
        assert_eq!(
            admit(
                "r",
                &task,
                Window::default(),
                &RackTasks::default(),
                None,
                0
            ),
            Ok(Admission::Start)
        );
        let busy = RackTasks {
            open: vec![open(TaskStatus::Running, "power_off", &[(Compute, "c1")])],
        };
        let e = admit("r", &task, Window::default(), &busy, None, 0).unwrap_err();
        assert!(
            e.to_string().starts_with("rack r already has a conflicting task ")
                && e.to_string().ends_with(
                    "(power_off, running): power_control on PowerShelf conflicts with any power_control rack-wide; wait for it, cancel it, or submit with the queue strategy"
                ),
            "{e}"
        );
        assert_eq!(
            admit(
                "r",
                &task,
                Window::default(),
                &busy,
                Some(Duration::from_secs(60)),
                1_000
            ),
            Ok(Admission::Queue { expires_ms: 61_000 })
        );
        let mut full = busy.clone();
        for _ in 0..MAX_WAITING_PER_RACK {
            full.open
                .push(open(TaskStatus::Waiting, "power_on", &[(Compute, "c1")]));
        }
        assert_eq!(
            admit(
                "r",
                &task,
                Window::default(),
                &full,
                Some(Duration::from_secs(60)),
                0
            )
            .unwrap_err()
            .to_string(),
            "rack r already has 5 queued tasks (at most 5)"
        );
    }

    #[test]
    fn tasks_on_other_components_start_beside_a_running_one() {
        let running = RackTasks {
            open: vec![open(TaskStatus::Running, "power_on", &[(Compute, "c1")])],
        };
        let other_tray = Footprint::new("power_off".parse().unwrap(), [(Compute, "c2")]);
        let switches = Footprint::new("upgrade".parse().unwrap(), [(NVSwitch, "s1")]);
        let same_tray = Footprint::new("upgrade".parse().unwrap(), [(Compute, "c1")]);
        assert_eq!(
            admit("r", &other_tray, Window::default(), &running, None, 0),
            Ok(Admission::Start)
        );
        assert_eq!(
            admit("r", &switches, Window::default(), &running, None, 0),
            Ok(Admission::Start)
        );
        assert!(matches!(
            admit("r", &same_tray, Window::default(), &running, None, 0),
            Err(Refusal::Busy { .. })
        ));
    }

    #[test]
    fn a_new_task_does_not_pass_an_older_waiting_task_it_conflicts_with() {
        // c1 runs; a rack-wide task waits for it; a task on c2 alone
        // conflicts with the waiting one (shelves hold the rack).
        let tasks = RackTasks {
            open: vec![
                open(TaskStatus::Running, "power_on", &[(Compute, "c1")]),
                OpenTask {
                    status: TaskStatus::Waiting,
                    expires_ms: Some(10_000),
                    ..open(
                        TaskStatus::Waiting,
                        "power_off",
                        &[(PowerShelf, "p1"), (Compute, "c1"), (Compute, "c2")],
                    )
                },
            ],
        };
        let c2 = Footprint::new("power_off".parse().unwrap(), [(Compute, "c2")]);
        let refused = admit("r", &c2, Window::default(), &tasks, None, 0).unwrap_err();
        let Refusal::Busy { open, .. } = &refused else {
            panic!("{refused}")
        };
        assert_eq!(open.id, tasks.open[1].id, "names the waiting task");
        assert!(matches!(
            admit(
                "r",
                &c2,
                Window::default(),
                &tasks,
                Some(Duration::from_secs(1)),
                0
            ),
            Ok(Admission::Queue { .. })
        ));
    }

    #[test]
    fn promotion_starts_every_waiting_task_that_conflicts_with_nothing_before_it() {
        let running = open(TaskStatus::Running, "power_on", &[(Compute, "c1")]);
        let mut expired = open(TaskStatus::Waiting, "power_on", &[(Compute, "c9")]);
        expired.expires_ms = Some(100);
        let blocked = open(TaskStatus::Waiting, "power_off", &[(Compute, "c1")]);
        let behind_blocked = open(
            TaskStatus::Waiting,
            "upgrade",
            &[(Compute, "c1"), (Compute, "c3")],
        );
        let free = open(TaskStatus::Waiting, "power_off", &[(Compute, "c2")]);
        let free_switch = open(TaskStatus::Waiting, "power_off", &[(NVSwitch, "s1")]);
        let conflicts_with_free = open(TaskStatus::Waiting, "upgrade", &[(Compute, "c2")]);
        let tasks = RackTasks {
            open: vec![
                running.clone(),
                expired.clone(),
                blocked.clone(),
                behind_blocked,
                free.clone(),
                free_switch.clone(),
                conflicts_with_free,
            ],
        };
        assert_eq!(
            next_in_line(&tasks, 200),
            QueueDecision {
                expire: vec![expired.id],
                promote: vec![free.id, free_switch.id],
            }
        );
        // The rack free: the oldest starts, and what does not conflict with
        // it or with anything older still waiting.
        let tasks = RackTasks {
            open: vec![blocked.clone(), free.clone(), free_switch.clone()],
        };
        assert_eq!(
            next_in_line(&tasks, 0).promote,
            vec![blocked.id, free.id, free_switch.id]
        );
    }

    #[test]
    fn a_task_whose_window_opens_later_waits_without_standing_in_the_way() {
        let running = RackTasks {
            open: vec![open(TaskStatus::Running, "power_on", &[(Compute, "c1")])],
        };
        let later = Window {
            not_before_ms: Some(10_000),
            not_after_ms: Some(20_000),
        };
        let c1 = Footprint::new("upgrade".parse().unwrap(), [(Compute, "c1")]);
        // Waits until its window's end, busy rack or not, queue or not.
        assert_eq!(
            admit("r", &c1, later, &running, None, 0),
            Ok(Admission::Queue { expires_ms: 20_000 })
        );
        let open_ended = Window {
            not_before_ms: Some(10_000),
            not_after_ms: None,
        };
        assert_eq!(
            admit("r", &c1, open_ended, &RackTasks::default(), None, 0),
            Ok(Admission::Queue {
                expires_ms: 10_000 + 3_600_000
            })
        );
        // Queued in its window, the wait ends with the window.
        assert_eq!(
            admit(
                "r",
                &c1,
                later,
                &running,
                Some(Duration::from_secs(3600)),
                15_000
            ),
            Ok(Admission::Queue { expires_ms: 20_000 })
        );
        // Not due yet: it blocks nobody, and is not promoted.
        let mut pending_window = open(TaskStatus::Waiting, "upgrade", &[(Compute, "c2")]);
        pending_window.not_before_ms = Some(10_000);
        pending_window.expires_ms = Some(20_000);
        let tasks = RackTasks {
            open: vec![pending_window.clone()],
        };
        let c2 = Footprint::new("power_off".parse().unwrap(), [(Compute, "c2")]);
        assert_eq!(
            admit("r", &c2, Window::default(), &tasks, None, 5_000),
            Ok(Admission::Start)
        );
        assert_eq!(next_in_line(&tasks, 5_000), QueueDecision::default());
        assert_eq!(
            next_in_line(&tasks, 10_000).promote,
            vec![pending_window.id]
        );
        assert_eq!(next_in_line(&tasks, 20_000).expire, vec![pending_window.id]);
    }
}
