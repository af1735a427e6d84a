//! The planner: rule snapshot + the task's components → stages of steps.

use std::collections::BTreeMap;
use std::time::Duration;

use flow_hardware::ComponentTarget;
use flow_rules::budget::{batches, step_budget};
use flow_rules::{Action, ComponentType, RuleDefinition, Stage};

/// One step of the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedStep {
    /// Its index in the rule's `steps`.
    pub step_index: usize,
    /// Its component type.
    pub component_type: ComponentType,
    /// The task's components of that type (empty when skipped).
    pub components: Vec<ComponentTarget>,
    /// No component of its type is targeted: reported as skipped.
    pub skipped: bool,
    /// Its execution budget for these components (zero when skipped).
    pub budget: Duration,
}

/// One stage: steps that run together.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedStage {
    /// The stage number.
    pub stage: Stage,
    /// Its steps, in rule order.
    pub steps: Vec<PlannedStep>,
}

/// The plan of a task.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Stages in ascending order.
    pub stages: Vec<PlannedStage>,
    /// Every targeted component by type, in the order given (types without
    /// a step included: `VerifyReachability` may probe them).
    pub components: BTreeMap<ComponentType, Vec<ComponentTarget>>,
}

/// Why a rule cannot run for these components.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The rule has no steps.
    #[error("the rule has no steps: nothing to do")]
    NoSteps,
    /// No step targets any type the task has.
    #[error("nothing to do: the rule has steps for {rule} but the task targets {targeted}")]
    NothingToDo {
        /// Types the rule's steps target.
        rule: String,
        /// Types the task targets.
        targeted: String,
    },
}

fn names(types: impl Iterator<Item = ComponentType>) -> String {
    let v: Vec<_> = types.map(|t| t.as_str()).collect();
    if v.is_empty() {
        "no component".to_owned()
    } else {
        v.join(", ")
    }
}

/// Plans a task. Components of types the rule has no step for are ignored
/// (they are not the rule's business); steps of absent types are skipped.
pub fn plan(rule: &RuleDefinition, components: &[ComponentTarget]) -> Result<Plan, PlanError> {
    if rule.steps.is_empty() {
        return Err(PlanError::NoSteps);
    }
    let mut by_type: BTreeMap<ComponentType, Vec<ComponentTarget>> = BTreeMap::new();
    for c in components {
        by_type.entry(c.component_type).or_default().push(c.clone());
    }
    let mut stages: BTreeMap<Stage, Vec<PlannedStep>> = BTreeMap::new();
    let mut any = false;
    for (step_index, step) in rule.steps.iter().enumerate() {
        let components = by_type
            .get(&step.component_type)
            .cloned()
            .unwrap_or_default();
        let skipped = components.is_empty();
        any |= !skipped;
        let budget = if skipped {
            Duration::ZERO
        } else {
            step_budget(step, components.len())
        };
        stages.entry(step.stage).or_default().push(PlannedStep {
            step_index,
            component_type: step.component_type,
            components,
            skipped,
            budget,
        });
    }
    if !any {
        return Err(PlanError::NothingToDo {
            rule: names(rule.component_types().into_iter()),
            targeted: names(by_type.keys().copied()),
        });
    }
    Ok(Plan {
        stages: stages
            .into_iter()
            .map(|(stage, steps)| PlannedStage { stage, steps })
            .collect(),
        components: by_type,
    })
}

/// The least time a plan takes, whatever the hardware: per step, the
/// rule's sleeps and one poll interval per polling action (the first poll
/// of a verification finds a command just sent not yet done; a firmware
/// update's first poll comes one interval after it starts, per batch of
/// `max_parallel`); steps of a stage side by side, stages in turn.
pub fn least_duration(rule: &RuleDefinition, plan: &Plan) -> Duration {
    plan.stages
        .iter()
        .map(|stage| {
            stage
                .steps
                .iter()
                .filter(|s| !s.skipped)
                .filter_map(|s| rule.steps.get(s.step_index).map(|step| (s, step)))
                .map(|(planned, step)| {
                    step.actions()
                        .map(|action| {
                            let n = batches(action, step.max_parallel, planned.components.len());
                            match action {
                                Action::Sleep { duration } => *duration,
                                Action::VerifyPowerStatus { poll_interval, .. }
                                | Action::VerifyReachability { poll_interval, .. }
                                | Action::WaitDecommissioned { poll_interval, .. } => {
                                    *poll_interval
                                }
                                Action::FirmwareControl { poll_interval, .. } => {
                                    Action::firmware_poll_interval(*poll_interval).saturating_mul(n)
                                }
                                Action::PowerControl { .. }
                                | Action::GetPowerStatus { .. }
                                | Action::DecommissionControl => Duration::ZERO,
                            }
                        })
                        .sum::<Duration>()
                })
                .max()
                .unwrap_or_default()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_rules::{OperationCode, builtin_rule};

    fn components(types: &[(ComponentType, usize)]) -> Vec<ComponentTarget> {
        types
            .iter()
            .flat_map(|(t, n)| {
                (1..=*n).map(move |i| ComponentTarget {
                    rack: "r".into(),
                    name: format!("{}-{i:02}", t.subject_token()),
                    component_type: *t,
                    bmc_url: "http://127.0.0.1:1".into(),
                    credential_ref: "x".into(),
                    resource_id: None,
                })
            })
            .collect()
    }

    #[test]
    fn stages_ascend_and_absent_types_are_skipped() {
        let rule = &builtin_rule("force_power_on".parse::<OperationCode>().unwrap()).definition;
        let plan = plan(
            rule,
            &components(&[(ComponentType::Compute, 3), (ComponentType::PowerShelf, 2)]),
        )
        .unwrap();
        let stages: Vec<u32> = plan.stages.iter().map(|s| s.stage.get()).collect();
        assert_eq!(stages, [1, 2, 3, 4]);
        let switch = &plan.stages[1].steps[0];
        assert_eq!(switch.component_type, ComponentType::NVSwitch);
        assert!(switch.skipped && switch.components.is_empty() && switch.budget.is_zero());
        let last: Vec<_> = plan.stages[3]
            .steps
            .iter()
            .map(|s| (s.component_type, s.skipped))
            .collect();
        assert_eq!(
            last,
            [
                (ComponentType::PowerShelf, false),
                (ComponentType::NVSwitch, true),
                (ComponentType::Compute, false)
            ]
        );
        assert_eq!(plan.stages[2].steps[0].components.len(), 3);
        assert!(!plan.stages[2].steps[0].budget.is_zero());
    }

    #[test]
    fn the_least_duration_is_the_rules_sleeps_and_first_polls_stage_by_stage() {
        let rule = RuleDefinition::from_value(&serde_json::json!({
            "version": "v1",
            "steps": [
                {"component_type": "PowerShelf", "stage": 1,
                 "main_operation": {"name": "PowerControl"},
                 "post_operation": [{"name": "Sleep", "parameters": {"duration": "10s"}}]},
                {"component_type": "Compute", "stage": 1,
                 "main_operation": {"name": "Sleep", "parameters": {"duration": "3s"}}},
                {"component_type": "Compute", "stage": 2,
                 "main_operation": {"name": "PowerControl"},
                 "post_operation": [{"name": "VerifyPowerStatus", "timeout": "5m",
                     "poll_interval": "15s", "parameters": {"expected_status": "on"}}]}
            ]
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let p = plan(
            &rule,
            &components(&[(ComponentType::Compute, 2), (ComponentType::PowerShelf, 1)]),
        )
        .unwrap();
        // Stage 1: the longer of 10 s and 3 s; stage 2: one poll of 15 s.
        assert_eq!(least_duration(&rule, &p), Duration::from_secs(25));
    }

    #[test]
    fn nothing_to_do_is_an_error() {
        assert_eq!(
            plan(
                &RuleDefinition::default(),
                &components(&[(ComponentType::Compute, 1)])
            ),
            Err(PlanError::NoSteps)
        );
        let rule = &builtin_rule("upgrade".parse::<OperationCode>().unwrap()).definition;
        let e = plan(rule, &components(&[(ComponentType::PowerShelf, 8)])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "nothing to do: the rule has steps for Compute, NVSwitch but the task targets PowerShelf"
        );
    }
}
