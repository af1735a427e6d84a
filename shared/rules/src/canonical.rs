//! The canonical JSON form of rules: what the store keeps and the API
//! returns. Unset optional fields are omitted, durations are written in Go's
//! form (`"10m0s"`), component types by their canonical names; parsing the
//! output gives back the same model.

use serde_json::{Map, Number, Value, json};

use crate::duration::format_go;
use crate::{Action, RetryPolicy, RuleDefinition, RuleSpec, Step};

impl RuleDefinition {
    /// The canonical JSON value.
    pub fn to_json_value(&self) -> Value {
        json!({
            "version": self.version.as_str(),
            "steps": self.steps.iter().map(Step::to_json_value).collect::<Vec<_>>(),
        })
    }

    /// The canonical JSON text, pretty-printed.
    pub fn to_canonical_json(&self) -> String {
        pretty(&self.to_json_value())
    }
}

impl RuleSpec {
    /// The rule as a batch entry (YAML batch keys, JSON value).
    pub fn to_json_value(&self) -> Value {
        let definition = self.definition.to_json_value();
        json!({
            "name": self.name,
            "description": self.description,
            "operation_type": self.operation_type().as_str(),
            "operation": self.operation.as_str(),
            "steps": definition["steps"],
        })
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

impl Step {
    /// The canonical JSON value of one step.
    pub fn to_json_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("component_type".into(), self.component_type.as_str().into());
        m.insert("stage".into(), self.stage.get().into());
        m.insert("max_parallel".into(), self.max_parallel.into());
        if let Some(t) = self.timeout {
            m.insert("timeout".into(), format_go(t).into());
        }
        if let Some(r) = &self.retry {
            m.insert("retry".into(), r.to_json_value());
        }
        if !self.pre_operation.is_empty() {
            m.insert("pre_operation".into(), actions(&self.pre_operation));
        }
        m.insert("main_operation".into(), self.main_operation.to_json_value());
        if !self.post_operation.is_empty() {
            m.insert("post_operation".into(), actions(&self.post_operation));
        }
        Value::Object(m)
    }
}

fn actions(list: &[Action]) -> Value {
    Value::Array(list.iter().map(Action::to_json_value).collect())
}

impl RetryPolicy {
    /// The canonical JSON value of a retry policy.
    pub fn to_json_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("max_attempts".into(), self.max_attempts.get().into());
        m.insert(
            "initial_interval".into(),
            format_go(self.initial_interval).into(),
        );
        m.insert(
            "backoff_coefficient".into(),
            Number::from_f64(self.backoff_coefficient).map_or(Value::Null, Value::Number),
        );
        if let Some(max) = self.max_interval {
            m.insert("max_interval".into(), format_go(max).into());
        }
        Value::Object(m)
    }
}

impl Action {
    /// The canonical JSON value of an action.
    pub fn to_json_value(&self) -> Value {
        let mut m = Map::new();
        let mut params = Map::new();
        m.insert("name".into(), self.name().as_str().into());
        let put = |m: &mut Map<String, Value>, key: &str, d: Option<std::time::Duration>| {
            if let Some(d) = d {
                m.insert(key.into(), format_go(d).into());
            }
        };
        match self {
            Action::Sleep { duration } => {
                put(&mut params, "duration", Some(*duration));
            }
            Action::PowerControl { operation, timeout } => {
                put(&mut m, "timeout", *timeout);
                if let Some(op) = operation {
                    params.insert("operation".into(), op.as_str().into());
                }
            }
            Action::FirmwareControl {
                operation,
                poll_interval,
                poll_timeout,
                timeout,
            } => {
                put(&mut m, "timeout", *timeout);
                if let Some(op) = operation {
                    params.insert("operation".into(), op.as_str().into());
                }
                put(&mut params, "poll_interval", *poll_interval);
                put(&mut params, "poll_timeout", *poll_timeout);
            }
            Action::VerifyPowerStatus {
                expected,
                timeout,
                poll_interval,
            } => {
                put(&mut m, "timeout", Some(*timeout));
                put(&mut m, "poll_interval", Some(*poll_interval));
                params.insert("expected_status".into(), expected.as_str().into());
            }
            Action::VerifyReachability {
                component_types,
                require_all,
                timeout,
                poll_interval,
            } => {
                put(&mut m, "timeout", Some(*timeout));
                put(&mut m, "poll_interval", Some(*poll_interval));
                params.insert(
                    "component_types".into(),
                    component_types.iter().map(|t| t.as_str()).collect(),
                );
                if *require_all {
                    params.insert("require_all".into(), true.into());
                }
            }
            Action::GetPowerStatus { timeout } => put(&mut m, "timeout", Some(*timeout)),
            Action::DecommissionControl => {}
            Action::WaitDecommissioned {
                timeout,
                poll_interval,
            } => {
                put(&mut m, "timeout", Some(*timeout));
                put(&mut m, "poll_interval", Some(*poll_interval));
            }
        }
        if !params.is_empty() {
            m.insert("parameters".into(), Value::Object(params));
        }
        Value::Object(m)
    }
}
