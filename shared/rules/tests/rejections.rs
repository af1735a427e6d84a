//! Every rejection rule of the rule format and of the reference system's
//! checks (`docs/rule-format.md`, "Order of checks"), plus Flow's stricter
//! checks ("Where Flow is stricter"): each bad document is refused with a
//! message that names the right path and says what is allowed.

use flow_rules::{RuleBatch, RuleDefinition};
use serde_json::{Value, json};

/// The error lines for a JSON definition that must be refused.
fn errors(doc: Value) -> Vec<String> {
    match RuleDefinition::from_value(&doc) {
        Ok(rule) => panic!("accepted a bad document: {doc}\n{rule:?}"),
        Err(e) => e.iter().map(|e| e.to_string()).collect(),
    }
}

/// Asserts that `doc` is refused with exactly the line `expected` among its
/// errors.
#[track_caller]
fn refused(doc: Value, expected: &str) {
    let lines = errors(doc);
    assert!(
        lines.iter().any(|l| l == expected),
        "expected the error\n  {expected}\ngot\n  {}",
        lines.join("\n  ")
    );
}

/// A valid one-step definition with `patch` merged into the step.
fn step(patch: Value) -> Value {
    let mut step = json!({
        "component_type": "compute",
        "stage": 1,
        "main_operation": {"name": "PowerControl"}
    });
    for (k, v) in patch.as_object().expect("patch is an object") {
        step[k] = v.clone();
    }
    json!({"version": "v1", "steps": [step]})
}

/// A valid definition whose step has `action` as its only post action.
fn post(action: Value) -> Value {
    step(json!({"post_operation": [action]}))
}

#[test]
fn the_base_documents_are_valid() {
    assert!(RuleDefinition::from_value(&step(json!({}))).is_ok());
    assert!(
        RuleDefinition::from_value(&json!({})).is_ok(),
        "no steps is a valid definition"
    );
    assert!(RuleDefinition::from_value(&json!({"steps": []})).is_ok());
}

// ---- top level ----------------------------------------------------------

#[test]
fn version_other_than_v1() {
    refused(
        json!({"version": "v2", "steps": []}),
        "version: unsupported version \"v2\"; the only version is \"v1\" (or omit it)",
    );
    refused(
        json!({"version": "V1"}),
        "version: unsupported version \"V1\"; the only version is \"v1\" (or omit it)",
    );
    refused(
        json!({"version": 1}),
        "version: must be a string, got the number 1",
    );
}

#[test]
fn document_must_be_an_object_and_steps_an_array() {
    refused(json!([]), "document: must be an object, got an array");
    refused(
        json!({"steps": {}}),
        "steps: must be an array of steps, got an object",
    );
    refused(
        json!({"steps": [7]}),
        "steps[0]: must be an object, got the number 7",
    );
}

#[test]
fn unknown_fields_are_named_at_every_level() {
    refused(
        json!({"version": "v1", "step": []}),
        "document: unknown field `step` (did you mean `steps`?); allowed: version, steps",
    );
    refused(
        step(json!({"timeot": "5m"})),
        "steps[0]: unknown field `timeot` (did you mean `timeout`?); allowed: component_type, \
         stage, max_parallel, timeout, retry, pre_operation, main_operation, post_operation",
    );
    refused(
        step(
            json!({"retry": {"max_attempts": 3, "initial_interval": "1s",
                               "backoff_coefficient": 2.0, "max_intervall": "1m"}}),
        ),
        "steps[0].retry: unknown field `max_intervall` (did you mean `max_interval`?); allowed: \
         max_attempts, initial_interval, backoff_coefficient, max_interval",
    );
    refused(
        post(json!({"name": "Sleep", "parameter": {"duration": "1s"}})),
        "steps[0].post_operation[0] (Sleep): unknown field `parameter` (did you mean `parameters`?); \
         allowed: name, timeout, poll_interval, parameters",
    );
    refused(
        post(
            json!({"name": "VerifyPowerStatus", "timeout": "1m", "poll_interval": "5s",
                    "parameters": {"expected_status": "on", "expected": "on"}}),
        ),
        "steps[0].post_operation[0] (VerifyPowerStatus).parameters: unknown field `expected`; \
         allowed: expected_status",
    );
}

#[test]
fn legacy_delay_after_is_refused_with_advice() {
    refused(
        step(json!({"delay_after": "30s"})),
        "steps[0]: `delay_after` is not allowed here: the legacy delay_after is not part of the \
         v1 schema; add a Sleep action to post_operation",
    );
}

// ---- step (docs/rule-format.md, "Steps") --------------------------------

#[test]
fn component_type_unknown_missing_or_not_a_string() {
    refused(
        step(json!({"component_type": "gpu"})),
        "steps[0].component_type: unknown component type \"gpu\"; allowed: Compute, NVSwitch \
         (or NVLSwitch), PowerShelf, ToRSwitch, UMS, CDU (any case)",
    );
    refused(
        step(json!({"component_type": "unknown"})),
        "steps[0].component_type: unknown component type \"unknown\"; allowed: Compute, NVSwitch \
         (or NVLSwitch), PowerShelf, ToRSwitch, UMS, CDU (any case)",
    );
    refused(
        step(json!({"component_type": 3})),
        "steps[0].component_type: must be a string, got the number 3",
    );
    let mut doc = step(json!({}));
    doc["steps"][0]
        .as_object_mut()
        .unwrap()
        .remove("component_type");
    refused(
        doc,
        "steps[0]: requires component_type (Compute, NVSwitch (or NVLSwitch), PowerShelf, \
         ToRSwitch, UMS, CDU (any case))",
    );
}

#[test]
fn stage_below_one_missing_or_not_an_integer() {
    refused(
        step(json!({"stage": 0})),
        "steps[0].stage: must be >= 1, got 0",
    );
    refused(
        step(json!({"stage": -2})),
        "steps[0].stage: must be >= 1, got -2",
    );
    refused(
        step(json!({"stage": 1.5})),
        "steps[0].stage: must be an integer, got the number 1.5",
    );
    refused(
        step(json!({"stage": "1"})),
        "steps[0].stage: must be an integer, got the string \"1\"",
    );
    let mut doc = step(json!({}));
    doc["steps"][0].as_object_mut().unwrap().remove("stage");
    refused(
        doc,
        "steps[0]: requires stage (an integer >= 1; steps with the same stage run in parallel)",
    );
}

#[test]
fn max_parallel_negative() {
    refused(
        step(json!({"max_parallel": -1})),
        "steps[0].max_parallel: must be >= 0 (0 = unlimited, 1 = one at a time), got -1",
    );
    refused(
        step(json!({"max_parallel": "2"})),
        "steps[0].max_parallel: must be an integer, got the string \"2\"",
    );
}

#[test]
fn step_timeout_negative_unparseable_or_a_number() {
    refused(
        step(json!({"timeout": "-5m"})),
        "steps[0].timeout: must be non-negative, got -5m0s",
    );
    refused(
        step(json!({"timeout": "10xyz"})),
        "steps[0].timeout: invalid duration \"10xyz\": unknown unit \"xyz\" (use Go syntax such \
         as 30s, 1m30s, 1.5h, 500ms)",
    );
    refused(
        step(json!({"timeout": "30"})),
        "steps[0].timeout: invalid duration \"30\": missing unit after \"30\" (use Go syntax \
         such as 30s, 1m30s, 1.5h, 500ms)",
    );
    refused(
        step(json!({"timeout": 600})),
        "steps[0].timeout: must be a duration string such as \"30s\", got the number 600",
    );
}

#[test]
fn main_operation_missing_and_reported_after_pre_operations() {
    let lines = errors(step(json!({
        "main_operation": null,
        "pre_operation": [{"name": "Slep"}]
    })));
    assert_eq!(
        lines,
        [
            "steps[0].pre_operation[0].name: unknown action \"Slep\" (did you mean `Sleep`?); \
             allowed: PowerControl, FirmwareControl, VerifyPowerStatus, VerifyReachability, \
             Sleep, GetPowerStatus, DecommissionControl, WaitDecommissioned",
            "steps[0]: requires main_operation (an action such as {\"name\": \"PowerControl\"})",
        ]
    );
}

#[test]
fn duplicate_component_type_in_one_stage() {
    let doc = json!({"steps": [
        {"component_type": "nvswitch", "stage": 2, "main_operation": {"name": "PowerControl"}},
        {"component_type": "NVLSwitch", "stage": 2, "main_operation": {"name": "PowerControl"}},
    ]});
    refused(
        doc,
        "steps[1]: duplicate step: NVSwitch already has a step in stage 2 (steps[0])",
    );
    // The same type in another stage, and several types in one stage, are fine.
    let ok = json!({"steps": [
        {"component_type": "compute", "stage": 5, "main_operation": {"name": "PowerControl"}},
        {"component_type": "compute", "stage": 1, "main_operation": {"name": "PowerControl"}},
        {"component_type": "nvswitch", "stage": 1, "main_operation": {"name": "PowerControl"}},
    ]});
    assert!(RuleDefinition::from_value(&ok).is_ok());
}

// ---- retry (docs/rule-format.md, "Retry policy") ------------------------

fn retry(patch: Value) -> Value {
    let mut r = json!({"max_attempts": 3, "initial_interval": "1s", "backoff_coefficient": 2.0});
    for (k, v) in patch.as_object().unwrap() {
        if v.is_null() {
            r.as_object_mut().unwrap().remove(k);
        } else {
            r[k] = v.clone();
        }
    }
    step(json!({ "retry": r }))
}

#[test]
fn retry_policy_checks() {
    refused(
        retry(json!({"max_attempts": 0})),
        "steps[0].retry.max_attempts: must be between 1 and 100, got 0",
    );
    refused(
        retry(json!({"max_attempts": null})),
        "steps[0].retry: requires max_attempts (total attempts including the first, >= 1)",
    );
    refused(
        retry(json!({"initial_interval": null})),
        "steps[0].retry: requires initial_interval (a positive duration such as \"5s\")",
    );
    refused(
        retry(json!({"initial_interval": "0s"})),
        "steps[0].retry.initial_interval: must be positive, got 0s",
    );
    refused(
        retry(json!({"backoff_coefficient": 0.5})),
        "steps[0].retry.backoff_coefficient: must be >= 1.0, got 0.5",
    );
    refused(
        retry(json!({"backoff_coefficient": null})),
        "steps[0].retry: requires backoff_coefficient (a number >= 1.0)",
    );
    refused(
        retry(json!({"max_interval": "-1s"})),
        "steps[0].retry.max_interval: must be non-negative, got -1s",
    );
    refused(
        retry(json!({"initial_interval": "10s", "max_interval": "5s"})),
        "steps[0].retry.max_interval: max_interval 5s is shorter than initial_interval 10s; \
         make it at least as long, or omit it for no cap",
    );
    refused(
        retry(json!({"initial_interval": 5})),
        "steps[0].retry.initial_interval: must be a duration string such as \"30s\", got the \
         number 5",
    );
}

// ---- actions (docs/rule-format.md, "Actions") ---------------------------

#[test]
fn unknown_and_internal_action_names() {
    refused(
        post(json!({"name": "sleep", "parameters": {"duration": "1s"}})),
        "steps[0].post_operation[0].name: unknown action \"sleep\" (did you mean `Sleep`?); \
         allowed: PowerControl, FirmwareControl, VerifyPowerStatus, VerifyReachability, Sleep, \
         GetPowerStatus, DecommissionControl, WaitDecommissioned",
    );
    for internal in [
        "BringUpControl",
        "WaitBringUp",
        "InjectExpectation",
        "VerifyFirmwareConsistency",
    ] {
        refused(
            step(json!({"main_operation": {"name": internal}})),
            &format!(
                "steps[0].main_operation.name: action {internal} is internal to Flow and not \
                 allowed in user rules; allowed: PowerControl, FirmwareControl, \
                 VerifyPowerStatus, VerifyReachability, Sleep, GetPowerStatus, \
                 DecommissionControl, WaitDecommissioned"
            ),
        );
    }
    refused(
        step(json!({"main_operation": {"name": ""}})),
        "steps[0].main_operation.name: unknown action \"\"; allowed: PowerControl, \
         FirmwareControl, VerifyPowerStatus, VerifyReachability, Sleep, GetPowerStatus, \
         DecommissionControl, WaitDecommissioned",
    );
    refused(
        step(json!({"main_operation": {}})),
        "steps[0].main_operation: requires name (PowerControl, FirmwareControl, \
         VerifyPowerStatus, VerifyReachability, Sleep, GetPowerStatus, DecommissionControl, \
         WaitDecommissioned)",
    );
}

#[test]
fn verify_power_status_requirements_in_order() {
    let lines = errors(post(json!({"name": "VerifyPowerStatus"})));
    assert_eq!(
        lines,
        [
            "steps[0].post_operation[0] (VerifyPowerStatus): requires parameter expected_status \
             (\"on\" or \"off\")",
            "steps[0].post_operation[0] (VerifyPowerStatus): requires timeout",
            "steps[0].post_operation[0] (VerifyPowerStatus): requires poll_interval",
        ]
    );
    let action = |status: Value| {
        post(
            json!({"name": "VerifyPowerStatus", "timeout": "30s", "poll_interval": "5s",
                    "parameters": {"expected_status": status}}),
        )
    };
    refused(
        action(json!("ON")),
        "steps[0].post_operation[0] (VerifyPowerStatus).parameters.expected_status: must be \
         \"on\" or \"off\", got \"ON\"",
    );
    refused(
        action(json!(true)),
        "steps[0].post_operation[0] (VerifyPowerStatus).parameters.expected_status: must be a \
         string, got the boolean true",
    );
}

#[test]
fn negative_or_zero_action_timeouts() {
    refused(
        post(
            json!({"name": "VerifyPowerStatus", "timeout": "-30s", "poll_interval": "5s",
                    "parameters": {"expected_status": "on"}}),
        ),
        "steps[0].post_operation[0] (VerifyPowerStatus).timeout: must be positive, got -30s",
    );
    refused(
        post(json!({"name": "GetPowerStatus", "timeout": "0s"})),
        "steps[0].post_operation[0] (GetPowerStatus).timeout: must be positive, got 0s",
    );
    refused(
        step(json!({"main_operation": {"name": "PowerControl", "timeout": "-1m"}})),
        "steps[0].main_operation (PowerControl).timeout: must be non-negative, got -1m0s",
    );
}

#[test]
fn verify_reachability_parameters() {
    let action = |params: Value| {
        post(
            json!({"name": "VerifyReachability", "timeout": "3m", "poll_interval": "10s",
                    "parameters": params}),
        )
    };
    refused(
        action(json!({})),
        "steps[0].post_operation[0] (VerifyReachability): requires parameter component_types \
         (a list of component types such as [\"compute\", \"nvswitch\"])",
    );
    refused(
        action(json!({"component_types": []})),
        "steps[0].post_operation[0] (VerifyReachability).parameters.component_types: must not \
         be empty; list the component types to probe, such as [\"compute\", \"nvswitch\"]",
    );
    refused(
        action(json!({"component_types": "compute"})),
        "steps[0].post_operation[0] (VerifyReachability).parameters.component_types: must be \
         an array of component types, got the string \"compute\"",
    );
    refused(
        action(json!({"component_types": ["compute", 7]})),
        "steps[0].post_operation[0] (VerifyReachability).parameters.component_types[1]: must \
         be a string, got the number 7",
    );
    refused(
        action(json!({"component_types": ["compute", "gpu"]})),
        "steps[0].post_operation[0] (VerifyReachability).parameters.component_types[1]: \
         unknown component type \"gpu\"; allowed: Compute, NVSwitch (or NVLSwitch), \
         PowerShelf, ToRSwitch, UMS, CDU (any case)",
    );
    refused(
        action(json!({"component_types": ["compute", "Compute"]})),
        "steps[0].post_operation[0] (VerifyReachability).parameters.component_types[1]: \
         Compute is listed twice",
    );
    refused(
        action(json!({"component_types": ["compute"], "require_all": "yes"})),
        "steps[0].post_operation[0] (VerifyReachability).parameters.require_all: must be true \
         or false, got the string \"yes\"",
    );
    refused(
        post(json!({"name": "VerifyReachability", "parameters": {"component_types": ["ums"]}})),
        "steps[0].post_operation[0] (VerifyReachability): requires timeout",
    );
}

#[test]
fn sleep_duration_must_parse_and_be_positive() {
    refused(
        post(json!({"name": "Sleep"})),
        "steps[0].post_operation[0] (Sleep): requires parameter duration (a duration such as \
         \"30s\")",
    );
    refused(
        post(json!({"name": "Sleep", "parameters": {"duration": "abc"}})),
        "steps[0].post_operation[0] (Sleep).parameters.duration: invalid duration \"abc\": \
         expected a number at \"abc\" (use Go syntax such as 30s, 1m30s, 1.5h, 500ms)",
    );
    refused(
        post(json!({"name": "Sleep", "parameters": {"duration": 30}})),
        "steps[0].post_operation[0] (Sleep).parameters.duration: must be a duration string \
         such as \"30s\", got the number 30",
    );
    refused(
        post(json!({"name": "Sleep", "parameters": {"duration": "-1s"}})),
        "steps[0].post_operation[0] (Sleep).parameters.duration: must be positive, got -1s",
    );
    refused(
        post(json!({"name": "Sleep", "timeout": "20s", "parameters": {"duration": "1s"}})),
        "steps[0].post_operation[0] (Sleep): `timeout` is not allowed here: Sleep takes only \
         parameters.duration",
    );
}

#[test]
fn power_control_operation_must_be_one_of_the_eight_codes() {
    refused(
        step(json!({"main_operation": {"name": "PowerControl",
                                        "parameters": {"operation": "reboot"}}})),
        "steps[0].main_operation (PowerControl).parameters.operation: unknown power operation \
         \"reboot\"; allowed: power_on, force_power_on, power_off, force_power_off, restart, \
         force_restart, warm_reset, cold_reset",
    );
    refused(
        step(json!({"main_operation": {"name": "PowerControl", "poll_interval": "5s"}})),
        "steps[0].main_operation (PowerControl): `poll_interval` is not allowed here: \
         PowerControl does not poll; confirm the result with a VerifyPowerStatus action",
    );
}

#[test]
fn firmware_control_parameters() {
    refused(
        step(json!({"main_operation": {"name": "FirmwareControl",
                                        "parameters": {"poll_interval": "0s"}}})),
        "steps[0].main_operation (FirmwareControl).parameters.poll_interval: must be positive, \
         got 0s",
    );
    refused(
        step(json!({"main_operation": {"name": "FirmwareControl",
                                        "parameters": {"poll_timeout": "forever"}}})),
        "steps[0].main_operation (FirmwareControl).parameters.poll_timeout: invalid duration \
         \"forever\": expected a number at \"forever\" (use Go syntax such as 30s, 1m30s, \
         1.5h, 500ms)",
    );
    refused(
        step(json!({"main_operation": {"name": "FirmwareControl", "poll_interval": "2m"}})),
        "steps[0].main_operation (FirmwareControl): `poll_interval` is not allowed here: \
         FirmwareControl takes poll_interval and poll_timeout under parameters",
    );
    refused(
        step(json!({"main_operation": {"name": "FirmwareControl",
                                        "parameters": {"operation": "flash"}}})),
        "steps[0].main_operation (FirmwareControl).parameters.operation: unknown firmware \
         operation \"flash\"; allowed: upgrade, downgrade, rollback",
    );
}

#[test]
fn get_power_status_requires_timeout() {
    refused(
        post(json!({"name": "GetPowerStatus"})),
        "steps[0].post_operation[0] (GetPowerStatus): requires timeout",
    );
}

#[test]
fn decommission_actions() {
    refused(
        post(json!({"name": "WaitDecommissioned"})),
        "steps[0].post_operation[0] (WaitDecommissioned): requires timeout",
    );
    refused(
        post(json!({"name": "WaitDecommissioned", "timeout": "4h"})),
        "steps[0].post_operation[0] (WaitDecommissioned): requires poll_interval",
    );
    refused(
        post(json!({"name": "WaitDecommissioned", "timeout": "0s", "poll_interval": "30s"})),
        "steps[0].post_operation[0] (WaitDecommissioned).timeout: must be positive, got 0s",
    );
    refused(
        post(json!({"name": "WaitDecommissioned", "timeout": "1h", "poll_interval": "0"})),
        "steps[0].post_operation[0] (WaitDecommissioned).poll_interval: must be positive, got 0s",
    );
    refused(
        step(json!({"main_operation": {"name": "DecommissionControl", "timeout": "1m"}})),
        "steps[0].main_operation (DecommissionControl): `timeout` is not allowed here: the \
         executor always gives DecommissionControl 5m and one attempt",
    );
    assert!(
        RuleDefinition::from_value(&step(json!({
            "main_operation": {"name": "DecommissionControl"},
            "post_operation": [{"name": "WaitDecommissioned", "timeout": "4h",
                                "poll_interval": "30s"}]
        })))
        .is_ok()
    );
}

#[test]
fn all_errors_of_a_document_are_reported() {
    let doc = json!({"steps": [
        {"component_type": "gpu", "stage": 0, "main_operation": {"name": "PowerControl"}},
        {"component_type": "compute", "stage": 1, "max_parallel": -1,
         "main_operation": {"name": "Reboot"}},
    ]});
    assert_eq!(errors(doc).len(), 4);
}

// ---- YAML specifics ------------------------------------------------------

#[test]
fn yaml_unquoted_on_and_off_are_strings() {
    let yaml = "steps:\n  - component_type: compute\n    stage: 1\n    main_operation: {name: PowerControl}\n    post_operation:\n      - name: VerifyPowerStatus\n        timeout: 30s\n        poll_interval: 5s\n        parameters: {expected_status: off}\n";
    let rule = RuleDefinition::from_yaml_str(yaml).expect("unquoted off is the string");
    assert!(
        rule.to_canonical_json()
            .contains("\"expected_status\": \"off\"")
    );
}

#[test]
fn yaml_numbers_where_durations_belong_are_refused() {
    let yaml = "steps:\n  - component_type: compute\n    stage: 1\n    timeout: 30\n    main_operation: {name: PowerControl}\n";
    let e = RuleDefinition::from_yaml_str(yaml).unwrap_err().to_string();
    assert_eq!(
        e,
        "steps[0].timeout: must be a duration string such as \"30s\", got the number 30"
    );
}

#[test]
fn syntax_errors_are_reported_with_their_position() {
    let e = RuleDefinition::from_json_str("{\"steps\": [")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("document: not valid JSON: EOF while parsing"),
        "{e}"
    );
    let e = RuleBatch::from_yaml_str("rules: [\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("document: not valid YAML: "), "{e}");
    assert!(e.contains("line 1"), "{e}");
}

// ---- batches (docs/rule-format.md, "Batch files") -----------------------

fn batch_errors(yaml: &str) -> Vec<String> {
    match RuleBatch::from_yaml_str(yaml) {
        Ok(b) => panic!("accepted a bad batch: {b:?}"),
        Err(e) => e.iter().map(|e| e.to_string()).collect(),
    }
}

const ON: &str = "    steps:\n      - {component_type: compute, stage: 1, main_operation: {name: PowerControl}}\n";

/// A batch entry whose one step uses the main action that fits its type.
fn rule(name: &str, operation_type: &str, operation: &str) -> String {
    let action = match operation_type {
        "firmware_control" => "FirmwareControl",
        "decommission" => "DecommissionControl",
        _ => "PowerControl",
    };
    format!(
        "  - name: {name}\n    operation_type: {operation_type}\n    operation: {operation}\n    steps:\n      - {{component_type: compute, stage: 1, main_operation: {{name: {action}}}}}\n"
    )
}

#[test]
fn batch_requires_every_required_operation_of_each_included_type() {
    let yaml = format!(
        "version: v1\nrules:\n{}",
        rule("On", "power_control", "power_on")
    );
    assert_eq!(
        batch_errors(&yaml),
        [
            "rules: has power_control rules but none for power_off; a batch with power_control \
          rules must include power_on and power_off"
        ]
    );
    let yaml = format!("rules:\n{}", rule("Down", "firmware_control", "downgrade"));
    assert_eq!(
        batch_errors(&yaml),
        [
            "rules: has firmware_control rules but none for upgrade; a batch with \
          firmware_control rules must include upgrade"
        ]
    );
}

#[test]
fn batch_refuses_two_rules_for_one_operation() {
    let yaml = format!(
        "rules:\n{}{}{}",
        rule("On", "power_control", "power_on"),
        rule("Off", "power_control", "power_off"),
        rule("On again", "power_control", "power_on")
    );
    assert_eq!(
        batch_errors(&yaml),
        [
            "rules[2] (On again): second rule for power_control/power_on (rules[0] (On)); a batch \
          holds one rule per operation"
        ]
    );
}

#[test]
fn batch_rule_fields() {
    let yaml = format!("rules:\n{}", rule("X", "power", "power_on"));
    assert_eq!(
        batch_errors(&yaml),
        [
            "rules[0] (X).operation_type: unknown operation type \"power\"; allowed: \
          power_control, firmware_control, decommission"
        ]
    );
    let yaml = format!("rules:\n{}", rule("X", "power_control", "upgrade"));
    assert_eq!(
        batch_errors(&yaml),
        [
            "rules[0] (X).operation: operation \"upgrade\" is not a power_control operation; \
          allowed: power_on, force_power_on, power_off, force_power_off, restart, \
          force_restart, warm_reset, cold_reset"
        ]
    );
    let yaml =
        format!("rules:\n  - operation_type: decommission\n    operation: decommission\n{ON}");
    assert!(batch_errors(&yaml).contains(&"rules[0]: requires name".to_owned()));
    let yaml = "rules:\n  - name: X\n    operation_type: decommission\n    operation: decommission\n    is_default: true\n";
    assert_eq!(
        batch_errors(yaml),
        [
            "rules[0] (X): unknown field `is_default`; allowed: name, description, \
          operation_type, operation, steps"
        ]
    );
    let long = "n".repeat(129);
    let yaml = format!("rules:\n{}", rule(&long, "decommission", "decommission"));
    assert!(
        batch_errors(&yaml)[0]
            .ends_with(".name: must be at most 128 characters, got 129 characters")
    );
}

#[test]
fn batch_rule_paths_carry_the_rule_name() {
    let yaml = "rules:\n  - name: Decom\n    operation_type: decommission\n    operation: decommission\n    steps:\n      - {component_type: compute, stage: 1, main_operation: {name: WaitDecommissioned, timeout: 1h}}\n";
    assert_eq!(
        batch_errors(yaml),
        ["rules[0] (Decom).steps[0].main_operation (WaitDecommissioned): requires poll_interval"]
    );
}

#[test]
fn actions_that_cannot_work_in_the_rules_operation_are_refused() {
    let yaml = "rules:\n  - name: Up\n    operation_type: firmware_control\n    operation: upgrade\n    steps:\n      - {component_type: compute, stage: 1, main_operation: {name: FirmwareControl}, post_operation: [{name: PowerControl}]}\n";
    assert_eq!(
        batch_errors(yaml),
        [
            "rules[0] (Up).steps[0].post_operation[0] (PowerControl): PowerControl without \
          parameters.operation runs the task's own power operation, and a firmware_control \
          task has none; set parameters.operation (e.g. power_off)"
        ]
    );
    let yaml = format!(
        "rules:\n{}  - name: Off\n    operation_type: power_control\n    operation: power_off\n    steps:\n      - {{component_type: compute, stage: 1, main_operation: {{name: DecommissionControl}}}}\n      - {{component_type: nvswitch, stage: 1, main_operation: {{name: FirmwareControl}}}}\n",
        rule("On", "power_control", "power_on")
    );
    let lines = batch_errors(&yaml);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with(
        "rules[1] (Off).steps[0].main_operation (DecommissionControl): DecommissionControl \
         takes components out of service"
    ));
    assert!(lines[1].starts_with(
        "rules[1] (Off).steps[1].main_operation (FirmwareControl): FirmwareControl needs the \
         firmware images"
    ));
}

#[test]
fn an_empty_batch_and_a_batch_without_rules() {
    assert_eq!(
        RuleBatch::from_yaml_str("rules: []\n").unwrap().rules.len(),
        0
    );
    assert_eq!(
        batch_errors("version: v1\n"),
        [
            "document: requires rules (a list of rules with name, operation_type, operation and \
          steps)"
        ]
    );
}

#[test]
fn repeated_keys_are_refused_in_json_and_yaml() {
    let e = RuleDefinition::from_json_str(r#"{"steps": [], "steps": []}"#)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "document: not valid JSON: duplicate key `steps` at line 1 column 21"
    );
    let e = RuleDefinition::from_yaml_str("steps: []\nsteps: []\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("document: not valid YAML: "), "{e}");
    assert!(e.contains("duplicate mapping key: steps"), "{e}");
}
