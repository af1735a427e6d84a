//! The ideal makespan: the critical path that a rule and the simulator's
//! timing model allow, with zero overhead for messaging, storage and HTTP.
//!
//! Two figures, from one walk of the plan:
//! * **the physical ideal** (`total`): the hardware's own timing — each
//!   transition, boot and firmware update as the simulator times it at its
//!   time scale — plus the rule's mandatory waits (`Sleep`). Nothing that
//!   runs the rule can finish sooner, so no run scores below 1.00;
//! * **the polled ideal** (`polled_total`, the figure reported until
//!   2026-12-06): the same with every wait rounded up to the rule's poll
//!   interval, as a pipeline that only polls would see it. Event-driven
//!   verification beats it (nvl72 scored 0.90 against it), so it is kept
//!   only to compare with earlier runs.
//!
//! The stages and steps come from the same planner the scheduler uses
//! ([`flow_decisions::plan`]); each step is walked action by action with the
//! executor's semantics:
//! * a per-component action runs over the components with a sliding window
//!   of `max_parallel`; a call itself takes no time;
//! * a poll (VerifyPowerStatus, FirmwareControl's task poll,
//!   WaitDecommissioned) waits for the hardware; polled, a wait of `t`
//!   costs `ceil(t / poll) * poll` (FirmwareControl: first poll one
//!   interval after the update starts);
//! * `Sleep` sleeps; `VerifyReachability` waits for the tray BMCs to boot
//!   after the shelves came on;
//! * steps of a stage run side by side; stages one after another.
//!
//! Racks are independent, so the ideal for many racks is the ideal of one.

use std::collections::BTreeMap;
use std::time::Duration;

use flow_decisions::plan::plan;
use flow_protocol::jobs::ComponentTarget;
use flow_rack_sim::Timings;
use flow_rules::{Action, ComponentType, OperationCode, PowerOperation, RuleDefinition};

/// The ideal of one task, stage by stage.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Ideal {
    /// The physical ideal: hardware timing and the rule's sleeps.
    pub total: Duration,
    /// Per stage, in order.
    pub stages: Vec<Duration>,
    /// The polled ideal (waits rounded up to poll intervals), the figure
    /// reported before 2026-12-06.
    pub polled_total: Duration,
    /// Per stage, in order.
    pub polled_stages: Vec<Duration>,
}

/// Quantises a wait of `wait` to a poll every `poll`, the first at once.
/// A lower bound only while the transition outlasts the calls made before
/// the first poll: when it is shorter (the zero-latency scenarios, 0.2–2 ms
/// transitions) a poll can find it done at once and a run can come in
/// under this figure.
fn polled(wait: Duration, poll: Duration) -> Duration {
    if wait.is_zero() || poll.is_zero() {
        return wait;
    }
    let n = wait.as_nanos().div_ceil(poll.as_nanos());
    poll * u32::try_from(n).unwrap_or(u32::MAX)
}

/// What the simulated hardware is doing, in time since the task began.
#[derive(Debug, Default)]
struct World {
    /// When the last power transition of each type ends.
    power_ready: BTreeMap<ComponentType, Duration>,
    /// When the tray BMCs answer again (after shelf power returned).
    bmc_up: Option<Duration>,
}

/// Scaled simulator timings of one transition: (duration, affects BMCs).
fn transition(t: &Timings, scale: f64, ty: ComponentType, op: PowerOperation) -> (Duration, bool) {
    let s = |d: Duration| d.mul_f64(scale);
    let shelf = ty == ComponentType::PowerShelf;
    match op {
        PowerOperation::PowerOn | PowerOperation::ForcePowerOn if shelf => (s(t.shelf_on), true),
        PowerOperation::PowerOn | PowerOperation::ForcePowerOn => (s(t.power_on), false),
        PowerOperation::PowerOff | PowerOperation::ForcePowerOff if shelf => {
            (s(t.shelf_off), false)
        }
        PowerOperation::PowerOff => (s(t.graceful_shutdown), false),
        PowerOperation::ForcePowerOff => (s(t.force_off), false),
        PowerOperation::Restart | PowerOperation::WarmReset => (s(t.restart + t.power_on), false),
        PowerOperation::ForceRestart => (s(t.force_restart + t.power_on), false),
        PowerOperation::ColdReset => (s(t.power_cycle + t.power_on), false),
    }
}

/// The ideal time of `rule` on `components` for `operation`: physical and
/// polled.
pub fn ideal(
    rule: &RuleDefinition,
    operation: OperationCode,
    components: &[ComponentTarget],
    timings: &Timings,
    scale: f64,
) -> anyhow::Result<Ideal> {
    let (total, stages) = walk(rule, operation, components, timings, scale, false)?;
    let (polled_total, polled_stages) = walk(rule, operation, components, timings, scale, true)?;
    Ok(Ideal {
        total,
        stages,
        polled_total,
        polled_stages,
    })
}

/// One walk of the plan: waits as the hardware takes them, or rounded up
/// to the polls (`polls`).
fn walk(
    rule: &RuleDefinition,
    operation: OperationCode,
    components: &[ComponentTarget],
    timings: &Timings,
    scale: f64,
    polls: bool,
) -> anyhow::Result<(Duration, Vec<Duration>)> {
    let wait = |w: Duration, poll: Duration| if polls { polled(w, poll) } else { w };
    let plan = plan(rule, components)?;
    let mut now = Duration::ZERO;
    let mut world = World::default();
    let mut stages = Vec::new();
    for stage in &plan.stages {
        let start = now;
        let mut end = start;
        for planned in stage.steps.iter().filter(|s| !s.skipped) {
            let step = &rule.steps[planned.step_index];
            let n = planned.components.len();
            let window = match step.max_parallel {
                0 => n,
                m => (m as usize).min(n),
            }
            .max(1);
            let waves = u32::try_from(n.div_ceil(window)).unwrap_or(u32::MAX);
            let mut t = start;
            let ty = step.component_type;
            for action in step
                .pre_operation
                .iter()
                .chain(std::iter::once(&step.main_operation))
                .chain(&step.post_operation)
            {
                t += match action {
                    Action::Sleep { duration } => *duration,
                    Action::PowerControl { operation: op, .. } => {
                        let op = match (op, operation) {
                            (Some(op), _) => *op,
                            (None, OperationCode::Power(op)) => op,
                            (None, other) => {
                                anyhow::bail!("PowerControl without an operation in a {other} rule")
                            }
                        };
                        let (d, boots_bmcs) = transition(timings, scale, ty, op);
                        world.power_ready.insert(ty, t + d);
                        if boots_bmcs {
                            world.bmc_up = Some(t + d + timings.bmc_boot.mul_f64(scale));
                        }
                        Duration::ZERO
                    }
                    Action::VerifyPowerStatus { poll_interval, .. } => {
                        let ready = world.power_ready.get(&ty).copied().unwrap_or(t);
                        wait(ready.saturating_sub(t), *poll_interval)
                    }
                    Action::VerifyReachability { poll_interval, .. } => {
                        let up = world.bmc_up.unwrap_or(t);
                        wait(up.saturating_sub(t), *poll_interval)
                    }
                    Action::GetPowerStatus { .. } | Action::DecommissionControl => Duration::ZERO,
                    Action::FirmwareControl { poll_interval, .. } => {
                        let poll = Action::firmware_poll_interval(*poll_interval);
                        let run = timings.firmware_update.mul_f64(scale);
                        if polls {
                            polled(run, poll).max(poll) * waves
                        } else {
                            run * waves
                        }
                    }
                    Action::WaitDecommissioned { poll_interval, .. } => wait(
                        timings.decommission_phase.mul_f64(scale) * 3,
                        *poll_interval,
                    ),
                };
            }
            end = end.max(t);
        }
        stages.push(end - start);
        now = end;
    }
    Ok((now, stages))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rack(counts: &[(ComponentType, usize)]) -> Vec<ComponentTarget> {
        counts
            .iter()
            .flat_map(|(t, n)| {
                (1..=*n).map(move |i| ComponentTarget {
                    rack: "rack-01".into(),
                    name: format!("{}-{i:02}", t.subject_token()),
                    component_type: *t,
                    bmc_url: "http://127.0.0.1:1".into(),
                    credential_ref: "x".into(),
                    resource_id: None,
                })
            })
            .collect()
    }

    fn example_rule(op: &str) -> (RuleDefinition, OperationCode) {
        let batch = flow_rules::RuleBatch::from_yaml_str(include_str!(
            "../../../examples/operation-rules.yaml"
        ))
        .expect("the example rules validate");
        let code: OperationCode = op.parse().expect("an operation");
        let spec = batch
            .rules
            .into_iter()
            .find(|r| r.operation == code)
            .expect("the example has the rule");
        (spec.definition, code)
    }

    #[test]
    fn polls_round_up_to_their_interval() {
        let s = Duration::from_secs;
        assert_eq!(polled(Duration::ZERO, s(5)), Duration::ZERO);
        assert_eq!(polled(Duration::from_millis(100), s(5)), s(5));
        assert_eq!(polled(s(5), s(5)), s(5));
        assert_eq!(polled(Duration::from_millis(5001), s(5)), s(10));
    }

    #[test]
    fn graceful_power_on_of_an_nvl72_rack_at_a_twentieth_of_real_time() {
        let (rule, code) = example_rule("power_on");
        let nvl72 = rack(&[
            (ComponentType::PowerShelf, 8),
            (ComponentType::NVSwitch, 9),
            (ComponentType::Compute, 18),
        ]);
        let i = ideal(&rule, code, &nvl72, &Timings::default(), 0.05).unwrap();
        // Polled: shelves one 5 s poll for the 0.1 s shelf transition, BMCs
        // already up at the reachability check (1.1 s < 5 s), then the 30 s
        // settle; switches and trays one 5 s poll each for their 0.25 s
        // power-on.
        let s = Duration::from_secs;
        assert_eq!(i.polled_stages, vec![s(35), s(5), s(5)]);
        assert_eq!(i.polled_total, s(45));
        // Physical: the shelves' 0.1 s, the BMCs' boot after them (1.1 s
        // in all), the 30 s sleep; then each 0.25 s power-on.
        let ms = Duration::from_millis;
        let t = Timings::default();
        let boot = t.shelf_on.mul_f64(0.05) + t.bmc_boot.mul_f64(0.05);
        assert_eq!(i.stages[0], boot.max(t.shelf_on.mul_f64(0.05)) + s(30));
        assert_eq!(i.stages[1], t.power_on.mul_f64(0.05));
        assert_eq!(i.stages[2], t.power_on.mul_f64(0.05));
        assert!(
            i.total < i.polled_total && i.total > s(30) + ms(500),
            "{i:?}"
        );
    }

    #[test]
    fn firmware_waves_follow_max_parallel() {
        let (rule, code) = example_rule("upgrade");
        let r = rack(&[(ComponentType::NVSwitch, 9), (ComponentType::Compute, 18)]);
        // 30 s updates polled each minute: compute 18/4 → 5 waves, switches
        // 9/2 → 5 waves, one minute each.
        let i = ideal(&rule, code, &r, &Timings::default(), 1.0).unwrap();
        assert_eq!(
            i.polled_stages,
            vec![Duration::from_secs(300), Duration::from_secs(300)]
        );
        // Physically each wave is the 30 s update itself.
        assert_eq!(
            i.stages,
            vec![Duration::from_secs(150), Duration::from_secs(150)]
        );
    }
}
