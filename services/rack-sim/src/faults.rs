//! Fault injection: what can go wrong with a BMC, which BMCs a fault
//! targets (a glob on `rack/component`), and the store the admin API edits.
//!
//! Lock order: a rack's lock may be held while the fault store is locked,
//! never the other way round.

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::model::PowerState;
use crate::sync::lock;

/// A fault to install: which BMCs and what goes wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// Glob on `<rack>/<component>`: `*` matches any run of characters,
    /// `?` one character, e.g. `rack-01/compute-03`, `rack-01/*`, `*/*`.
    pub target: String,
    /// What goes wrong.
    pub kind: FaultKind,
}

/// What goes wrong with a targeted BMC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultKind {
    /// Every reply is delayed by `ms` milliseconds (not time-scaled).
    Latency {
        /// Delay in milliseconds.
        ms: u64,
    },
    /// That fraction of requests answer `status` with a Redfish error body.
    ErrorRate {
        /// 0.0–1.0.
        rate: f64,
        /// HTTP status, 400–599.
        status: u16,
    },
    /// The next `count` requests (to any targeted BMC) answer `status`;
    /// then the fault removes itself.
    FailNext {
        /// Requests still to fail.
        count: u32,
        /// HTTP status, 400–599.
        status: u16,
    },
    /// The BMC's listener is closed while the fault is installed.
    Unreachable {},
    /// Resets are accepted (204) but change nothing, and the resource reports
    /// `state` as its power state.
    StuckPower {
        /// The power state reported.
        state: PowerState,
    },
    /// Every update task on the BMC ends in `Exception` with `message` at
    /// its midpoint.
    FirmwareFails {
        /// The failure message in the task.
        message: String,
    },
    /// A decommission stays in `Decommissioning/Wiping`.
    DecommissionStalls {},
    /// The BMC's event streams end and new ones are refused (`503`) while
    /// the fault is installed; everything else answers as before.
    EventsDown {},
    /// The BMC's event streams stay open but its events are dropped,
    /// silently, while the fault is installed (keep-alives still come).
    DropEvents {},
}

/// Id of an installed fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FaultId(pub u64);

impl fmt::Display for FaultId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An installed fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    /// Its id, for `DELETE /admin/v1/faults/{id}`.
    pub id: FaultId,
    /// Glob on `<rack>/<component>`.
    pub target: String,
    /// What goes wrong (a `fail_next` count shows what is left).
    pub kind: FaultKind,
}

/// A fault that cannot be installed or removed.
#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    /// The fault is malformed.
    #[error("invalid fault: {0}")]
    Invalid(String),
    /// No fault has this id.
    #[error("no fault with id {0}")]
    NotFound(FaultId),
}

impl FaultSpec {
    /// Checks what serde cannot.
    ///
    /// # Errors
    ///
    /// [`FaultError::Invalid`] naming the problem.
    pub fn validate(&self) -> Result<(), FaultError> {
        let invalid = |m: String| Err(FaultError::Invalid(m));
        if self.target.matches('/').count() != 1 {
            return invalid(format!(
                "target {:?} must be a glob on \"<rack>/<component>\"",
                self.target
            ));
        }
        let status_ok = |s: u16| (400..=599).contains(&s);
        match &self.kind {
            FaultKind::ErrorRate { rate, status } => {
                if !(0.0..=1.0).contains(rate) {
                    return invalid(format!("error_rate.rate must be in 0..=1, got {rate}"));
                }
                if !status_ok(*status) {
                    return invalid(format!("error_rate.status must be 400..=599, got {status}"));
                }
            }
            FaultKind::FailNext { count, status } => {
                if *count == 0 {
                    return invalid("fail_next.count must be at least 1".to_owned());
                }
                if !status_ok(*status) {
                    return invalid(format!("fail_next.status must be 400..=599, got {status}"));
                }
            }
            FaultKind::Latency { .. }
            | FaultKind::Unreachable {}
            | FaultKind::StuckPower { .. }
            | FaultKind::FirmwareFails { .. }
            | FaultKind::DecommissionStalls {}
            | FaultKind::EventsDown {}
            | FaultKind::DropEvents {} => {}
        }
        Ok(())
    }
}

/// What the faults do to one incoming request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestEffects {
    /// Delay before the reply.
    pub latency: Duration,
    /// Fail the request with this status instead of handling it.
    pub fail_with: Option<u16>,
}

#[derive(Debug, Default)]
struct Store {
    next_id: u64,
    faults: Vec<Fault>,
}

/// The installed faults.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    store: Mutex<Store>,
}

impl Faults {
    /// Installs a fault; returns it with its id.
    pub(crate) fn add(&self, spec: FaultSpec) -> Result<Fault, FaultError> {
        spec.validate()?;
        let mut store = lock(&self.store);
        store.next_id += 1;
        let fault = Fault {
            id: FaultId(store.next_id),
            target: spec.target,
            kind: spec.kind,
        };
        store.faults.push(fault.clone());
        Ok(fault)
    }

    /// Removes one fault.
    pub(crate) fn remove(&self, id: FaultId) -> Result<(), FaultError> {
        let mut store = lock(&self.store);
        let before = store.faults.len();
        store.faults.retain(|f| f.id != id);
        if store.faults.len() == before {
            return Err(FaultError::NotFound(id));
        }
        Ok(())
    }

    /// Removes every fault (ids keep increasing).
    pub(crate) fn clear(&self) {
        lock(&self.store).faults.clear();
    }

    /// Every installed fault, oldest first.
    pub(crate) fn list(&self) -> Vec<Fault> {
        lock(&self.store).faults.clone()
    }

    /// Rolls the dice for one request to `rack/component`: summed latency,
    /// then the first `fail_next` with requests left (which counts down and
    /// removes itself at zero), then each `error_rate`.
    pub(crate) fn on_request(&self, rack: &str, component: &str) -> RequestEffects {
        let mut store = lock(&self.store);
        let mut effects = RequestEffects::default();
        let mut exhausted = None;
        let mut rng = rand::rng();
        for fault in store.faults.iter_mut() {
            if !matches_target(&fault.target, rack, component) {
                continue;
            }
            match &mut fault.kind {
                FaultKind::Latency { ms } => effects.latency += Duration::from_millis(*ms),
                FaultKind::FailNext { count, status } if effects.fail_with.is_none() => {
                    effects.fail_with = Some(*status);
                    *count = count.saturating_sub(1);
                    if *count == 0 {
                        exhausted = Some(fault.id);
                    }
                }
                FaultKind::ErrorRate { rate, status }
                    if effects.fail_with.is_none() && rng.random_bool(*rate) =>
                {
                    effects.fail_with = Some(*status);
                }
                _ => {}
            }
        }
        if let Some(id) = exhausted {
            store.faults.retain(|f| f.id != id);
        }
        effects
    }

    fn find<T>(
        &self,
        rack: &str,
        component: &str,
        pick: impl Fn(&FaultKind) -> Option<T>,
    ) -> Option<T> {
        lock(&self.store)
            .faults
            .iter()
            .filter(|f| matches_target(&f.target, rack, component))
            .find_map(|f| pick(&f.kind))
    }

    /// Whether an `unreachable` fault targets the BMC.
    pub(crate) fn unreachable(&self, rack: &str, component: &str) -> bool {
        self.find(rack, component, |k| {
            matches!(k, FaultKind::Unreachable {}).then_some(())
        })
        .is_some()
    }

    /// The stuck power state, if a `stuck_power` fault targets the BMC.
    pub(crate) fn stuck_power(&self, rack: &str, component: &str) -> Option<PowerState> {
        self.find(rack, component, |k| match k {
            FaultKind::StuckPower { state } => Some(*state),
            _ => None,
        })
    }

    /// The failure message, if a `firmware_fails` fault targets the BMC.
    pub(crate) fn firmware_failure(&self, rack: &str, component: &str) -> Option<String> {
        self.find(rack, component, |k| match k {
            FaultKind::FirmwareFails { message } => Some(message.clone()),
            _ => None,
        })
    }

    /// Whether an `events_down` fault targets the BMC.
    pub(crate) fn events_down(&self, rack: &str, component: &str) -> bool {
        self.find(rack, component, |k| {
            matches!(k, FaultKind::EventsDown {}).then_some(())
        })
        .is_some()
    }

    /// Whether a `drop_events` fault targets the BMC.
    pub(crate) fn drops_events(&self, rack: &str, component: &str) -> bool {
        self.find(rack, component, |k| {
            matches!(k, FaultKind::DropEvents {}).then_some(())
        })
        .is_some()
    }

    /// Whether a `decommission_stalls` fault targets the component.
    pub(crate) fn decommission_stalls(&self, rack: &str, component: &str) -> bool {
        self.find(rack, component, |k| {
            matches!(k, FaultKind::DecommissionStalls {}).then_some(())
        })
        .is_some()
    }
}

/// Whether `glob` matches `rack/component`.
fn matches_target(glob: &str, rack: &str, component: &str) -> bool {
    let name = format!("{rack}/{component}");
    glob_match(glob.as_bytes(), name.as_bytes())
}

/// `*` matches any run (including `/`), `?` any one byte.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                backtrack = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match backtrack {
                Some((star, matched)) => {
                    p = star + 1;
                    t = matched + 1;
                    backtrack = Some((star, matched + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(matches_target(
            "rack-01/compute-01",
            "rack-01",
            "compute-01"
        ));
        assert!(matches_target("rack-01/*", "rack-01", "nvswitch-09"));
        assert!(matches_target("*/*", "rack-02", "powershelf-01"));
        assert!(matches_target("*/compute-0?", "rack-02", "compute-07"));
        assert!(!matches_target("*/compute-0?", "rack-02", "compute-10"));
        assert!(!matches_target("rack-01/*", "rack-011", "x"));
        assert!(matches_target("rack-*/comp*-1*", "rack-3", "compute-12"));
    }

    #[test]
    fn fault_json_round_trips_and_unknown_fields_are_refused() {
        let spec: FaultSpec = serde_json::from_str(
            r#"{"target": "rack-01/*", "kind": {"fail_next": {"count": 3, "status": 500}}}"#,
        )
        .expect("fault");
        assert_eq!(
            spec.kind,
            FaultKind::FailNext {
                count: 3,
                status: 500
            }
        );
        let spec: FaultSpec =
            serde_json::from_str(r#"{"target": "*/*", "kind": {"unreachable": {}}}"#)
                .expect("fault");
        assert_eq!(
            serde_json::to_value(&spec.kind).expect("json"),
            serde_json::json!({"unreachable": {}})
        );
        assert!(
            serde_json::from_str::<FaultSpec>(
                r#"{"target": "*/*", "kind": {"latency": {"ms": 1, "jitter": 2}}}"#
            )
            .is_err()
        );
    }

    #[test]
    fn fail_next_counts_down_and_removes_itself() {
        let faults = Faults::default();
        faults
            .add(FaultSpec {
                target: "r/*".into(),
                kind: FaultKind::FailNext {
                    count: 2,
                    status: 503,
                },
            })
            .expect("valid");
        assert_eq!(faults.on_request("r", "c").fail_with, Some(503));
        assert_eq!(faults.on_request("other", "c").fail_with, None);
        assert_eq!(faults.on_request("r", "d").fail_with, Some(503));
        assert_eq!(faults.on_request("r", "c").fail_with, None);
        assert!(faults.list().is_empty());
    }

    #[test]
    fn bad_faults_are_refused() {
        let faults = Faults::default();
        for kind in [
            FaultKind::ErrorRate {
                rate: 1.5,
                status: 503,
            },
            FaultKind::FailNext {
                count: 0,
                status: 500,
            },
            FaultKind::FailNext {
                count: 1,
                status: 200,
            },
        ] {
            let spec = FaultSpec {
                target: "*/*".into(),
                kind,
            };
            assert!(faults.add(spec).is_err());
        }
        let no_slash = FaultSpec {
            target: "rack-01".into(),
            kind: FaultKind::Unreachable {},
        };
        assert!(faults.add(no_slash).is_err());
    }
}
