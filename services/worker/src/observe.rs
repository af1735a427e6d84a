//! What the hardware watcher tells the console and operators about each
//! component besides events: its power state and whether its BMC answers
//! (`flow_protocol::state`). A state is published when it differs from the
//! last one published for the component, so a quiet site costs nothing.

use flow_hardware::{PowerStatus, manager::ComponentManager};
use flow_protocol::jobs::ComponentTarget;
use flow_protocol::state::{ComponentState, ObservationSource, PowerState};
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
        source: ObservationSource::Watcher,
        measured_w: None,
    })
}

/// The power a manager reads, as the state reports it.
pub fn power_of(status: PowerStatus) -> PowerState {
    match status {
        PowerStatus::On => PowerState::On,
        PowerStatus::Off => PowerState::Off,
        PowerStatus::PoweringOn => PowerState::PoweringOn,
        PowerStatus::PoweringOff => PowerState::PoweringOff,
        PowerStatus::Unknown => PowerState::Unknown,
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

/// The draw a Redfish metrics resource reports, W: `PowerWatts.Reading`
/// (`EnvironmentMetrics`), `OutputPowerWatts.Reading` (a supply's
/// metrics), or `PowerControl[0].PowerConsumedWatts` (the older `Power`).
pub fn watts_of(body: &serde_json::Value) -> Option<u32> {
    let reading = body
        .pointer("/PowerWatts/Reading")
        .or_else(|| body.pointer("/OutputPowerWatts/Reading"))
        .or_else(|| body.pointer("/PowerControl/0/PowerConsumedWatts"))?
        .as_f64()?;
    // A reading is a non-negative number of watts.
    (reading.is_finite() && reading >= 0.0).then(|| reading.round().min(f64::from(u32::MAX)) as u32)
}

/// Whether an event's message ID says the power changed: DMTF's
/// `ResourceEvent.1.3.ResourcePoweredOn` and the like, or an OpenBMC
/// log event's `OpenBMC.0.1.DCPowerOn` / `DCPowerOff`
/// (`docs/hardware.md`, "Events: change signals").
pub fn is_power_change(message_id: &str) -> bool {
    message_id.rsplit('.').next().is_some_and(|k| {
        k.starts_with("ResourcePowered")
            || k.starts_with("ResourcePowering")
            || k == "PowerStateChanged"
            || k == "DCPowerOn"
            || k == "DCPowerOff"
    })
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
        assert!(is_power_change("OpenBMC.0.1.DCPowerOn"));
        assert!(is_power_change("OpenBMC.0.1.DCPowerOff"));
        assert!(!is_power_change("TaskEvent.1.0.TaskCompletedOK"));
    }

    #[test]
    fn a_measured_draw_is_read_from_any_of_the_three_redfish_shapes() {
        use serde_json::json;
        assert_eq!(
            watts_of(&json!({"PowerWatts": {"Reading": 5400.4}})),
            Some(5400)
        );
        assert_eq!(
            watts_of(&json!({"OutputPowerWatts": {"Reading": 812}})),
            Some(812)
        );
        assert_eq!(
            watts_of(&json!({"PowerControl": [{"PowerConsumedWatts": 900}]})),
            Some(900)
        );
        assert_eq!(watts_of(&json!({"PowerWatts": {"Reading": -1}})), None);
        assert_eq!(watts_of(&json!({"PowerWatts": {}})), None);
    }
}
