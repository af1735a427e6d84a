//! The commands a step sends — power operations, the start of a firmware
//! update, a decommission request — decided from the step's own record and
//! the state read just before, and sent only once their record is kept.
//!
//! A command goes in two halves. [`decide`] looks at the component's
//! [`CommandRecord`] (what this job already sent it), reads the state where
//! the operation needs it (`shared/hardware/src/command.rs`), asks power
//! admission, and answers with a [`Call`]: done already, come back, fail, or
//! [`Call::Send`]. The executor then writes the record of every command of
//! the batch as unconfirmed, keeps the checkpoint in its journal, and only
//! then calls [`send`]; the answers are written as accepted (or the record
//! removed when the device refused) and kept again.
//!
//! A redelivered job finds in the record whether its command went:
//! accepted — never sent again; unconfirmed (the worker stopped between the
//! send and its confirmation, or the device did not answer) — sent again
//! only where a second copy is harmless (a power operation with a steady
//! end state, whose decision reads the state first; a firmware update,
//! after looking for the update the device already runs; a decommission
//! request, which the lifecycle API takes once); a restart is not repeated,
//! and the component fails saying why.

use std::time::Duration;

use flow_hardware::command::{PowerPlan, end_state, plan, reads_first, repeat_is_harmless};
use flow_hardware::{
    ComponentManager, ComponentTarget, FirmwareRequest, FirmwareStart, HardwareError, PowerStatus,
};
use flow_protocol::power::{Admission, gated};
use flow_protocol::state::ObservationSource;
use flow_rules::duration::format_short;
use flow_rules::{Action, PowerOperation};

use crate::StepJob;
use crate::checkpoint::{Command, CommandRecord, ComponentState, Delivery};
use crate::clock::{Clock, after};
use crate::executor::{Call, CallError, Effects, call_timeout, power_operation, retry, timed};
use crate::gate::{GateRequest, PowerGate};
use crate::images::ImageSource;
use crate::observe::Seen;

/// How often a component that is moving is read again while its command
/// waits for it to settle (an event from its BMC reads it sooner:
/// `shared/executor/src/wake.rs`).
pub const STEADY_POLL: Duration = Duration::from_secs(1);

/// How long a command whose record could not be kept waits before the step
/// tries again (it is not sent unrecorded).
pub const UNRECORDED_RETRY: Duration = Duration::from_secs(1);

/// How long a command waits before asking again when admission did not
/// answer (the command is never sent unadmitted).
const GATE_RETRY_MS: u64 = 1_000;

/// Why a power command may not go now.
enum Held {
    /// Ask again at this time; the reason is shown to operators.
    Until(u64, String),
    /// Reserved from the first time until the second: go then without
    /// asking again. The third is the reservation's start as admission
    /// recorded it (the first is never before the worker's now).
    Reserved(u64, u64, u64, String),
    /// The slot is now (its start has come by the time the answer
    /// arrived): go in this pass, by the first time (its send-by); the
    /// second is the slot's start. Sent later than its send-by it would
    /// land outside what its grant counted, so the send checks it again
    /// (`crate::executor`).
    Now(u64, u64),
    /// It never can, as its domain stands.
    Refused(String),
}

impl Held {
    fn reason(&self) -> Option<String> {
        match self {
            Held::Until(_, reason) | Held::Reserved(_, _, _, reason) => Some(reason.clone()),
            Held::Refused(_) | Held::Now(..) => None,
        }
    }
}

/// Asks the power gate whether `op` may go to `target` now; `None` = go.
/// Steps of racks in no power domain never ask.
#[allow(clippy::too_many_arguments)]
async fn admit(
    job: &StepJob,
    gate: &dyn PowerGate,
    target: &ComponentTarget,
    op: PowerOperation,
    observed: Option<PowerStatus>,
    replaces_ms: Option<u64>,
    limit: Duration,
    now: u64,
    clock: &dyn Clock,
) -> Option<Held> {
    if job.power_domains.is_empty() || !gated(target.component_type, op) {
        return None;
    }
    let request = GateRequest {
        rack: &target.rack,
        component: &target.name,
        component_type: target.component_type,
        operation: op,
        observed: observed.map(|s| (s, now)),
        replaces_ms,
    };
    match tokio::time::timeout(limit, gate.admit(job, request)).await {
        Ok(Ok(Admission::Granted)) => None,
        Ok(Ok(Admission::Reserved {
            at_ms,
            send_by_ms,
            reason,
        })) if send_by_ms >= at_ms => {
            let answered = clock.now_ms();
            if at_ms <= answered && answered <= send_by_ms {
                Some(Held::Now(send_by_ms, at_ms))
            } else {
                Some(Held::Reserved(at_ms.max(now), send_by_ms, at_ms, reason))
            }
        }
        Ok(Ok(Admission::Reserved { at_ms, reason, .. }))
        | Ok(Ok(Admission::Wait {
            until_ms: at_ms,
            reason,
        })) => Some(Held::Until(at_ms.max(now), reason)),
        Ok(Ok(Admission::Refused { reason })) => {
            Some(Held::Refused(format!("power admission refused: {reason}")))
        }
        Ok(Err(error)) => Some(Held::Until(
            now + GATE_RETRY_MS,
            format!("waiting for power admission, not answered: {error}"),
        )),
        Err(_) => Some(Held::Until(
            now + GATE_RETRY_MS,
            format!(
                "waiting for power admission, not answered within {}",
                format_short(limit)
            ),
        )),
    }
}

/// A decision and the hardware calls made to reach it (reads).
pub(crate) struct Decided {
    /// What to do.
    pub call: Call,
    /// Requests made to the device.
    pub calls: u32,
    /// The power read on the way, if any.
    pub seen: Option<Seen>,
}

impl Decided {
    pub(crate) fn new(call: Call, calls: u32) -> Self {
        Decided {
            call,
            calls,
            seen: None,
        }
    }

    pub(crate) fn with_seen(mut self, seen: Option<Seen>) -> Self {
        self.seen = seen;
        self
    }
}

/// The record's verdict on a command this job may have sent before:
/// `Some(fail)` when it must not go again.
fn not_again(state: &ComponentState, command: Command) -> Option<Call> {
    let record = state.command.as_ref()?;
    if record.delivery != Delivery::Unconfirmed || record.command != command {
        return None;
    }
    match command {
        Command::Power(op) if !repeat_is_harmless(op) => Some(Call::Fail(format!(
            "permanent: {op} may have reached the device already (sent at {} ms, no answer \
             recorded); not sent again, since a second {op} is not harmless",
            record.at_ms,
            op = op.as_str(),
        ))),
        _ => None,
    }
}

/// Decides a command action's next call for one component.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn decide(
    job: &StepJob,
    action: &Action,
    manager: &dyn ComponentManager,
    fx: &Effects<'_>,
    target: &ComponentTarget,
    state: &mut ComponentState,
    now: u64,
    started: u64,
) -> Decided {
    let (gate, clock) = (fx.gate, fx.clock);
    match action {
        Action::PowerControl { operation, .. } => {
            let op = match power_operation(job, *operation) {
                Ok(op) => op,
                Err(e) => return Decided::new(Call::Fail(e.record()), 0),
            };
            decide_power(
                job, action, manager, gate, target, state, op, now, started, clock,
            )
            .await
        }
        Action::FirmwareControl { .. } => {
            let request = match firmware_request(job, fx.images).await {
                Ok(request) => request,
                Err(e) => return Decided::new(retry(state, &job.step.retry_policy(), e, now), 0),
            };
            let unconfirmed = state
                .command
                .as_ref()
                .is_some_and(|r| r.delivery == Delivery::Unconfirmed);
            if !unconfirmed {
                return Decided::new(Call::Send(Command::FirmwareUpdate), 0);
            }
            // An earlier delivery may have started it: the device's own
            // task record says so, not a guess.
            let limit = call_timeout(job, action);
            match timed(limit, manager.firmware_in_progress(target, &request)).await {
                Ok(Some(found)) => {
                    adopt_update(job, action, state, found, now);
                    let interval = firmware_interval(action);
                    Decided::new(Call::Again(after(now, interval)), 1)
                }
                Ok(None) => Decided::new(Call::Send(Command::FirmwareUpdate), 1),
                Err(e) => Decided::new(retry(state, &job.step.retry_policy(), e, now), 1),
            }
        }
        // The lifecycle API takes a request once (a second is answered
        // with the state it is in), so a record is all it needs.
        _ => Decided::new(Call::Send(Command::Decommission), 0),
    }
}

#[allow(clippy::too_many_arguments)]
async fn decide_power(
    job: &StepJob,
    action: &Action,
    manager: &dyn ComponentManager,
    gate: &dyn PowerGate,
    target: &ComponentTarget,
    state: &mut ComponentState,
    op: PowerOperation,
    now: u64,
    started: u64,
    clock: &dyn Clock,
) -> Decided {
    let limit = call_timeout(job, action);
    let policy = job.step.retry_policy();
    if let Some(fail) = not_again(state, Command::Power(op)) {
        return Decided::new(fail, 0);
    }
    // A reservation whose time came goes without reading or asking again:
    // both were done when it was reserved (a device that changed since
    // refuses, and the refusal is read). One missed (the worker came late)
    // decides anew, releasing it: nothing was sent under it.
    let reserved_at = state.reserved_at_ms.take();
    let replaces_ms = match state.send_by_ms.take() {
        Some(by) if now <= by => {
            // Kept until sent: the send checks it again.
            state.held = None;
            state.send_by_ms = Some(by);
            state.reserved_at_ms = reserved_at;
            return Decided::new(Call::Send(Command::Power(op)), 0);
        }
        Some(_) => reserved_at,
        None => None,
    };
    let mut calls = 0;
    let mut seen = None;
    let mut read = None;
    if reads_first(op) {
        calls += 1;
        let result = timed(limit, manager.power_status(target)).await;
        seen = Some(Seen::read(&result, ObservationSource::Read));
        let observed = match result {
            Ok(s) => s,
            Err(e) => return Decided::new(retry(state, &policy, e, now), calls).with_seen(seen),
        };
        read = Some(observed);
        match plan(op, observed) {
            PowerPlan::Send => state.awaiting = None,
            PowerPlan::Already(s) => {
                state.awaiting = None;
                state.held = None;
                return Decided::new(Call::Done(format!("already {s}")), calls).with_seen(seen);
            }
            PowerPlan::Refuse(why) => {
                return Decided::new(
                    Call::Fail(format!("permanent: {}: {why}", target.name)),
                    calls,
                )
                .with_seen(seen);
            }
            PowerPlan::AwaitSteady(moving) => {
                let deadline = after(started, limit);
                if now >= deadline {
                    return Decided::new(
                        Call::Fail(format!(
                            "still {moving} after {}: {} not sent (it waits for a steady state)",
                            format_short(limit),
                            op.as_str()
                        )),
                        calls,
                    )
                    .with_seen(seen);
                }
                state.awaiting = Some(moving);
                state.held = Some(format!(
                    "waiting for {moving} to end before sending {}",
                    op.as_str()
                ));
                return Decided::new(Call::Again(after(now, STEADY_POLL).min(deadline)), calls)
                    .with_seen(seen);
            }
        }
    }
    if let Some(held) = admit(job, gate, target, op, read, replaces_ms, limit, now, clock).await {
        state.held = held.reason();
        let call = match held {
            Held::Now(by, start) => {
                state.send_by_ms = Some(by);
                state.reserved_at_ms = Some(start);
                Call::Send(Command::Power(op))
            }
            Held::Until(at, _) => Call::Held(at),
            Held::Reserved(at, by, start, _) => {
                state.send_by_ms = Some(by);
                state.reserved_at_ms = Some(start);
                Call::Held(at)
            }
            Held::Refused(reason) => Call::Fail(reason),
        };
        return Decided::new(call, calls).with_seen(seen);
    }
    state.held = None;
    Decided::new(Call::Send(Command::Power(op)), calls).with_seen(seen)
}

/// The firmware request of the step's type: its image as the BMC is to
/// fetch it — verified against its digest by `images`, never the origin.
/// No image, or one that cannot be verified, is the error: no update is
/// requested.
async fn firmware_request(
    job: &StepJob,
    images: &dyn ImageSource,
) -> Result<FirmwareRequest, CallError> {
    let component_type = job.step.component_type;
    let image = job
        .firmware
        .get(&component_type)
        .ok_or(CallError::NoImage { component_type })?;
    let image_uri = images.stage(image).await?;
    Ok(FirmwareRequest {
        image_uri,
        version: image.version.clone(),
        targets: Vec::new(),
        sub_targets: image.sub_targets.clone(),
    })
}

fn firmware_interval(action: &Action) -> Duration {
    match action {
        Action::FirmwareControl { poll_interval, .. } => {
            Action::firmware_poll_interval(*poll_interval)
        }
        _ => Action::firmware_poll_interval(None),
    }
}

/// Takes a running update as the step's own: polled from now on.
fn adopt_update(
    job: &StepJob,
    action: &Action,
    state: &mut ComponentState,
    found: flow_hardware::FirmwareJob,
    now: u64,
) {
    let _ = job;
    let poll_timeout = match action {
        Action::FirmwareControl { poll_timeout, .. } => *poll_timeout,
        _ => None,
    };
    state.firmware_job = Some(found);
    state.attempts = 0;
    state.poll_deadline_ms = Some(after(now, Action::firmware_poll_timeout(poll_timeout)));
    if let Some(record) = state.command.as_mut() {
        record.delivery = Delivery::Accepted;
    }
}

/// Marks the component's command as about to be sent: the record the
/// journal keeps before the send.
pub(crate) fn record(state: &mut ComponentState, command: Command, now: u64) {
    state.command = Some(CommandRecord {
        command,
        at_ms: now,
        delivery: Delivery::Unconfirmed,
    });
}

/// Sends a decided command (its record is kept) and reads its answer.
/// Returns the call and whether the command may have been carried out.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn send(
    job: &StepJob,
    action: &Action,
    manager: &dyn ComponentManager,
    images: &dyn ImageSource,
    target: &ComponentTarget,
    state: &mut ComponentState,
    command: Command,
    now: u64,
) -> Decided {
    let limit = call_timeout(job, action);
    let policy = job.step.retry_policy();
    match command {
        Command::Power(op) => match timed(limit, manager.power_control(target, op)).await {
            Ok(sent) => {
                accepted(state);
                Decided::new(Call::Done(format!("sent {}", sent.reset_type)), 1)
            }
            Err(e) => power_not_accepted(job, action, manager, target, state, op, e, now).await,
        },
        Command::FirmwareUpdate => {
            let request = match firmware_request(job, images).await {
                Ok(request) => request,
                Err(e) => {
                    // Nothing was sent: the record goes.
                    state.command = None;
                    return Decided::new(retry(state, &policy, e, now), 0);
                }
            };
            match timed(limit, manager.firmware_update(target, &request)).await {
                Ok(FirmwareStart::AlreadyInstalled { version }) => {
                    // Read from the inventory; nothing was started.
                    state.command = None;
                    if request.sub_targets.is_empty() {
                        state.installed_version = Some(version.clone());
                    }
                    Decided::new(Call::Done(format!("already at {version}")), 1)
                }
                Ok(FirmwareStart::Started(fw)) => {
                    adopt_update(job, action, state, fw, now);
                    accepted(state);
                    Decided::new(Call::Again(after(now, firmware_interval(action))), 1)
                }
                Err(e) => {
                    unanswered_or_refused(state, &e);
                    Decided::new(retry(state, &policy, e, now), 1)
                }
            }
        }
        Command::Decommission => match timed(limit, manager.decommission(target)).await {
            Ok(s) => {
                accepted(state);
                Decided::new(Call::Done(format!("{s:?}")), 1)
            }
            // The executor's fixed policy: one attempt, five minutes
            // (`DECOMMISSION_CONTROL_ATTEMPTS`).
            Err(e) => {
                unanswered_or_refused(state, &e);
                Decided::new(Call::Fail(e.record()), 1)
            }
        },
    }
}

fn accepted(state: &mut ComponentState) {
    if let Some(record) = state.command.as_mut() {
        record.delivery = Delivery::Accepted;
    }
}

/// After an error: a device that answered did not carry the command out
/// (its record goes); one that did not answer may have (it stays,
/// unconfirmed).
fn unanswered_or_refused(state: &mut ComponentState, e: &CallError) {
    if !e.may_have_arrived() {
        state.command = None;
    }
}

/// A power command that was not accepted. Refused by a device that rests
/// in the operation's end state (a BMC that will not power off what is
/// off): that state, read now, is the answer. Unanswered: repeated per the
/// retry policy where harmless, else the component fails (its record
/// stays, so no later delivery sends it either).
#[allow(clippy::too_many_arguments)]
async fn power_not_accepted(
    job: &StepJob,
    action: &Action,
    manager: &dyn ComponentManager,
    target: &ComponentTarget,
    state: &mut ComponentState,
    op: PowerOperation,
    error: CallError,
    now: u64,
) -> Decided {
    let policy = job.step.retry_policy();
    let limit = call_timeout(job, action);
    if error.may_have_arrived() {
        if repeat_is_harmless(op) {
            return Decided::new(retry(state, &policy, error, now), 1);
        }
        return Decided::new(
            Call::Fail(format!(
                "{}; {} may have been carried out, so it is not sent again (a second one is not harmless)",
                error.record(),
                op.as_str()
            )),
            1,
        );
    }
    state.command = None;
    // Refused for what it is asked (4xx: "already off", "in transition"),
    // not for being busy or broken (5xx, retried as they are).
    let refused = matches!(
        error,
        CallError::Hardware(HardwareError::Http {
            status: 400..=499,
            ..
        })
    );
    if let (true, Some(end)) = (refused, end_state(op)) {
        let result = timed(limit, manager.power_status(target)).await;
        let seen = Some(Seen::read(&result, ObservationSource::Read));
        if let Ok(now_state) = result {
            if now_state == end {
                return Decided::new(Call::Done(format!("already {end}")), 2).with_seen(seen);
            }
            if now_state.is_transition() && op != PowerOperation::ForcePowerOff {
                // Moving since it was read: decided again once it settles.
                state.awaiting = Some(now_state);
                return Decided::new(Call::Again(after(now, STEADY_POLL)), 2).with_seen(seen);
            }
        }
        return Decided::new(retry(state, &policy, error, now), 2).with_seen(seen);
    }
    Decided::new(retry(state, &policy, error, now), 1)
}
