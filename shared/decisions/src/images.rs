//! Firmware images against a task's plan, checked at submission: a task
//! that would flash some trays and then fail for want of an image is
//! refused before anything is flashed.

use std::collections::{BTreeMap, BTreeSet};

use flow_protocol::firmware::{BundleImage, BundleRecord, MAX_IMAGE_BYTES, is_sha256};
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
        } else if let Some(problem) = digest_problem(*t, image) {
            problems.push(problem);
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// What is wrong with an image's digest and size, if anything: BMCs are
/// given only bytes verified against a digest, so every image needs one.
fn digest_problem(t: ComponentType, image: &FirmwareImage) -> Option<String> {
    match image.digest.as_deref() {
        None => Some(format!(
            "{t}: the image {} has no digest: give --sha256 {}=sha256:<64 hex digits>, or name a published bundle (BMCs are given only bytes Flow has verified)",
            image.image_uri,
            t.subject_token()
        )),
        Some(d) if !is_sha256(d) => Some(format!(
            "{t}: the digest {d:?} of {} is not sha256:<64 lower-case hex digits>",
            image.image_uri
        )),
        Some(_) => match image.size {
            Some(0) => Some(format!("{t}: the image {} has size 0", image.image_uri)),
            Some(n) if n > MAX_IMAGE_BYTES => Some(format!(
                "{t}: the image {} is {n} bytes, above the {MAX_IMAGE_BYTES}-byte limit",
                image.image_uri
            )),
            _ => None,
        },
    }
}

/// The images a task naming `bundle` installs: for each component type the
/// plan flashes, the bundle's image of that type — its main one, or the one
/// of the sub-target asked for. Every problem names the type: the bundle is
/// retired, does not fit the rack's model, holds no image for a flashed
/// type, or holds two that could be meant.
pub fn from_bundle(
    bundle: &BundleRecord,
    rack_model: &str,
    flashed: &BTreeSet<ComponentType>,
    sub_targets: &[SubTarget],
) -> Result<BTreeMap<ComponentType, FirmwareImage>, Vec<String>> {
    let name = format!("bundle {} {}", bundle.name, bundle.version);
    let mut problems = Vec::new();
    if bundle.retired_at.is_some() {
        problems.push(format!(
            "{name} is retired: name a current bundle (flow bundle list)"
        ));
    }
    if !bundle.models.is_empty() && !bundle.models.iter().any(|m| m == rack_model) {
        problems.push(format!(
            "{name} fits rack models {} and this rack is a {rack_model:?}",
            bundle.models.join(", ")
        ));
    }
    let mut images = BTreeMap::new();
    for t in flashed {
        let wanted: Vec<_> = bundle
            .images
            .iter()
            .filter(|i| i.component_type == *t)
            .filter(|i| match i.sub_target {
                None => !sub_targets.iter().any(|s| SubTarget::of(*t).contains(s)),
                Some(sub) => sub_targets.contains(&sub),
            })
            .collect();
        match wanted.as_slice() {
            [one] => {
                images.insert(
                    *t,
                    FirmwareImage {
                        image_uri: one.url.clone(),
                        version: Some(one.version.clone()),
                        sub_targets: one.sub_target.into_iter().collect(),
                        digest: Some(one.digest.clone()),
                        size: Some(one.size),
                    },
                );
            }
            [] => {
                let has: Vec<String> = bundle
                    .images
                    .iter()
                    .filter(|i| i.component_type == *t)
                    .map(BundleImage::slot)
                    .collect();
                problems.push(if has.is_empty() {
                    format!(
                        "{t}: {name} holds no image for it (the rule flashes {t}; leave it out with --type)"
                    )
                } else {
                    format!(
                        "{t}: {name} holds no {} image for it (it has {}): name one with --sub-target, or leave {t} out with --type",
                        if sub_targets.is_empty() { "main" } else { "such" },
                        has.join(", ")
                    )
                });
            }
            many => problems.push(format!(
                "{t}: {name} holds {} images that could be meant ({}): a task flashes one image per component type, name one with --sub-target",
                many.len(),
                many.iter().map(|i| i.slot()).collect::<Vec<_>>().join(", ")
            )),
        }
    }
    if problems.is_empty() {
        Ok(images)
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

    const DIGEST: &str = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    fn image(version: Option<&str>) -> FirmwareImage {
        FirmwareImage {
            image_uri: "http://images/fw.bin".into(),
            version: version.map(str::to_owned),
            sub_targets: Vec::new(),
            digest: Some(DIGEST.into()),
            size: None,
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

    fn bundle_image(t: ComponentType, sub: Option<SubTarget>, version: &str) -> BundleImage {
        BundleImage {
            component_type: t,
            sub_target: sub,
            version: version.into(),
            url: format!("http://origin/{}-{version}.bin", t.subject_token()),
            digest: DIGEST.into(),
            size: 4096,
        }
    }

    fn bundle(images: Vec<BundleImage>) -> BundleRecord {
        BundleRecord {
            name: "gb200-fw".into(),
            version: "2026.11".into(),
            models: vec!["gb200-nvl72".into()],
            images,
            published_by: "OPS/alice".into(),
            published_at: time::OffsetDateTime::UNIX_EPOCH,
            retired_at: None,
        }
    }

    #[test]
    fn a_bundle_gives_each_flashed_type_its_one_image_and_names_what_it_cannot() {
        let b = bundle(vec![
            bundle_image(ComponentType::Compute, None, "1.4.0"),
            bundle_image(ComponentType::NVSwitch, Some(SubTarget::Nvos), "2.1"),
            bundle_image(ComponentType::NVSwitch, Some(SubTarget::Bmc), "88.1"),
            bundle_image(ComponentType::PowerShelf, None, "3.0"),
        ]);
        let compute: BTreeSet<_> = [ComponentType::Compute].into();
        let images = from_bundle(&b, "gb200-nvl72", &compute, &[]).unwrap();
        assert_eq!(images.len(), 1, "only the flashed type: {images:?}");
        let c = &images[&ComponentType::Compute];
        assert_eq!(c.version.as_deref(), Some("1.4.0"));
        assert_eq!(c.digest.as_deref(), Some(DIGEST));
        assert_eq!(c.size, Some(4096));
        assert_eq!(c.image_uri, "http://origin/compute-1.4.0.bin");

        let both: BTreeSet<_> = [ComponentType::Compute, ComponentType::NVSwitch].into();
        let e = from_bundle(&b, "gb200-nvl72", &both, &[]).unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(
            e,
            [
                "NVSwitch: bundle gb200-fw 2026.11 holds no main image for it (it has NVSwitch/nvos, NVSwitch/bmc): name one with --sub-target, or leave NVSwitch out with --type"
            ]
        );
        let images = from_bundle(&b, "gb200-nvl72", &both, &[SubTarget::Nvos]).unwrap();
        assert_eq!(
            images[&ComponentType::NVSwitch].sub_targets,
            [SubTarget::Nvos]
        );
        assert_eq!(
            images[&ComponentType::NVSwitch].version.as_deref(),
            Some("2.1")
        );
        // Compute has no nvos: its main image is still the one.
        assert_eq!(
            images[&ComponentType::Compute].version.as_deref(),
            Some("1.4.0")
        );
        let e =
            from_bundle(&b, "gb200-nvl72", &both, &[SubTarget::Nvos, SubTarget::Bmc]).unwrap_err();
        assert_eq!(
            e,
            [
                "NVSwitch: bundle gb200-fw 2026.11 holds 2 images that could be meant (NVSwitch/nvos, NVSwitch/bmc): a task flashes one image per component type, name one with --sub-target"
            ]
        );

        let e = from_bundle(&b, "gb300-nvl72", &compute, &[]).unwrap_err();
        assert_eq!(
            e,
            [
                "bundle gb200-fw 2026.11 fits rack models gb200-nvl72 and this rack is a \"gb300-nvl72\""
            ]
        );
        let mut retired = b.clone();
        retired.retired_at = Some(time::OffsetDateTime::UNIX_EPOCH);
        let e = from_bundle(&retired, "gb200-nvl72", &compute, &[]).unwrap_err();
        assert!(e[0].contains("is retired"), "{e:?}");
    }

    #[test]
    fn every_image_needs_a_well_formed_digest() {
        let rule = &builtin_rule("upgrade".parse::<OperationCode>().unwrap()).definition;
        let p = plan(rule, &components(&[ComponentType::Compute])).unwrap();
        let mut bare = image(Some("26.02"));
        bare.digest = None;
        let e = check_images(rule, &p, &[(ComponentType::Compute, bare)].into()).unwrap_err();
        assert!(
            e[0].starts_with("Compute: the image http://images/fw.bin has no digest: give --sha256 compute=sha256:"),
            "{e:?}"
        );
        let mut upper = image(Some("26.02"));
        upper.digest = Some(DIGEST.to_uppercase());
        let e = check_images(rule, &p, &[(ComponentType::Compute, upper)].into()).unwrap_err();
        assert!(
            e[0].contains("is not sha256:<64 lower-case hex digits>"),
            "{e:?}"
        );
    }
}
