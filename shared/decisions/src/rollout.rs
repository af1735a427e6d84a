//! Phased rollouts ("runs"), the decisions only: how a run's racks are
//! ordered and cut into phases, whether a safety gate trips, and — given a
//! run and its targets now — what happens next (which targets to submit,
//! whether the run advances, pauses or ends). The scheduler
//! (`services/scheduler/src/runs.rs`) loads, applies and persists; nothing
//! here does I/O.

use std::fmt;
use std::time::Duration;

use flow_protocol::run::{
    Gate, GateKind, GateScope, Ordering, PhasePolicy, RetryPolicy, RunReason, RunStatus,
    TargetStatus,
};

/// Why a run cannot be planned; each names its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// No racks to roll out to.
    #[error("targets: the run names no racks")]
    NoTargets,
    /// A phase policy that is malformed or leaves a phase empty.
    #[error("phases: {0}")]
    Phases(String),
}

/// The phase sizes for `n` targets, in order.
///
/// * `Percentages`: cumulative shares of the targets (`1, 10, 50, 100`: the
///   first 1 %, up to 10 %, …), each rounded up (1 % of 3 racks is 1); a
///   last share under 100 gets a final phase for the rest.
/// * `Counts`: phases of these many racks; the rest is a final phase.
/// * `Equal(k)`: `k` phases as even as can be (earlier ones one larger).
///
/// A phase that would be empty is refused, naming it.
pub fn phase_sizes(n: usize, policy: &PhasePolicy) -> Result<Vec<usize>, PlanError> {
    if n == 0 {
        return Err(PlanError::NoTargets);
    }
    let bad = |m: String| Err(PlanError::Phases(m));
    let sizes = match policy {
        PhasePolicy::Percentages(shares) => {
            if shares.is_empty() {
                return bad("give at least one share".to_owned());
            }
            let mut shares = shares.clone();
            if shares.last().is_some_and(|l| *l < 100) {
                shares.push(100);
            }
            let mut sizes = Vec::new();
            let mut done = 0usize;
            let mut last = 0u32;
            for (i, share) in shares.iter().enumerate() {
                if *share == 0 || *share > 100 || *share <= last {
                    return bad(format!(
                        "shares must rise from 1 to 100 %, got {share}% after {last}% (phase {})",
                        i + 1
                    ));
                }
                last = *share;
                let upto = (n * (*share as usize)).div_ceil(100);
                if upto == done {
                    return bad(format!(
                        "phase {} ({share}% of {n} racks) would be empty",
                        i + 1
                    ));
                }
                sizes.push(upto - done);
                done = upto;
            }
            sizes
        }
        PhasePolicy::Counts(counts) => {
            if counts.is_empty() || counts.contains(&0) {
                return bad("counts must be positive".to_owned());
            }
            let total: usize = counts.iter().sum();
            if total > n {
                return bad(format!(
                    "the counts add up to {total}, but the run has {n} racks"
                ));
            }
            let mut sizes = counts.clone();
            if total < n {
                sizes.push(n - total);
            }
            sizes
        }
        PhasePolicy::Equal(k) => {
            if *k == 0 || *k > n {
                return bad(format!("{k} equal phases of {n} racks: use 1 to {n}"));
            }
            (0..*k).map(|i| n / k + usize::from(i < n % k)).collect()
        }
    };
    Ok(sizes)
}

/// A rack a run may target, with the row it stands in (its `row` label,
/// else its location).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The rack's name.
    pub rack: String,
    /// Its row.
    pub row: String,
}

/// The racks in the order the run takes them.
///
/// * `Random { seed }`: a shuffle of the racks by name, the same for the
///   same seed.
/// * `RowByRow`: row by row (rows and racks by name): a row is done before
///   the next starts.
/// * `RoundRobinRows`: one rack of each row in turn, so a phase spreads
///   over the rows.
pub fn order(mut racks: Vec<Candidate>, ordering: &Ordering) -> Vec<Candidate> {
    racks.sort_by(|a, b| a.rack.cmp(&b.rack));
    match ordering {
        Ordering::Random { seed } => {
            let mut state = seed.unwrap_or(0);
            for i in (1..racks.len()).rev() {
                let j = usize::try_from(splitmix64(&mut state) % (i as u64 + 1)).unwrap_or(0);
                racks.swap(i, j);
            }
            racks
        }
        Ordering::RowByRow => {
            racks.sort_by(|a, b| (&a.row, &a.rack).cmp(&(&b.row, &b.rack)));
            racks
        }
        Ordering::RoundRobinRows => {
            let mut rows: std::collections::BTreeMap<
                String,
                std::collections::VecDeque<Candidate>,
            > = std::collections::BTreeMap::new();
            for r in racks {
                rows.entry(r.row.clone()).or_default().push_back(r);
            }
            let mut out = Vec::new();
            while rows.values().any(|q| !q.is_empty()) {
                for q in rows.values_mut() {
                    if let Some(r) = q.pop_front() {
                        out.push(r);
                    }
                }
            }
            out
        }
    }
}

/// SplitMix64: a small, well-mixed generator, enough for a reproducible
/// shuffle (not for secrets).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One target as the decision sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetView {
    /// Its phase (0-based).
    pub phase: usize,
    /// Its place in the run's order.
    pub seq: usize,
    /// Where it is.
    pub status: TargetStatus,
    /// A blocked target's next try (epoch ms).
    pub next_attempt_ms: Option<i64>,
}

/// The run as the decision sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunView {
    /// Its status.
    pub status: RunStatus,
    /// Why it is paused.
    pub reason: RunReason,
    /// The current phase (0-based).
    pub phase: usize,
    /// How many phases.
    pub phases: usize,
    /// At most this many targets submitted and not finished at once.
    pub max_concurrent: usize,
    /// Its safety gates (any one trips).
    pub gates: Vec<Gate>,
    /// Start the next phase when one completes without tripping a gate.
    pub auto_advance: bool,
    /// Failures an operator accepted by resuming after a gate tripped: in
    /// the current phase, and in the whole run. Gates count the failures
    /// beyond them.
    pub accepted: Accepted,
    /// Whether one of its maintenance windows is open now (true without
    /// windows).
    pub in_window: bool,
}

/// Failures accepted by a resume.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accepted {
    /// In the current phase.
    pub phase: usize,
    /// In the whole run.
    pub run: usize,
}

/// A tripped gate and its figure against its threshold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trip {
    /// The gate.
    pub gate: Gate,
    /// What it saw, e.g. `2 of 7 targets failed (28.6 %), threshold 10 %`.
    pub figure: String,
}

/// Outcome counts of some targets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Targets.
    pub planned: usize,
    /// Completed.
    pub completed: usize,
    /// Failed or terminated.
    pub failed: usize,
    /// Skipped.
    pub skipped: usize,
    /// Submitted and not finished.
    pub running: usize,
}

impl Counts {
    /// Counts of `targets`.
    pub fn of<'a>(targets: impl IntoIterator<Item = &'a TargetView>) -> Counts {
        let mut c = Counts::default();
        for t in targets {
            c.planned += 1;
            match t.status {
                TargetStatus::Completed => c.completed += 1,
                TargetStatus::Failed | TargetStatus::Terminated => c.failed += 1,
                TargetStatus::Skipped => c.skipped += 1,
                TargetStatus::Submitted => c.running += 1,
                TargetStatus::Pending | TargetStatus::Blocked => {}
            }
        }
        c
    }

    /// Every target has an outcome.
    pub fn finished(&self) -> bool {
        self.completed + self.failed + self.skipped == self.planned
    }
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} planned, {} completed, {} failed, {} running",
            self.planned, self.completed, self.failed, self.running
        )
    }
}

/// The first gate that trips on these counts (failures beyond those
/// accepted), with its figure.
pub fn tripped(gates: &[Gate], phase: Counts, run: Counts, accepted: Accepted) -> Option<Trip> {
    gates.iter().find_map(|gate| {
        let (counts, accepted) = match gate.scope {
            GateScope::Phase => (phase, accepted.phase),
            GateScope::Run => (run, accepted.run),
        };
        let failed = counts.failed.saturating_sub(accepted);
        let planned = counts.planned.max(1);
        let scope = match gate.scope {
            GateScope::Phase => "in the phase",
            GateScope::Run => "in the run",
        };
        let trips = match gate.kind {
            GateKind::FailureRate { percent } => {
                failed > 0 && failed * 100 >= usize::try_from(percent).unwrap_or(100) * planned
            }
            GateKind::FailureCount { count } => {
                failed >= usize::try_from(count).unwrap_or(usize::MAX)
            }
        };
        trips.then(|| Trip {
            gate: *gate,
            figure: match gate.kind {
                GateKind::FailureRate { percent } => format!(
                    "{failed} of {} targets {scope} failed ({:.1} %), threshold {percent} %",
                    counts.planned,
                    failed as f64 * 100.0 / planned as f64
                ),
                GateKind::FailureCount { count } => {
                    format!("{failed} targets {scope} failed, threshold {count}")
                }
            },
        })
    })
}

/// What a run does next.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Its status now.
    pub status: RunStatus,
    /// Why (paused) — `None` otherwise.
    pub reason: RunReason,
    /// Its phase now.
    pub phase: usize,
    /// Whether the phase moved on (accepted failures of the phase reset).
    pub advanced: bool,
    /// The targets to submit now (indexes into the slice given, in order).
    pub submit: Vec<usize>,
    /// The gate that tripped, if one did.
    pub trip: Option<Trip>,
}

/// What `run` does with `targets` at `now_ms`: gates first (a tripped gate
/// pauses it and nothing is submitted), then the phase (complete: the run
/// ends after the last, else advances or pauses at the phase gate), then
/// the window (closed: it pauses until one opens), then as many of the
/// phase's pending targets, in order, as `max_concurrent` leaves room for
/// (blocked ones once their retry is due).
pub fn decide(run: &RunView, targets: &[TargetView], now_ms: i64) -> Decision {
    let mut d = Decision {
        status: run.status,
        reason: run.reason,
        phase: run.phase,
        advanced: false,
        submit: Vec::new(),
        trip: None,
    };
    match (run.status, run.reason) {
        (RunStatus::Pending, _) => {
            d.status = RunStatus::Running;
            d.reason = RunReason::None;
        }
        (RunStatus::Running, _) => {}
        (RunStatus::Paused, RunReason::OutsideWindow) if run.in_window => {
            d.status = RunStatus::Running;
            d.reason = RunReason::None;
        }
        _ => return d,
    }
    let mut accepted = run.accepted;
    let all = Counts::of(targets);
    loop {
        let phase = Counts::of(targets.iter().filter(|t| t.phase == d.phase));
        if let Some(trip) = tripped(&run.gates, phase, all, accepted) {
            d.status = RunStatus::Paused;
            d.reason = RunReason::SafetyGate;
            d.trip = Some(trip);
            return d;
        }
        if !phase.finished() {
            break;
        }
        if d.phase + 1 >= run.phases {
            d.status = if all.failed == 0 {
                RunStatus::Completed
            } else if all.completed == 0 {
                RunStatus::Failed
            } else {
                RunStatus::CompletedWithFailures
            };
            d.reason = RunReason::None;
            return d;
        }
        if !run.auto_advance {
            d.status = RunStatus::Paused;
            d.reason = RunReason::PhaseGate;
            return d;
        }
        d.phase += 1;
        d.advanced = true;
        accepted.phase = 0;
    }
    if !run.in_window {
        d.status = RunStatus::Paused;
        d.reason = RunReason::OutsideWindow;
        return d;
    }
    let room = run.max_concurrent.saturating_sub(all.running);
    let mut next: Vec<usize> = (0..targets.len())
        .filter(|&i| {
            let t = &targets[i];
            t.phase == d.phase
                && match t.status {
                    TargetStatus::Pending => true,
                    TargetStatus::Blocked => t.next_attempt_ms.is_none_or(|at| at <= now_ms),
                    _ => false,
                }
        })
        .collect();
    next.sort_by_key(|&i| targets[i].seq);
    next.truncate(room);
    d.submit = next;
    d
}

/// How long a target refused for a conflict waits before its next try
/// (`attempt` 1 is the first retry): the initial delay doubling up to the
/// maximum.
pub fn retry_delay(policy: &RetryPolicy, attempt: u32) -> Duration {
    let initial = Duration::from_secs(policy.initial_seconds);
    let max = Duration::from_secs(policy.max_seconds);
    let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(20));
    initial.saturating_mul(factor).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pct(v: &[u32]) -> PhasePolicy {
        PhasePolicy::Percentages(v.to_vec())
    }

    #[test]
    fn phases_round_up_cumulatively() {
        assert_eq!(
            phase_sizes(1000, &pct(&[1, 10, 50, 100])).unwrap(),
            [10, 90, 400, 500]
        );
        assert_eq!(phase_sizes(3, &pct(&[1])).unwrap(), [1, 2]);
        assert_eq!(phase_sizes(7, &pct(&[50, 100])).unwrap(), [4, 3]);
        assert_eq!(phase_sizes(20, &pct(&[10, 50, 100])).unwrap(), [2, 8, 10]);
        let e = phase_sizes(5, &pct(&[1, 10, 100])).unwrap_err().to_string();
        assert!(e.contains("phase 2 (10% of 5 racks) would be empty"), "{e}");
        assert!(phase_sizes(5, &pct(&[50, 40])).is_err());
        assert!(phase_sizes(5, &pct(&[0, 100])).is_err());
        assert_eq!(
            phase_sizes(30, &PhasePolicy::Counts(vec![2, 20])).unwrap(),
            [2, 20, 8]
        );
        assert_eq!(
            phase_sizes(22, &PhasePolicy::Counts(vec![2, 20])).unwrap(),
            [2, 20]
        );
        assert!(phase_sizes(10, &PhasePolicy::Counts(vec![2, 20])).is_err());
        assert_eq!(
            phase_sizes(10, &PhasePolicy::Equal(4)).unwrap(),
            [3, 3, 2, 2]
        );
        assert!(phase_sizes(3, &PhasePolicy::Equal(4)).is_err());
        assert_eq!(
            phase_sizes(0, &PhasePolicy::Equal(1)),
            Err(PlanError::NoTargets)
        );
        // No cap on the number of racks (the reference refuses 101).
        assert_eq!(phase_sizes(5000, &pct(&[1, 100])).unwrap(), [50, 4950]);
    }

    fn racks(rows: &[(&str, &str)]) -> Vec<Candidate> {
        rows.iter()
            .map(|(r, row)| Candidate {
                rack: (*r).to_owned(),
                row: (*row).to_owned(),
            })
            .collect()
    }

    fn names(c: &[Candidate]) -> Vec<&str> {
        c.iter().map(|c| c.rack.as_str()).collect()
    }

    #[test]
    fn orders_by_seed_row_or_round_robin() {
        let all = racks(&[
            ("b2", "B"),
            ("a1", "A"),
            ("a2", "A"),
            ("c1", "C"),
            ("b1", "B"),
            ("a3", "A"),
        ]);
        let one = order(all.clone(), &Ordering::Random { seed: Some(7) });
        let again = order(all.clone(), &Ordering::Random { seed: Some(7) });
        let other = order(all.clone(), &Ordering::Random { seed: Some(8) });
        assert_eq!(one, again);
        assert_ne!(names(&one), names(&other));
        let mut sorted = names(&one);
        sorted.sort();
        assert_eq!(sorted, ["a1", "a2", "a3", "b1", "b2", "c1"]);
        assert_eq!(
            names(&order(all.clone(), &Ordering::RowByRow)),
            ["a1", "a2", "a3", "b1", "b2", "c1"]
        );
        assert_eq!(
            names(&order(all, &Ordering::RoundRobinRows)),
            ["a1", "b1", "c1", "a2", "b2", "a3"]
        );
    }

    fn target(phase: usize, seq: usize, status: TargetStatus) -> TargetView {
        TargetView {
            phase,
            seq,
            status,
            next_attempt_ms: None,
        }
    }

    fn run(gates: Vec<Gate>) -> RunView {
        RunView {
            status: RunStatus::Running,
            reason: RunReason::None,
            phase: 0,
            phases: 2,
            max_concurrent: 2,
            gates,
            auto_advance: false,
            accepted: Accepted::default(),
            in_window: true,
        }
    }

    fn rate(percent: u32, scope: GateScope) -> Gate {
        Gate {
            kind: GateKind::FailureRate { percent },
            scope,
        }
    }

    use TargetStatus::{Completed, Failed, Pending, Submitted};

    #[test]
    fn submits_in_order_up_to_the_concurrency() {
        let r = run(vec![rate(50, GateScope::Phase)]);
        let t = [
            target(0, 2, Pending),
            target(0, 0, Submitted),
            target(0, 1, Pending),
            target(1, 3, Pending),
        ];
        let d = decide(&r, &t, 0);
        assert_eq!((d.status, d.submit.clone()), (RunStatus::Running, vec![2]));
    }

    #[test]
    fn a_gate_trips_before_anything_more_starts() {
        let r = run(vec![rate(25, GateScope::Phase)]);
        let t = [
            target(0, 0, Failed),
            target(0, 1, Completed),
            target(0, 2, Pending),
            target(0, 3, Pending),
        ];
        let d = decide(&r, &t, 0);
        assert_eq!(
            (d.status, d.reason, d.submit.len()),
            (RunStatus::Paused, RunReason::SafetyGate, 0)
        );
        assert_eq!(
            d.trip.unwrap().figure,
            "1 of 4 targets in the phase failed (25.0 %), threshold 25 %"
        );
        // Accepted by a resume: the gate counts failures beyond it.
        let mut resumed = r.clone();
        resumed.accepted = Accepted { phase: 1, run: 1 };
        let d = decide(&resumed, &t, 0);
        assert_eq!(
            (d.status, d.submit.clone()),
            (RunStatus::Running, vec![2, 3])
        );
        // A count gate over the run.
        let r = run(vec![Gate {
            kind: GateKind::FailureCount { count: 2 },
            scope: GateScope::Run,
        }]);
        let t = [
            target(0, 0, Failed),
            target(1, 1, Failed),
            target(1, 2, Pending),
        ];
        assert_eq!(decide(&r, &t, 0).reason, RunReason::SafetyGate);
    }

    #[test]
    fn phases_end_at_a_gate_or_advance_and_the_run_ends() {
        let r = run(vec![rate(50, GateScope::Phase)]);
        let t = [target(0, 0, Completed), target(1, 1, Pending)];
        let d = decide(&r, &t, 0);
        assert_eq!(
            (d.status, d.reason),
            (RunStatus::Paused, RunReason::PhaseGate)
        );
        let auto = RunView {
            auto_advance: true,
            ..r.clone()
        };
        let d = decide(&auto, &t, 0);
        assert_eq!((d.phase, d.advanced, d.submit.clone()), (1, true, vec![1]));
        let done = [target(0, 0, Completed), target(1, 1, Completed)];
        let last = RunView {
            phase: 1,
            ..r.clone()
        };
        assert_eq!(decide(&last, &done, 0).status, RunStatus::Completed);
        let some = [target(0, 0, Completed), target(1, 1, Failed)];
        let lenient = RunView {
            gates: vec![Gate {
                kind: GateKind::FailureCount { count: 5 },
                scope: GateScope::Run,
            }],
            ..last.clone()
        };
        assert_eq!(
            decide(&lenient, &some, 0).status,
            RunStatus::CompletedWithFailures
        );
    }

    #[test]
    fn outside_a_window_it_pauses_and_resumes_when_one_opens() {
        let mut r = run(vec![]);
        r.in_window = false;
        let t = [target(0, 0, Pending)];
        let d = decide(&r, &t, 0);
        assert_eq!(
            (d.status, d.reason),
            (RunStatus::Paused, RunReason::OutsideWindow)
        );
        r.status = RunStatus::Paused;
        r.reason = RunReason::OutsideWindow;
        assert!(decide(&r, &t, 0).submit.is_empty());
        r.in_window = true;
        let d = decide(&r, &t, 0);
        assert_eq!((d.status, d.submit.clone()), (RunStatus::Running, vec![0]));
        // An operator's pause is not lifted by a window.
        r.status = RunStatus::Paused;
        r.reason = RunReason::OperatorPaused;
        assert_eq!(decide(&r, &t, 0).status, RunStatus::Paused);
    }

    #[test]
    fn blocked_targets_wait_for_their_retry_and_back_off() {
        let r = run(vec![]);
        let mut t = [target(0, 0, TargetStatus::Blocked)];
        t[0].next_attempt_ms = Some(1000);
        assert!(decide(&r, &t, 999).submit.is_empty());
        assert_eq!(decide(&r, &t, 1000).submit, vec![0]);
        let p = RetryPolicy::default();
        let delays: Vec<u64> = (1..=6).map(|a| retry_delay(&p, a).as_secs()).collect();
        assert_eq!(delays, [30, 60, 120, 240, 300, 300]);
    }
}
