//! The statuses of tasks, steps, stages and components (and, through
//! [`status_enum`], of runs and their targets). Each travels (and
//! is stored) as its snake-case name; [`as_str`](TaskStatus::as_str) and
//! `FromStr` are the one mapping between the two, used by the API, the
//! events and the store's row layer alike.

/// A status name that is not one of the enum's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} status {text:?}; allowed: {allowed}")]
pub struct UnknownStatus {
    /// `task`, `step`, `stage`, `component`, `run`, `run reason` or `run target`.
    pub what: &'static str,
    /// The text given.
    pub text: String,
    /// The names allowed.
    pub allowed: &'static str,
}

macro_rules! status_enum {
    (
        $(#[$doc:meta])*
        $name:ident, $what:literal, $allowed:literal {
            $($(#[$vdoc:meta])* $variant:ident => $text:literal,)+
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// Every status, in lifecycle order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The name, as serialised and stored.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::status::UnknownStatus;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err($crate::status::UnknownStatus { what: $what, text: s.to_owned(), allowed: $allowed }),
                }
            }
        }
    };
}

pub(crate) use status_enum;

status_enum!(
    /// Where a task stands: `waiting → pending → running → completed |
    /// failed | terminated`.
    TaskStatus, "task", "waiting, pending, running, completed, failed, terminated" {
        /// Queued behind another task of its rack (FIFO, with an expiry).
        Waiting => "waiting",
        /// Planned, not yet admitted: the state the lifecycle builds a task
        /// in before its submission decides whether it starts or waits.
        /// It is never stored: a task is inserted running or waiting.
        Pending => "pending",
        /// A stage is running.
        Running => "running",
        /// Every stage completed.
        Completed => "completed",
        /// A step failed, passed its deadline, or the task expired while
        /// queued.
        Failed => "failed",
        /// Cancelled.
        Terminated => "terminated",
    }
);

impl TaskStatus {
    /// Completed, failed or terminated: nothing changes it any more.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Terminated
        )
    }

    /// Pending or running: it holds its rack.
    pub fn holds_rack(self) -> bool {
        matches!(self, TaskStatus::Pending | TaskStatus::Running)
    }

    /// Waiting, pending or running: not finished.
    pub fn is_open(self) -> bool {
        !self.is_final()
    }
}

status_enum!(
    /// Where one step of a task stands.
    StepStatus, "step", "pending, running, completed, failed, skipped, cancelled" {
        /// Its stage has not started.
        Pending => "pending",
        /// Its job is queued or on a worker.
        Running => "running",
        /// Every action done.
        Completed => "completed",
        /// An action failed, or the step passed its deadline.
        Failed => "failed",
        /// No component of its type is targeted.
        Skipped => "skipped",
        /// Stopped: the task was cancelled, or ended while it was open.
        Cancelled => "cancelled",
    }
);

impl StepStatus {
    /// Pending or running.
    pub fn is_open(self) -> bool {
        matches!(self, StepStatus::Pending | StepStatus::Running)
    }

    /// Completed, failed or cancelled: it ran (or was stopped) and is over.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            StepStatus::Completed | StepStatus::Failed | StepStatus::Cancelled
        )
    }
}

status_enum!(
    /// Where a stage stands, derived from its steps.
    StageStatus, "stage", "pending, running, completed, failed, cancelled, skipped" {
        /// No step of it has started.
        Pending => "pending",
        /// A step of it runs.
        Running => "running",
        /// Every step completed (or was skipped).
        Completed => "completed",
        /// A step of it failed.
        Failed => "failed",
        /// A step of it was cancelled, none failed.
        Cancelled => "cancelled",
        /// Every step of it was skipped.
        Skipped => "skipped",
    }
);

impl StageStatus {
    /// The status of a stage whose steps have these statuses.
    pub fn of(steps: impl IntoIterator<Item = StepStatus>) -> StageStatus {
        let (mut running, mut pending, mut failed, mut cancelled, mut completed) =
            (false, false, false, false, false);
        for s in steps {
            match s {
                StepStatus::Running => running = true,
                StepStatus::Pending => pending = true,
                StepStatus::Failed => failed = true,
                StepStatus::Cancelled => cancelled = true,
                StepStatus::Completed => completed = true,
                StepStatus::Skipped => {}
            }
        }
        if running {
            StageStatus::Running
        } else if failed {
            StageStatus::Failed
        } else if cancelled {
            StageStatus::Cancelled
        } else if pending {
            StageStatus::Pending
        } else if completed {
            StageStatus::Completed
        } else {
            StageStatus::Skipped
        }
    }
}

status_enum!(
    /// A component's outcome in a step's record.
    ComponentOutcome, "component", "pending, done, failed" {
        /// It had not finished the action the step ended in.
        Pending => "pending",
        /// It finished every action.
        Done => "done",
        /// It failed an action.
        Failed => "failed",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_round_trips_through_its_name_and_json() {
        for s in TaskStatus::ALL {
            assert_eq!(s.as_str().parse::<TaskStatus>(), Ok(*s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for s in StepStatus::ALL {
            assert_eq!(s.as_str().parse::<StepStatus>(), Ok(*s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for s in ComponentOutcome::ALL {
            assert_eq!(s.as_str().parse::<ComponentOutcome>(), Ok(*s));
        }
        let e = "done".parse::<TaskStatus>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown task status \"done\"; allowed: waiting, pending, running, completed, failed, terminated"
        );
    }

    #[test]
    fn a_stage_takes_the_status_of_its_steps() {
        use StepStatus::*;
        assert_eq!(StageStatus::of([Completed, Running]), StageStatus::Running);
        assert_eq!(
            StageStatus::of([Completed, Failed, Cancelled]),
            StageStatus::Failed
        );
        assert_eq!(
            StageStatus::of([Completed, Cancelled]),
            StageStatus::Cancelled
        );
        assert_eq!(StageStatus::of([Pending, Skipped]), StageStatus::Pending);
        assert_eq!(
            StageStatus::of([Completed, Skipped]),
            StageStatus::Completed
        );
        assert_eq!(StageStatus::of([Skipped]), StageStatus::Skipped);
    }
}
