//! Firmware images against a task's plan, checked at submission: a task
//! that would flash some trays and then fail for want of an image is
//! refused before anything is flashed.

use std::collections::{BTreeMap, BTreeSet};

use flow_protocol::jobs::{FirmwareImage, SubTarget};
use flow_rules::{Action, ComponentType, RuleDefinition};

use crate::plan::Plan;

/// The component types whose steps flash firmware in this plan (steps of
/// types the task does not target are skipped and flash nothing).
pub fn flashed_types(rule: &RuleDefinition, plan: &Plan) -> BTreeSet<ComponentType> {
    plan.stages
        .iter()
        .flat_map(|stage| &stage.steps)
        .filter(|s| !s.skipped)
        .filter(|s| {
            rule.steps.get(s.step_index).is_some_and(|step| {
                step.actions()
                    .any(|a| matches!(a, Action::FirmwareControl { .. }))
            })
        })
        .map(|s| s.component_type)
        .collect()
}

/// Every problem with the images of a task: a type the plan flashes with no
/// image; an image for a type it does not flash; an image with no version
/// (without one an update to the installed version cannot be recognised
/// and skipped, so the version is required).
pub fn check_images(
    rule: &RuleDefinition,
    plan: &Plan,
    images: &BTreeMap<ComponentType, FirmwareImage>,
) -> Result<(), Vec<String>> {
    let flashed = flashed_types(rule, plan);
    let names = |types: &BTreeSet<ComponentType>| {
        if types.is_empty() {
            "none".to_owned()
        } else {
            types
                .iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let mut problems = Vec::new();
    for t in &flashed {
        if !images.contains_key(t) {
            problems.push(format!(
                "{t}: the rule flashes {t} but the task names no image for it: add --image {}=<uri>@<version>, or leave {t} out with --type",
                t.subject_token()
            ));
        }
    }
    for (t, image) in images {
        if !flashed.contains(t) {
            problems.push(format!(
                "{t}: an image was given but the task flashes no {t} (it flashes: {})",
                names(&flashed)
            ));
        } else if let Some(bad) = image
            .sub_targets
            .iter()
            .find(|s| !SubTarget::of(*t).contains(s))
        {
            let has = SubTarget::of(*t);
            problems.push(format!(
                "{t}: {bad} is not a sub-target of {t} (it has: {})",
                if has.is_empty() {
                    "none".to_owned()
                } else {
                    has.iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ));
        } else if image.version.as_deref().is_none_or(|v| v.trim().is_empty()) {
            problems.push(format!(
                "{t}: the image {} has no version: give {}=<uri>@<version> (the version decides whether a component already has it)",
                image.image_uri,
                t.subject_token()
            ));
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
    use crate::plan::plan;
    use flow_hardware::ComponentTarget;
    use flow_rules::{OperationCode, builtin_rule};

    fn components(types: &[ComponentType]) -> Vec<ComponentTarget> {
        types
            .iter()
            .map(|t| ComponentTarget {
                rack: "r".into(),
                name: format!("{}-01", t.subject_token()),
                component_type: *t,
                bmc_url: "http://127.0.0.1:1".into(),
                credential_ref: "x".into(),
                resource_id: None,
            })
            .collect()
    }

    fn image(version: Option<&str>) -> FirmwareImage {
        FirmwareImage {
            image_uri: "http://images/fw.bin".into(),
            version: version.map(str::to_owned),
            sub_targets: Vec::new(),
        }
    }

    #[test]
    fn every_flashed_type_needs_a_versioned_image_and_no_other_type_has_one() {
        let rule = &builtin_rule("upgrade".parse::<OperationCode>().unwrap()).definition;
        let all = components(&[ComponentType::Compute, ComponentType::NVSwitch]);
        let p = plan(rule, &all).unwrap();
        assert_eq!(
            flashed_types(rule, &p),
            [ComponentType::Compute, ComponentType::NVSwitch].into()
        );
        let only_compute = [(ComponentType::Compute, image(Some("26.02")))].into();
        let e = check_images(rule, &p, &only_compute).unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("NVSwitch: the rule flashes NVSwitch but the task names no image"),
            "{e:?}"
        );
        // Narrowed to compute (--type compute): the switch step is skipped.
        let p = plan(rule, &components(&[ComponentType::Compute])).unwrap();
        assert_eq!(check_images(rule, &p, &only_compute), Ok(()));
        let extra = [
            (ComponentType::Compute, image(Some("26.02"))),
            (ComponentType::PowerShelf, image(Some("1.0"))),
        ]
        .into();
        let e = check_images(rule, &p, &extra).unwrap_err();
        assert_eq!(
            e,
            [
                "PowerShelf: an image was given but the task flashes no PowerShelf (it flashes: Compute)"
            ]
        );
        let unversioned = [(ComponentType::Compute, image(None))].into();
        let e = check_images(rule, &p, &unversioned).unwrap_err();
        assert!(e[0].contains("has no version"), "{e:?}");
    }
}
