//! Firmware snapshots and restores (`docs/firmware.md`, "Snapshot and
//! restore"): the versions a firmware task records before it runs, and the
//! task that brings its components back to them from the catalog's
//! bundles — naming, before anything is done, each component it cannot
//! bring back and why.

use std::collections::BTreeMap;

use flow_protocol::firmware::{BundleRecord, InstalledVersion};
use flow_protocol::jobs::FirmwareImage;
use flow_rules::{ComponentType, RuleDefinition};

use crate::images::flashed_types;
use crate::plan::Plan;

/// A firmware task's snapshot: each component of a type its plan flashes,
/// with the version the inventory recorded (`installed`, by name; empty:
/// not known).
pub fn snapshot(
    rule: &RuleDefinition,
    plan: &Plan,
    installed: &BTreeMap<&str, &str>,
) -> Vec<InstalledVersion> {
    let mut out = Vec::new();
    for t in flashed_types(rule, plan) {
        for c in plan.components.get(&t).into_iter().flatten() {
            out.push(InstalledVersion {
                component: c.name.clone(),
                component_type: t,
                version: installed
                    .get(c.name.as_str())
                    .copied()
                    .unwrap_or_default()
                    .to_owned(),
            });
        }
    }
    out
}

/// One component a restore brings back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The component.
    pub component: String,
    /// The version it is brought back to.
    pub version: String,
    /// The bundle whose image does it (`gb200-fw 2026.05`).
    pub bundle: String,
}

/// One component a restore leaves alone, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    /// The component.
    pub component: String,
    /// The version it had (empty: not known).
    pub version: String,
    /// Why it is left alone.
    pub reason: String,
}

/// What a restore does: the images of its task, the components it brings
/// back, and those it leaves alone.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RestorePlan {
    /// The task's images, one per component type.
    pub images: BTreeMap<ComponentType, FirmwareImage>,
    /// The components it restores, in the snapshot's order.
    pub restored: Vec<Restored>,
    /// The components it cannot, in the snapshot's order.
    pub left: Vec<Left>,
}

/// A type's version to restore, and the bundle and image that hold it.
type Choice<'a> = (String, Option<(&'a BundleRecord, FirmwareImage)>);

/// The restore of `snapshot` on a rack of `rack_model` from `bundles`
/// (retired ones too: they are kept for this). Per component type: the
/// version most of its components had (a task installs one image per
/// type), from the current bundle that holds it — else the newest retired
/// one. A component whose version was not known, whose version differs
/// from its type's, or whose version no bundle of its model holds is left
/// alone, named with the reason.
pub fn plan_restore(
    snapshot: &[InstalledVersion],
    bundles: &[BundleRecord],
    rack_model: &str,
) -> RestorePlan {
    let mut by_type: BTreeMap<ComponentType, Vec<&InstalledVersion>> = BTreeMap::new();
    for entry in snapshot {
        by_type.entry(entry.component_type).or_default().push(entry);
    }
    let mut chosen: BTreeMap<ComponentType, Choice<'_>> = BTreeMap::new();
    for (t, entries) in &by_type {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for e in entries.iter().filter(|e| !e.version.is_empty()) {
            *counts.entry(e.version.as_str()).or_default() += 1;
        }
        let Some((version, _)) = counts
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
        else {
            continue;
        };
        let holding = |b: &&BundleRecord| {
            (b.models.is_empty() || b.models.iter().any(|m| m == rack_model))
                && b.images.iter().any(|i| {
                    i.component_type == *t && i.sub_target.is_none() && i.version == *version
                })
        };
        let best = bundles
            .iter()
            .filter(holding)
            .max_by_key(|b| (b.retired_at.is_none(), b.published_at));
        let image = best.map(|b| {
            let i = b
                .images
                .iter()
                .find(|i| i.component_type == *t && i.sub_target.is_none() && i.version == *version)
                .map(|i| FirmwareImage {
                    image_uri: i.url.clone(),
                    version: Some(i.version.clone()),
                    sub_targets: Vec::new(),
                    digest: Some(i.digest.clone()),
                    size: Some(i.size),
                });
            (b, i)
        });
        let image = image.and_then(|(b, i)| i.map(|i| (b, i)));
        chosen.insert(*t, ((*version).to_owned(), image));
    }
    let mut plan = RestorePlan::default();
    for entry in snapshot {
        let left = |reason: String| Left {
            component: entry.component.clone(),
            version: entry.version.clone(),
            reason,
        };
        if entry.version.is_empty() {
            plan.left.push(left(
                "its version was not known when the task was submitted".to_owned(),
            ));
            continue;
        }
        let Some((version, image)) = chosen.get(&entry.component_type) else {
            continue;
        };
        if entry.version != *version {
            plan.left.push(left(format!(
                "its {} trays are restored to {version}, and a task installs one image per component type (restore it with --image)",
                entry.component_type
            )));
            continue;
        }
        match image {
            Some((bundle, image)) => {
                plan.images
                    .entry(entry.component_type)
                    .or_insert_with(|| image.clone());
                plan.restored.push(Restored {
                    component: entry.component.clone(),
                    version: version.clone(),
                    bundle: format!("{} {}", bundle.name, bundle.version),
                });
            }
            None => plan.left.push(left(format!(
                "no bundle{} holds a {} image of version {version}",
                if rack_model.is_empty() {
                    String::new()
                } else {
                    format!(" for a {rack_model}")
                },
                entry.component_type
            ))),
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_protocol::firmware::BundleImage;
    use time::OffsetDateTime;

    const D: &str = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    fn at(component: &str, t: ComponentType, version: &str) -> InstalledVersion {
        InstalledVersion {
            component: component.into(),
            component_type: t,
            version: version.into(),
        }
    }

    fn bundle(version: &str, images: &[(ComponentType, &str)], age: i64) -> BundleRecord {
        BundleRecord {
            name: "gb200-fw".into(),
            version: version.into(),
            models: vec!["gb200-nvl72".into()],
            images: images
                .iter()
                .map(|(t, v)| BundleImage {
                    component_type: *t,
                    sub_target: None,
                    version: (*v).into(),
                    url: format!("http://origin/{}-{v}.bin", t.subject_token()),
                    digest: D.into(),
                    size: 10,
                })
                .collect(),
            published_by: "OPS/alice".into(),
            published_at: OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(age),
            retired_at: None,
        }
    }

    #[test]
    fn each_component_is_restored_from_a_bundle_that_holds_its_version_or_named() {
        use ComponentType::{Compute, NVSwitch, PowerShelf};
        let snapshot = [
            at("compute-01", Compute, "25.06"),
            at("compute-02", Compute, "25.06"),
            at("compute-03", Compute, "25.04"),
            at("nvswitch-01", NVSwitch, "2.0"),
            at("powershelf-01", PowerShelf, ""),
        ];
        let mut old = bundle("2026.05", &[(Compute, "25.06")], 1);
        old.retired_at = Some(OffsetDateTime::UNIX_EPOCH);
        let newer = bundle("2026.06", &[(Compute, "25.06"), (NVSwitch, "2.1")], 2);
        let plan = plan_restore(&snapshot, &[old.clone(), newer], "gb200-nvl72");
        assert_eq!(
            plan.restored,
            [
                Restored {
                    component: "compute-01".into(),
                    version: "25.06".into(),
                    bundle: "gb200-fw 2026.06".into(),
                },
                Restored {
                    component: "compute-02".into(),
                    version: "25.06".into(),
                    bundle: "gb200-fw 2026.06".into(),
                },
            ],
            "a current bundle is preferred to a retired one"
        );
        assert_eq!(plan.images.len(), 1);
        assert_eq!(plan.images[&Compute].version.as_deref(), Some("25.06"));
        assert_eq!(plan.images[&Compute].digest.as_deref(), Some(D));
        let left: Vec<(&str, &str)> = plan
            .left
            .iter()
            .map(|l| (l.component.as_str(), l.reason.as_str()))
            .collect();
        assert_eq!(
            left,
            [
                (
                    "compute-03",
                    "its Compute trays are restored to 25.06, and a task installs one image per component type (restore it with --image)"
                ),
                (
                    "nvswitch-01",
                    "no bundle for a gb200-nvl72 holds a NVSwitch image of version 2.0"
                ),
                (
                    "powershelf-01",
                    "its version was not known when the task was submitted"
                ),
            ]
        );
        // Only the retired bundle holds it: that one is used.
        let plan = plan_restore(&snapshot[..2], &[old], "gb200-nvl72");
        assert_eq!(plan.restored[0].bundle, "gb200-fw 2026.05");
        // Another model: nothing fits.
        let plan = plan_restore(
            &snapshot[..2],
            &[bundle("x", &[(Compute, "25.06")], 1)],
            "gb300",
        );
        assert!(plan.restored.is_empty());
        assert_eq!(plan.left.len(), 2);
    }
}
