//! From a document to the validated model: the format's fields, defaults and
//! checks in the reference system's order (`docs/rule-format.md`, "Order of
//! checks"), plus Flow's stricter checks (unknown fields, negative timeouts,
//! unparseable durations, …; `docs/rule-format.md`, "Where Flow is
//! stricter").

use std::collections::HashMap;
use std::num::NonZeroU32;

use serde_json::{Map, Value};

use crate::check::{Checker, Refused, field};
use crate::error::{Path, Problem, closest};
use crate::{
    Action, ActionName, ComponentType, FirmwareOperation, PowerOperation, PowerState, RetryPolicy,
    RuleDefinition, SchemaVersion, Stage, Step,
};

/// Most retry attempts a step may ask for: Flow's own limit, so that budgets
/// stay finite and a typo (`300` for `3`) is caught.
pub const MAX_RETRY_ATTEMPTS: i64 = 100;

pub(crate) const DEFINITION_FIELDS: &[&str] = &["version", "steps"];
pub(crate) const STEP_FIELDS: &[&str] = &[
    "component_type",
    "stage",
    "max_parallel",
    "timeout",
    "retry",
    "pre_operation",
    "main_operation",
    "post_operation",
];
const STEP_REFUSED: &[Refused] = &[(
    "delay_after",
    "the legacy delay_after is not part of the v1 schema; add a Sleep action to post_operation",
)];
pub(crate) const RETRY_FIELDS: &[&str] = &[
    "max_attempts",
    "initial_interval",
    "backoff_coefficient",
    "max_interval",
];
pub(crate) const ACTION_FIELDS: &[&str] = &["name", "timeout", "poll_interval", "parameters"];

/// Reads the version field: absent means v1, anything but `"v1"` is refused.
pub(crate) fn version(c: &mut Checker, path: &Path, map: &Map<String, Value>) -> SchemaVersion {
    if let Some(v) = field(map, "version") {
        let p = path.field("version");
        if let Some(s) = c.string(&p, v)
            && s != "v1"
        {
            c.report(
                &p,
                Problem::InvalidName(format!(
                    "unsupported version {s:?}; the only version is \"v1\" (or omit it)"
                )),
            );
        }
    }
    SchemaVersion::V1
}

/// Parses a rule definition object `{version, steps}`.
pub(crate) fn definition(c: &mut Checker, path: &Path, value: &Value) -> Option<RuleDefinition> {
    let before = c.count();
    let map = c.object(path, value, DEFINITION_FIELDS, &[])?;
    let version = version(c, path, map);
    let steps = steps(c, path, map);
    (c.count() == before).then_some(RuleDefinition { version, steps })
}

/// Parses the `steps` array of a definition or batch rule, with the
/// duplicate (stage, component type) check.
pub(crate) fn steps(c: &mut Checker, path: &Path, map: &Map<String, Value>) -> Vec<Step> {
    let Some(value) = field(map, "steps") else {
        return Vec::new();
    };
    let steps_path = path.field("steps");
    let Some(items) = c.array(&steps_path, value, "an array of steps") else {
        return Vec::new();
    };
    let mut seen: HashMap<(Stage, ComponentType), usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let p = steps_path.index(i);
        let (key, parsed) = step(c, &p, item);
        if let Some((stage, component_type)) = key {
            if let Some(first) = seen.get(&(stage, component_type)) {
                c.report(
                    &p,
                    Problem::DuplicateStep {
                        component_type,
                        stage: stage.get(),
                        first: steps_path.index(*first).to_string(),
                    },
                );
            } else {
                seen.insert((stage, component_type), i);
            }
        }
        out.extend(parsed);
    }
    out
}

type StepKey = (Stage, ComponentType);

/// Parses one step. Returns its (stage, type) whenever those two are valid,
/// so duplicates are found even in a step with other errors.
fn step(c: &mut Checker, path: &Path, value: &Value) -> (Option<StepKey>, Option<Step>) {
    let before = c.count();
    let Some(map) = c.object(path, value, STEP_FIELDS, STEP_REFUSED) else {
        return (None, None);
    };
    // The reference system's order (`docs/rule-format.md`, "Order of
    // checks"): type, stage, max_parallel, timeout, retry, pre, main
    // missing, main, post.
    let component_type = match field(map, "component_type") {
        None => {
            c.report(
                path,
                Problem::Missing {
                    what: "component_type".into(),
                    hint: Some(ComponentType::ALLOWED),
                },
            );
            None
        }
        Some(v) => {
            let p = path.field("component_type");
            c.string(&p, v)
                .and_then(|s| match s.parse::<ComponentType>() {
                    Ok(t) => Some(t),
                    Err(e) => {
                        c.report(&p, Problem::InvalidName(e.to_string()));
                        None
                    }
                })
        }
    };
    let stage = match field(map, "stage") {
        None => {
            c.report(
                path,
                Problem::Missing {
                    what: "stage".into(),
                    hint: Some("an integer >= 1; steps with the same stage run in parallel"),
                },
            );
            None
        }
        Some(v) => c
            .integer(&path.field("stage"), v, 1, i64::from(u32::MAX), ">= 1")
            .and_then(|n| u32::try_from(n).ok())
            .and_then(NonZeroU32::new)
            .map(Stage),
    };
    let max_parallel = field(map, "max_parallel").map_or(Some(0), |v| {
        c.integer(
            &path.field("max_parallel"),
            v,
            0,
            i64::from(u32::MAX),
            ">= 0 (0 = unlimited, 1 = one at a time)",
        )
        .and_then(|n| u32::try_from(n).ok())
    });
    let timeout = field(map, "timeout")
        .map(|v| c.non_negative_duration(&path.field("timeout"), v))
        .map_or(Some(None), |d| d.map(|d| (!d.is_zero()).then_some(d)));
    let retry = field(map, "retry")
        .map(|v| retry(c, &path.field("retry"), v))
        .map_or(Some(None), |r| r.map(Some));
    let pre_operation = actions(c, path, map, "pre_operation");
    let main_operation = match field(map, "main_operation") {
        None => {
            c.report(
                path,
                Problem::Missing {
                    what: "main_operation".into(),
                    hint: Some("an action such as {\"name\": \"PowerControl\"}"),
                },
            );
            None
        }
        Some(v) => action(c, &path.field("main_operation"), v),
    };
    let post_operation = actions(c, path, map, "post_operation");
    let key = stage.zip(component_type);
    if c.count() != before {
        return (key, None);
    }
    let parsed = (|| {
        Some(Step {
            component_type: component_type?,
            stage: stage?,
            max_parallel: max_parallel?,
            timeout: timeout?,
            retry: retry?,
            pre_operation,
            main_operation: main_operation?,
            post_operation,
        })
    })();
    (key, parsed)
}

fn retry(c: &mut Checker, path: &Path, value: &Value) -> Option<RetryPolicy> {
    let before = c.count();
    let map = c.object(path, value, RETRY_FIELDS, &[])?;
    let required = |c: &mut Checker, name: &str, hint: &'static str| {
        let v = field(map, name);
        if v.is_none() {
            c.report(
                path,
                Problem::Missing {
                    what: name.to_owned(),
                    hint: Some(hint),
                },
            );
        }
        v
    };
    let max_attempts = required(
        c,
        "max_attempts",
        "total attempts including the first, >= 1",
    )
    .and_then(|v| {
        c.integer(
            &path.field("max_attempts"),
            v,
            1,
            MAX_RETRY_ATTEMPTS,
            "between 1 and 100",
        )
    })
    .and_then(|n| u32::try_from(n).ok())
    .and_then(NonZeroU32::new);
    let initial_interval = required(c, "initial_interval", "a positive duration such as \"5s\"")
        .and_then(|v| c.positive_duration(&path.field("initial_interval"), v));
    let backoff_coefficient = required(c, "backoff_coefficient", "a number >= 1.0").and_then(|v| {
        let p = path.field("backoff_coefficient");
        let f = c.number(&p, v)?;
        if f >= 1.0 && f.is_finite() {
            Some(f)
        } else {
            c.report(
                &p,
                Problem::OutOfRange {
                    bound: ">= 1.0",
                    got: format!("{f}"),
                },
            );
            None
        }
    });
    let max_interval = field(map, "max_interval")
        .map(|v| c.non_negative_duration(&path.field("max_interval"), v))
        .map_or(Some(None), |d| d.map(|d| (!d.is_zero()).then_some(d)));
    if let (Some(Some(max)), Some(initial)) = (max_interval, initial_interval)
        && max < initial
    {
        c.report(
            &path.field("max_interval"),
            Problem::MaxBelowInitial {
                max: crate::duration::format_short(max),
                initial: crate::duration::format_short(initial),
            },
        );
    }
    if c.count() != before {
        return None;
    }
    Some(RetryPolicy {
        max_attempts: max_attempts?,
        initial_interval: initial_interval?,
        backoff_coefficient: backoff_coefficient?,
        max_interval: max_interval?,
    })
}

fn actions(c: &mut Checker, path: &Path, map: &Map<String, Value>, name: &str) -> Vec<Action> {
    let Some(value) = field(map, name) else {
        return Vec::new();
    };
    let p = path.field(name);
    let Some(items) = c.array(&p, value, "an array of actions") else {
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .filter_map(|(j, item)| action(c, &p.index(j), item))
        .collect()
}

/// What an action accepts: its parameters and whether the action-level
/// `timeout` and `poll_interval` are required, optional or refused.
pub(crate) struct Spec {
    pub(crate) params: &'static [&'static str],
    pub(crate) required_params: &'static [(&'static str, &'static str)],
    pub(crate) timeout: Use,
    pub(crate) poll_interval: Use,
}

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Use {
    Required,
    Optional,
    Refused(&'static str),
}

pub(crate) fn spec(name: ActionName) -> Spec {
    const NO_POLL: &str = "this action does not poll";
    match name {
        ActionName::Sleep => Spec {
            params: &["duration"],
            required_params: &[("duration", "a duration such as \"30s\"")],
            timeout: Use::Refused("Sleep takes only parameters.duration"),
            poll_interval: Use::Refused("Sleep takes only parameters.duration"),
        },
        ActionName::PowerControl => Spec {
            params: &["operation"],
            required_params: &[],
            timeout: Use::Optional,
            poll_interval: Use::Refused(
                "PowerControl does not poll; confirm the result with a VerifyPowerStatus action",
            ),
        },
        ActionName::FirmwareControl => Spec {
            params: &["operation", "poll_interval", "poll_timeout"],
            required_params: &[],
            timeout: Use::Optional,
            poll_interval: Use::Refused(
                "FirmwareControl takes poll_interval and poll_timeout under parameters",
            ),
        },
        ActionName::VerifyPowerStatus => Spec {
            params: &["expected_status"],
            required_params: &[("expected_status", "\"on\" or \"off\"")],
            timeout: Use::Required,
            poll_interval: Use::Required,
        },
        ActionName::VerifyReachability => Spec {
            params: &["component_types", "require_all"],
            required_params: &[(
                "component_types",
                "a list of component types such as [\"compute\", \"nvswitch\"]",
            )],
            timeout: Use::Required,
            poll_interval: Use::Required,
        },
        ActionName::GetPowerStatus => Spec {
            params: &[],
            required_params: &[],
            timeout: Use::Required,
            poll_interval: Use::Refused(NO_POLL),
        },
        ActionName::DecommissionControl => Spec {
            params: &[],
            required_params: &[],
            timeout: Use::Refused(
                "the executor always gives DecommissionControl 5m and one attempt",
            ),
            poll_interval: Use::Refused(NO_POLL),
        },
        ActionName::WaitDecommissioned => Spec {
            params: &[],
            required_params: &[],
            timeout: Use::Required,
            poll_interval: Use::Required,
        },
    }
}

fn action_name(c: &mut Checker, path: &Path, map: &Map<String, Value>) -> Option<ActionName> {
    let Some(v) = field(map, "name") else {
        c.report(
            path,
            Problem::Missing {
                what: "name".into(),
                hint: Some(ActionName::USER_ALLOWED),
            },
        );
        return None;
    };
    let p = path.field("name");
    let name = c.string(&p, v)?;
    if let Some(known) = ActionName::from_name(name) {
        return Some(known);
    }
    if ActionName::INTERNAL.contains(&name) {
        c.report(&p, Problem::InternalAction { name: name.into() });
    } else {
        let names: Vec<&'static str> = ActionName::ALL.iter().map(|a| a.as_str()).collect();
        c.report(
            &p,
            Problem::UnknownAction {
                name: name.into(),
                suggestion: closest(name, &names),
            },
        );
    }
    None
}

/// Reads an action-level `timeout` or `poll_interval` per its [`Use`].
/// `Some(None)` = absent/zero optional, `None` = error.
fn action_duration(
    c: &mut Checker,
    path: &Path,
    map: &Map<String, Value>,
    key: &'static str,
    usage: Use,
) -> Option<Option<std::time::Duration>> {
    let value = field(map, key);
    match (usage, value) {
        (Use::Refused(advice), Some(_)) => {
            c.report(path, Problem::NotAllowedHere { field: key, advice });
            None
        }
        (Use::Refused(_) | Use::Optional, None) => Some(None),
        (Use::Required, None) => {
            c.report(
                path,
                Problem::Missing {
                    what: key.to_owned(),
                    hint: None,
                },
            );
            None
        }
        (Use::Required, Some(v)) => c.positive_duration(&path.field(key), v).map(Some),
        (Use::Optional, Some(v)) => c
            .non_negative_duration(&path.field(key), v)
            .map(|d| (!d.is_zero()).then_some(d)),
    }
}

/// Parses one action. The path is labelled with the action's name.
pub(crate) fn action(c: &mut Checker, path: &Path, value: &Value) -> Option<Action> {
    let before = c.count();
    let Value::Object(map) = value else {
        c.wrong_type(path, "an object", value);
        return None;
    };
    let name = action_name(c, path, map);
    let path = &match name {
        Some(name) => path.label(name.as_str()),
        None => path.clone(),
    };
    c.object(path, value, ACTION_FIELDS, &[]);
    let name = name?;
    let spec = spec(name);
    let empty = Map::new();
    let params_path = path.field("parameters");
    let params = match field(map, "parameters") {
        None => &empty,
        Some(v) => c
            .object(&params_path, v, spec.params, &[])
            .unwrap_or(&empty),
    };
    // The reference system's order (`docs/rule-format.md`, "Order of
    // checks"): required parameters, timeout, poll_interval, then the
    // parameter values.
    for (param, hint) in spec.required_params {
        if field(params, param).is_none() {
            c.report(
                path,
                Problem::Missing {
                    what: format!("parameter {param}"),
                    hint: Some(hint),
                },
            );
        }
    }
    let timeout = action_duration(c, path, map, "timeout", spec.timeout);
    let poll_interval = action_duration(c, path, map, "poll_interval", spec.poll_interval);
    let param = |key: &str| field(params, key);
    let pp = |key: &str| params_path.field(key);
    let action = match name {
        ActionName::Sleep => param("duration")
            .and_then(|v| c.positive_duration(&pp("duration"), v))
            .map(|duration| Action::Sleep { duration }),
        ActionName::PowerControl => {
            let operation = match param("operation") {
                None => Some(None),
                Some(v) => power_operation(c, &pp("operation"), v).map(Some),
            };
            Some(Action::PowerControl {
                operation: operation?,
                timeout: timeout?,
            })
        }
        ActionName::FirmwareControl => {
            let operation = match param("operation") {
                None => Some(None),
                Some(v) => firmware_operation(c, &pp("operation"), v).map(Some),
            };
            let poll_interval = param("poll_interval")
                .map(|v| c.positive_duration(&pp("poll_interval"), v))
                .map_or(Some(None), |d| d.map(Some));
            let poll_timeout = param("poll_timeout")
                .map(|v| c.positive_duration(&pp("poll_timeout"), v))
                .map_or(Some(None), |d| d.map(Some));
            Some(Action::FirmwareControl {
                operation: operation?,
                poll_interval: poll_interval?,
                poll_timeout: poll_timeout?,
                timeout: timeout?,
            })
        }
        ActionName::VerifyPowerStatus => {
            let expected =
                param("expected_status").and_then(|v| power_state(c, &pp("expected_status"), v));
            Some(Action::VerifyPowerStatus {
                expected: expected?,
                timeout: timeout??,
                poll_interval: poll_interval??,
            })
        }
        ActionName::VerifyReachability => {
            let types = param("component_types")
                .and_then(|v| component_types(c, &pp("component_types"), v));
            let require_all = param("require_all")
                .map(|v| c.boolean(&pp("require_all"), v))
                .unwrap_or(Some(false));
            Some(Action::VerifyReachability {
                component_types: types?,
                require_all: require_all?,
                timeout: timeout??,
                poll_interval: poll_interval??,
            })
        }
        ActionName::GetPowerStatus => Some(Action::GetPowerStatus { timeout: timeout?? }),
        ActionName::DecommissionControl => Some(Action::DecommissionControl),
        ActionName::WaitDecommissioned => Some(Action::WaitDecommissioned {
            timeout: timeout??,
            poll_interval: poll_interval??,
        }),
    };
    action.filter(|_| c.count() == before)
}

fn power_operation(c: &mut Checker, path: &Path, value: &Value) -> Option<PowerOperation> {
    let s = c.string(path, value)?;
    match s.parse() {
        Ok(op) => Some(op),
        Err(_) => {
            let allowed: Vec<_> = PowerOperation::ALL.iter().map(|p| p.as_str()).collect();
            c.report(
                path,
                Problem::InvalidName(format!(
                    "unknown power operation {s:?}; allowed: {}",
                    allowed.join(", ")
                )),
            );
            None
        }
    }
}

fn firmware_operation(c: &mut Checker, path: &Path, value: &Value) -> Option<FirmwareOperation> {
    let s = c.string(path, value)?;
    match s.parse() {
        Ok(op) => Some(op),
        Err(_) => {
            c.report(
                path,
                Problem::InvalidName(format!(
                    "unknown firmware operation {s:?}; allowed: upgrade, downgrade, rollback"
                )),
            );
            None
        }
    }
}

fn power_state(c: &mut Checker, path: &Path, value: &Value) -> Option<PowerState> {
    let s = c.string(path, value)?;
    match s {
        "on" => Some(PowerState::On),
        "off" => Some(PowerState::Off),
        other => {
            c.report(
                path,
                Problem::InvalidName(format!("must be \"on\" or \"off\", got {other:?}")),
            );
            None
        }
    }
}

fn component_types(c: &mut Checker, path: &Path, value: &Value) -> Option<Vec<ComponentType>> {
    let items = c.array(path, value, "an array of component types")?;
    if items.is_empty() {
        c.report(
            path,
            Problem::Empty {
                advice: "list the component types to probe, such as [\"compute\", \"nvswitch\"]",
            },
        );
        return None;
    }
    let before = c.count();
    let mut types = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(s) = c.string(&p, item) else {
            continue;
        };
        match s.parse::<ComponentType>() {
            Ok(t) if types.contains(&t) => {
                c.report(&p, Problem::InvalidName(format!("{t} is listed twice")));
            }
            Ok(t) => types.push(t),
            Err(e) => c.report(&p, Problem::InvalidName(e.to_string())),
        }
    }
    (c.count() == before).then_some(types)
}
