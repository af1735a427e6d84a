//! What the hardware watcher tells the console and operators about each
//! component besides events: its power state and whether its BMC answers
//! (`flow_protocol::state`). A state is published when it differs from the
//! last one published for the component, so a quiet site costs nothing.

use flow_hardware::{PowerStatus, manager::ComponentManager};
use flow_protocol::jobs::ComponentTarget;
use flow_protocol::state::{ComponentState, PowerState};
use time::OffsetDateTime;

/// What was last published for one component: power, reachable, error.
pub type Seen = (PowerState, bool, String);

/// The state to publish for `now`, or none when it is what was last
/// published.
pub fn next(target: &ComponentTarget, last: Option<&Seen>, now: Seen) -> Option<ComponentState> {
    if last == Some(&now) {
        return None;
    }
    let (power, reachable, error) = now;
    Some(ComponentState {
        schema: flow_protocol::api::SCHEMA,
        rack: target.rack.clone(),
        component: target.name.clone(),
        power,
        reachable,
        error,
        observed_at: OffsetDateTime::now_utc(),
    })
}

/// The power a manager reads, as the state reports it.
pub fn power_of(status: PowerStatus) -> PowerState {
    match status {
        PowerStatus::On => PowerState::On,
        PowerStatus::Off => PowerState::Off,
        // A transition is reported as unknown here: its end is not known.
        PowerStatus::PoweringOn | PowerStatus::PoweringOff | PowerStatus::Unknown => {
            PowerState::Unknown
        }
    }
}

/// Reads a component's power through its type's manager (the resource the
/// managers command), or `Unknown` for a type nobody manages.
pub async fn read(
    manager: Option<&dyn ComponentManager>,
    target: &ComponentTarget,
) -> Result<PowerState, flow_hardware::HardwareError> {
    match manager {
        Some(m) => m.power_status(target).await.map(power_of),
        None => Ok(PowerState::Unknown),
    }
}

/// Whether an event's message ID says the power changed
/// (`ResourceEvent.1.3.ResourcePoweredOn` and the like).
pub fn is_power_change(message_id: &str) -> bool {
    message_id
        .rsplit('.')
        .next()
        .is_some_and(|k| k.starts_with("ResourcePowered") || k == "PowerStateChanged")
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_rules::ComponentType;

    fn target() -> ComponentTarget {
        ComponentTarget {
            rack: "rack-01".into(),
            name: "compute-01".into(),
            component_type: ComponentType::Compute,
            bmc_url: "http://127.0.0.1:1".into(),
            credential_ref: String::new(),
            resource_id: None,
        }
    }

    #[test]
    fn a_state_is_published_when_it_changes_only() {
        let on: Seen = (PowerState::On, true, String::new());
        let first = next(&target(), None, on.clone()).expect("first");
        assert_eq!((first.power, first.reachable), (PowerState::On, true));
        assert!(next(&target(), Some(&on), on.clone()).is_none());
        let down: Seen = (PowerState::On, false, "refused".into());
        let d = next(&target(), Some(&on), down).expect("unreachable is a change");
        assert!(!d.reachable);
        assert_eq!(d.error, "refused");
    }

    #[test]
    fn power_events_are_told_by_their_message_id() {
        assert!(is_power_change("ResourceEvent.1.3.ResourcePoweredOn"));
        assert!(is_power_change("ResourceEvent.1.3.ResourcePoweredOff"));
        assert!(!is_power_change("TaskEvent.1.0.TaskCompletedOK"));
    }
}
