//! The step execution budget covers every attempt, wait, poll deadline, sleep
//! and `max_parallel` batch a step may use — unlike the reference system's
//! formula (`docs/rule-format.md`, "Step budget").

use std::time::Duration;

use flow_rules::budget::{ComponentCounts, rule_budget, step_budget};
use flow_rules::{OperationCode, RuleDefinition, Step, builtin_rule};
use serde_json::json;

fn one_step(step: serde_json::Value) -> Step {
    let rule =
        RuleDefinition::from_value(&json!({"steps": [step]})).unwrap_or_else(|e| panic!("{e}"));
    rule.steps.into_iter().next().expect("one step")
}

fn minutes(m: u64, s: u64) -> Duration {
    Duration::from_secs(m * 60 + s)
}

#[test]
fn the_seeds_32_minute_example_gets_every_default_attempt() {
    // The format specification's example: with no step timeout or pre/post
    // action timeouts, the reference system's budget is 32 minutes, while
    // each activity attempt can take 20 minutes. It counts one attempt:
    // 30 min base + 2 min buffer = 32 min (`docs/rule-format.md`, "Step
    // budget").
    let step = one_step(json!({
        "component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}
    }));
    let reference = minutes(32, 0);
    // Flow: three default attempts of 20 min, waits of 1 s and 2 s, 2 min buffer.
    let flow = step_budget(&step, 1);
    assert_eq!(flow, minutes(62, 3));
    assert!(flow > reference + minutes(30, 0));
}

#[test]
fn batches_multiply_per_component_actions_only() {
    // The reference system's own batch cases (one attempt, step timeout 1 min,
    // pre GetPowerStatus 10 s, post Sleep 20 s), which Flow's formula
    // reproduces (`docs/rule-format.md`, "Step budget").
    let step = |max_parallel: u32| {
        one_step(json!({
            "component_type": "compute", "stage": 1, "timeout": "1m",
            "max_parallel": max_parallel,
            "retry": {"max_attempts": 1, "initial_interval": "1s", "backoff_coefficient": 1.0},
            "pre_operation": [{"name": "GetPowerStatus", "timeout": "10s"}],
            "main_operation": {"name": "PowerControl"},
            "post_operation": [{"name": "Sleep", "parameters": {"duration": "20s"}}]
        }))
    };
    assert_eq!(step_budget(&step(0), 5), minutes(3, 30));
    assert_eq!(step_budget(&step(3), 3), minutes(3, 30));
    // ⌈5/2⌉ = 3 batches of the main (1 min) and the pre action (10 s); the
    // Sleep runs once.
    assert_eq!(step_budget(&step(2), 5), minutes(5, 50));
}

#[test]
fn polling_actions_count_their_deadline_and_one_interval() {
    // The format's graceful power-on example
    // (fixtures/seed-graceful-power-on.json), compute step: 20 min, 3 attempts
    // 5 s ×2 cap 1 min, max_parallel 8, post VerifyPowerStatus 30 s / 5 s; 18
    // compute trays.
    let step = one_step(json!({
        "component_type": "compute", "stage": 3, "max_parallel": 8, "timeout": "20m",
        "retry": {"max_attempts": 3, "initial_interval": "5s", "backoff_coefficient": 2.0,
                  "max_interval": "1m"},
        "main_operation": {"name": "PowerControl"},
        "post_operation": [{"name": "VerifyPowerStatus", "timeout": "30s", "poll_interval": "5s",
                            "parameters": {"expected_status": "on"}}]
    }));
    // Per batch: PowerControl 3×20m + 5s + 10s = 60m15s; verify 30s + 5s.
    // Three batches of 8: 3 × (60m15s + 35s) + 2m buffer.
    assert_eq!(step_budget(&step, 18), minutes(182, 30) + minutes(2, 0));
    assert_eq!(step_budget(&step, 8), minutes(60, 50) + minutes(2, 0));
}

#[test]
fn firmware_counts_start_attempts_and_the_poll_timeout() {
    // Built-in upgrade, compute step: 45 min, 2 attempts 30 s, poll 2m / 45m.
    // The reference system: 45m × 2 + 30s + 2m = 92m30s. Flow adds the
    // polling it allows (`docs/rule-format.md`, "Step budget").
    let rule = builtin_rule(OperationCode::Firmware(
        flow_rules::FirmwareOperation::Upgrade,
    ));
    let compute = &rule.definition.steps[0];
    assert_eq!(step_budget(compute, 18), minutes(90 + 45 + 2 + 2, 30));
}

#[test]
fn decommission_control_is_five_minutes_once() {
    let step = one_step(json!({
        "component_type": "powershelf", "stage": 1, "timeout": "2h",
        "main_operation": {"name": "DecommissionControl"},
        "post_operation": [{"name": "WaitDecommissioned", "timeout": "4h", "poll_interval": "30s"}]
    }));
    assert_eq!(step_budget(&step, 8), minutes(5 + 240 + 2, 30));
}

#[test]
fn rule_budget_sums_the_longest_step_of_each_stage_and_skips_absent_types() {
    let rule = builtin_rule("force_power_on".parse().unwrap());
    let counts = ComponentCounts::nvl72();
    let total = rule_budget(&rule.definition, &counts);
    let stages = rule.definition.stages();
    let expected: Duration = stages
        .values()
        .map(|steps| {
            steps
                .iter()
                .map(|s| step_budget(s, counts.get(s.component_type)))
                .max()
                .unwrap()
        })
        .sum();
    assert_eq!(total, expected);
    // A rack with compute trays only runs only the compute steps.
    let compute_only = ComponentCounts(
        [(flow_rules::ComponentType::Compute, 18)]
            .into_iter()
            .collect(),
    );
    let compute_total: Duration = rule
        .definition
        .steps
        .iter()
        .filter(|s| s.component_type == flow_rules::ComponentType::Compute)
        .map(|s| step_budget(s, 18))
        .sum();
    assert_eq!(rule_budget(&rule.definition, &compute_only), compute_total);
    assert_eq!(
        rule_budget(&rule.definition, &ComponentCounts::default()),
        Duration::ZERO
    );
}
