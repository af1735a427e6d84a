//! A BMC's firmware inventory and its update tasks.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use super::kind::Profile;

/// Finished tasks a BMC keeps; older finished ones are forgotten (real BMCs
/// keep a bounded task list too).
pub const MAX_FINISHED_TASKS: usize = 64;

/// The firmware members of one BMC and their current versions.
#[derive(Debug, Clone)]
pub struct FirmwareInventory {
    members: Vec<Member>,
}

/// One firmware inventory member.
#[derive(Debug, Clone)]
pub struct Member {
    /// Member id, e.g. `FW_BMC_0`.
    pub id: &'static str,
    /// Human-readable name.
    pub name: &'static str,
    /// Installed version.
    pub version: String,
}

impl FirmwareInventory {
    /// The inventory as shipped.
    pub fn new(profile: &Profile) -> Self {
        FirmwareInventory {
            members: profile
                .firmware
                .iter()
                .map(|slot| Member {
                    id: slot.id,
                    name: slot.name,
                    version: slot.initial.to_owned(),
                })
                .collect(),
        }
    }

    /// Every member, in order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// One member by id.
    pub fn member(&self, id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    /// The installed version of `id`.
    pub fn version(&self, id: &str) -> Option<&str> {
        self.member(id).map(|m| m.version.as_str())
    }

    /// Installs `version` on `id` (ignored for an unknown id).
    pub fn install(&mut self, id: &str, version: &str) {
        if let Some(m) = self.members.iter_mut().find(|m| m.id == id) {
            m.version = version.to_owned();
        }
    }
}

/// DMTF `TaskState` values the simulator produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TaskState {
    /// Created, not yet started.
    New,
    /// In progress.
    Running,
    /// Finished successfully.
    Completed,
    /// Failed.
    Exception,
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskEnd {
    /// The image was applied.
    Completed,
    /// The update failed for this reason.
    Failed(String),
}

/// A task's state as seen at one instant.
#[derive(Debug, Clone)]
pub struct TaskView<'a> {
    /// Its state.
    pub state: TaskState,
    /// 0–100.
    pub percent: u8,
    /// When it ended, if it has.
    pub ended_at: Option<Instant>,
    /// Why it failed, if it did.
    pub failure: Option<&'a str>,
}

/// One SimpleUpdate in progress or done.
#[derive(Debug, Clone)]
pub struct UpdateTask {
    /// Per-BMC id, from 1.
    pub id: u32,
    /// The image being installed.
    pub image_uri: String,
    /// The version it installs.
    pub version: String,
    /// The inventory members it updates.
    pub targets: Vec<&'static str>,
    /// When it was accepted.
    pub start: Instant,
    duration: Duration,
    midpoint_passed: bool,
    end: Option<(Instant, TaskEnd, u8)>,
}

impl UpdateTask {
    /// A task accepted at `start` that takes `duration`.
    pub fn new(
        id: u32,
        image_uri: String,
        version: String,
        targets: Vec<&'static str>,
        start: Instant,
        duration: Duration,
    ) -> Self {
        UpdateTask {
            id,
            image_uri,
            version,
            targets,
            start,
            duration,
            midpoint_passed: false,
            end: None,
        }
    }

    /// Whether it has not ended yet.
    pub fn is_running(&self) -> bool {
        self.end.is_none()
    }

    /// When its next decision is due: the midpoint (where an injected
    /// failure strikes) and then the end.
    pub fn next_event(&self) -> Option<Instant> {
        if self.end.is_some() {
            None
        } else if self.midpoint_passed {
            Some(self.start + self.duration)
        } else {
            Some(self.start + self.duration / 2)
        }
    }

    /// Applies the decision due at `at`. `failure` is the message of a
    /// `firmware_fails` fault on this BMC, if any. Returns `true` when the
    /// task has just completed (the caller installs the version).
    pub fn apply_event(&mut self, at: Instant, failure: Option<String>) -> bool {
        if self.end.is_some() {
            return false;
        }
        if !self.midpoint_passed {
            self.midpoint_passed = true;
            if let Some(message) = failure {
                self.fail(at, message);
            }
            return false;
        }
        self.end = Some((at, TaskEnd::Completed, 100));
        true
    }

    /// Ends it in `Exception` at `at` (power lost, injected failure).
    pub fn fail(&mut self, at: Instant, message: String) {
        if self.end.is_none() {
            let percent = self.percent_at(at);
            self.end = Some((at, TaskEnd::Failed(message), percent));
        }
    }

    fn percent_at(&self, now: Instant) -> u8 {
        if self.duration.is_zero() {
            return 99;
        }
        let elapsed = now.saturating_duration_since(self.start).as_nanos();
        let percent = (elapsed * 100 / self.duration.as_nanos()).min(99);
        u8::try_from(percent).unwrap_or(99)
    }

    /// Its state at `now`.
    pub fn view(&self, now: Instant) -> TaskView<'_> {
        match &self.end {
            Some((at, TaskEnd::Completed, _)) => TaskView {
                state: TaskState::Completed,
                percent: 100,
                ended_at: Some(*at),
                failure: None,
            },
            Some((at, TaskEnd::Failed(message), percent)) => TaskView {
                state: TaskState::Exception,
                percent: *percent,
                ended_at: Some(*at),
                failure: Some(message),
            },
            None if now <= self.start => TaskView {
                state: TaskState::New,
                percent: 0,
                ended_at: None,
                failure: None,
            },
            None => TaskView {
                state: TaskState::Running,
                percent: self.percent_at(now),
                ended_at: None,
                failure: None,
            },
        }
    }
}

/// Drops the oldest finished tasks beyond [`MAX_FINISHED_TASKS`].
pub fn prune_tasks(tasks: &mut Vec<UpdateTask>) {
    let finished = tasks.iter().filter(|t| !t.is_running()).count();
    let mut excess = finished.saturating_sub(MAX_FINISHED_TASKS);
    tasks.retain(|t| {
        if excess > 0 && !t.is_running() {
            excess -= 1;
            false
        } else {
            true
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(start: Instant) -> UpdateTask {
        UpdateTask::new(
            1,
            "http://img/bmc-1.0.bin".into(),
            "1.0".into(),
            vec!["FW_BMC_0"],
            start,
            Duration::from_secs(10),
        )
    }

    #[test]
    fn a_task_runs_then_completes() {
        let t0 = Instant::now();
        let mut t = task(t0);
        assert_eq!(t.view(t0).state, TaskState::New);
        let v = t.view(t0 + Duration::from_secs(3));
        assert_eq!((v.state, v.percent), (TaskState::Running, 30));
        assert_eq!(t.next_event(), Some(t0 + Duration::from_secs(5)));
        assert!(!t.apply_event(t0 + Duration::from_secs(5), None));
        assert_eq!(t.next_event(), Some(t0 + Duration::from_secs(10)));
        assert!(t.apply_event(t0 + Duration::from_secs(10), None));
        let v = t.view(t0 + Duration::from_secs(11));
        assert_eq!((v.state, v.percent), (TaskState::Completed, 100));
        assert_eq!(t.next_event(), None);
    }

    #[test]
    fn an_injected_failure_strikes_at_the_midpoint() {
        let t0 = Instant::now();
        let mut t = task(t0);
        assert!(!t.apply_event(t0 + Duration::from_secs(5), Some("bad image".into())));
        let v = t.view(t0 + Duration::from_secs(20));
        assert_eq!(v.state, TaskState::Exception);
        assert_eq!(v.percent, 50);
        assert_eq!(v.failure, Some("bad image"));
        assert_eq!(t.next_event(), None);
    }
}
