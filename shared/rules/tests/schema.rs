//! The hand-written JSON Schemas of rule documents (`src/schema.rs`, part
//! of the published API contract) describe what the parser reads: the
//! specification's examples, the example batch and the built-in rules
//! validate, raw and in canonical form; every document the parser accepts —
//! generated ones, mutated at random — validates too (the schema is never
//! stricter than the parser); and documents with a wrong field, name or
//! duration are refused by both.

use flow_rules::{RuleBatch, RuleDefinition, builtin_rules};
use jsonschema::Validator;
use proptest::prelude::*;
use schemars::JsonSchema;
use serde_json::{Value, json};

fn validator<T: JsonSchema>() -> Validator {
    let schema = schemars::generate::SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft7)
        .build(&schema)
        .unwrap_or_else(|e| panic!("the schema does not compile: {e}\n{schema:#}"))
}

fn errors(v: &Validator, value: &Value) -> Vec<String> {
    v.iter_errors(value)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

fn assert_valid(v: &Validator, value: &Value, what: &str) {
    let errors = errors(v, value);
    assert!(errors.is_empty(), "{what}: {errors:#?}\n{value:#}");
}

fn text(path: &str) -> String {
    let path = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(text: &str) -> Value {
    let options = serde_saphyr::options! { strict_booleans: true };
    serde_saphyr::from_str_with_options(text, options).expect("YAML")
}

#[test]
fn the_seed_examples_validate_raw_and_canonical() {
    let v = validator::<RuleDefinition>();
    for name in [
        "seed-forceful-power-on.json",
        "seed-graceful-power-off.json",
        "seed-graceful-power-on.json",
    ] {
        let raw: Value = serde_json::from_str(&text(&format!("tests/fixtures/{name}"))).unwrap();
        assert_valid(&v, &raw, name);
        let rule = RuleDefinition::from_value(&raw).unwrap();
        assert_valid(&v, &rule.to_json_value(), name);
    }
}

#[test]
fn the_example_batch_and_the_built_in_rules_validate() {
    let v = validator::<RuleBatch>();
    let example = yaml(&text("../../examples/operation-rules.yaml"));
    RuleBatch::from_value(&example).expect("the example batch is valid");
    assert_valid(&v, &example, "examples/operation-rules.yaml");
    let builtin = yaml(flow_rules::BUILTIN_RULES_YAML);
    assert_valid(&v, &builtin, "builtin/rules.yaml");
    let canonical = json!({
        "version": "v1",
        "rules": builtin_rules().iter().map(|r| r.to_json_value()).collect::<Vec<_>>(),
    });
    assert_valid(&v, &canonical, "the built-in rules, canonical");
}

fn step_with(extra: Value) -> Value {
    let mut s = json!({"component_type": "compute", "stage": 1,
                       "main_operation": {"name": "PowerControl"}});
    s.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({"steps": [s]})
}

#[test]
fn what_the_parser_refuses_for_its_shape_the_schema_refuses_too() {
    let v = validator::<RuleDefinition>();
    let good = step_with(json!({"timeout": "1m30s", "max_parallel": 2}));
    assert!(RuleDefinition::from_value(&good).is_ok());
    assert_valid(&v, &good, "a good step");
    for bad in [
        step_with(json!({"timeot": "5m"})),
        step_with(json!({"timeout": 30})),
        step_with(json!({"timeout": "30"})),
        step_with(json!({"timeout": "3d"})),
        step_with(json!({"main_operation": {"name": "Sleep", "parameters": {"duration": "-1s"}}})),
        step_with(json!({"component_type": "gpu"})),
        step_with(json!({"stage": 0})),
        step_with(json!({"delay_after": "5s"})),
        step_with(json!({"main_operation": {"name": "Reboot"}})),
        step_with(json!({"main_operation": {"name": "PowerControl", "poll_interval": "5s"}})),
        step_with(
            json!({"main_operation": {"name": "VerifyPowerStatus", "timeout": "1m",
                                            "poll_interval": "5s"}}),
        ),
        step_with(json!({"main_operation": {"name": "Sleep",
                                            "parameters": {"duration": "1s", "jitter": "1s"}}})),
        json!({"version": "v2", "steps": []}),
    ] {
        assert!(
            RuleDefinition::from_value(&bad).is_err(),
            "the parser accepts {bad}"
        );
        assert!(
            !errors(&v, &bad).is_empty(),
            "the schema accepts what the parser refuses for its shape: {bad}"
        );
    }
    // The parser reads null as absent, and component types in any case.
    let lenient = step_with(json!({"timeout": null, "component_type": "NVLSWITCH",
                                   "main_operation": {"name": "Sleep", "timeout": null,
                                                      "parameters": {"duration": "1s"}}}));
    assert!(RuleDefinition::from_value(&lenient).is_ok());
    assert_valid(&v, &lenient, "nulls and any case");
}

/// Replaces the node at a pseudo-random position (by `pick`) with `new`.
fn mutate(value: &mut Value, pick: &mut usize, new: &Value) -> bool {
    if *pick == 0 {
        *value = new.clone();
        return true;
    }
    *pick -= 1;
    match value {
        Value::Array(items) => items.iter_mut().any(|v| mutate(v, pick, new)),
        Value::Object(map) => map.values_mut().any(|v| mutate(v, pick, new)),
        _ => false,
    }
}

/// What a mutation puts in: values of every JSON type, biased toward the
/// format's own names, durations and fragments.
fn replacement() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..300).prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop::sample::select(vec![
            "v1",
            "compute",
            "COMPUTE",
            "nvlswitch",
            "PowerShelf",
            "ups",
            "PowerControl",
            "Sleep",
            "VerifyPowerStatus",
            "VerifyReachability",
            "FirmwareControl",
            "GetPowerStatus",
            "WaitDecommissioned",
            "DecommissionControl",
            "on",
            "off",
            "30s",
            "-1s",
            "-0s",
            "0",
            "+5m",
            ".5s",
            "1.s",
            "1.5h",
            "2µs",
            "3d",
            "power_on",
            "upgrade",
            "",
        ])
        .prop_map(Value::from),
        prop::collection::vec(
            prop::sample::select(vec!["compute", "nvswitch", "CDU", "ups"]),
            0..3
        )
        .prop_map(|v| json!(v)),
        prop::sample::select(vec![
            json!({"name": "Sleep", "parameters": {"duration": "1s"}}),
            json!({"name": "PowerControl", "parameters": {"operation": "power_off"}}),
            json!({"name": "FirmwareControl", "parameters": {"poll_timeout": "1h"}}),
            json!({"name": "VerifyReachability", "timeout": "1m", "poll_interval": "5s",
                   "parameters": {"component_types": ["compute"], "require_all": true}}),
            json!({"max_attempts": 2, "initial_interval": "1s", "backoff_coefficient": 1.5}),
            json!({"timeout": "10s"}),
            json!({}),
            json!([]),
        ]),
    ]
}

fn step() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec!["Compute", "nvswitch", "POWERSHELF"]),
        1u32..4,
        prop::option::of(0u32..4),
        prop::option::of(prop::sample::select(vec!["0", "30s", "1m30s"])),
        prop::sample::select(vec![
            json!({"name": "PowerControl"}),
            json!({"name": "GetPowerStatus", "timeout": "5s"}),
            json!({"name": "DecommissionControl"}),
            json!({"name": "WaitDecommissioned", "timeout": "1h", "poll_interval": "1m"}),
            json!({"name": "VerifyPowerStatus", "timeout": "1m", "poll_interval": "5s",
                   "parameters": {"expected_status": "on"}}),
        ]),
        prop::option::of(Just(
            json!([{"name": "Sleep", "parameters": {"duration": "2s"}}]),
        )),
        prop::option::of(Just(json!({"max_attempts": 3, "initial_interval": "1s",
                                     "backoff_coefficient": 2, "max_interval": "1m"}))),
    )
        .prop_map(|(t, stage, parallel, timeout, main, post, retry)| {
            let mut s = json!({"component_type": t, "stage": stage, "main_operation": main});
            let m = s.as_object_mut().unwrap();
            if let Some(p) = parallel {
                m.insert("max_parallel".into(), p.into());
            }
            if let Some(t) = timeout {
                m.insert("timeout".into(), t.into());
            }
            if let Some(p) = post {
                m.insert("post_operation".into(), p);
            }
            if let Some(r) = retry {
                m.insert("retry".into(), r);
            }
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_document_the_parser_accepts_validates(
        steps in prop::collection::vec(step(), 0..4),
        pick in 0usize..60,
        new in replacement(),
    ) {
        let v = validator::<RuleDefinition>();
        let mut doc = json!({"version": "v1", "steps": steps});
        let mut pick = pick;
        mutate(&mut doc, &mut pick, &new);
        if let Ok(rule) = RuleDefinition::from_value(&doc) {
            let problems = errors(&v, &doc);
            prop_assert!(problems.is_empty(), "{:#?}\n{:#}", problems, doc);
            let canonical = rule.to_json_value();
            let problems = errors(&v, &canonical);
            prop_assert!(problems.is_empty(), "{:#?}\n{:#}", problems, canonical);
        }
        let batch = json!({"rules": [{"name": "r", "operation_type": "power_control",
                                      "operation": "power_on", "steps": doc["steps"].clone()},
                                     {"name": "s", "operation_type": "power_control",
                                      "operation": "power_off"}]});
        if RuleBatch::from_value(&batch).is_ok() {
            let problems = errors(&validator::<RuleBatch>(), &batch);
            prop_assert!(problems.is_empty(), "{:#?}\n{:#}", problems, batch);
        }
    }
}
