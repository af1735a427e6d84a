//! Hardware conditions a component can be in — a coolant leak, a critical
//! temperature — raised and cleared through the admin API. A BMC reports
//! them in its chassis' `Status.Conditions` (and `Health`), and a compute
//! tray's BMC also as a Redfish event on its EventService SSE stream.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// What is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConditionKind {
    /// A leak detector of the tray's cold plate loop tripped.
    Leak,
    /// A temperature sensor read above its upper critical threshold.
    OverTemperature,
}

impl ConditionKind {
    /// The Redfish `MessageId` it is reported with. The leak message is
    /// modelled on DMTF's Environmental registry and the temperature one on
    /// its SensorEvent registry; Flow's watcher reads the part after the
    /// registry's version (`LeakDetectedCritical`,
    /// `ReadingAboveUpperCriticalThreshold`).
    pub fn message_id(self) -> &'static str {
        match self {
            ConditionKind::Leak => "Environmental.1.0.LeakDetectedCritical",
            ConditionKind::OverTemperature => "SensorEvent.1.0.ReadingAboveUpperCriticalThreshold",
        }
    }

    /// The message, for a component.
    pub fn message(self, component: &str) -> String {
        match self {
            ConditionKind::Leak => format!("A critical leak was detected on {component}."),
            ConditionKind::OverTemperature => {
                format!("A temperature of {component} is above its upper critical threshold.")
            }
        }
    }
}

/// One condition a component is in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    /// Unique across the simulator (the Redfish `EventId`).
    pub id: u64,
    /// What.
    pub kind: ConditionKind,
    /// When it began (wall time, whole milliseconds).
    #[serde(with = "time::serde::rfc3339")]
    pub since: OffsetDateTime,
}
