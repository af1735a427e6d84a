//! Property tests: canonical JSON round-trips exactly (through the JSON and
//! the YAML reader), and no document — random, or a valid one mutated —
//! panics the parser.

use std::num::NonZeroU32;
use std::time::Duration;

use flow_rules::duration::{format_go, parse_go};
use flow_rules::{
    Action, ComponentType, FirmwareOperation, PowerOperation, PowerState, RetryPolicy, RuleBatch,
    RuleDefinition, SchemaVersion, Stage, Step,
};
use proptest::prelude::*;
use serde_json::{Map, Value};

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (1u64..3_600).prop_map(Duration::from_secs),
        (1u64..10_000_000).prop_map(Duration::from_millis),
        (1u64..u64::from(u32::MAX)).prop_map(Duration::from_nanos),
    ]
}

fn component_type() -> impl Strategy<Value = ComponentType> {
    prop::sample::select(ComponentType::ALL.to_vec())
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        duration().prop_map(|duration| Action::Sleep { duration }),
        (
            prop::option::of(prop::sample::select(PowerOperation::ALL.to_vec())),
            prop::option::of(duration())
        )
            .prop_map(|(operation, timeout)| Action::PowerControl { operation, timeout }),
        (
            prop::option::of(prop::sample::select(FirmwareOperation::ALL.to_vec())),
            prop::option::of(duration()),
            prop::option::of(duration()),
            prop::option::of(duration())
        )
            .prop_map(|(operation, poll_interval, poll_timeout, timeout)| {
                Action::FirmwareControl {
                    operation,
                    poll_interval,
                    poll_timeout,
                    timeout,
                }
            }),
        (any::<bool>(), duration(), duration()).prop_map(|(on, timeout, poll_interval)| {
            Action::VerifyPowerStatus {
                expected: if on { PowerState::On } else { PowerState::Off },
                timeout,
                poll_interval,
            }
        }),
        (
            prop::sample::subsequence(ComponentType::ALL.to_vec(), 1..=6),
            any::<bool>(),
            duration(),
            duration()
        )
            .prop_map(|(component_types, require_all, timeout, poll_interval)| {
                Action::VerifyReachability {
                    component_types,
                    require_all,
                    timeout,
                    poll_interval,
                }
            }),
        duration().prop_map(|timeout| Action::GetPowerStatus { timeout }),
        Just(Action::DecommissionControl),
        (duration(), duration()).prop_map(|(timeout, poll_interval)| {
            Action::WaitDecommissioned {
                timeout,
                poll_interval,
            }
        }),
    ]
}

fn retry() -> impl Strategy<Value = RetryPolicy> {
    (
        1u32..=100,
        duration(),
        1.0f64..16.0,
        prop::option::of(duration()),
    )
        .prop_map(|(attempts, initial, coefficient, extra)| RetryPolicy {
            max_attempts: NonZeroU32::new(attempts).unwrap(),
            initial_interval: initial,
            backoff_coefficient: coefficient,
            max_interval: extra.map(|e| initial + e),
        })
}

fn step() -> impl Strategy<Value = Step> {
    (
        component_type(),
        1u32..12,
        0u32..20,
        prop::option::of(duration()),
        prop::option::of(retry()),
        prop::collection::vec(action(), 0..3),
        action(),
        prop::collection::vec(action(), 0..3),
    )
        .prop_map(
            |(component_type, stage, max_parallel, timeout, retry, pre, main, post)| Step {
                component_type,
                stage: Stage(NonZeroU32::new(stage).unwrap()),
                max_parallel,
                timeout,
                retry,
                pre_operation: pre,
                main_operation: main,
                post_operation: post,
            },
        )
}

fn definition() -> impl Strategy<Value = RuleDefinition> {
    prop::collection::vec(step(), 0..8).prop_map(|steps| {
        // One step per (stage, type), as validation demands.
        let mut seen = Vec::new();
        let steps = steps
            .into_iter()
            .filter(|s| {
                let key = (s.stage, s.component_type);
                let fresh = !seen.contains(&key);
                seen.push(key);
                fresh
            })
            .collect();
        RuleDefinition {
            version: SchemaVersion::V1,
            steps,
        }
    })
}

/// Random JSON, biased toward the schema's own field names and values so
/// that deep paths of the parser are reached.
fn json_value() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        prop::sample::select(vec![
            "version",
            "steps",
            "rules",
            "name",
            "component_type",
            "stage",
            "max_parallel",
            "timeout",
            "retry",
            "pre_operation",
            "main_operation",
            "post_operation",
            "parameters",
            "poll_interval",
            "duration",
            "expected_status",
            "component_types",
            "require_all",
            "operation",
            "operation_type",
            "max_attempts",
            "initial_interval",
            "backoff_coefficient",
            "max_interval",
            "poll_timeout",
        ])
        .prop_map(str::to_owned),
        "[a-z_]{0,8}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop::sample::select(vec![
            "v1",
            "compute",
            "nvswitch",
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
            "0",
            "1.5h",
            "power_on",
            "power_control",
            "1e400s",
            "99999999999999999999h",
            ".s",
            "",
        ])
        .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..8)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn canonical_json_round_trips(def in definition()) {
        let text = def.to_canonical_json();
        let parsed = RuleDefinition::from_json_str(&text);
        prop_assert_eq!(parsed.as_ref(), Ok(&def), "{}", text);
        prop_assert_eq!(parsed.unwrap().to_canonical_json(), text);
    }

    #[test]
    fn canonical_json_read_as_yaml_gives_the_same_rule(def in definition()) {
        let text = def.to_canonical_json();
        prop_assert_eq!(RuleDefinition::from_yaml_str(&text), Ok(def), "{}", text);
    }

    #[test]
    fn go_durations_round_trip(nanos in 0u64..=i64::MAX as u64) {
        let d = Duration::from_nanos(nanos);
        let text = format_go(d);
        prop_assert_eq!(parse_go(&text).map(|s| s.non_negative()), Ok(Some(d)), "{}", text);
    }

    #[test]
    fn random_values_never_panic(value in json_value()) {
        let _ = RuleDefinition::from_value(&value);
        let _ = RuleBatch::from_value(&value);
        let wrapped = serde_json::json!({"steps": [value.clone()]});
        let _ = RuleDefinition::from_value(&wrapped);
        let batch = serde_json::json!({"rules": [{"name": "x", "operation_type": "power_control",
                                                  "operation": "power_on", "steps": [value]}]});
        let _ = RuleBatch::from_value(&batch);
    }

    #[test]
    fn random_text_never_panics(text in ".{0,200}") {
        let _ = RuleDefinition::from_json_str(&text);
        let _ = RuleDefinition::from_yaml_str(&text);
        let _ = RuleBatch::from_yaml_str(&text);
        let _ = parse_go(&text);
    }

    #[test]
    fn mutated_valid_documents_never_panic_and_stay_consistent(
        def in definition(),
        pick in 0usize..400,
        new in json_value(),
    ) {
        let mut value = def.to_json_value();
        let mut pick = pick;
        mutate(&mut value, &mut pick, &new);
        if let Ok(rule) = RuleDefinition::from_value(&value) {
            // Whatever is accepted must round-trip too.
            let again = RuleDefinition::from_json_str(&rule.to_canonical_json());
            prop_assert_eq!(again, Ok(rule));
        }
    }
}
