//! Typed IDs: newtypes over `Uuid`, so a rack ID is never passed where a rule
//! ID belongs. Converted to raw `Uuid` only at the database row layer.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! typed_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh random ID.
            pub fn new() -> Self {
                Self(Uuid::new_v4())
            }

            /// The raw UUID (for the row layer).
            pub fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

typed_id!(
    /// Identifies an operation rule.
    RuleId
);
typed_id!(
    /// Identifies a rack.
    RackId
);
typed_id!(
    /// Identifies a component of a rack.
    ComponentId
);
typed_id!(
    /// Identifies a task (one rack, one operation).
    TaskId
);
typed_id!(
    /// Identifies a schedule.
    ScheduleId
);
typed_id!(
    /// Identifies a phased rollout (a run).
    RunId
);
typed_id!(
    /// Identifies an event rule.
    EventRuleId
);
typed_id!(
    /// Identifies a stored hardware event.
    EventId
);
typed_id!(
    /// Identifies one action's execution for one event.
    ExecutionId
);

/// A rack named by ID or by its unique name, as operators type it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct RackRef(pub String);

impl RackRef {
    /// The ID, when the reference is one.
    pub fn as_id(&self) -> Option<RackId> {
        self.0.parse().ok()
    }
}

impl fmt::Display for RackRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
