//! JSON Schemas (draft 7) of the rule documents and the name-like enums,
//! for the published API contract (`docs/api/flow-api.asyncapi.json`).
//!
//! Rules are read by a hand-written parser ([`crate::parse`]), not by
//! serde, so these schemas are written by hand too — from the parser's own
//! field lists and per-action [`Spec`](crate::parse::Spec), so that a field
//! added to the parser cannot be missed here. A schema describes every
//! document the parser accepts (and so the canonical form the API returns):
//! a JSON `null` counts as absent, component types are read in any case,
//! durations are Go duration strings (`"30s"`, `"1m30s"`). It cannot state
//! the checks across fields (one step per stage and type, `max_interval` not
//! below `initial_interval`, a batch's required operations): the parser
//! makes those, and `tests/schema.rs` checks that the schema is never
//! stricter than the parser.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Map, Value, json};

use crate::batch::{BATCH_FIELDS, RULE_FIELDS};
use crate::parse::{
    ACTION_FIELDS, DEFINITION_FIELDS, MAX_RETRY_ATTEMPTS, RETRY_FIELDS, STEP_FIELDS, Use, spec,
};
use crate::{
    Action, ActionName, ComponentType, OperationCode, OperationType, PowerOperation, RetryPolicy,
    RuleBatch, RuleDefinition, RuleSpec, Step, defaults,
};

/// A Go duration string, as `crate::duration::parse_go` reads it: an
/// optional sign, then `<decimal><unit>` groups, or `0`.
const GO_DURATION: &str = r"^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$";

/// The same without a leading `-`: a duration that must be positive.
const POSITIVE_GO_DURATION: &str =
    r"^\+?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$";

fn duration(positive: bool, description: &str) -> Value {
    let (pattern, sign) = if positive {
        (POSITIVE_GO_DURATION, "greater than zero")
    } else {
        (GO_DURATION, "not negative")
    };
    json!({
        "description": format!("{description} (a Go duration, {sign}: \"500ms\", \"30s\", \"1m30s\")"),
        "type": "string",
        "pattern": pattern,
    })
}

/// `schema` or `null` (which the parser reads as absent).
fn nullable(schema: Value) -> Value {
    json!({"anyOf": [schema, {"type": "null"}]})
}

/// An object with exactly the fields `allowed`: each described by
/// `fields`, those in `required` present and not `null`, the rest
/// nullable.
fn object(
    description: &str,
    allowed: &[&str],
    mut fields: Map<String, Value>,
    required: &[&str],
) -> Value {
    let mut properties = Map::new();
    for name in allowed {
        let schema = fields
            .remove(*name)
            .unwrap_or_else(|| panic!("no schema for the field {name}"));
        let schema = if required.contains(name) {
            schema
        } else {
            nullable(schema)
        };
        properties.insert((*name).to_owned(), schema);
    }
    assert!(
        fields.is_empty(),
        "fields the parser does not read: {:?}",
        fields.keys().collect::<Vec<_>>()
    );
    json!({
        "description": description,
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn schema(value: Value) -> Schema {
    Schema::try_from(value).unwrap_or_else(|e| panic!("a hand-written schema is not one: {e}"))
}

fn reference<T: JsonSchema>(generator: &mut SchemaGenerator) -> Value {
    generator.subschema_for::<T>().to_value()
}

fn fields(pairs: Vec<(&str, Value)>) -> Map<String, Value> {
    pairs
        .into_iter()
        .map(|(name, schema)| (name.to_owned(), schema))
        .collect()
}

/// A case-insensitive regular expression for `word` (JSON Schema patterns
/// have no flags).
fn any_case(word: &str) -> String {
    word.chars()
        .map(|c| {
            if c.is_ascii_alphabetic() {
                format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase())
            } else {
                c.to_string()
            }
        })
        .collect()
}

impl JsonSchema for ComponentType {
    fn schema_name() -> Cow<'static, str> {
        "ComponentType".into()
    }

    fn schema_id() -> Cow<'static, str> {
        "flow_rules::ComponentType".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let names: Vec<String> = ComponentType::ALL
            .iter()
            .map(|t| t.as_str())
            .chain(["NVLSwitch"])
            .map(any_case)
            .collect();
        json_schema!({
            "description": format!(
                "A component type: {}. Written by its canonical name.",
                ComponentType::ALLOWED
            ),
            "type": "string",
            "pattern": format!("^({})$", names.join("|")),
        })
    }
}

macro_rules! name_enum {
    ($ty:ty, $name:literal, $description:literal, $values:expr) => {
        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                $name.into()
            }

            fn schema_id() -> Cow<'static, str> {
                concat!("flow_rules::", $name).into()
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                let values: Vec<&str> = $values;
                json_schema!({
                    "description": $description,
                    "type": "string",
                    "enum": values,
                })
            }
        }
    };
}

name_enum!(
    OperationType,
    "OperationType",
    "A family of operations.",
    OperationType::ALL.iter().map(|t| t.as_str()).collect()
);
name_enum!(
    OperationCode,
    "OperationCode",
    "An operation code; each belongs to one operation type.",
    OperationCode::all().map(|c| c.as_str()).collect()
);
name_enum!(
    PowerOperation,
    "PowerOperation",
    "A power operation code.",
    PowerOperation::ALL.iter().map(|p| p.as_str()).collect()
);

impl JsonSchema for RuleDefinition {
    fn schema_name() -> Cow<'static, str> {
        "RuleDefinition".into()
    }

    fn schema_id() -> Cow<'static, str> {
        "flow_rules::RuleDefinition".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let steps = json!({"type": "array", "items": reference::<Step>(generator)});
        schema(object(
            "A rule definition (docs/rule-format.md): stages of steps. Read \
             from any document of this shape; written in canonical form.",
            DEFINITION_FIELDS,
            fields(vec![("version", version()), ("steps", steps)]),
            &[],
        ))
    }
}

fn version() -> Value {
    json!({
        "description": "The schema version: only \"v1\" (absent means v1).",
        "const": "v1",
    })
}

impl JsonSchema for Step {
    fn schema_name() -> Cow<'static, str> {
        "RuleStep".into()
    }

    fn schema_id() -> Cow<'static, str> {
        "flow_rules::Step".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let action = reference::<Action>(generator);
        let actions = json!({"type": "array", "items": action});
        schema(object(
            "One step: one component type in one stage, its actions run in \
             order. A stage has at most one step per component type.",
            STEP_FIELDS,
            fields(vec![
                ("component_type", reference::<ComponentType>(generator)),
                (
                    "stage",
                    json!({"description": "Its stage (>= 1): stages run in ascending order.",
                           "type": "integer", "minimum": 1, "maximum": u32::MAX}),
                ),
                (
                    "max_parallel",
                    json!({"description": "Most components in flight at once (0 = unlimited).",
                           "type": "integer", "minimum": 0, "maximum": u32::MAX}),
                ),
                (
                    "timeout",
                    duration(
                        false,
                        "The activity timeout of each call (absent or zero: 20 min)",
                    ),
                ),
                ("retry", reference::<RetryPolicy>(generator)),
                ("pre_operation", actions.clone()),
                ("main_operation", action),
                ("post_operation", actions),
            ]),
            &["component_type", "stage", "main_operation"],
        ))
    }
}

impl JsonSchema for RetryPolicy {
    fn schema_name() -> Cow<'static, str> {
        "StepRetryPolicy".into()
    }

    fn schema_id() -> Cow<'static, str> {
        "flow_rules::RetryPolicy".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        schema(object(
            "A step's retry policy: the wait before attempt k >= 2 is \
             min(initial_interval * backoff_coefficient^(k-2), max_interval).",
            RETRY_FIELDS,
            fields(vec![
                (
                    "max_attempts",
                    json!({"description": "Attempts including the first.",
                           "type": "integer", "minimum": 1, "maximum": MAX_RETRY_ATTEMPTS}),
                ),
                (
                    "initial_interval",
                    duration(true, "The wait before the first retry"),
                ),
                (
                    "backoff_coefficient",
                    json!({"description": "The multiplier of each later wait.",
                           "type": "number", "minimum": 1.0}),
                ),
                (
                    "max_interval",
                    duration(
                        false,
                        "The cap on any wait, not below initial_interval (absent or zero: no cap)",
                    ),
                ),
            ]),
            &["max_attempts", "initial_interval", "backoff_coefficient"],
        ))
    }
}

impl JsonSchema for Action {
    fn schema_name() -> Cow<'static, str> {
        "StepAction".into()
    }

    fn schema_id() -> Cow<'static, str> {
        "flow_rules::Action".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let variants: Vec<Value> = ActionName::ALL
            .into_iter()
            .map(|name| action(generator, name))
            .collect();
        json_schema!({
            "description": format!(
                "An action, by its name (case-sensitive): {}.",
                ActionName::USER_ALLOWED
            ),
            "oneOf": variants,
        })
    }
}

/// The schema of one action: its name, its `timeout` and `poll_interval`
/// as its [`Spec`](crate::parse::Spec) uses them, and its parameters.
fn action(generator: &mut SchemaGenerator, name: ActionName) -> Value {
    let spec = spec(name);
    let mut required = vec!["name"];
    let mut level = |key: &'static str, usage: Use, what: &str| match usage {
        Use::Required => {
            required.push(key);
            duration(true, what)
        }
        Use::Optional => duration(false, &format!("{what} (absent or zero: the default)")),
        // The parser reads null as absent, so only null passes.
        Use::Refused(advice) => json!({"description": advice, "type": "null"}),
    };
    let timeout = level("timeout", spec.timeout, "The action's timeout");
    let poll_interval = level(
        "poll_interval",
        spec.poll_interval,
        "The time between polls",
    );
    let mut params = Map::new();
    let mut required_params = Vec::new();
    for param in spec.params {
        let schema = parameter(generator, name, param);
        if spec.required_params.iter().any(|(p, _)| p == param) {
            required_params.push(*param);
            params.insert((*param).to_owned(), schema);
        } else {
            params.insert((*param).to_owned(), nullable(schema));
        }
    }
    let parameters = json!({
        "type": "object",
        "properties": params,
        "required": required_params,
        "additionalProperties": false,
    });
    if !required_params.is_empty() {
        required.push("parameters");
    }
    let mut properties = Map::new();
    for key in ACTION_FIELDS {
        let schema = match *key {
            "name" => json!({"const": name.as_str()}),
            "timeout" => timeout.clone(),
            "poll_interval" => poll_interval.clone(),
            "parameters" => parameters.clone(),
            other => panic!("the action field {other} has no schema"),
        };
        let schema =
            if required.contains(key) || matches!(schema.get("type"), Some(t) if t == "null") {
                schema
            } else {
                nullable(schema)
            };
        properties.insert((*key).to_owned(), schema);
    }
    json!({
        "title": name.as_str(),
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn parameter(generator: &mut SchemaGenerator, action: ActionName, param: &str) -> Value {
    match (action, param) {
        (ActionName::Sleep, "duration") => duration(true, "How long to pause"),
        (ActionName::PowerControl, "operation") => json!({
            "description": "The command (absent: the task's own power operation).",
            "allOf": [reference::<PowerOperation>(generator)],
        }),
        (ActionName::FirmwareControl, "operation") => json!({
            "description": "The firmware operation (absent: the task's own).",
            "type": "string",
            "enum": ["upgrade", "downgrade", "rollback"],
        }),
        (ActionName::FirmwareControl, "poll_interval") => {
            duration(true, "The time between status polls (default 2 min)")
        }
        (ActionName::FirmwareControl, "poll_timeout") => {
            duration(true, "The longest wait for completion (default 30 min)")
        }
        (ActionName::VerifyPowerStatus, "expected_status") => json!({
            "description": "The power state to wait for.",
            "type": "string",
            "enum": ["on", "off"],
        }),
        (ActionName::VerifyReachability, "component_types") => json!({
            "description": "The component types to probe (at least one, none twice).",
            "type": "array",
            "items": reference::<ComponentType>(generator),
            "minItems": 1,
            "uniqueItems": true,
        }),
        (ActionName::VerifyReachability, "require_all") => json!({
            "description": "Every component must answer, not just the type's status call.",
            "type": "boolean",
        }),
        (action, param) => panic!("{action} has a parameter {param} without a schema"),
    }
}

impl JsonSchema for RuleBatch {
    fn schema_name() -> Cow<'static, str> {
        "RuleBatch".into()
    }

    fn schema_id() -> Cow<'static, str> {
        "flow_rules::RuleBatch".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let rules = json!({"type": "array", "items": reference::<RuleSpec>(generator)});
        schema(object(
            "A batch of rules (the YAML batch file, as JSON): at most one \
             rule per operation, and every required operation of each \
             operation type it has (power_on and power_off; upgrade).",
            BATCH_FIELDS,
            fields(vec![("version", version()), ("rules", rules)]),
            &["rules"],
        ))
    }
}

impl JsonSchema for RuleSpec {
    fn schema_name() -> Cow<'static, str> {
        "RuleSpec".into()
    }

    fn schema_id() -> Cow<'static, str> {
        "flow_rules::RuleSpec".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let steps = json!({"type": "array", "items": reference::<Step>(generator)});
        schema(object(
            "A rule of a batch: its name, its operation (a code of its \
             type) and its steps.",
            RULE_FIELDS,
            fields(vec![
                (
                    "name",
                    json!({"description": "A name (not blank).", "type": "string",
                           "minLength": 1, "maxLength": defaults::MAX_RULE_NAME_LEN}),
                ),
                (
                    "description",
                    json!({"description": "What it is for.", "type": "string"}),
                ),
                ("operation_type", reference::<OperationType>(generator)),
                ("operation", reference::<OperationCode>(generator)),
                ("steps", steps),
            ]),
            &["name", "operation_type", "operation"],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generate<T: JsonSchema>() -> Value {
        schemars::generate::SchemaSettings::draft07()
            .into_generator()
            .into_root_schema_for::<T>()
            .to_value()
    }

    #[test]
    fn each_action_lists_the_fields_the_parser_reads() {
        let root = generate::<Action>();
        for (variant, name) in root["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .zip(ActionName::ALL)
        {
            let keys: Vec<&str> = variant["properties"]
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, ACTION_FIELDS, "{name}");
            let params: Vec<&str> = variant["properties"]["parameters"]
                .pointer("/anyOf/0/properties")
                .or_else(|| variant["properties"]["parameters"].get("properties"))
                .and_then(Value::as_object)
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(params, spec(name).params, "{name}");
        }
    }

    #[test]
    fn a_component_type_is_read_in_any_case() {
        let pattern = generate::<ComponentType>()["pattern"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(pattern.contains("[nN][vV][lL][sS][wW][iI][tT][cC][hH]"));
        assert!(pattern.starts_with("^([cC][oO][mM][pP][uU][tT][eE]|"));
    }
}
