//! Power commands decided on what Flow reads, never on a guess: given the
//! power state read just before, whether an operation is sent now, is
//! already done, waits for the component to stop moving, or makes no
//! sense; and what a second copy of it would do. Pure: the step executor
//! (`shared/executor/src/command.rs`) and `flow bmc`
//! (`services/cli/src/bmc.rs`) act on it.
//!
//! The choice per operation (`docs/hardware.md`, "Commands and transitions"):
//! * `force_power_off` is sent at once, whatever the state — it is what a
//!   leak sends, and a transition never delays it. It is not read first; a
//!   BMC that refuses it is read, and `Off` then means "already off".
//! * Every other operation is sent only from a steady state: a component
//!   `PoweringOn` or `PoweringOff` (a restart in progress, another tool's
//!   command) is read again until it settles, bounded by the action's
//!   timeout, and the operation is decided then.
//! * "Already" needs the steady end state itself: `On` for a power-on,
//!   `Off` for a power-off. A restart is never "already": it is sent.
//!   A transitional state is never taken for the end state.

use flow_rules::PowerOperation;

use crate::PowerStatus;

/// What to do with a power operation, given the state read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PowerPlan {
    /// Send the command now.
    Send,
    /// The component rests in the operation's end state: nothing to send.
    Already(PowerStatus),
    /// The component is moving: read it again later, then decide.
    AwaitSteady(PowerStatus),
    /// The operation makes no sense in this state (a restart of a
    /// component that is off); the text says why.
    Refuse(String),
}

/// The steady state an operation ends in, or `None` for a restart (which
/// ends where it began, through a transition).
pub fn end_state(op: PowerOperation) -> Option<PowerStatus> {
    use PowerOperation as P;
    match op {
        P::PowerOn | P::ForcePowerOn => Some(PowerStatus::On),
        P::PowerOff | P::ForcePowerOff => Some(PowerStatus::Off),
        P::Restart | P::ForceRestart | P::WarmReset | P::ColdReset => None,
    }
}

/// Whether the state is read before the command is decided. Only a forced
/// power-off goes unread: nothing the state could say would hold it back.
pub fn reads_first(op: PowerOperation) -> bool {
    op != PowerOperation::ForcePowerOff
}

/// Whether sending the operation a second time is harmless. An operation
/// with a steady end state converges: a second power-on of a component
/// powering on (or on) changes nothing, and the decision before it reads
/// the state anyway. A restart does not: a second one restarts the
/// component again, so a restart whose send is not known to have failed is
/// never repeated.
pub fn repeat_is_harmless(op: PowerOperation) -> bool {
    end_state(op).is_some()
}

/// The plan for `op` when the component was read as `observed`.
pub fn plan(op: PowerOperation, observed: PowerStatus) -> PowerPlan {
    let end = end_state(op);
    if end == Some(observed) {
        return PowerPlan::Already(observed);
    }
    if op == PowerOperation::ForcePowerOff {
        return PowerPlan::Send;
    }
    match observed {
        PowerStatus::PoweringOn | PowerStatus::PoweringOff => PowerPlan::AwaitSteady(observed),
        PowerStatus::Off if end.is_none() && op != PowerOperation::ColdReset => {
            PowerPlan::Refuse(format!(
                "is Off: {} needs it On (use power_on, or cold_reset to cycle it)",
                op.as_str()
            ))
        }
        // On, Off (for an operation that changes it) and a state the BMC
        // does not report: the BMC decides.
        PowerStatus::On | PowerStatus::Off | PowerStatus::Unknown => PowerPlan::Send,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PowerOperation as P;
    use PowerStatus as S;

    const STATES: [PowerStatus; 5] = [S::On, S::Off, S::PoweringOn, S::PoweringOff, S::Unknown];

    #[test]
    fn a_forced_power_off_is_never_held_back_by_a_transition() {
        assert!(!reads_first(P::ForcePowerOff));
        for s in [S::On, S::PoweringOn, S::PoweringOff, S::Unknown] {
            assert_eq!(plan(P::ForcePowerOff, s), PowerPlan::Send, "{s:?}");
        }
        assert_eq!(plan(P::ForcePowerOff, S::Off), PowerPlan::Already(S::Off));
    }

    #[test]
    fn a_transition_is_never_taken_for_its_end_state() {
        for op in PowerOperation::ALL {
            if op == P::ForcePowerOff {
                continue;
            }
            assert!(reads_first(op));
            for s in [S::PoweringOn, S::PoweringOff] {
                assert_eq!(plan(op, s), PowerPlan::AwaitSteady(s), "{op:?} in {s:?}");
            }
        }
    }

    #[test]
    fn already_needs_the_steady_end_state_and_restarts_are_never_already() {
        for op in PowerOperation::ALL {
            for s in STATES {
                let p = plan(op, s);
                if let PowerPlan::Already(at) = p {
                    assert_eq!(Some(at), end_state(op), "{op:?} in {s:?}");
                    assert!(matches!(at, S::On | S::Off));
                }
                if end_state(op).is_none() {
                    assert!(!matches!(p, PowerPlan::Already(_)), "{op:?} in {s:?}");
                }
            }
        }
        assert_eq!(plan(P::PowerOn, S::On), PowerPlan::Already(S::On));
        assert_eq!(plan(P::PowerOff, S::Off), PowerPlan::Already(S::Off));
        assert_eq!(plan(P::PowerOff, S::On), PowerPlan::Send);
        assert_eq!(plan(P::PowerOn, S::Off), PowerPlan::Send);
        assert_eq!(plan(P::Restart, S::On), PowerPlan::Send);
        assert_eq!(plan(P::ColdReset, S::Off), PowerPlan::Send);
        assert_eq!(plan(P::PowerOn, S::Unknown), PowerPlan::Send);
    }

    #[test]
    fn a_restart_of_what_is_off_is_refused_saying_why() {
        for op in [P::Restart, P::ForceRestart, P::WarmReset] {
            let PowerPlan::Refuse(why) = plan(op, S::Off) else {
                panic!("{op:?} from Off was not refused");
            };
            assert!(
                why.starts_with("is Off: ") && why.contains(op.as_str()),
                "{why}"
            );
        }
    }

    #[test]
    fn only_operations_with_a_steady_end_are_repeated() {
        for op in PowerOperation::ALL {
            assert_eq!(repeat_is_harmless(op), end_state(op).is_some(), "{op:?}");
        }
        assert!(repeat_is_harmless(P::ForcePowerOff));
        assert!(!repeat_is_harmless(P::ForceRestart));
        assert!(!repeat_is_harmless(P::ColdReset));
    }
}
