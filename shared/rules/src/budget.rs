//! Execution budgets: how long a step may legitimately take, so the
//! scheduler can fail a step that overruns without cutting off work the rule
//! allows.
//!
//! The format says Flow derives a separate execution budget for each step;
//! the reference system counted one attempt when `retry` is omitted and
//! ignored sleeps, poll deadlines and `max_parallel` batches, so its
//! deadline could fire while allowed work was still running (32 min for a
//! step whose three default attempts may take 60 min; `docs/rule-format.md`,
//! "Step budget"). Flow's budget covers everything a step may do:
//!
//! ```text
//! T(a)        = a.timeout (PowerControl, FirmwareControl) or the step's activity timeout
//! call(a)     = attempts × T(a) + Σ backoff waits          (the step's retry policy)
//! budget(a)   = Sleep                → duration
//!               PowerControl         → call(a)
//!               GetPowerStatus       → attempts × a.timeout + Σ backoff waits
//!               FirmwareControl      → call(a) + poll_timeout + poll_interval
//!               VerifyPowerStatus,
//!               VerifyReachability,
//!               WaitDecommissioned   → a.timeout + a.poll_interval
//!               DecommissionControl  → 5 min (one attempt, fixed by the executor)
//! batches(a)  = ⌈n / max_parallel⌉ for per-component actions when 0 < max_parallel < n, else 1
//! step budget = Σ over pre, main and post actions of batches(a) × budget(a) + 2 min buffer
//! rule budget = Σ over stages of the largest step budget in the stage
//! ```
//!
//! `n` is the number of the step's components in the task. A polling action's
//! status calls are bounded by its own deadline, so one extra poll interval
//! covers the last round.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{Action, ComponentType, RuleDefinition, Step, defaults};

/// Number of components of each type in a task's target.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ComponentCounts(pub BTreeMap<ComponentType, usize>);

impl ComponentCounts {
    /// One GB200 NVL72 rack: 18 compute trays, 9 NVLink switch trays and 8
    /// power shelves — the rack the summaries assume.
    pub fn nvl72() -> Self {
        ComponentCounts(BTreeMap::from([
            (ComponentType::Compute, 18),
            (ComponentType::NVSwitch, 9),
            (ComponentType::PowerShelf, 8),
        ]))
    }

    /// How many components of a type (0 when absent).
    pub fn get(&self, t: ComponentType) -> usize {
        self.0.get(&t).copied().unwrap_or(0)
    }
}

/// The time one action may take for one batch of components.
pub fn action_budget(action: &Action, step: &Step) -> Duration {
    let retry = step.retry_policy();
    let attempts = retry.max_attempts.get();
    let calls = |per_attempt: Duration| {
        per_attempt
            .saturating_mul(attempts)
            .saturating_add(retry.total_delay())
    };
    match action {
        Action::Sleep { duration } => *duration,
        Action::PowerControl { timeout, .. } => {
            calls(timeout.unwrap_or_else(|| step.activity_timeout()))
        }
        Action::GetPowerStatus { timeout } => calls(*timeout),
        Action::FirmwareControl {
            timeout,
            poll_interval,
            poll_timeout,
            ..
        } => calls(timeout.unwrap_or_else(|| step.activity_timeout()))
            .saturating_add(Action::firmware_poll_timeout(*poll_timeout))
            .saturating_add(Action::firmware_poll_interval(*poll_interval)),
        Action::VerifyPowerStatus {
            timeout,
            poll_interval,
            ..
        }
        | Action::VerifyReachability {
            timeout,
            poll_interval,
            ..
        }
        | Action::WaitDecommissioned {
            timeout,
            poll_interval,
        } => timeout.saturating_add(*poll_interval),
        Action::DecommissionControl => defaults::DECOMMISSION_CONTROL_TIMEOUT
            .saturating_mul(defaults::DECOMMISSION_CONTROL_ATTEMPTS),
    }
}

/// How many sequential batches an action runs in for `components`
/// components.
pub fn batches(action: &Action, max_parallel: u32, components: usize) -> u32 {
    let limit = max_parallel as usize;
    if !action.name().is_per_component() || limit == 0 || components <= limit {
        return 1;
    }
    u32::try_from(components.div_ceil(limit)).unwrap_or(u32::MAX)
}

/// The deadline of one step acting on `components` components, buffer
/// included.
pub fn step_budget(step: &Step, components: usize) -> Duration {
    step.actions()
        .map(|a| action_budget(a, step).saturating_mul(batches(a, step.max_parallel, components)))
        .fold(defaults::SCHEDULING_BUFFER, Duration::saturating_add)
}

/// The longest a whole rule may run for these counts: stages run one after
/// another; steps of a stage run together, so a stage takes its longest
/// step. Steps of absent types are skipped and cost nothing.
pub fn rule_budget(definition: &RuleDefinition, counts: &ComponentCounts) -> Duration {
    definition
        .stages()
        .values()
        .map(|steps| {
            steps
                .iter()
                .filter(|s| counts.get(s.component_type) > 0)
                .map(|s| step_budget(s, counts.get(s.component_type)))
                .max()
                .unwrap_or(Duration::ZERO)
        })
        .fold(Duration::ZERO, Duration::saturating_add)
}
