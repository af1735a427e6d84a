//! Event rules, decided without I/O: which rule handles an event (rack
//! binding → site binding → built-in, disabled rules passed over), which
//! of its actions apply and to which components, when a failed attempt is
//! tried again, and whether a rule as written is valid; for leaks, how many
//! trays of the rack leak and which components an event locks. The scheduler
//! stores and runs what this decides (`services/scheduler/src/events.rs`).

use std::time::Duration;

use flow_protocol::api::TaskSubmit;
use flow_protocol::event::{
    ActionCondition, ActionKind, EventRuleSpec, EventType, ExecutionStatus, HardwareEvent,
    RuleAction, TargetStrategy,
};
use flow_rules::{ComponentType, OperationCode, PowerOperation};

/// Attempts an execution gets before it fails.
pub const MAX_ATTEMPTS: u32 = 4;
/// The longest wait between attempts.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);

/// The prefix of a built-in rule's name.
pub const BUILTIN_PREFIX: &str = "builtin:";

/// How many leaking trays in a rack make the built-in leak rule power the
/// whole rack off and lock it (the severe tier: `docs/leak-containment.md`,
/// "Where the tiers come from").
pub const RACK_ESCALATION_TRAYS: u32 = 2;

/// The built-in rule for an event type, used when no binding applies.
///
/// A leak on a tray, while it is the rack's only leaking tray,
/// force-powers-off that tray and the trays of its type below it (they are
/// what it drips on); at [`RACK_ESCALATION_TRAYS`] or more leaking trays it
/// force-powers-off the whole rack (trays first, power shelves last) and
/// locks every component. Both go first (`preempt`): a task already open on
/// those components is cancelled and the power-off starts at once, without
/// waiting for readiness. The leaking tray itself is always locked. An
/// over-temperature is an alert.
pub fn builtin(event_type: EventType) -> EventRuleSpec {
    let name = format!("{BUILTIN_PREFIX}{event_type}");
    match event_type {
        EventType::LeakDetected => {
            let force_off = |description: &str| {
                let mut task = TaskSubmit::new(
                    String::new(),
                    OperationCode::Power(PowerOperation::ForcePowerOff),
                    Vec::new(),
                );
                task.override_readiness = true;
                task.description = description.to_owned();
                Box::new(task)
            };
            let trays = vec![ComponentType::Compute, ComponentType::NVSwitch];
            EventRuleSpec {
                name,
                description: format!(
                    "Force-power-off the leaking tray and the trays below it; at {RACK_ESCALATION_TRAYS} or more leaking trays, the whole rack (shelves last), locked."
                ),
                event_type,
                actions: vec![
                    RuleAction {
                        name: "force_power_off_affected".to_owned(),
                        when: ActionCondition {
                            component_types: trays.clone(),
                            max_leaking_trays: Some(RACK_ESCALATION_TRAYS - 1),
                            ..ActionCondition::default()
                        },
                        kind: ActionKind::SubmitTask {
                            target: TargetStrategy::AffectedComponents,
                            task: force_off(
                                "leak: force power off the tray and the trays below it",
                            ),
                            preempt: true,
                            lock: false,
                        },
                    },
                    RuleAction {
                        name: "force_power_off_rack".to_owned(),
                        when: ActionCondition {
                            component_types: trays,
                            min_leaking_trays: Some(RACK_ESCALATION_TRAYS),
                            ..ActionCondition::default()
                        },
                        kind: ActionKind::SubmitTask {
                            target: TargetStrategy::Rack,
                            task: force_off(
                                "leak: several trays leak; force power off the whole rack",
                            ),
                            preempt: true,
                            lock: true,
                        },
                    },
                ],
            }
        }
        EventType::TemperatureCritical => EventRuleSpec {
            name,
            description: "Alert on a critical temperature.".to_owned(),
            event_type,
            actions: vec![RuleAction {
                name: "alert".to_owned(),
                when: ActionCondition::default(),
                kind: ActionKind::Alert {
                    severity: flow_protocol::event::Severity::Critical,
                    message: "critical temperature".to_owned(),
                },
            }],
        },
    }
}

/// A candidate rule as the store has it.
#[derive(Debug, Clone)]
pub struct Candidate<R> {
    /// The rule (or its ID).
    pub rule: R,
    /// Whether it is enabled.
    pub enabled: bool,
}

/// The rule that handles an event: the rack's binding if its rule is
/// enabled, else the site's if enabled, else `None` (the built-in).
pub fn select<R>(rack: Option<Candidate<R>>, site: Option<Candidate<R>>) -> Option<R> {
    [rack, site]
        .into_iter()
        .flatten()
        .find(|c| c.enabled)
        .map(|c| c.rule)
}

/// A component of the event's rack, as the rule sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RackComponent {
    /// Its name.
    pub name: String,
    /// Its type.
    pub component_type: ComponentType,
    /// Its slot, if the rack document gives one.
    pub slot: Option<u32>,
}

/// What one action will do for one event, fixed when the event arrives.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// The action.
    pub action: RuleAction,
    /// `pending`, or `skipped` with the reason.
    pub status: ExecutionStatus,
    /// Why it was skipped.
    pub reason: String,
    /// The components (names, in the event's rack) it acts on.
    pub targets: Vec<String>,
}

/// Why an event cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// The event names a component its rack does not have.
    #[error("rack {rack} has no component {component:?}")]
    UnknownComponent {
        /// The rack.
        rack: String,
        /// The name given.
        component: String,
    },
}

/// Whether a component type is a tray (what the leak count counts).
pub fn is_tray(t: ComponentType) -> bool {
    matches!(t, ComponentType::Compute | ComponentType::NVSwitch)
}

/// How many trays of the rack leak: the components named in `leaking`
/// (those with an uncleared leak event, the new one's included) that are
/// trays.
pub fn leaking_trays(
    leaking: &std::collections::BTreeSet<String>,
    components: &[RackComponent],
) -> u32 {
    let count = components
        .iter()
        .filter(|c| is_tray(c.component_type) && leaking.contains(&c.name))
        .count();
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// The components (names) an event locks once planned: a leak's own
/// component, and the targets of every pending action that asks to lock.
pub fn locks(event: &HardwareEvent, planned: &[Planned]) -> Vec<String> {
    let mut out = std::collections::BTreeSet::new();
    if event.event_type == EventType::LeakDetected {
        out.insert(event.component.clone());
    }
    for p in planned {
        if p.status == ExecutionStatus::Pending
            && matches!(p.action.kind, ActionKind::SubmitTask { lock: true, .. })
        {
            out.extend(p.targets.iter().cloned());
        }
    }
    out.into_iter().collect()
}

/// Plans each action of `rule` for `event` on a rack with `components`,
/// `leaking` trays of which leak (see [`leaking_trays`]).
pub fn plan(
    rule: &EventRuleSpec,
    event: &HardwareEvent,
    components: &[RackComponent],
    leaking: u32,
) -> Result<Vec<Planned>, EventError> {
    let subject = components
        .iter()
        .find(|c| c.name == event.component)
        .ok_or_else(|| EventError::UnknownComponent {
            rack: event.rack.clone(),
            component: event.component.clone(),
        })?;
    Ok(rule
        .actions
        .iter()
        .map(|action| {
            let (status, reason, targets) = if !applies(&action.when, event, subject) {
                (
                    ExecutionStatus::Skipped,
                    format!(
                        "its condition does not match a {} event on a {}",
                        event.severity, subject.component_type
                    ),
                    Vec::new(),
                )
            } else if !counts(&action.when, leaking) {
                (
                    ExecutionStatus::Skipped,
                    format!(
                        "its condition does not match {leaking} leaking tray(s) in rack {}",
                        event.rack
                    ),
                    Vec::new(),
                )
            } else {
                let targets = match &action.kind {
                    ActionKind::SubmitTask { target, .. } => targets(*target, subject, components),
                    ActionKind::Alert { .. } | ActionKind::Noop => vec![subject.name.clone()],
                };
                if targets.is_empty() {
                    (
                        ExecutionStatus::Skipped,
                        "no component to act on".to_owned(),
                        targets,
                    )
                } else {
                    (ExecutionStatus::Pending, String::new(), targets)
                }
            };
            Planned {
                action: action.clone(),
                status,
                reason,
                targets,
            }
        })
        .collect())
}

fn counts(when: &ActionCondition, leaking: u32) -> bool {
    when.min_leaking_trays.is_none_or(|min| leaking >= min)
        && when.max_leaking_trays.is_none_or(|max| leaking <= max)
}

fn applies(when: &ActionCondition, event: &HardwareEvent, subject: &RackComponent) -> bool {
    (when.severities.is_empty() || when.severities.contains(&event.severity))
        && (when.component_types.is_empty()
            || when.component_types.contains(&subject.component_type))
}

/// The components a task of `strategy` targets, by name.
pub fn targets(
    strategy: TargetStrategy,
    subject: &RackComponent,
    components: &[RackComponent],
) -> Vec<String> {
    match strategy {
        TargetStrategy::Component => vec![subject.name.clone()],
        TargetStrategy::Rack => components.iter().map(|c| c.name.clone()).collect(),
        TargetStrategy::AffectedComponents => {
            let mut below: Vec<&RackComponent> = components
                .iter()
                .filter(|c| {
                    c.name != subject.name
                        && c.component_type == subject.component_type
                        && matches!((c.slot, subject.slot), (Some(s), Some(at)) if s < at)
                })
                .collect();
            // Nearest first: the tray right below drips first.
            below.sort_by_key(|c| std::cmp::Reverse(c.slot));
            std::iter::once(subject.name.clone())
                .chain(below.into_iter().map(|c| c.name.clone()))
                .collect()
        }
    }
}

/// When to try again after `attempts` failed attempts (10 s, 20 s, 40 s
/// with a `base` of 10 s, capped at [`MAX_RETRY_DELAY`]), or `None` when
/// the execution has had its [`MAX_ATTEMPTS`].
pub fn retry_delay(attempts: u32, base: Duration) -> Option<Duration> {
    if attempts >= MAX_ATTEMPTS {
        return None;
    }
    let factor = 1u32 << attempts.saturating_sub(1).min(16);
    Some(base.saturating_mul(factor).min(MAX_RETRY_DELAY.max(base)))
}

/// The longest rule name.
pub const MAX_NAME_LEN: usize = 128;

/// Every problem with a rule as written (empty: valid).
pub fn validate(spec: &EventRuleSpec) -> Vec<String> {
    let mut problems = Vec::new();
    if spec.name.is_empty() || spec.name.len() > MAX_NAME_LEN {
        problems.push(format!("name: 1 to {MAX_NAME_LEN} bytes"));
    } else if spec.name.trim() != spec.name {
        problems.push("name: no surrounding whitespace".to_owned());
    } else if spec.name.starts_with(BUILTIN_PREFIX) {
        problems.push(format!("name: {BUILTIN_PREFIX:?} is for built-in rules"));
    }
    if spec.actions.is_empty() {
        problems.push("actions: at least one".to_owned());
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, action) in spec.actions.iter().enumerate() {
        let at = format!("actions[{i}]");
        let snake = !action.name.is_empty()
            && action.name.starts_with(|c: char| c.is_ascii_lowercase())
            && action
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !snake {
            problems.push(format!(
                "{at}.name: {:?} is not lower_snake_case",
                action.name
            ));
        } else if !seen.insert(action.name.as_str()) {
            problems.push(format!("{at}.name: {:?} is used twice", action.name));
        }
        if let (Some(min), Some(max)) =
            (action.when.min_leaking_trays, action.when.max_leaking_trays)
            && min > max
        {
            problems.push(format!(
                "{at}.when: min_leaking_trays {min} is above max_leaking_trays {max}: it never applies"
            ));
        }
        if (action.when.min_leaking_trays.is_some() || action.when.max_leaking_trays.is_some())
            && spec.event_type != EventType::LeakDetected
        {
            problems.push(format!(
                "{at}.when: min_leaking_trays and max_leaking_trays count leaks; the rule handles {}",
                spec.event_type
            ));
        }
        match &action.kind {
            ActionKind::SubmitTask { task, .. } => {
                if !task.racks.is_empty() || !task.labels.is_empty() || !task.components.is_empty()
                {
                    problems.push(format!(
                        "{at}.do.task: names targets; the action's `target` chooses them"
                    ));
                }
                if !task.request_id.is_empty() {
                    problems.push(format!(
                        "{at}.do.task.request_id: set by the execution, leave it empty"
                    ));
                }
            }
            ActionKind::Alert { message, .. } => {
                if message.trim().is_empty() {
                    problems.push(format!("{at}.do.message: empty"));
                }
            }
            ActionKind::Noop => {}
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_protocol::event::Severity;
    use time::OffsetDateTime;

    fn rack() -> Vec<RackComponent> {
        let mut out = Vec::new();
        for slot in 1..=3 {
            out.push(RackComponent {
                name: format!("shelf-{slot}"),
                component_type: ComponentType::PowerShelf,
                slot: Some(slot),
            });
        }
        for slot in 1..=4 {
            out.push(RackComponent {
                name: format!("compute-{slot}"),
                component_type: ComponentType::Compute,
                slot: Some(slot),
            });
            out.push(RackComponent {
                name: format!("switch-{slot}"),
                component_type: ComponentType::NVSwitch,
                slot: Some(slot),
            });
        }
        out
    }

    fn leak(component: &str) -> HardwareEvent {
        HardwareEvent {
            source: "redfish".to_owned(),
            key: format!("r1/{component}/leak/1"),
            event_type: EventType::LeakDetected,
            severity: Severity::Critical,
            rack: "r1".to_owned(),
            component: component.to_owned(),
            message: "leak".to_owned(),
            origin: String::new(),
            observed_at: OffsetDateTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn the_builtin_leak_rule_powers_off_the_tray_and_those_below_it() {
        let rule = builtin(EventType::LeakDetected);
        // Valid but for its reserved name.
        assert_eq!(
            validate(&rule),
            ["name: \"builtin:\" is for built-in rules"]
        );
        let planned = plan(&rule, &leak("compute-3"), &rack(), 1).unwrap();
        assert_eq!(planned.len(), 2);
        assert_eq!(planned[0].status, ExecutionStatus::Pending);
        assert_eq!(planned[0].targets, ["compute-3", "compute-2", "compute-1"]);
        assert_eq!(planned[1].status, ExecutionStatus::Skipped);
        assert_eq!(
            planned[1].reason,
            "its condition does not match 1 leaking tray(s) in rack r1"
        );
        // Only the leaking tray is locked.
        assert_eq!(locks(&leak("compute-3"), &planned), ["compute-3"]);
        // The lowest tray has nothing below it.
        let planned = plan(&rule, &leak("switch-1"), &rack(), 1).unwrap();
        assert_eq!(planned[0].targets, ["switch-1"]);
        // A shelf is not a tray: the condition skips it (it is locked all
        // the same).
        let planned = plan(&rule, &leak("shelf-2"), &rack(), 0).unwrap();
        assert_eq!(planned[0].status, ExecutionStatus::Skipped);
        assert_eq!(planned[1].status, ExecutionStatus::Skipped);
        assert!(planned[0].targets.is_empty());
        assert_eq!(locks(&leak("shelf-2"), &planned), ["shelf-2"]);
    }

    #[test]
    fn two_leaking_trays_power_off_and_lock_the_whole_rack() {
        let rule = builtin(EventType::LeakDetected);
        let leaking = ["compute-3", "switch-1", "shelf-1"]
            .map(str::to_owned)
            .into_iter()
            .collect();
        // The shelf does not count: two trays.
        assert_eq!(leaking_trays(&leaking, &rack()), 2);
        let planned = plan(&rule, &leak("switch-1"), &rack(), 2).unwrap();
        assert_eq!(planned[0].status, ExecutionStatus::Skipped);
        assert_eq!(planned[1].status, ExecutionStatus::Pending);
        assert_eq!(planned[1].targets.len(), rack().len());
        let mut all: Vec<String> = rack().into_iter().map(|c| c.name).collect();
        all.sort();
        assert_eq!(locks(&leak("switch-1"), &planned), all);
    }

    #[test]
    fn a_count_condition_is_checked() {
        let mut rule = builtin(EventType::LeakDetected);
        rule.name = "mine".to_owned();
        rule.actions[0].when.min_leaking_trays = Some(3);
        rule.actions[0].when.max_leaking_trays = Some(2);
        assert_eq!(
            validate(&rule),
            ["actions[0].when: min_leaking_trays 3 is above max_leaking_trays 2: it never applies"]
        );
        rule.event_type = EventType::TemperatureCritical;
        rule.actions.truncate(1);
        rule.actions[0].when.max_leaking_trays = None;
        assert_eq!(
            validate(&rule),
            [
                "actions[0].when: min_leaking_trays and max_leaking_trays count leaks; the rule handles hardware.temperature.critical"
            ]
        );
    }

    #[test]
    fn an_unknown_component_is_named() {
        let rule = builtin(EventType::LeakDetected);
        let error = plan(&rule, &leak("compute-9"), &rack(), 1).unwrap_err();
        assert_eq!(error.to_string(), "rack r1 has no component \"compute-9\"");
    }

    #[test]
    fn a_rack_binding_wins_and_disabled_rules_are_passed_over() {
        let c = |rule: &'static str, enabled| Some(Candidate { rule, enabled });
        assert_eq!(select(c("rack", true), c("site", true)), Some("rack"));
        assert_eq!(select(c("rack", false), c("site", true)), Some("site"));
        assert_eq!(select(c("rack", false), c("site", false)), None);
        assert_eq!(select(None, None::<Candidate<&str>>), None);
    }

    #[test]
    fn retries_back_off_10_20_40_then_stop() {
        let base = Duration::from_secs(10);
        let delays: Vec<_> = (1..=4).map(|a| retry_delay(a, base)).collect();
        assert_eq!(
            delays,
            [
                Some(Duration::from_secs(10)),
                Some(Duration::from_secs(20)),
                Some(Duration::from_secs(40)),
                None
            ]
        );
        assert_eq!(
            retry_delay(3, Duration::from_secs(100)),
            Some(Duration::from_secs(100))
        );
    }

    #[test]
    fn conditions_and_strategies() {
        let mut rule = builtin(EventType::LeakDetected);
        rule.name = "mine".to_owned();
        rule.actions[0].when.severities = vec![Severity::Warning];
        let planned = plan(&rule, &leak("compute-2"), &rack(), 1).unwrap();
        assert_eq!(planned[0].status, ExecutionStatus::Skipped);
        let subject = &rack()[3];
        assert_eq!(
            targets(TargetStrategy::Component, subject, &rack()),
            ["compute-1"]
        );
        assert_eq!(targets(TargetStrategy::Rack, subject, &rack()).len(), 11);
    }

    #[test]
    fn invalid_rules_name_each_problem() {
        let mut rule = builtin(EventType::LeakDetected);
        rule.name = " x".to_owned();
        rule.actions.push(rule.actions[0].clone());
        rule.actions.push(RuleAction {
            name: "Alert".to_owned(),
            when: ActionCondition::default(),
            kind: ActionKind::Alert {
                severity: Severity::Warning,
                message: " ".to_owned(),
            },
        });
        if let ActionKind::SubmitTask { task, .. } = &mut rule.actions[0].kind {
            task.components = vec!["compute-1".to_owned()];
        }
        assert_eq!(
            validate(&rule),
            [
                "name: no surrounding whitespace",
                "actions[0].do.task: names targets; the action's `target` chooses them",
                "actions[2].name: \"force_power_off_affected\" is used twice",
                "actions[3].name: \"Alert\" is not lower_snake_case",
                "actions[3].do.message: empty",
            ]
        );
    }
}
