//! Firmware versions compared, so that an upgrade that would install an
//! older version (or a downgrade a newer one) is refused at submission
//! unless the operator allows it (docs/architecture.md, "Firmware version
//! checks").

use std::cmp::Ordering;
use std::collections::BTreeMap;

use flow_protocol::jobs::FirmwareImage;
use flow_protocol::preview::{VersionChange, VersionMove};
use flow_rules::{ComponentType, FirmwareOperation, OperationCode};

use crate::plan::Plan;

/// One run of a version: digits compare as numbers (of any length),
/// anything else as text; a number sorts before text.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Part<'a> {
    /// Digits without leading zeros ("" is 0), by length, then digits.
    Number(usize, &'a str),
    Text(&'a str),
}

fn parts(version: &str) -> Vec<Part<'_>> {
    let mut out = Vec::new();
    let mut rest = version.trim();
    rest = rest
        .strip_prefix(['v', 'V'])
        .filter(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        .unwrap_or(rest);
    while let Some(c) = rest.chars().next() {
        if matches!(c, '.' | '-' | '_' | '+') {
            rest = &rest[1..];
            continue;
        }
        let digits = c.is_ascii_digit();
        let end = rest
            .find(|x: char| x.is_ascii_digit() != digits || matches!(x, '.' | '-' | '_' | '+'))
            .unwrap_or(rest.len());
        let (run, tail) = rest.split_at(end);
        rest = tail;
        out.push(if digits {
            let n = run.trim_start_matches('0');
            Part::Number(n.len(), n)
        } else {
            Part::Text(run)
        });
    }
    out
}

/// How `a` compares with `b` (`25.06-2` < `25.10` < `26.02`, `1.0` =
/// `1.0.0`, `2.0-rc1` < `2.0`, `v26.02` = `26.02`); `None` when either is
/// empty (not known).
pub fn compare(a: &str, b: &str) -> Option<Ordering> {
    if a.trim().is_empty() || b.trim().is_empty() {
        return None;
    }
    let (a, b) = (parts(a), parts(b));
    // The numbers first, trailing zeros aside; then a release sorts after
    // its pre-releases (a text suffix), and suffixes compare run by run.
    let split = |p: &[Part<'_>]| -> usize {
        p.iter()
            .position(|x| matches!(x, Part::Text(_)))
            .unwrap_or(p.len())
    };
    let (na, nb) = (split(&a), split(&b));
    let core = |p: &[Part<'_>]| -> usize {
        p.iter()
            .rposition(|x| *x != Part::Number(0, ""))
            .map_or(0, |i| i + 1)
    };
    let by_numbers = a[..core(&a[..na])].cmp(&b[..core(&b[..nb])]);
    Some(
        by_numbers.then_with(|| match (na == a.len(), nb == b.len()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => a[na..].cmp(&b[nb..]),
        }),
    )
}

/// A component whose version would move the wrong way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrongWay {
    /// The component's name.
    pub component: String,
    /// What it has.
    pub installed: String,
    /// What the task would install.
    pub target: String,
}

/// The components (name, installed version) that `operation` to `target`
/// would move the wrong way: an upgrade to an older version, a downgrade
/// to a newer one. Rollbacks and unknown installed versions are not
/// checked; the same version is an update that is skipped, not a change.
pub fn wrong_way<'a>(
    operation: OperationCode,
    target: &str,
    components: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<WrongWay> {
    let wrong = match operation {
        OperationCode::Firmware(FirmwareOperation::Upgrade) => Ordering::Greater,
        OperationCode::Firmware(FirmwareOperation::Downgrade) => Ordering::Less,
        _ => return Vec::new(),
    };
    components
        .into_iter()
        .filter(|(_, installed)| compare(installed, target) == Some(wrong))
        .map(|(component, installed)| WrongWay {
            component: component.to_owned(),
            installed: installed.to_owned(),
            target: target.to_owned(),
        })
        .collect()
}

/// Every planned component a firmware image of a version names: its
/// installed version (by `installed`, component name → the version the
/// inventory last knew) → the image's, which way, and whether `operation`
/// would move it the wrong way. A sub-target's version is not in the
/// inventory (it keeps the main firmware's): not listed.
pub fn changes(
    operation: OperationCode,
    plan: &Plan,
    installed: &BTreeMap<&str, &str>,
    images: &BTreeMap<ComponentType, FirmwareImage>,
) -> Vec<VersionChange> {
    let mut out = Vec::new();
    for (component_type, targets) in &plan.components {
        let Some(target) = images
            .get(component_type)
            .filter(|i| i.sub_targets.is_empty())
            .and_then(|i| i.version.as_deref())
        else {
            continue;
        };
        for t in targets {
            let have = installed.get(t.name.as_str()).copied().unwrap_or("");
            let wrong = !wrong_way(operation, target, [(t.name.as_str(), have)]).is_empty();
            out.push(VersionChange {
                component: t.name.clone(),
                component_type: *component_type,
                installed: have.to_owned(),
                target: target.to_owned(),
                direction: match compare(have, target) {
                    Some(Ordering::Less) => VersionMove::Up,
                    Some(Ordering::Greater) => VersionMove::Down,
                    Some(Ordering::Equal) => VersionMove::Same,
                    None => VersionMove::Unknown,
                },
                wrong_way: wrong,
            });
        }
    }
    out
}

/// The refusal's details for the wrong-way moves among `changes`
/// (nothing: no refusal).
pub fn wrong_way_problems(operation: OperationCode, changes: &[VersionChange]) -> Vec<String> {
    changes
        .iter()
        .filter(|c| c.wrong_way)
        .map(|c| {
            format!(
                "{}: has {}; {operation} to {} would move it the wrong way (allow with allow_version_change, --allow-version-change)",
                c.component, c.installed, c.target
            )
        })
        .collect()
}

/// Every planned component an `operation` would move the wrong way with
/// `images`, by `installed` (component name → the version the inventory
/// last knew), as the refusal's details.
pub fn check(
    operation: OperationCode,
    plan: &Plan,
    installed: &BTreeMap<&str, &str>,
    images: &BTreeMap<ComponentType, FirmwareImage>,
) -> Result<(), Vec<String>> {
    let problems = wrong_way_problems(operation, &changes(operation, plan, installed, images));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_by_their_numbers() {
        assert_eq!(compare("25.06-2", "25.10"), Some(Ordering::Less));
        assert_eq!(compare("26.02", "25.10"), Some(Ordering::Greater));
        assert_eq!(compare("26.2", "26.02"), Some(Ordering::Equal));
        assert_eq!(compare("1.10.0", "1.9.9"), Some(Ordering::Greater));
        assert_eq!(
            compare("88.0002.1333", "88.0002.1334"),
            Some(Ordering::Less)
        );
        assert_eq!(compare("2.0-rc1", "2.0-rc2"), Some(Ordering::Less));
        assert_eq!(compare("2.0-rc1", "2.0"), Some(Ordering::Less));
        assert_eq!(compare("1.0.0", "1.0"), Some(Ordering::Equal));
        assert_eq!(compare("v25.10", "26.02"), Some(Ordering::Less));
        assert_eq!(compare("v26.02", "26.02"), Some(Ordering::Equal));
        assert_eq!(
            compare("1.123456789012345678901234567890", "1.99"),
            Some(Ordering::Greater)
        );
        assert_eq!(compare("25.06", "25.06-2"), Some(Ordering::Less));
        assert_eq!(compare("", "1.0"), None);
    }

    #[test]
    fn only_moves_the_wrong_way_are_named() {
        let installed = [
            ("c1", "26.02"),
            ("c2", "25.06-2"),
            ("c3", ""),
            ("c4", "25.10"),
        ];
        let upgrade = wrong_way("upgrade".parse().unwrap(), "25.10", installed);
        assert_eq!(
            upgrade,
            [WrongWay {
                component: "c1".into(),
                installed: "26.02".into(),
                target: "25.10".into()
            }]
        );
        let downgrade = wrong_way("downgrade".parse().unwrap(), "25.10", installed);
        assert_eq!(
            downgrade
                .iter()
                .map(|w| w.component.as_str())
                .collect::<Vec<_>>(),
            ["c2"]
        );
        assert!(wrong_way("rollback".parse().unwrap(), "1", installed).is_empty());
    }
}
