//! Which tasks of one rack may run side by side: the conflict table at
//! component granularity (docs/architecture.md, "Conflicts").
//!
//! Each task has a [`Footprint`]: its operation and the components it
//! targets. Two footprints conflict when a [`CONFLICTS`] row matches them
//! in either direction: the row's first side matches one task (its
//! operation type, and — unless the row says any type — at least one
//! component of the row's type), the second side the other task, and, for
//! rows that require it, the two tasks share a component. A power task on
//! compute trays and one on switch trays therefore run together; anything
//! touching a power shelf's power holds the whole rack; decommission holds
//! everything.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use flow_rules::{ComponentType, OperationCode, OperationType};

/// What a task occupies: its operation and its components by type (names,
/// unique in the rack).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Footprint {
    /// The operation, or none for a task whose row could not be read (it
    /// conflicts with everything, so nothing runs beside what is unknown).
    pub operation: Option<OperationCode>,
    /// Its components.
    pub components: BTreeMap<ComponentType, BTreeSet<String>>,
}

impl Footprint {
    /// The footprint of `operation` on `components` (type, name).
    pub fn new<'a>(
        operation: OperationCode,
        components: impl IntoIterator<Item = (ComponentType, &'a str)>,
    ) -> Footprint {
        let mut by_type: BTreeMap<ComponentType, BTreeSet<String>> = BTreeMap::new();
        for (t, name) in components {
            by_type.entry(t).or_default().insert(name.to_owned());
        }
        Footprint {
            operation: Some(operation),
            components: by_type,
        }
    }

    fn has_type(&self, t: ComponentType) -> bool {
        self.components
            .get(&t)
            .is_some_and(|names| !names.is_empty())
    }

    fn overlaps(&self, other: &Footprint) -> bool {
        self.components.iter().any(|(t, names)| {
            other
                .components
                .get(t)
                .is_some_and(|theirs| !names.is_disjoint(theirs))
        })
    }
}

/// One side of a [`ConflictRule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Side {
    /// The operation type it matches.
    pub operation: OperationType,
    /// The component type the task must target (none: any).
    pub component_type: Option<ComponentType>,
}

impl Side {
    const fn on(operation: OperationType, component_type: ComponentType) -> Side {
        Side {
            operation,
            component_type: Some(component_type),
        }
    }

    const fn any(operation: OperationType) -> Side {
        Side {
            operation,
            component_type: None,
        }
    }

    fn matches(&self, f: &Footprint) -> bool {
        f.operation
            .is_some_and(|op| op.operation_type() == self.operation)
            && self.component_type.is_none_or(|t| f.has_type(t))
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.component_type {
            Some(t) => write!(f, "{} on {t}", self.operation),
            None => write!(f, "any {}", self.operation),
        }
    }
}

/// A row of the conflict table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConflictRule {
    /// One task.
    pub a: Side,
    /// The other task.
    pub b: Side,
    /// Whether they must share a component to conflict.
    pub overlap: bool,
}

impl fmt::Display for ConflictRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} conflicts with {}", self.a, self.b)?;
        if self.overlap {
            f.write_str(" on shared components")
        } else {
            f.write_str(" rack-wide")
        }
    }
}

use ComponentType::{Compute, NVSwitch, PowerShelf};
use OperationType::{Decommission, FirmwareControl, PowerControl};

/// The conflict table: the reference system's rows for power and firmware
/// (its bring-up row has no operation here; its decommission row is
/// [`Conflict::Decommission`]).
pub const CONFLICTS: [ConflictRule; 7] = [
    ConflictRule {
        a: Side::on(PowerControl, PowerShelf),
        b: Side::any(PowerControl),
        overlap: false,
    },
    ConflictRule {
        a: Side::on(PowerControl, PowerShelf),
        b: Side::any(FirmwareControl),
        overlap: false,
    },
    ConflictRule {
        a: Side::on(PowerControl, Compute),
        b: Side::on(PowerControl, Compute),
        overlap: true,
    },
    ConflictRule {
        a: Side::on(PowerControl, NVSwitch),
        b: Side::on(PowerControl, NVSwitch),
        overlap: true,
    },
    ConflictRule {
        a: Side::on(PowerControl, Compute),
        b: Side::on(FirmwareControl, Compute),
        overlap: true,
    },
    ConflictRule {
        a: Side::on(PowerControl, NVSwitch),
        b: Side::on(FirmwareControl, NVSwitch),
        overlap: true,
    },
    ConflictRule {
        a: Side::any(FirmwareControl),
        b: Side::any(FirmwareControl),
        overlap: true,
    },
];

/// Why two tasks cannot run together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// A row of [`CONFLICTS`] matches.
    Rule(ConflictRule),
    /// A decommission holds the rack against every other operation.
    Decommission,
    /// One task's operation is unknown (an unreadable row).
    Unknown,
    /// No row matches, but they share a component (Flow's own rule: the
    /// reference lets two tasks on one ToR switch, UMS or CDU run at once).
    SharedComponent,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Conflict::Rule(rule) => rule.fmt(f),
            Conflict::Decommission => f.write_str("a decommission holds the whole rack"),
            Conflict::Unknown => f.write_str("the other task's operation is unknown"),
            Conflict::SharedComponent => f.write_str("they share a component"),
        }
    }
}

/// Whether `x` and `y` (tasks of one rack) may not run at the same time,
/// and why.
pub fn conflict(x: &Footprint, y: &Footprint) -> Option<Conflict> {
    let (Some(ox), Some(oy)) = (x.operation, y.operation) else {
        return Some(Conflict::Unknown);
    };
    if ox.operation_type() == Decommission || oy.operation_type() == Decommission {
        return Some(Conflict::Decommission);
    }
    CONFLICTS
        .iter()
        .find(|rule| {
            let sides = (rule.a.matches(x) && rule.b.matches(y))
                || (rule.a.matches(y) && rule.b.matches(x));
            sides && (!rule.overlap || x.overlaps(y))
        })
        .map(|rule| Conflict::Rule(*rule))
        .or_else(|| x.overlaps(y).then_some(Conflict::SharedComponent))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(op: &str, components: &[(ComponentType, &str)]) -> Footprint {
        Footprint::new(op.parse().unwrap(), components.iter().copied())
    }

    #[test]
    fn compute_and_switch_power_tasks_run_together_shelves_hold_the_rack() {
        let compute = task("power_on", &[(Compute, "c1"), (Compute, "c2")]);
        let other_compute = task("power_off", &[(Compute, "c3")]);
        let same_compute = task("power_off", &[(Compute, "c2")]);
        let switches = task("power_on", &[(NVSwitch, "s1")]);
        let shelf = task("power_on", &[(PowerShelf, "p1")]);
        let firmware_switch = task("upgrade", &[(NVSwitch, "s2")]);
        let firmware_compute = task("upgrade", &[(Compute, "c1")]);

        assert_eq!(conflict(&compute, &switches), None);
        assert_eq!(conflict(&compute, &other_compute), None);
        assert_eq!(
            conflict(&compute, &same_compute),
            Some(Conflict::Rule(CONFLICTS[2]))
        );
        assert_eq!(
            conflict(&shelf, &compute),
            Some(Conflict::Rule(CONFLICTS[0]))
        );
        assert_eq!(
            conflict(&compute, &shelf),
            Some(Conflict::Rule(CONFLICTS[0])),
            "either direction"
        );
        assert_eq!(
            conflict(&shelf, &firmware_switch),
            Some(Conflict::Rule(CONFLICTS[1]))
        );
        // Switch firmware on other trays than the power task's: none.
        assert_eq!(conflict(&switches, &firmware_switch), None);
        assert_eq!(
            conflict(&compute, &firmware_compute),
            Some(Conflict::Rule(CONFLICTS[4]))
        );
        // Power-shelf firmware does not block compute power.
        let shelf_firmware = task("upgrade", &[(PowerShelf, "p1")]);
        assert_eq!(conflict(&shelf_firmware, &compute), None);
        assert_eq!(
            conflict(&shelf_firmware, &task("upgrade", &[(PowerShelf, "p1")])),
            Some(Conflict::Rule(CONFLICTS[6]))
        );
        assert_eq!(
            conflict(&shelf_firmware, &task("upgrade", &[(PowerShelf, "p2")])),
            None
        );
    }

    #[test]
    fn decommission_and_unknown_tasks_conflict_with_everything() {
        let decommission = task("decommission", &[(Compute, "c9")]);
        let compute = task("power_on", &[(Compute, "c1")]);
        assert_eq!(
            conflict(&decommission, &compute),
            Some(Conflict::Decommission)
        );
        assert_eq!(
            conflict(&compute, &decommission),
            Some(Conflict::Decommission)
        );
        assert_eq!(
            conflict(&Footprint::default(), &compute),
            Some(Conflict::Unknown)
        );
    }

    #[test]
    fn any_two_tasks_on_one_component_conflict() {
        let cdu = task("power_off", &[(ComponentType::Cdu, "cdu-1")]);
        let cdu_firmware = task("upgrade", &[(ComponentType::Cdu, "cdu-1")]);
        let other_cdu = task("power_on", &[(ComponentType::Cdu, "cdu-2")]);
        assert_eq!(
            conflict(&cdu, &cdu_firmware),
            Some(Conflict::SharedComponent)
        );
        assert_eq!(conflict(&cdu, &other_cdu), None);
    }

    #[test]
    fn a_refusal_says_which_row() {
        assert_eq!(
            CONFLICTS[0].to_string(),
            "power_control on PowerShelf conflicts with any power_control rack-wide"
        );
        assert_eq!(
            CONFLICTS[2].to_string(),
            "power_control on Compute conflicts with power_control on Compute on shared components"
        );
    }
}
