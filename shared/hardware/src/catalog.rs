//! What the managers of a Flow installation declare, by component type, and
//! the capability check of a rule against it. Workers run the Redfish
//! managers (`flow-redfish`) for compute trays, NVLink switch trays and power
//! shelves, with the lifecycle API for decommissioning; the scheduler checks
//! every task's rule against this table at submission, so a rule a targeted
//! type's manager cannot run is refused before anything starts. The adapters
//! build their descriptors from the same table, so the two cannot drift.

use std::collections::BTreeSet;

use flow_rules::{ComponentType, RuleDefinition};

use crate::{Capability, required_capabilities};

/// The component types a Flow worker has a manager for.
pub const MANAGED_TYPES: [ComponentType; 3] = [
    ComponentType::Compute,
    ComponentType::NVSwitch,
    ComponentType::PowerShelf,
];

/// What a BMC manager does through the BMC itself.
pub const BMC_CAPABILITIES: [Capability; 4] = [
    Capability::PowerControl,
    Capability::PowerStatus,
    Capability::FirmwareControl,
    Capability::FirmwareStatus,
];

/// What a manager adds when the worker has a lifecycle API configured.
pub const LIFECYCLE_CAPABILITIES: [Capability; 2] = [
    Capability::DecommissionControl,
    Capability::DecommissionStatus,
];

/// The name the managers of [`MANAGED_TYPES`] go by in messages.
pub const MANAGER_NAME: &str = "redfish";

/// The capabilities of a managed type's manager, with or without a
/// lifecycle API; `None` for a type no manager serves.
pub fn declared(component_type: ComponentType, with_lifecycle: bool) -> Option<Vec<Capability>> {
    if !MANAGED_TYPES.contains(&component_type) {
        return None;
    }
    let mut list = BMC_CAPABILITIES.to_vec();
    if with_lifecycle {
        list.extend(LIFECYCLE_CAPABILITIES);
    }
    Some(list)
}

/// Checks a rule against what the installation's managers declare (with a
/// lifecycle API, as the workers of a full installation have): every step
/// of a `targeted` type must have a manager that supports every capability
/// its actions need. Returns each problem, naming the step, the action, the
/// type and the capability.
pub fn check_rule(
    rule: &RuleDefinition,
    targeted: &BTreeSet<ComponentType>,
) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    for (i, step) in rule.steps.iter().enumerate() {
        if !targeted.contains(&step.component_type) {
            continue;
        }
        let Some(declared) = declared(step.component_type, true) else {
            problems.push(format!(
                "steps[{i}]: no component manager is configured for {}",
                step.component_type
            ));
            continue;
        };
        for action in step.actions() {
            for cap in required_capabilities(action) {
                if !declared.contains(cap) {
                    problems.push(format!(
                        "steps[{i}] ({}): the {MANAGER_NAME} manager for {} does not support {cap}",
                        action.name(),
                        step.component_type
                    ));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_rules::{OperationCode, builtin_rule};

    #[test]
    fn managed_types_declare_power_firmware_and_with_a_lifecycle_api_decommission() {
        for t in MANAGED_TYPES {
            let caps = declared(t, false).unwrap();
            assert!(caps.contains(&Capability::PowerControl));
            assert!(!caps.contains(&Capability::DecommissionControl));
            assert!(
                declared(t, true)
                    .unwrap()
                    .contains(&Capability::DecommissionStatus)
            );
        }
        assert_eq!(declared(ComponentType::Cdu, true), None);
    }

    #[test]
    fn a_step_of_a_type_without_a_manager_is_named() {
        let rule = &builtin_rule("power_on".parse::<OperationCode>().unwrap()).definition;
        let targeted: BTreeSet<_> = [ComponentType::Compute].into();
        assert_eq!(check_rule(rule, &targeted), Ok(()));
        let cdu = RuleDefinition::from_value(&serde_json::json!({"version": "v1", "steps": [
            {"component_type": "cdu", "stage": 1, "main_operation": {"name": "PowerControl"}}
        ]}))
        .unwrap();
        let problems = check_rule(&cdu, &[ComponentType::Cdu].into()).unwrap_err();
        assert_eq!(
            problems,
            ["steps[0]: no component manager is configured for CDU"]
        );
        // A type the task does not target is not the check's business.
        assert_eq!(check_rule(&cdu, &targeted), Ok(()));
    }
}
