//! The step executor: advances a step job as far as it can without waiting,
//! and says when to come back. Pure over its inputs: the hardware registry
//! and the clock are injected; all state is in the [`Checkpoint`].

use std::time::Duration;

use flow_hardware::{
    ComponentManager, ComponentTarget, DecommissionState, ErrorClass, FirmwareState, HardwareError,
    ManagerRegistry, PowerStatus,
};
use flow_protocol::power::SentCommand;
use flow_rules::defaults::{DECOMMISSION_CONTROL_ATTEMPTS, DECOMMISSION_CONTROL_TIMEOUT};
use flow_rules::duration::format_short;
use flow_rules::{Action, ComponentType, OperationCode, PowerOperation, PowerState, RetryPolicy};

use crate::checkpoint::{ActionRecord, Command, ComponentState, ComponentStatus};
use crate::clock::after;
use crate::command::{self, Decided};
use crate::gate::PowerGate;
use crate::journal::Journal;
use crate::observe::{Observer, Seen};
use crate::{Checkpoint, Clock, StepJob};
use flow_protocol::state::ObservationSource;

/// How long status calls of `WaitDecommissioned` may fail in a row before
/// the action fails: "five minutes of consecutive status-call failures"
/// (`docs/rule-format.md`, "WaitDecommissioned" and "Defaults").
pub const DECOMMISSION_STATUS_FAILURE_LIMIT: Duration = Duration::from_secs(5 * 60);

/// Where a step stands after [`advance`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Every action is done.
    Done,
    /// Nothing to do before this time (epoch ms): checkpoint and come back.
    WaitUntil(u64),
    /// The step failed.
    Failed(StepFailure),
    /// The step was cancelled at an action boundary.
    Cancelled,
}

/// Why a step failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{action}: {message}")]
pub struct StepFailure {
    /// The action, e.g. `post_operation[0] (VerifyPowerStatus)`.
    pub action: String,
    /// What went wrong.
    pub message: String,
    /// Failed components and their last errors.
    pub components: Vec<(String, String)>,
}

/// Why one call for one component did not succeed. Its class decides
/// whether it is retried; it is rendered to text (`class: message`) only
/// where it is recorded, in the checkpoint and the step's result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The hardware refused or did not answer.
    #[error(transparent)]
    Hardware(#[from] HardwareError),
    /// The call did not end within its limit.
    #[error("no answer within {}", format_short(*after))]
    NoAnswer {
        /// The limit.
        after: Duration,
    },
    /// A firmware step of a type the task has no image for.
    #[error("the task names no firmware image for {component_type}")]
    NoImage {
        /// The step's type.
        component_type: ComponentType,
    },
    /// A `PowerControl` without an operation in a task whose operation is
    /// not a power operation.
    #[error(
        "PowerControl has no operation parameter and the task's operation {operation} is not a power operation"
    )]
    NoPowerOperation {
        /// The task's operation.
        operation: OperationCode,
    },
    /// The image cannot be given to a BMC (no digest, bytes that do not
    /// match it, an origin that fails).
    #[error(transparent)]
    Image(#[from] crate::images::ImageError),
    /// The BMC reported the update failed.
    #[error("update failed: {message}")]
    UpdateFailed {
        /// The BMC's message.
        message: String,
    },
    /// The lifecycle API reported a state Flow does not know.
    #[error("unexpected decommission state {state:?}")]
    UnexpectedDecommissionState {
        /// The state reported.
        state: String,
    },
}

impl CallError {
    /// Its class: a hardware error's own, transient for no answer,
    /// permanent otherwise.
    pub fn class(&self) -> ErrorClass {
        match self {
            CallError::Hardware(e) => e.class(),
            CallError::NoAnswer { .. } => ErrorClass::Transient,
            CallError::Image(e) => e.class(),
            CallError::NoImage { .. }
            | CallError::NoPowerOperation { .. }
            | CallError::UpdateFailed { .. }
            | CallError::UnexpectedDecommissionState { .. } => ErrorClass::Permanent,
        }
    }

    /// True when a retry can help.
    pub fn is_transient(&self) -> bool {
        self.class() == ErrorClass::Transient
    }

    /// The text recorded for a component: `transient: …`, `permanent: …`
    /// or `unsupported: …`.
    pub fn record(&self) -> String {
        format!("{}: {self}", self.class())
    }

    /// Whether the request went out and no answer came, so the device may
    /// have carried it out.
    pub fn may_have_arrived(&self) -> bool {
        match self {
            CallError::Hardware(e) => e.may_have_arrived(),
            CallError::NoAnswer { .. } => true,
            _ => false,
        }
    }
}

/// Why an action failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum ActionError {
    /// No manager serves the step's type on this worker.
    #[error("no manager for {0}")]
    NoManager(ComponentType),
    /// Components failed the action: each with its last error.
    #[error("{}", failed_components(.0))]
    Components(Vec<(String, String)>),
    /// `VerifyReachability` gave up.
    #[error(
        "{missing} still unreachable after {}{}{}",
        format_short(*timeout),
        if *require_all { " (every component must answer)" } else { "" },
        if unanswered.is_empty() {
            String::new()
        } else {
            format!("; no answer from {}", unanswered.join(", "))
        }
    )]
    Unreachable {
        /// The types still unreachable, comma-separated.
        missing: String,
        /// The action's timeout.
        timeout: Duration,
        /// Whether every component had to answer.
        require_all: bool,
        /// The components that did not answer the last probe.
        unanswered: Vec<String>,
    },
}

fn failed_components(failed: &[(String, String)]) -> String {
    match failed {
        [] => "no component failed".to_owned(),
        [(name, error)] => format!("{name} failed: {error}"),
        [(name, error), ..] => {
            format!("{} components failed; first: {name}: {error}", failed.len())
        }
    }
}

impl ActionError {
    fn components(&self) -> Vec<(String, String)> {
        match self {
            ActionError::Components(c) => c.clone(),
            _ => Vec::new(),
        }
    }
}

/// The outcome of one call for one component.
pub(crate) enum Call {
    /// The component is done with this action; the text is its result.
    Done(String),
    /// Try again at this time (epoch ms).
    Again(u64),
    /// The component failed the action.
    Fail(String),
    /// Power admission holds the command until this time (epoch ms): no
    /// command was sent (`shared/decisions/src/admission.rs`).
    Held(u64),
    /// Send this command now, once its record is kept
    /// (`shared/executor/src/command.rs`).
    Send(Command),
}

/// What a step's execution acts through: the hardware, the clock, power
/// admission, the journal that keeps its record around every command, and
/// whether its task was cancelled (checked at every action boundary).
#[derive(Clone, Copy)]
pub struct Effects<'a> {
    /// The managers by component type.
    pub hardware: &'a ManagerRegistry,
    /// Now.
    pub clock: &'a dyn Clock,
    /// Where a power command asks first.
    pub gate: &'a dyn PowerGate,
    /// Where a firmware update's image is verified and served from.
    pub images: &'a dyn crate::images::ImageSource,
    /// Where the checkpoint is kept before and after every command.
    pub journal: &'a dyn Journal,
    /// Where every read of a component's power is told.
    pub observer: &'a dyn Observer,
    /// Whether the task was cancelled.
    pub cancelled: &'a (dyn Fn() -> bool + Sync),
    /// The event signals taken before this run's commands
    /// (`shared/executor/src/wake.rs`).
    pub listening: &'a crate::wake::Listening,
}

/// The label of the step's action at `index` (`main_operation (PowerControl)`).
pub fn action_label(job: &StepJob, index: usize) -> Option<String> {
    actions(job).into_iter().nth(index).map(|(label, _)| label)
}

pub(crate) fn actions(job: &StepJob) -> Vec<(String, &Action)> {
    let step = &job.step;
    let mut list = Vec::new();
    for (i, a) in step.pre_operation.iter().enumerate() {
        list.push((format!("pre_operation[{i}] ({})", a.name()), a));
    }
    list.push((
        format!("main_operation ({})", step.main_operation.name()),
        &step.main_operation,
    ));
    for (i, a) in step.post_operation.iter().enumerate() {
        list.push((format!("post_operation[{i}] ({})", a.name()), a));
    }
    list
}

/// Advances the step as far as possible. Cancellation is checked at every
/// action boundary. Each call is bounded by its timeout, so one `advance`
/// returns within the longest call timeout of the current action; every
/// command goes only once its record is kept in `fx.journal`.
pub async fn advance(job: &StepJob, cp: &mut Checkpoint, fx: &Effects<'_>) -> Progress {
    let Effects {
        hardware,
        clock,
        cancelled,
        ..
    } = *fx;
    let list = actions(job);
    while let Some((label, action)) = list.get(cp.action) {
        if cp.action_started_ms.is_none() {
            if cancelled() {
                return Progress::Cancelled;
            }
            start_action(job, cp, clock.now_ms(), action.name().is_per_component());
        }
        let outcome = match action {
            Action::Sleep { duration } => sleep(cp, *duration, clock),
            Action::VerifyReachability {
                component_types,
                require_all,
                timeout,
                poll_interval,
            } => {
                reachability(
                    job,
                    cp,
                    hardware,
                    clock,
                    fx.observer,
                    component_types,
                    *require_all,
                    *timeout,
                    *poll_interval,
                )
                .await
            }
            _ => per_component(job, cp, fx, label, action).await,
        };
        match outcome {
            Ok(None) => {
                cp.finished.push(ActionRecord {
                    label: label.clone(),
                    started_ms: cp.action_started_ms.unwrap_or_default(),
                    ended_ms: clock.now_ms(),
                });
                cp.action += 1;
                cp.action_started_ms = None;
            }
            // A wait is a safe point too: nothing is in flight.
            Ok(Some(_)) if cancelled() => return Progress::Cancelled,
            Ok(Some(at)) => return Progress::WaitUntil(at),
            Err(error) => {
                return Progress::Failed(StepFailure {
                    action: label.clone(),
                    message: error.to_string(),
                    components: error.components(),
                });
            }
        }
    }
    Progress::Done
}

/// Starts an action. Per-component actions start every component afresh;
/// once-per-step actions (Sleep, VerifyReachability) keep the components'
/// outcomes of the action before, so the step reports them.
fn start_action(job: &StepJob, cp: &mut Checkpoint, now: u64, per_component: bool) {
    cp.action_started_ms = Some(now);
    cp.sleep_until_ms = None;
    cp.reachable.clear();
    cp.unanswered.clear();
    cp.next_probe_ms = None;
    if !per_component {
        return;
    }
    cp.components = job
        .components
        .iter()
        .map(|c| (c.name.clone(), ComponentState::pending()))
        .collect();
}

/// `Ok(None)` = action done, `Ok(Some(t))` = come back at t, `Err` = failed.
type ActionOutcome = Result<Option<u64>, ActionError>;

fn sleep(cp: &mut Checkpoint, duration: Duration, clock: &dyn Clock) -> ActionOutcome {
    let until = *cp
        .sleep_until_ms
        .get_or_insert_with(|| after(cp.action_started_ms.unwrap_or_default(), duration));
    if clock.now_ms() >= until {
        Ok(None)
    } else {
        Ok(Some(until))
    }
}

#[allow(clippy::too_many_arguments)]
async fn reachability(
    job: &StepJob,
    cp: &mut Checkpoint,
    hardware: &ManagerRegistry,
    clock: &dyn Clock,
    observer: &dyn Observer,
    types: &[ComponentType],
    require_all: bool,
    timeout: Duration,
    poll_interval: Duration,
) -> ActionOutcome {
    let now = clock.now_ms();
    if let Some(next) = cp.next_probe_ms.filter(|n| *n > now) {
        return Ok(Some(next));
    }
    for t in types {
        if cp.reachable.contains(t) {
            continue;
        }
        let targets = job.all_components.get(t).cloned().unwrap_or_default();
        if targets.is_empty() {
            // A type the task does not have counts as reachable.
            cp.reachable.insert(*t);
            continue;
        }
        let Ok(manager) = hardware.get(*t) else {
            return Err(ActionError::NoManager(*t));
        };
        let answers =
            futures::future::join_all(targets.iter().map(|c| manager.power_status(c))).await;
        cp.calls += answers.len() as u64;
        for (target, answer) in targets.iter().zip(&answers) {
            let seen = Seen::read(answer, ObservationSource::Read);
            observer.observed(target, seen.power, now, seen.source);
        }
        let ok = answers.iter().filter(|a| a.is_ok()).count();
        let reachable = if require_all {
            ok == targets.len()
        } else {
            ok > 0
        };
        if reachable {
            cp.reachable.insert(*t);
            cp.unanswered.remove(t);
        } else {
            cp.unanswered.insert(
                *t,
                targets
                    .iter()
                    .zip(&answers)
                    .filter(|(_, a)| a.is_err())
                    .map(|(c, _)| c.name.clone())
                    .collect(),
            );
        }
    }
    let missing: Vec<&str> = types
        .iter()
        .filter(|t| !cp.reachable.contains(t))
        .map(|t| t.as_str())
        .collect();
    if missing.is_empty() {
        return Ok(None);
    }
    let deadline = after(cp.action_started_ms.unwrap_or(now), timeout);
    let now = clock.now_ms();
    if now >= deadline {
        let unanswered = types
            .iter()
            .filter(|t| !cp.reachable.contains(t))
            .flat_map(|t| cp.unanswered.get(t).cloned().unwrap_or_default())
            .collect();
        return Err(ActionError::Unreachable {
            missing: missing.join(", "),
            timeout,
            require_all,
            unanswered,
        });
    }
    let next = after(now, poll_interval).min(deadline);
    cp.next_probe_ms = Some(next);
    Ok(Some(next))
}

async fn per_component(
    job: &StepJob,
    cp: &mut Checkpoint,
    fx: &Effects<'_>,
    label: &str,
    action: &Action,
) -> ActionOutcome {
    let Ok(manager) = fx.hardware.get(job.step.component_type) else {
        return Err(ActionError::NoManager(job.step.component_type));
    };
    let manager = manager.as_ref();
    let window = match job.step.max_parallel {
        0 => usize::MAX,
        n => n as usize,
    };
    loop {
        let now = fx.clock.now_ms();
        // Fill free max_parallel slots in component order.
        let active = cp
            .components
            .values()
            .filter(|s| s.status == ComponentStatus::Active)
            .count();
        let free = window.saturating_sub(active);
        promote(job, cp, free, now, action, fx.listening);
        let due: Vec<&ComponentTarget> = job
            .components
            .iter()
            .filter(|c| {
                cp.components
                    .get(&c.name)
                    .is_some_and(|s| s.status == ComponentStatus::Active && s.next_at_ms <= now)
            })
            .collect();
        if !due.is_empty() {
            let action_started = cp.action_started_ms.unwrap_or(now);
            let calls = due.iter().map(|c| {
                let state = cp.components[&c.name].clone();
                // A component's own start: with `max_parallel`, a later
                // batch gets the action's whole timeout too.
                let started = state.started_ms.unwrap_or(action_started);
                async move {
                    let mut state = state;
                    let decided =
                        one_call(job, action, manager, fx, c, &mut state, now, started).await;
                    (*c, state, decided)
                }
            });
            let results = futures::future::join_all(calls).await;
            // Waits count from the end of the calls (a backoff or a poll
            // interval is the pause after an answer, not after a request).
            let spent = fx.clock.now_ms().saturating_sub(now);
            let mut sends = Vec::new();
            for (target, state, decided) in results {
                if let Some(seen) = decided.seen {
                    fx.observer.observed(target, seen.power, now, seen.source);
                }
                match decided.call {
                    Call::Send(command) => {
                        // The reads that decided it, when they were made.
                        record_calls(cp, label, &target.name, decided.calls, now, None);
                        sends.push((target, state, command));
                    }
                    call => apply(
                        cp,
                        label,
                        &target.name,
                        state,
                        call,
                        decided.calls,
                        now,
                        spent,
                    ),
                }
            }
            if !sends.is_empty() {
                send_recorded(job, cp, fx, manager, label, action, sends).await;
            }
            let failed: Vec<(String, String)> = cp
                .components
                .iter()
                .filter(|(_, s)| s.status == ComponentStatus::Failed)
                .map(|(n, s)| (n.clone(), s.last_error.clone().unwrap_or_default()))
                .collect();
            if !failed.is_empty() {
                return Err(ActionError::Components(failed));
            }
            continue;
        }
        if cp
            .components
            .values()
            .all(|s| s.status == ComponentStatus::Done)
        {
            return Ok(None);
        }
        let next = cp
            .components
            .values()
            .filter(|s| s.status == ComponentStatus::Active)
            .map(|s| s.next_at_ms)
            .min();
        match next {
            Some(t) if t > fx.clock.now_ms() => return Ok(Some(t)),
            Some(_) => continue,
            // Nothing active and not all done: slots were just freed.
            None => continue,
        }
    }
}

/// Sends a batch of decided commands: each one's record is written as
/// unconfirmed and the checkpoint kept first (a command whose record could
/// not be kept is not sent, and comes back shortly); then they go at once,
/// and their answers are recorded and kept.
async fn send_recorded(
    job: &StepJob,
    cp: &mut Checkpoint,
    fx: &Effects<'_>,
    manager: &dyn ComponentManager,
    label: &str,
    action: &Action,
    sends: Vec<(&ComponentTarget, ComponentState, Command)>,
) {
    // Listen before speaking: a feed open before the send hears the
    // change. An urgent command (a leak's force-off) never waits for one.
    let urgent = sends
        .iter()
        .any(|(_, _, c)| *c == Command::Power(PowerOperation::ForcePowerOff));
    let targets: Vec<&ComponentTarget> = sends.iter().map(|(t, _, _)| *t).collect();
    let wait = if urgent {
        Duration::ZERO
    } else {
        crate::wake::FEED_OPEN_WAIT
    };
    fx.listening.before_send(manager, &targets, wait).await;
    let now = fx.clock.now_ms();
    for (target, state, command) in &sends {
        let mut recorded = state.clone();
        command::record(&mut recorded, *command, now);
        cp.components.insert(target.name.clone(), recorded);
    }
    if !fx.journal.keep(cp).await {
        tracing::warn!(
            commands = sends.len(),
            "the step's record could not be kept: its commands are not sent now"
        );
        let retry_at = after(now, command::UNRECORDED_RETRY);
        for (target, mut state, command) in sends {
            // Not sent: the record stays as it was before (`state` is the
            // component before its command was recorded).
            state.last_error = Some(format!(
                "transient: the step's record could not be kept; {command} not sent yet"
            ));
            apply(
                cp,
                label,
                &target.name,
                state,
                Call::Again(retry_at),
                0,
                now,
                0,
            );
        }
        return;
    }
    // A power-on sent after its slot's send-by would land outside what its
    // grant counted: one the record keeping made late is not sent but asks
    // again (naming the slot it lapsed, so admission releases it). Its
    // record goes back to before the command; the kept copy says
    // "unconfirmed" until the next save, which a redelivery treats as
    // possibly sent — a repeat power-on is harmless.
    let at_send = fx.clock.now_ms();
    let (late, sends): (Vec<_>, Vec<_>) = sends.into_iter().partition(|(_, state, command)| {
        matches!(command, Command::Power(_)) && state.send_by_ms.is_some_and(|by| at_send > by)
    });
    for (target, mut state, command) in late {
        tracing::debug!(component = %target.name, late_ms = at_send.saturating_sub(state.send_by_ms.unwrap_or(at_send)), "a power slot passed before its command could be sent; asking again");
        state.held = Some(format!(
            "the power-on slot passed before {command} could be sent; asking again"
        ));
        apply(
            cp,
            label,
            &target.name,
            state,
            Call::Again(at_send),
            0,
            now,
            0,
        );
    }
    let answers = futures::future::join_all(sends.into_iter().map(|(target, state, command)| {
        let mut state = cp.components.get(&target.name).cloned().unwrap_or(state);
        // Sent now: the slot it was admitted under is spent.
        state.send_by_ms = None;
        state.reserved_at_ms = None;
        async move {
            let decided = command::send(
                job, action, manager, fx.images, target, &mut state, command, now,
            )
            .await;
            (target, state, decided)
        }
    }))
    .await;
    let spent = fx.clock.now_ms().saturating_sub(now);
    let answered = fx.clock.now_ms();
    let mut admitted = Vec::new();
    for (target, state, decided) in answers {
        if state.command.is_some() {
            // Accepted, or sent without an answer: a command either way.
            cp.commands += 1;
        }
        if let Some(seen) = decided.seen {
            fx.observer
                .observed(target, seen.power, answered, seen.source);
        }
        // An admitted power command the device accepted: its grant is
        // counted from now for its settle time, not its whole hold.
        if let Some(record) = &state.command
            && record.delivery == crate::checkpoint::Delivery::Accepted
            && let Command::Power(op) = record.command
            && !job.power_domains.is_empty()
            && flow_protocol::power::gated(target.component_type, op)
        {
            admitted.push((
                target.rack.clone(),
                SentCommand {
                    component: target.name.clone(),
                    operation: op,
                    at_ms: answered,
                },
            ));
        }
        apply(
            cp,
            label,
            &target.name,
            state,
            decided.call,
            decided.calls,
            now,
            spent,
        );
    }
    // Confirmed. Should this not be kept now, the worker keeps it before
    // its next wait or its result (`services/worker/src/job.rs`).
    fx.journal.keep(cp).await;
    report_sent(job, fx, admitted).await;
}

/// Tells power admission which of its grants were sent (by rack: a step's
/// components share one).
async fn report_sent(job: &StepJob, fx: &Effects<'_>, admitted: Vec<(String, SentCommand)>) {
    let mut by_rack: std::collections::BTreeMap<String, Vec<SentCommand>> =
        std::collections::BTreeMap::new();
    for (rack, sent) in admitted {
        by_rack.entry(rack).or_default().push(sent);
    }
    for (rack, sent) in by_rack {
        let n = sent.len();
        if let Err(error) = fx.gate.sent(job, &rack, sent).await {
            // The grants are held to their expiry instead: safe, slower.
            tracing::warn!(%error, rack, commands = n, "power admission not told of the sends");
        }
    }
}

/// Counts `calls` requests to one component made at `now`, the last with
/// `error`.
fn record_calls(
    cp: &mut Checkpoint,
    label: &str,
    name: &str,
    calls: u32,
    now: u64,
    error: Option<&str>,
) {
    cp.calls += u64::from(calls);
    for i in 1..=calls {
        cp.record_call(name, label, now, if i == calls { error } else { None });
    }
}

/// Records one component's call outcome in the checkpoint.
#[allow(clippy::too_many_arguments)]
fn apply(
    cp: &mut Checkpoint,
    label: &str,
    name: &str,
    mut state: ComponentState,
    call: Call,
    calls: u32,
    now: u64,
    spent: u64,
) {
    // This call's error: a failure's, or a retried or polled error it
    // left on the state.
    let prior = cp.components.get(name).and_then(|s| s.last_error.clone());
    let error = match &call {
        Call::Fail(e) => Some(e.clone()),
        _ => state
            .last_error
            .clone()
            .filter(|e| Some(e) != prior.as_ref()),
    };
    record_calls(cp, label, name, calls, now, error.as_deref());
    match call {
        Call::Done(result) => {
            state.status = ComponentStatus::Done;
            state.awaiting = None;
            cp.results.insert(name.to_owned(), result);
            if let Some(version) = state.installed_version.clone() {
                cp.installed.insert(name.to_owned(), version);
            }
        }
        Call::Again(at) => state.next_at_ms = at.saturating_add(spent),
        // Held by power admission: no command was sent.
        Call::Held(at) => state.next_at_ms = at,
        Call::Fail(error) => {
            state.status = ComponentStatus::Failed;
            state.last_error = Some(error);
        }
        // Decided in one pass, sent in the next.
        Call::Send(_) => {}
    }
    cp.components.insert(name.to_owned(), state);
}

/// Moves up to `free` pending components (in order) to active, due now;
/// those of a power verification whose BMC's feed has been quiet since
/// their command went are due at the poll interval instead (the event, if
/// one comes first, makes them due at once).
fn promote(
    job: &StepJob,
    cp: &mut Checkpoint,
    free: usize,
    now: u64,
    action: &Action,
    listening: &crate::wake::Listening,
) {
    let mut free = free;
    for target in &job.components {
        if free == 0 {
            return;
        }
        if let Some(state) = cp.components.get_mut(&target.name)
            && state.status == ComponentStatus::Pending
        {
            state.status = ComponentStatus::Active;
            state.next_at_ms = match action {
                Action::VerifyPowerStatus { poll_interval, .. }
                    if listening.quiet_since_send(&target.name) =>
                {
                    tracing::debug!(component = %target.name, "event feed quiet since the command: first read at the event or the poll");
                    after(now, *poll_interval)
                }
                _ => now,
            };
            state.started_ms = Some(now);
            free -= 1;
        }
    }
}

/// The per-call time limit: the action's own timeout where it has one for
/// calls, else the step's activity timeout.
pub(crate) fn call_timeout(job: &StepJob, action: &Action) -> Duration {
    match action {
        Action::PowerControl {
            timeout: Some(t), ..
        }
        | Action::FirmwareControl {
            timeout: Some(t), ..
        } => *t,
        Action::GetPowerStatus { timeout } => *timeout,
        Action::DecommissionControl => DECOMMISSION_CONTROL_TIMEOUT,
        _ => job.step.activity_timeout(),
    }
}

pub(crate) async fn timed<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, HardwareError>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(limit, call).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(CallError::NoAnswer { after: limit }),
    }
}

/// The least time a verification poll is given to answer, however close
/// its action's deadline.
pub const MIN_POLL_ANSWER: Duration = Duration::from_secs(2);

/// A failed attempt: retry per the policy, or fail.
pub(crate) fn retry(
    state: &mut ComponentState,
    policy: &RetryPolicy,
    error: CallError,
    now: u64,
) -> Call {
    state.attempts += 1;
    let text = error.record();
    state.last_error = Some(text.clone());
    if !error.is_transient() {
        return Call::Fail(text);
    }
    match policy.delay_before(state.attempts + 1) {
        Some(delay) => Call::Again(after(now, delay)),
        None => Call::Fail(format!("{text} (after {} attempts)", state.attempts)),
    }
}

/// A poll that did not succeed yet: come back after `interval`, unless the
/// deadline has passed.
fn poll_again(now: u64, interval: Duration, deadline: u64, why: impl FnOnce() -> String) -> Call {
    if now >= deadline {
        Call::Fail(why())
    } else {
        Call::Again(after(now, interval).min(deadline))
    }
}

pub(crate) fn power_operation(
    job: &StepJob,
    explicit: Option<PowerOperation>,
) -> Result<PowerOperation, CallError> {
    match (explicit, job.operation) {
        (Some(op), _) => Ok(op),
        (None, OperationCode::Power(op)) => Ok(op),
        (None, operation) => Err(CallError::NoPowerOperation { operation }),
    }
}

fn status_text(s: PowerStatus) -> &'static str {
    s.as_str()
}

/// One call of `action` for one component: a command is decided
/// (`shared/executor/src/command.rs`) and sent later, in its batch; a read
/// is made here.
#[allow(clippy::too_many_arguments)]
async fn one_call(
    job: &StepJob,
    action: &Action,
    manager: &dyn ComponentManager,
    fx: &Effects<'_>,
    target: &ComponentTarget,
    state: &mut ComponentState,
    now: u64,
    started: u64,
) -> Decided {
    let is_command = match action {
        Action::PowerControl { .. } | Action::DecommissionControl => true,
        Action::FirmwareControl { .. } => state.firmware_job.is_none(),
        _ => false,
    };
    if is_command {
        return command::decide(job, action, manager, fx, target, state, now, started).await;
    }
    let (call, seen) = read_call(job, action, manager, target, state, now, started).await;
    Decided::new(call, 1).with_seen(seen)
}

/// One read of `action` for one component: a status, a verification poll,
/// a started update's progress, a decommission's state; and the power it
/// read, if it read power.
#[allow(clippy::too_many_lines)]
async fn read_call(
    job: &StepJob,
    action: &Action,
    manager: &dyn ComponentManager,
    target: &ComponentTarget,
    state: &mut ComponentState,
    now: u64,
    started: u64,
) -> (Call, Option<Seen>) {
    let limit = call_timeout(job, action);
    let policy = job.step.retry_policy();
    let call = match action {
        Action::GetPowerStatus { .. } => {
            let result = timed(limit, manager.power_status(target)).await;
            let seen = Seen::read(&result, ObservationSource::Read);
            let call = match result {
                Ok(s) => Call::Done(status_text(s).to_owned()),
                Err(e) => retry(state, &policy, e, now),
            };
            return (call, Some(seen));
        }
        Action::VerifyPowerStatus {
            expected,
            timeout,
            poll_interval,
        } => {
            let deadline = after(started, *timeout);
            // The last poll before the deadline still gets a fair answer
            // time: a poll with ~0 left would report "no answer" instead of
            // the state it would have read (seen at 250 racks, and on a
            // loaded machine). It may end the action up to
            // MIN_POLL_ANSWER past its timeout.
            let remaining =
                Duration::from_millis(deadline.saturating_sub(now)).max(MIN_POLL_ANSWER);
            let want = match expected {
                PowerState::On => PowerStatus::On,
                PowerState::Off => PowerStatus::Off,
            };
            let result = timed(limit.min(remaining), manager.power_status(target)).await;
            let seen = Seen::read(&result, ObservationSource::Verify);
            let call = match result {
                Ok(s) if s == want => Call::Done(status_text(s).to_owned()),
                Ok(s) => poll_again(now, *poll_interval, deadline, || {
                    format!(
                        "still {} after {} waiting for {}",
                        status_text(s),
                        format_short(*timeout),
                        status_text(want)
                    )
                }),
                Err(e) if e.is_transient() => {
                    let e = e.record();
                    state.last_error = Some(e.clone());
                    poll_again(now, *poll_interval, deadline, || {
                        format!(
                            "no answer for {} waiting for {}: {e}",
                            format_short(*timeout),
                            status_text(want)
                        )
                    })
                }
                Err(e) => Call::Fail(e.record()),
            };
            return (call, Some(seen));
        }
        Action::FirmwareControl {
            poll_interval,
            poll_timeout,
            ..
        } => {
            let interval = Action::firmware_poll_interval(*poll_interval);
            let Some(fw_job) = state.firmware_job.clone() else {
                return (
                    Call::Fail("permanent: no update was started".to_owned()),
                    None,
                );
            };
            let deadline = state.poll_deadline_ms.unwrap_or(now);
            match timed(limit, manager.firmware_status(target, Some(&fw_job))).await {
                Ok(s) if s.state == FirmwareState::Completed => {
                    let main_firmware = job
                        .firmware
                        .get(&job.step.component_type)
                        .is_none_or(|i| i.sub_targets.is_empty());
                    if main_firmware {
                        state.installed_version = fw_job.expected_version.clone();
                    }
                    Call::Done(match &fw_job.expected_version {
                        Some(v) => format!("installed {v}"),
                        None => "update completed".to_owned(),
                    })
                }
                Ok(s) if s.state == FirmwareState::Failed => {
                    Call::Fail(CallError::UpdateFailed { message: s.message }.record())
                }
                Ok(s) => poll_again(now, interval, deadline, || {
                    format!(
                        "update still {:?} after {} ({}%)",
                        s.state,
                        format_short(Action::firmware_poll_timeout(*poll_timeout)),
                        s.percent.unwrap_or(0)
                    )
                }),
                Err(e) if e.is_transient() => poll_again(now, interval, deadline, || {
                    format!("update status unreadable: {}", e.record())
                }),
                Err(e) => Call::Fail(e.record()),
            }
        }
        Action::WaitDecommissioned {
            timeout,
            poll_interval,
        } => {
            let deadline = after(started, *timeout);
            let limit = limit.min(flow_rules::defaults::LIFECYCLE_CALL_TIMEOUT);
            match timed(limit, manager.decommission_status(target)).await {
                Ok(DecommissionState::Decommissioned) => Call::Done("Decommissioned".to_owned()),
                Ok(DecommissionState::Other(s)) => {
                    Call::Fail(CallError::UnexpectedDecommissionState { state: s }.record())
                }
                Ok(s) => {
                    state.failing_since_ms = None;
                    poll_again(now, *poll_interval, deadline, || {
                        format!("still {s:?} after {}", format_short(*timeout))
                    })
                }
                Err(error) => {
                    let since = *state.failing_since_ms.get_or_insert(now);
                    let e = error.record();
                    state.last_error = Some(e.clone());
                    if !error.is_transient()
                        || now.saturating_sub(since)
                            >= DECOMMISSION_STATUS_FAILURE_LIMIT.as_millis() as u64
                    {
                        Call::Fail(format!(
                            "decommission status failing since {}s: {e}",
                            (now - since) / 1000
                        ))
                    } else {
                        poll_again(now, *poll_interval, deadline, || {
                            format!("decommission status unreadable: {e}")
                        })
                    }
                }
            }
        }
        Action::PowerControl { .. } | Action::DecommissionControl => {
            // Commands are decided in `shared/executor/src/command.rs`.
            debug_assert_eq!(DECOMMISSION_CONTROL_ATTEMPTS, 1);
            Call::Fail("permanent: a command reached the read path".to_owned())
        }
        Action::Sleep { .. } | Action::VerifyReachability { .. } => Call::Done(String::new()),
    };
    (call, None)
}
