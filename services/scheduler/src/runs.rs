//! Phased rollouts ("runs"): the `run.*` endpoints and the dispatcher that
//! moves runs on. The decisions (phases, order, gates, what to submit) are
//! `flow_decisions::rollout`'s; the runs and their targets are the store's
//! (`flow_store::runs`). Every scheduler runs the dispatcher; a run is
//! worked on under its row lock (`FOR UPDATE SKIP LOCKED`), so one
//! scheduler at a time acts on it. Each target's task is submitted through
//! the same path as `task.submit`, keyed `run/<run>/<rack>/<attempt>`: a
//! scheduler that dies after submitting and before recording finds the
//! task again (a duplicate) instead of making a second.

use std::collections::BTreeMap;
use std::time::Duration;

use flow_decisions::calendar::{self, WindowRule};
use flow_decisions::rollout::{self, Accepted, Candidate, Counts, RunView, TargetView};
use flow_protocol::api::{ApiError, ErrorCode, Submission, TaskSubmit};
use flow_protocol::ids::RackRef;
use flow_protocol::run::{
    GateKind, GateState, Ordering, RunAdvance, RunCreate, RunReason, RunRecord, RunStatus,
    TargetStatus,
};
use flow_protocol::task::timestamp;
use flow_protocol::{RunId, TaskId, TaskStatus};
use flow_store::StoreError;
use flow_store::runs::{Run, RunTx, Target};
use flow_store::tasks::Origin;
use flow_telemetry::ErrorChain;
use tokio_util::sync::CancellationToken;

use crate::background::{Driver, Next, Period};
use crate::error::{invalid_request, store_error};
use crate::schedules::check_name;
use crate::service::TaskService;
use crate::submit::Scope;

/// How often the dispatcher looks at the open runs (a create, resume or
/// advance wakes it at once). A target's task result is seen within this.
pub const RUN_POLL: Duration = Duration::from_millis(500);

/// Runs worked on per look.
const RUN_BATCH: i64 = 10;

/// The most racks one run may target (the reference refuses more than
/// 100; a submission takes at most 1,000).
pub const MAX_RACKS_PER_RUN: usize = 20_000;

fn conflict(message: String) -> ApiError {
    ApiError::new(ErrorCode::Conflict, message)
}

fn invalid(problems: Vec<String>) -> ApiError {
    invalid_request("run", problems)
}

fn time_of(ms: i64) -> time::OffsetDateTime {
    timestamp::from_ms(u64::try_from(ms).unwrap_or(0))
}

/// Whether one of the windows is open at `now_ms` (true without windows),
/// and the end of the open one.
fn window_now(rules: &[WindowRule], now_ms: i64) -> (bool, Option<i64>) {
    if rules.is_empty() {
        return (true, None);
    }
    match calendar::window_at(rules, now_ms) {
        Ok(Some(o)) if o.contains(now_ms) => (true, Some(o.end_ms)),
        _ => (false, None),
    }
}

fn views(targets: &[Target]) -> Vec<TargetView> {
    targets
        .iter()
        .map(|t| TargetView {
            phase: t.phase,
            seq: t.seq,
            status: t.status,
            next_attempt_ms: t.next_attempt_ms,
        })
        .collect()
}

impl TaskService {
    /// `run.create`: checks the request, resolves its racks (by ID, name or
    /// label) once, orders them, cuts them into phases and stores the run
    /// (`pending`, until a dispatcher starts it).
    pub async fn create_run(&self, r: RunCreate) -> Result<RunRecord, ApiError> {
        let (run, rows) = self.build_run(r).await?;
        let record = self
            .store
            .insert_run(&run, &rows)
            .await
            .map_err(store_error)?;
        tracing::info!(run_id = %record.id, name = %record.name, racks = rows.len(), phases = run.phase_count, "run created");
        self.poke_runs();
        Ok(record)
    }

    /// `run.plan`: the run `run.create` would store — its racks in order,
    /// cut into phases, its gates, the window it would start in — and what
    /// each rack's task would do now ([`TaskService::plan_task`]'s per-rack
    /// plan), creating nothing.
    pub async fn plan_run(
        &self,
        r: RunCreate,
    ) -> Result<flow_protocol::preview::RunPlanReply, ApiError> {
        let (run, rows) = self.build_run(r).await?;
        let mut phases: Vec<flow_protocol::preview::PhasePlan> = Vec::new();
        for (_, rack, phase, _) in &rows {
            // Numbered from 1, as `run.targets` numbers them.
            let phase = u32::try_from(*phase + 1).unwrap_or(u32::MAX);
            match phases.last_mut() {
                Some(p) if p.phase == phase => p.racks.push(rack.clone()),
                _ => phases.push(flow_protocol::preview::PhasePlan {
                    phase,
                    racks: vec![rack.clone()],
                }),
            }
        }
        let rules = calendar::window_rules(&run.windows, &run.timezone).map_err(invalid)?;
        let now = self.store.now_ms().await.map_err(store_error)?;
        let window = if rules.is_empty() {
            None
        } else {
            calendar::window_at(&rules, now)
                .map_err(|e| invalid(vec![format!("windows: {e}")]))?
                .map(|o| flow_protocol::preview::WindowPlan {
                    opens: time_of(o.start_ms),
                    closes: time_of(o.end_ms),
                    open_at_firing: o.contains(now),
                })
        };
        let mut racks = Vec::with_capacity(rows.len());
        for (_, rack, _, _) in &rows {
            let mut task = run.task.clone();
            task.request_id = format!("run-plan/{}/{rack}", run.id);
            task.racks = vec![RackRef(rack.clone())];
            task.labels = Default::default();
            racks.extend(self.plan_task(&task).await?.results);
        }
        Ok(flow_protocol::preview::RunPlanReply {
            name: run.name,
            ordering: run.ordering,
            phases,
            max_concurrent: u32::try_from(run.max_concurrent).unwrap_or(u32::MAX),
            gates: run.gates,
            auto_advance: run.auto_advance,
            timezone: run.timezone,
            window,
            racks,
        })
    }

    /// The run `run.create` stores and its targets (rack ID, name, phase,
    /// order): every check of the request, its racks resolved once,
    /// ordered and cut into phases.
    async fn build_run(
        &self,
        r: RunCreate,
    ) -> Result<(Run, Vec<(flow_protocol::RackId, String, usize, usize)>), ApiError> {
        check_name(&r.name)?;
        let mut problems = Vec::new();
        let task = r.task.clone();
        if !task.request_id.is_empty() {
            problems.push(
                "task.request_id: set per target (run/<run>/<rack>/<attempt>), leave it out"
                    .to_owned(),
            );
        }
        if !task.components.is_empty() {
            problems.push(
                "task.components: a run's targets are whole racks (by ID, name or label)"
                    .to_owned(),
            );
        }
        if task.not_before.is_some() || task.not_after.is_some() {
            problems.push(
                "task.not_before, task.not_after: a run's targets start inside its maintenance \
                 windows (windows)"
                    .to_owned(),
            );
        }
        // The request's own checks, but for its count of racks: a run's
        // limit is MAX_RACKS_PER_RUN, not one submission's.
        let mut probe = task.clone();
        probe.request_id = "run".to_owned();
        probe.racks.truncate(1);
        if let Err(e) = probe.check() {
            problems.push(format!("task.{}", e.message));
        }
        if task.racks.len() > MAX_RACKS_PER_RUN {
            problems.push(format!(
                "task.racks: at most {MAX_RACKS_PER_RUN} per run, got {}",
                task.racks.len()
            ));
        }
        if r.max_concurrent == 0 {
            problems.push("max_concurrent: must be at least 1".to_owned());
        }
        if r.gates.is_empty() {
            problems.push(
                "gates: give at least one (failure_rate or failure_count); a rollout without a \
                 safety gate is a plain submission"
                    .to_owned(),
            );
        }
        for (i, g) in r.gates.iter().enumerate() {
            match g.kind {
                GateKind::FailureRate { percent } if percent == 0 || percent > 100 => {
                    problems.push(format!(
                        "gates[{i}]: percent must be 1 to 100, got {percent}"
                    ));
                }
                GateKind::FailureCount { count: 0 } => {
                    problems.push(format!("gates[{i}]: count must be at least 1"));
                }
                _ => {}
            }
        }
        let p = r.retry;
        if p.timeout_seconds == 0 || p.initial_seconds == 0 || p.max_seconds < p.initial_seconds {
            problems.push(
                "retry: timeout and delays must be positive, the maximum at least the initial"
                    .to_owned(),
            );
        }
        let timezone = if r.timezone.is_empty() {
            "UTC".to_owned()
        } else {
            r.timezone.clone()
        };
        if let Err(e) = calendar::time_zone(&timezone) {
            problems.push(e.to_string());
        }
        if let Err(more) = calendar::window_rules(&r.windows, &timezone) {
            problems.extend(more);
        }
        if !problems.is_empty() {
            return Err(invalid(problems));
        }
        let targets = self.targets_within(&task, MAX_RACKS_PER_RUN).await?;
        let racks = self
            .store
            .list_racks(&Default::default())
            .await
            .map_err(store_error)?
            .racks;
        let by_name: BTreeMap<&str, _> = racks.iter().map(|r| (r.name.as_str(), r)).collect();
        let by_id: BTreeMap<_, _> = racks.iter().map(|r| (r.id, r)).collect();
        let mut candidates = Vec::new();
        for (rack, _) in &targets.racks {
            let found = rack
                .as_id()
                .and_then(|id| by_id.get(&id).copied())
                .or_else(|| by_name.get(rack.0.as_str()).copied())
                .ok_or_else(|| {
                    ApiError::new(ErrorCode::NotFound, format!("rack {:?} not found", rack.0))
                })?;
            candidates.push(Candidate {
                rack: found.name.clone(),
                row: found
                    .labels
                    .get("row")
                    .cloned()
                    .unwrap_or_else(|| found.location.clone()),
            });
        }
        let ordering = match r.ordering {
            Ordering::Random { seed: None } => Ordering::Random {
                seed: Some(uuid::Uuid::new_v4().as_u64_pair().0),
            },
            other => other,
        };
        let sizes = rollout::phase_sizes(candidates.len(), &r.phases)
            .map_err(|e| invalid(vec![e.to_string()]))?;
        let ordered = rollout::order(candidates, &ordering);
        let mut rows = Vec::new();
        let mut phase_of = sizes
            .iter()
            .enumerate()
            .flat_map(|(phase, n)| std::iter::repeat_n(phase, *n));
        for (seq, c) in ordered.iter().enumerate() {
            let rack = by_name[c.rack.as_str()];
            rows.push((rack.id, c.rack.clone(), phase_of.next().unwrap_or(0), seq));
        }
        let now = time_of(self.store.now_ms().await.map_err(store_error)?);
        let run = Run {
            id: RunId::new(),
            name: r.name,
            description: r.description,
            task,
            status: RunStatus::Pending,
            reason: RunReason::None,
            phase: 0,
            phase_count: sizes.len(),
            phase_policy: r.phases,
            max_concurrent: usize::try_from(r.max_concurrent).unwrap_or(usize::MAX),
            gates: r.gates,
            auto_advance: r.auto_advance,
            ordering,
            windows: r.windows,
            timezone,
            retry: r.retry,
            gate: None,
            accepted: (0, 0),
            created_at: now,
            updated_at: now,
            finished_at: None,
        };
        Ok((run, rows))
    }

    /// Wakes the run dispatcher.
    pub fn poke_runs(&self) {
        self.run_poke.notify_one();
    }

    /// A control on one run under its lock: `change` edits the run (or
    /// refuses), with its targets at hand; the run is saved and returned.
    async fn control(
        &self,
        reference: &str,
        change: impl FnOnce(&mut Run, &[Target], i64) -> Result<(), ApiError>,
    ) -> Result<(RunRecord, Vec<TaskId>), ApiError> {
        let mut tx = self.store.begin_runs().await.map_err(store_error)?;
        let mut run = tx.find(reference, true).await.map_err(store_error)?;
        let mut targets = tx.targets(run.id).await.map_err(store_error)?;
        let now = tx.now_ms();
        change(&mut run, &targets, now)?;
        tx.save_run(&run).await.map_err(store_error)?;
        // A cancelled run skips what it had not started and cancels what runs.
        let mut cancel = Vec::new();
        if run.status == RunStatus::Cancelled {
            for t in &mut targets {
                match t.status {
                    TargetStatus::Pending | TargetStatus::Blocked => {
                        t.status = TargetStatus::Skipped;
                        t.message = "the run was cancelled".to_owned();
                        tx.save_target(run.id, t).await.map_err(store_error)?;
                    }
                    TargetStatus::Submitted => cancel.extend(t.task_id),
                    _ => {}
                }
            }
        }
        tx.commit().await.map_err(store_error)?;
        self.poke_runs();
        Ok((run.record(&targets), cancel))
    }

    /// `run.pause`: a pending or running run stops submitting (its open
    /// tasks go on). A paused run keeps the reason it has.
    pub async fn pause_run(&self, reference: &str) -> Result<RunRecord, ApiError> {
        self.control(reference, |run, _, _| match run.status {
            RunStatus::Pending | RunStatus::Running => {
                run.status = RunStatus::Paused;
                run.reason = RunReason::OperatorPaused;
                Ok(())
            }
            RunStatus::Paused => Ok(()),
            s => Err(conflict(format!("run {:?} has ended ({s})", run.name))),
        })
        .await
        .map(|(r, _)| r)
    }

    /// `run.resume`: a paused run goes on. After a safety gate, the
    /// failures that tripped it are accepted: the gates count failures
    /// beyond them. At a phase gate use `advance`.
    pub async fn resume_run(&self, reference: &str) -> Result<RunRecord, ApiError> {
        self.control(reference, |run, targets, _| {
            match (run.status, run.reason) {
                (RunStatus::Paused, RunReason::PhaseGate) => Err(conflict(format!(
                    "run {:?} completed phase {} of {} and waits at its phase gate: advance it \
                 (flow run advance --expect-phase {})",
                    run.name,
                    run.phase + 1,
                    run.phase_count,
                    run.phase + 1
                ))),
                (RunStatus::Paused, reason) => {
                    if reason == RunReason::SafetyGate {
                        let views = views(targets);
                        let phase = Counts::of(views.iter().filter(|t| t.phase == run.phase));
                        run.accepted = (phase.failed, Counts::of(&views).failed);
                    }
                    run.status = RunStatus::Running;
                    run.reason = RunReason::None;
                    Ok(())
                }
                (RunStatus::Pending | RunStatus::Running, _) => Ok(()),
                (s, _) => Err(conflict(format!("run {:?} has ended ({s})", run.name))),
            }
        })
        .await
        .map(|(r, _)| r)
    }

    /// `run.advance`: at a phase gate, the next phase starts. With
    /// `expect_phase`, refused unless the run is at that phase.
    pub async fn advance_run(&self, r: &RunAdvance) -> Result<RunRecord, ApiError> {
        self.control(&r.run, |run, _, _| {
            if (run.status, run.reason) != (RunStatus::Paused, RunReason::PhaseGate) {
                return Err(conflict(format!(
                    "run {:?} is {} ({}), not waiting at a phase gate",
                    run.name, run.status, run.reason
                )));
            }
            let at = u32::try_from(run.phase + 1).unwrap_or(u32::MAX);
            if let Some(expect) = r.expect_phase
                && expect != at
            {
                return Err(conflict(format!(
                    "run {:?} is at phase {at} of {}, not {expect}",
                    run.name, run.phase_count
                )));
            }
            run.phase += 1;
            run.accepted.0 = 0;
            run.status = RunStatus::Running;
            run.reason = RunReason::None;
            Ok(())
        })
        .await
        .map(|(r, _)| r)
    }

    /// `run.cancel`: the run ends; targets not started are skipped and the
    /// open tasks are cancelled (each at its next action boundary).
    pub async fn cancel_run(&self, reference: &str) -> Result<RunRecord, ApiError> {
        let (record, cancel) = self
            .control(reference, |run, _, _| {
                if run.status.is_final() {
                    return Err(conflict(format!(
                        "run {:?} has ended ({})",
                        run.name, run.status
                    )));
                }
                run.status = RunStatus::Cancelled;
                run.reason = RunReason::None;
                Ok(())
            })
            .await?;
        for task in cancel {
            if let Err(error) = self.cancel(task).await {
                tracing::warn!(run_id = %record.id, task_id = %task, error = %ErrorChain(&error), "a run's task could not be cancelled");
            }
        }
        self.poke();
        Ok(record)
    }

    /// Moves open runs on until `stop`: every [`RUN_POLL`], or when poked.
    pub async fn run_runs(self, stop: CancellationToken) {
        let driver = Driver {
            name: "runs",
            period: Period::Rest(RUN_POLL),
            poke: Some(&self.run_poke),
        };
        driver
            .drive(&stop, |_| async {
                self.dispatch_runs().await.map(|()| Next::Wait)
            })
            .await;
    }

    async fn dispatch_runs(&self) -> Result<(), StoreError> {
        let mut tx = self.store.begin_runs().await?;
        let ids = tx.claim_active(RUN_BATCH).await?;
        let mut submitted = false;
        for id in ids {
            submitted |= self.step_run(&mut tx, id).await?;
        }
        tx.commit().await?;
        if submitted {
            self.poke();
        }
        Ok(())
    }

    /// One look at a locked run: its targets' tasks read, the decision
    /// applied, its submissions made. Whether anything was submitted.
    async fn step_run(&self, tx: &mut RunTx, id: RunId) -> Result<bool, StoreError> {
        let mut run = tx.find(&id.to_string(), false).await?;
        let mut targets = tx.targets(id).await?;
        let now = tx.now_ms();
        for t in &mut targets {
            if t.status != TargetStatus::Submitted {
                continue;
            }
            let next = match &t.task {
                Some((TaskStatus::Completed, _)) => Some((TargetStatus::Completed, String::new())),
                Some((TaskStatus::Failed, m)) => Some((TargetStatus::Failed, m.clone())),
                Some((TaskStatus::Terminated, m)) => Some((TargetStatus::Terminated, m.clone())),
                Some(_) => None,
                None => Some((TargetStatus::Failed, "its task is gone".to_owned())),
            };
            if let Some((status, message)) = next {
                t.status = status;
                t.message = message;
                tx.save_target(id, t).await?;
            }
        }
        let rules = calendar::window_rules(&run.windows, &run.timezone).unwrap_or_default();
        let (in_window, window_end) = window_now(&rules, now);
        let view = RunView {
            status: run.status,
            reason: run.reason,
            phase: run.phase,
            phases: run.phase_count,
            max_concurrent: run.max_concurrent,
            gates: run.gates.clone(),
            auto_advance: run.auto_advance,
            accepted: Accepted {
                phase: run.accepted.0,
                run: run.accepted.1,
            },
            in_window,
        };
        let decision = rollout::decide(&view, &views(&targets), now);
        let before = (run.status, run.reason, run.phase);
        run.status = decision.status;
        run.reason = decision.reason;
        run.phase = decision.phase;
        if decision.advanced {
            run.accepted.0 = 0;
        }
        if let Some(trip) = &decision.trip {
            tracing::warn!(run_id = %id, name = %run.name, phase = run.phase + 1, figure = %trip.figure, "safety gate tripped; run paused");
            run.gate = Some(GateState {
                gate: trip.gate,
                figure: trip.figure.clone(),
                at: time_of(now),
            });
        }
        let mut submitted = false;
        for i in decision.submit {
            let t = &mut targets[i];
            let request = target_request(&run, t, window_end);
            // A rack with components locked by a hardware event (a leak)
            // is skipped, with the lock's message: it is not a failure of
            // the run, and it must not be retried until cleared.
            match self
                .lock_refusal(&request, &RackRef(t.rack.clone()), &Scope::Whole)
                .await
            {
                Ok(Some(locked)) => {
                    tracing::warn!(run_id = %id, rack = %t.rack, reason = %locked.message, "run target skipped: locked by a hardware event");
                    t.status = TargetStatus::Skipped;
                    t.message = locked.message;
                    t.next_attempt_ms = None;
                    tx.save_target(id, t).await?;
                    continue;
                }
                Ok(None) => {}
                // Submitting says the same, and records it.
                Err(_) => {}
            }
            t.attempts += 1;
            let outcome = self
                .submit_rack(
                    &request,
                    &RackRef(t.rack.clone()),
                    &Scope::Whole,
                    Origin::Run(id),
                )
                .await
                .unwrap_or_else(Submission::Refused);
            match outcome {
                Submission::Created(task)
                | Submission::Duplicate(task)
                | Submission::Queued { task_id: task, .. } => {
                    t.status = TargetStatus::Submitted;
                    t.task_id = Some(task);
                    t.message.clear();
                    t.next_attempt_ms = None;
                    submitted = true;
                }
                Submission::Refused(e) if e.code == ErrorCode::Conflict => {
                    let first = *t.first_blocked_ms.get_or_insert(now);
                    let blocked_for =
                        Duration::from_millis(u64::try_from(now - first).unwrap_or(0));
                    t.status = TargetStatus::Blocked;
                    t.message = e.message.clone();
                    if blocked_for >= Duration::from_secs(run.retry.timeout_seconds) {
                        run.status = RunStatus::Paused;
                        run.reason = RunReason::ConflictRetryTimeout;
                        tracing::warn!(run_id = %id, rack = %t.rack, "a target stayed blocked past the retry timeout; run paused");
                    }
                    let tries = t.attempts.saturating_sub(1).max(1);
                    let delay = rollout::retry_delay(&run.retry, tries);
                    t.next_attempt_ms =
                        Some(now + i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
                }
                Submission::Refused(e) => {
                    t.status = TargetStatus::Failed;
                    t.message = e.to_string();
                }
            }
            tx.save_target(id, t).await?;
            // A refusal counts against the gates: look again next time
            // before submitting more.
            if matches!(t.status, TargetStatus::Failed)
                || run.reason == RunReason::ConflictRetryTimeout
            {
                break;
            }
        }
        if (run.status, run.reason, run.phase) != before || decision.trip.is_some() {
            tracing::info!(run_id = %id, name = %run.name, status = %run.status, reason = %run.reason, phase = run.phase + 1, "run moved on");
        }
        tx.save_run(&run).await?;
        Ok(submitted)
    }
}

/// The task request for one target: the run's request for this rack alone,
/// keyed by run, rack and attempt, described by the run and phase, and
/// bounded by the open window's end.
fn target_request(run: &Run, t: &Target, window_end: Option<i64>) -> TaskSubmit {
    let mut request = run.task.clone();
    request.racks = vec![RackRef(t.rack_id.to_string())];
    request.labels = Default::default();
    request.components.clear();
    request.request_id = format!("run/{}/{}/{}", run.id, t.rack_id, t.attempts + 1);
    let label = format!(
        "{} — phase {} of {}",
        run.name,
        t.phase + 1,
        run.phase_count
    );
    request.description = if request.description.is_empty() {
        label
    } else {
        format!("{} ({label})", request.description)
    };
    request.not_after = window_end.map(time_of);
    request
}
