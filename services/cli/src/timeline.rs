//! `--wait` and `task watch` as lines (logs, CI, pipes), in the order things
//! happened. Two sources tell a task's progress: the workers' live
//! `step_progress` events (an action, components done) and the task's
//! record, read every half second (a step running, completed, failed). The
//! record is read late, so its lines would come after live lines of a
//! later stage that happened after them. Here every line carries when it
//! happened (an event's time; a step's start or end), live lines wait
//! until the record has shown every earlier stage settled, and lines are
//! printed sorted by that time: a stage's end before the next stage's progress, a step's
//! start before its actions. A step's end is told once, by its record: live
//! lines of a step already ended are dropped.

use std::collections::{BTreeMap, BTreeSet};

use flow_protocol::StepStatus;
use flow_protocol::task::{StepRecord, TaskRecord};

use crate::task::step_line;

/// One line waiting to be printed.
#[derive(Debug, Clone)]
struct Entry {
    /// When it happened (epoch ms).
    at_ms: u64,
    /// The stage it is about.
    stage: u32,
    /// The step (`stage 2/NVSwitch`).
    step: String,
    /// The text.
    line: String,
    /// From the record (else from a live event).
    record: bool,
}

/// The lines of one watched task.
#[derive(Debug)]
pub(crate) struct Timeline {
    /// When watching began (epoch ms): times are shown from it.
    start_ms: u64,
    /// The last line printed per source and step.
    shown: BTreeMap<(bool, String), String>,
    /// Steps whose end was printed.
    ended: BTreeSet<String>,
    pending: Vec<Entry>,
}

fn ms(t: time::OffsetDateTime) -> u64 {
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

fn step_key(stage: u32, component_type: &str) -> String {
    format!("stage {stage}/{component_type}")
}

fn is_final(status: StepStatus) -> bool {
    !matches!(status, StepStatus::Pending | StepStatus::Running)
}

/// When a step's current line happened: its end, its start, or `now`.
fn happened(s: &StepRecord, now_ms: u64) -> u64 {
    let at = if is_final(s.status) {
        s.finished_at.or(s.started_at)
    } else if s.status == StepStatus::Running {
        s.started_at
    } else {
        None
    };
    at.map_or(now_ms, ms)
}

impl Timeline {
    /// A timeline whose times count from `start_ms`.
    pub(crate) fn new(start_ms: u64) -> Self {
        Timeline {
            start_ms,
            shown: BTreeMap::new(),
            ended: BTreeSet::new(),
            pending: Vec::new(),
        }
    }

    /// A live line of a step, as it happened at `at_ms`.
    pub(crate) fn progress(&mut self, at_ms: u64, stage: u32, component_type: &str, line: String) {
        self.pending.push(Entry {
            at_ms,
            stage,
            step: step_key(stage, component_type),
            line,
            record: false,
        });
    }

    /// Takes the record as read at `now_ms` and returns the lines to print
    /// now, in the order they happened.
    pub(crate) fn record(&mut self, task: &TaskRecord, now_ms: u64) -> Vec<String> {
        for s in &task.steps {
            self.pending.push(Entry {
                at_ms: happened(s, now_ms),
                stage: s.stage,
                step: step_key(s.stage, s.component_type.as_str()),
                line: step_line(s),
                record: true,
            });
        }
        // The lowest stage with a step still open: live lines of later
        // stages wait (what ends the open stage is not known yet). None
        // open, or the task over: everything goes. The record's own lines
        // are one snapshot and go at once.
        let open = (!task.status.is_final())
            .then(|| {
                task.steps
                    .iter()
                    .filter(|s| !is_final(s.status))
                    .map(|s| s.stage)
                    .min()
            })
            .flatten();
        // A stage starts after every earlier one ended: its lines are
        // placed no earlier than that, whatever clock stamped them.
        let floor = |stage: u32| {
            task.steps
                .iter()
                .filter(|s| s.stage < stage && is_final(s.status))
                .filter_map(|s| s.finished_at.map(ms))
                .max()
                .unwrap_or(0)
        };
        let (mut ready, waiting): (Vec<Entry>, Vec<Entry>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|e| e.record || open.is_none_or(|open| e.stage <= open));
        self.pending = waiting;
        for e in &mut ready {
            e.at_ms = e.at_ms.max(floor(e.stage));
        }
        // By time; at one instant, a step's record line before live ones.
        ready.sort_by_key(|e| (e.at_ms, !e.record));
        let mut lines = Vec::new();
        for e in ready {
            if !e.record && self.ended.contains(&e.step) {
                continue;
            }
            let key = (e.record, e.step.clone());
            if self.shown.get(&key) == Some(&e.line) {
                continue;
            }
            let seconds = e.at_ms.saturating_sub(self.start_ms) as f64 / 1000.0;
            lines.push(format!("[{seconds:>6.1}s]{}", e.line));
            if e.record
                && task.steps.iter().any(|s| {
                    step_key(s.stage, s.component_type.as_str()) == e.step
                        && is_final(s.status)
                        && step_line(s) == e.line
                })
            {
                self.ended.insert(e.step.clone());
            }
            self.shown.insert(key, e.line);
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T0: u64 = 1_700_000_000_000;

    fn at(ms: u64) -> String {
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(T0 + ms) * 1_000_000)
            .unwrap()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    }

    fn step(
        stage: u32,
        t: &str,
        status: &str,
        started: Option<u64>,
        ended: Option<u64>,
    ) -> StepRecord {
        serde_json::from_value(json!({
            "step_index": stage - 1, "stage": stage, "component_type": t, "status": status,
            "components": 2, "budget_ms": 0, "deadline": null,
            "started_at": started.map(at), "finished_at": ended.map(at),
            "error": null, "results": {}, "calls": 0, "generation": 0
        }))
        .unwrap()
    }

    fn task(status: &str, steps: Vec<StepRecord>) -> TaskRecord {
        serde_json::from_value(json!({
            "id": "6c1e0a3e-5f6b-4d7e-9a1b-2c3d4e5f6a7b", "request_id": "r",
            "rack_id": "0b570a3e-5f6b-4d7e-9a1b-2c3d4e5f6a7b", "rack": "rack-01",
            "operation_type": "power_control", "operation": "power_on", "status": status,
            "rule_id": null, "rule_revision": null, "rule_source": "builtin",
            "rule_name": "builtin", "rule": {}, "current_stage": null, "message": "",
            "created_at": at(0), "started_at": at(0), "finished_at": null,
            "steps": steps,
        }))
        .unwrap()
    }

    #[test]
    fn a_stage_end_read_late_is_printed_before_the_next_stages_progress() {
        let mut t = Timeline::new(T0);
        let first = t.record(
            &task(
                "running",
                vec![
                    step(1, "PowerShelf", "running", Some(100), None),
                    step(2, "NVSwitch", "pending", None, None),
                ],
            ),
            T0 + 500,
        );
        assert_eq!(first.len(), 2, "{first:?}");
        assert!(
            first[0].starts_with("[   0.1s]  stage 1 PowerShelf running"),
            "{first:?}"
        );
        // Stage 1 ended at 35.2 s, stage 2 started at 35.25 s and its
        // worker told its first action at 35.3 s; the record is read at
        // 35.6 s. Live, the action arrived first.
        t.progress(
            35_300 + T0,
            2,
            "NVSwitch",
            "  stage 2 NVSwitch   post_operation[0] (VerifyPowerStatus) 0/2 done".into(),
        );
        let lines = t.record(
            &task(
                "running",
                vec![
                    step(1, "PowerShelf", "completed", Some(100), Some(35_200)),
                    step(2, "NVSwitch", "running", Some(35_250), None),
                ],
            ),
            T0 + 35_600,
        );
        let order: Vec<&str> = lines.iter().map(|l| &l[9..]).collect();
        assert_eq!(
            order,
            [
                "  stage 1 PowerShelf completed 0/2 done",
                "  stage 2 NVSwitch   running   0/2 done",
                "  stage 2 NVSwitch   post_operation[0] (VerifyPowerStatus) 0/2 done",
            ],
            "{lines:?}"
        );
        assert!(lines[0].starts_with("[  35.2s]"), "{lines:?}");
        assert!(lines[2].starts_with("[  35.3s]"), "{lines:?}");
    }

    #[test]
    fn a_later_stages_progress_waits_until_the_record_shows_the_earlier_one_ended() {
        let mut t = Timeline::new(T0);
        t.record(
            &task(
                "running",
                vec![
                    step(1, "Compute", "running", Some(0), None),
                    step(2, "PowerShelf", "pending", None, None),
                ],
            ),
            T0 + 10,
        );
        t.progress(T0 + 900, 2, "PowerShelf", "  stage 2 live".into());
        // The record still shows stage 1 running: the live line waits.
        let lines = t.record(
            &task(
                "running",
                vec![
                    step(1, "Compute", "running", Some(0), None),
                    step(2, "PowerShelf", "pending", None, None),
                ],
            ),
            T0 + 1_000,
        );
        assert!(lines.is_empty(), "{lines:?}");
        let lines = t.record(
            &task(
                "completed",
                vec![
                    step(1, "Compute", "completed", Some(0), Some(800)),
                    step(2, "PowerShelf", "completed", Some(850), Some(950)),
                ],
            ),
            T0 + 1_500,
        );
        let order: Vec<&str> = lines.iter().map(|l| &l[9..]).collect();
        assert_eq!(order[0], "  stage 1 Compute    completed 0/2 done");
        assert_eq!(order[1], "  stage 2 live");
        assert_eq!(order[2], "  stage 2 PowerShelf completed 0/2 done");
        // A live line of a step whose end was printed is dropped.
        t.progress(T0 + 960, 2, "PowerShelf", "  stage 2 late".into());
        assert!(t.record(&task("completed", vec![]), T0 + 2_000).is_empty());
    }
}
