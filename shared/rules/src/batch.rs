//! Named rules bound to an operation ([`RuleSpec`]) and the YAML batch file
//! that carries several of them ([`RuleBatch`]; `docs/rule-format.md`,
//! "Batch files").

use std::collections::HashMap;

use serde_json::Value;

use crate::check::{Checker, field};
use crate::error::{Path, Problem, ValidationErrors};
use crate::parse::{self, steps, version};
use crate::{Action, OperationCode, OperationType, RuleDefinition, defaults};

/// A rule as an operator writes it: a name, what it is for, the operation it
/// runs, and its definition.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSpec {
    /// A human name (1–128 characters).
    pub name: String,
    /// Free text; may be empty.
    pub description: String,
    /// The operation (its type follows from the code).
    pub operation: OperationCode,
    /// The steps.
    pub definition: RuleDefinition,
}

impl RuleSpec {
    /// The operation type.
    pub fn operation_type(&self) -> OperationType {
        self.operation.operation_type()
    }
}

/// A validated batch: rules in file order, at most one per operation, with
/// every required operation of each type present.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuleBatch {
    /// The rules.
    pub rules: Vec<RuleSpec>,
}

pub(crate) const BATCH_FIELDS: &[&str] = &["version", "rules"];
pub(crate) const RULE_FIELDS: &[&str] = &[
    "name",
    "description",
    "operation_type",
    "operation",
    "steps",
];

impl RuleBatch {
    /// Parses and validates a YAML batch file, collecting every error.
    pub fn from_yaml_str(text: &str) -> Result<RuleBatch, ValidationErrors> {
        let value = crate::document::yaml_value(text)?;
        Self::from_value(&value)
    }

    /// Validates a batch already read into a value tree.
    pub fn from_value(value: &Value) -> Result<RuleBatch, ValidationErrors> {
        let mut c = Checker::default();
        let batch = batch(&mut c, &Path::root(), value);
        c.finish(batch)
    }
}

fn batch(c: &mut Checker, path: &Path, value: &Value) -> Option<RuleBatch> {
    let before = c.count();
    let map = c.object(path, value, BATCH_FIELDS, &[])?;
    version(c, path, map);
    let rules_path = path.field("rules");
    let items = match field(map, "rules") {
        None => {
            c.report(
                path,
                Problem::Missing {
                    what: "rules".into(),
                    hint: Some("a list of rules with name, operation_type, operation and steps"),
                },
            );
            return None;
        }
        Some(v) => c.array(&rules_path, v, "an array of rules")?,
    };
    let mut rules = Vec::new();
    let mut first_of: HashMap<OperationCode, String> = HashMap::new();
    let mut types_present = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let (operation, spec) = rule(c, &rules_path.index(i), item);
        if let Some((operation, rule_path)) = operation {
            if !types_present.contains(&operation.operation_type()) {
                types_present.push(operation.operation_type());
            }
            match first_of.get(&operation) {
                Some(first) => c.report(
                    &rule_path,
                    Problem::DuplicateRule {
                        operation_type: operation.operation_type(),
                        code: operation,
                        first: first.clone(),
                    },
                ),
                None => {
                    first_of.insert(operation, rule_path.to_string());
                }
            }
        }
        rules.extend(spec);
    }
    for operation_type in types_present {
        let required = operation_type.required_codes();
        for code in required {
            if !first_of.contains_key(code) {
                c.report(
                    &rules_path,
                    Problem::MissingRequiredOperation {
                        operation_type,
                        code: *code,
                        required: required
                            .iter()
                            .map(|c| c.as_str())
                            .collect::<Vec<_>>()
                            .join(" and "),
                    },
                );
            }
        }
    }
    (c.count() == before).then_some(RuleBatch { rules })
}

/// Parses one rule of a batch. Returns its operation (and labelled path)
/// whenever type and code are valid, for the batch-level checks.
fn rule(
    c: &mut Checker,
    path: &Path,
    value: &Value,
) -> (Option<(OperationCode, Path)>, Option<RuleSpec>) {
    let before = c.count();
    let Value::Object(map) = value else {
        c.wrong_type(path, "an object", value);
        return (None, None);
    };
    let name = rule_name(c, path, field(map, "name"));
    let path = &match &name {
        Some(n) => path.label(n),
        None => path.clone(),
    };
    c.object(path, value, RULE_FIELDS, &[]);
    let description = field(map, "description")
        .map(|v| c.string(&path.field("description"), v).map(str::to_owned))
        .unwrap_or(Some(String::new()));
    let operation = operation(
        c,
        path,
        field(map, "operation_type"),
        field(map, "operation"),
    );
    let steps = steps(c, path, map);
    let key = operation.map(|op| (op, path.clone()));
    if c.count() != before {
        return (key, None);
    }
    let (Some(name), Some(description), Some(operation)) = (name, description, operation) else {
        return (key, None);
    };
    let spec = RuleSpec {
        name,
        description,
        operation,
        definition: RuleDefinition {
            version: Default::default(),
            steps,
        },
    };
    check_fits_operation(c, path, &spec);
    (key, (c.count() == before).then_some(spec))
}

/// Validates a rule name: present, not blank, at most 128 characters.
pub(crate) fn rule_name(c: &mut Checker, path: &Path, value: Option<&Value>) -> Option<String> {
    let Some(v) = value else {
        c.report(
            path,
            Problem::Missing {
                what: "name".into(),
                hint: None,
            },
        );
        return None;
    };
    let p = path.field("name");
    let s = c.string(&p, v)?;
    if s.trim().is_empty() {
        c.report(
            &p,
            Problem::Empty {
                advice: "give the rule a name",
            },
        );
        return None;
    }
    let len = s.chars().count();
    if len > defaults::MAX_RULE_NAME_LEN {
        c.report(
            &p,
            Problem::OutOfRange {
                bound: "at most 128 characters",
                got: format!("{len} characters"),
            },
        );
        return None;
    }
    Some(s.to_owned())
}

/// Validates `operation_type` then `operation` (the code must belong to the
/// type), in the reference system's order (`docs/rule-format.md`, "Order of
/// checks").
pub(crate) fn operation(
    c: &mut Checker,
    path: &Path,
    operation_type: Option<&Value>,
    code: Option<&Value>,
) -> Option<OperationCode> {
    let operation_type = match operation_type {
        None => {
            c.report(
                path,
                Problem::Missing {
                    what: "operation_type".into(),
                    hint: Some("power_control, firmware_control or decommission"),
                },
            );
            None
        }
        Some(v) => {
            let p = path.field("operation_type");
            c.string(&p, v)
                .and_then(|s| match s.parse::<OperationType>() {
                    Ok(t) => Some(t),
                    Err(e) => {
                        c.report(&p, Problem::InvalidName(e.to_string()));
                        None
                    }
                })
        }
    };
    let Some(code) = code else {
        c.report(
            path,
            Problem::Missing {
                what: "operation".into(),
                hint: Some("the operation code, such as power_on"),
            },
        );
        return None;
    };
    let p = path.field("operation");
    let code = c.string(&p, code)?;
    let operation_type = operation_type?;
    match operation_type.parse_code(code) {
        Ok(op) => Some(op),
        Err(e) => {
            c.report(&p, Problem::InvalidName(e.to_string()));
            None
        }
    }
}

/// Checks that every action can work in a task of the rule's operation type
/// (`docs/rule-format.md`, "Actions and operation types": the reference
/// system only found these at run time).
pub(crate) fn check_fits_operation(c: &mut Checker, path: &Path, spec: &RuleSpec) {
    let operation_type = spec.operation_type();
    for (i, step) in spec.definition.steps.iter().enumerate() {
        let step_path = path.field("steps").index(i);
        let phases = [
            ("pre_operation", step.pre_operation.as_slice()),
            ("main_operation", std::slice::from_ref(&step.main_operation)),
            ("post_operation", step.post_operation.as_slice()),
        ];
        for (phase, actions) in phases {
            for (j, action) in actions.iter().enumerate() {
                let p = if phase == "main_operation" {
                    step_path.field(phase)
                } else {
                    step_path.field(phase).index(j)
                };
                let p = p.label(action.name().as_str());
                if let Some(message) = misfit(action, operation_type) {
                    c.report(&p, Problem::WrongOperationType(message));
                }
            }
        }
    }
}

fn misfit(action: &Action, operation_type: OperationType) -> Option<String> {
    match action {
        Action::PowerControl {
            operation: None, ..
        } if operation_type != OperationType::PowerControl => Some(format!(
            "PowerControl without parameters.operation runs the task's own power operation, \
             and a {operation_type} task has none; set parameters.operation (e.g. power_off)"
        )),
        Action::FirmwareControl { .. } if operation_type != OperationType::FirmwareControl => {
            Some(format!(
                "FirmwareControl needs the firmware images that only firmware_control tasks \
                 carry; it cannot run in a {operation_type} rule"
            ))
        }
        Action::DecommissionControl if operation_type != OperationType::Decommission => {
            Some(format!(
                "DecommissionControl takes components out of service and is only allowed in \
                 decommission rules, not in a {operation_type} rule"
            ))
        }
        _ => None,
    }
}

/// Checks that every action of a validated definition can work in a task
/// of `operation` (the check `rule create` makes), so that validating a
/// definition for an operation agrees with creating it.
pub fn check_for_operation(
    definition: &RuleDefinition,
    operation: OperationCode,
) -> Result<(), ValidationErrors> {
    let mut c = Checker::default();
    let spec = RuleSpec {
        name: String::new(),
        description: String::new(),
        operation,
        definition: definition.clone(),
    };
    check_fits_operation(&mut c, &Path::root(), &spec);
    c.finish(Some(()))
}

/// Validates a single rule given as flags plus a definition (the
/// `rule create` single mode and the API), with the same checks a batch rule
/// gets.
pub fn spec_from_parts(
    name: &str,
    description: &str,
    operation_type: &str,
    operation: &str,
    definition: &Value,
) -> Result<RuleSpec, ValidationErrors> {
    let mut c = Checker::default();
    let root = Path::root();
    let name = rule_name(&mut c, &root, Some(&Value::String(name.to_owned())));
    let op = self::operation(
        &mut c,
        &root,
        Some(&Value::String(operation_type.to_owned())),
        Some(&Value::String(operation.to_owned())),
    );
    let definition = parse::definition(&mut c, &root.field("definition"), definition);
    let spec = match (name, op, definition) {
        (Some(name), Some(operation), Some(definition)) => Some(RuleSpec {
            name,
            description: description.to_owned(),
            operation,
            definition,
        }),
        _ => None,
    };
    if let Some(spec) = &spec {
        check_fits_operation(&mut c, &root.field("definition"), spec);
    }
    c.finish(spec)
}
