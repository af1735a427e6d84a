//! The format specification's examples (`tests/fixtures/seed-*.json`;
//! `docs/rule-format.md`), the shipped example batch and the built-in rules
//! all validate, and their canonical JSON parses back to the same model.

use std::time::Duration;

use flow_rules::{
    Action, ComponentType, OperationCode, PowerState, RuleBatch, RuleDefinition, builtin_rule,
    builtin_rules,
};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn parse(name: &str) -> RuleDefinition {
    RuleDefinition::from_json_str(&fixture(name)).unwrap_or_else(|e| panic!("{name}:\n{e}"))
}

#[test]
fn seed_graceful_power_on_validates_with_its_values() {
    let rule = parse("seed-graceful-power-on.json");
    assert_eq!(rule.steps.len(), 3);
    let stages: Vec<_> = rule.stages().keys().map(|s| s.get()).collect();
    assert_eq!(stages, [1, 2, 3]);
    let shelf = &rule.steps[0];
    assert_eq!(shelf.component_type, ComponentType::PowerShelf);
    assert_eq!(shelf.max_parallel, 1);
    assert_eq!(shelf.timeout, Some(Duration::from_secs(600)));
    let retry = shelf.retry.expect("retry");
    assert_eq!(retry.max_attempts.get(), 3);
    assert_eq!(retry.initial_interval, Duration::from_secs(5));
    assert_eq!(retry.max_interval, Some(Duration::from_secs(60)));
    assert_eq!(
        shelf.post_operation[0],
        Action::VerifyPowerStatus {
            expected: PowerState::On,
            timeout: Duration::from_secs(30),
            poll_interval: Duration::from_secs(5),
        }
    );
    assert_eq!(
        shelf.post_operation[1],
        Action::VerifyReachability {
            component_types: vec![ComponentType::Compute, ComponentType::NVSwitch],
            require_all: false,
            timeout: Duration::from_secs(180),
            poll_interval: Duration::from_secs(10),
        }
    );
    assert_eq!(
        shelf.post_operation[2],
        Action::Sleep {
            duration: Duration::from_secs(30)
        }
    );
}

#[test]
fn seed_graceful_power_off_validates() {
    let rule = parse("seed-graceful-power-off.json");
    let order: Vec<_> = rule.steps.iter().map(|s| s.component_type).collect();
    assert_eq!(
        order,
        [
            ComponentType::Compute,
            ComponentType::NVSwitch,
            ComponentType::PowerShelf
        ]
    );
    // No max_interval in this example: no cap.
    assert_eq!(rule.steps[0].retry.expect("retry").max_interval, None);
    assert_eq!(
        rule.steps[2].pre_operation,
        [Action::Sleep {
            duration: Duration::from_secs(30)
        }]
    );
}

#[test]
fn seed_forceful_power_on_has_a_shared_verification_stage() {
    let rule = parse("seed-forceful-power-on.json");
    let stages = rule.stages();
    assert_eq!(stages.len(), 4);
    let last = stages.values().last().expect("stage 4");
    assert_eq!(last.len(), 3);
    assert!(
        last.iter()
            .all(|s| matches!(s.main_operation, Action::VerifyPowerStatus { .. }))
    );
}

#[test]
fn canonical_json_of_the_seed_examples_parses_back_identically() {
    for name in [
        "seed-graceful-power-on.json",
        "seed-graceful-power-off.json",
        "seed-forceful-power-on.json",
    ] {
        let rule = parse(name);
        let text = rule.to_canonical_json();
        let again = RuleDefinition::from_json_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rule, again, "{name}");
        assert_eq!(text, again.to_canonical_json(), "{name}");
    }
}

#[test]
fn the_example_batch_validates_and_covers_every_operation_it_promises() {
    let path = format!(
        "{}/../../examples/operation-rules.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("examples/operation-rules.yaml");
    let batch = RuleBatch::from_yaml_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let codes: Vec<_> = batch.rules.iter().map(|r| r.operation.as_str()).collect();
    for code in [
        "power_on",
        "power_off",
        "force_power_on",
        "force_power_off",
        "restart",
        "force_restart",
        "upgrade",
        "decommission",
    ] {
        assert!(
            codes.contains(&code),
            "example batch lacks {code}: {codes:?}"
        );
    }
}

#[test]
fn every_code_has_a_valid_builtin_rule() {
    assert_eq!(builtin_rules().len(), 12);
    for code in OperationCode::all() {
        let rule = builtin_rule(code);
        assert_eq!(rule.operation, code);
        assert!(!rule.definition.steps.is_empty(), "{code} has no steps");
        let text = rule.definition.to_canonical_json();
        assert_eq!(
            RuleDefinition::from_json_str(&text).as_ref(),
            Ok(&rule.definition)
        );
    }
}

#[test]
fn builtins_use_the_seed_switch_name_and_merge_keys_expand() {
    let rule = builtin_rule("force_power_on".parse().unwrap());
    let stage4: Vec<_> = rule
        .definition
        .steps
        .iter()
        .filter(|s| s.stage.get() == 4)
        .map(|s| s.component_type)
        .collect();
    assert_eq!(
        stage4,
        [
            ComponentType::PowerShelf,
            ComponentType::NVSwitch,
            ComponentType::Compute
        ]
    );
    let json = rule.definition.to_canonical_json();
    assert!(json.contains("\"NVSwitch\"") && !json.contains("NVLSwitch"));
}

#[test]
fn decommission_builtin_requests_then_waits_in_order() {
    let rule = builtin_rule(OperationCode::Decommission);
    let order: Vec<_> = rule
        .definition
        .steps
        .iter()
        .map(|s| (s.stage.get(), s.component_type))
        .collect();
    assert_eq!(
        order,
        [
            (1, ComponentType::Compute),
            (2, ComponentType::NVSwitch),
            (3, ComponentType::PowerShelf)
        ]
    );
    for step in &rule.definition.steps {
        assert_eq!(step.main_operation, Action::DecommissionControl);
        assert!(matches!(
            step.post_operation.as_slice(),
            [Action::WaitDecommissioned { .. }]
        ));
    }
}
