//! Whether a component may be operated on: the status an operator sets
//! (`flow rack component-status`), which the readiness gate of power and
//! firmware tasks waits on (docs/architecture.md, "The readiness gate").

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How long a gated task waits for its components by default (the
/// reference's `DefaultWaitTimeout`).
pub const DEFAULT_WAIT_SECONDS: u64 = 30 * 60;
/// The longest wait a task may ask for.
pub const MAX_WAIT_SECONDS: u64 = 7 * 24 * 3600;

/// A component's operator-set status.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ComponentStatus {
    /// Free to be operated on.
    #[default]
    Ready,
    /// Running a workload: power and firmware tasks wait. (`in-use` is
    /// read too, as operators type it.)
    #[serde(alias = "in-use")]
    InUse,
    /// Under maintenance: power and firmware tasks wait.
    Maintenance,
}

impl ComponentStatus {
    /// Every status.
    pub const ALL: [ComponentStatus; 3] = [
        ComponentStatus::Ready,
        ComponentStatus::InUse,
        ComponentStatus::Maintenance,
    ];

    /// Its name, as stored and sent.
    pub fn as_str(self) -> &'static str {
        match self {
            ComponentStatus::Ready => "ready",
            ComponentStatus::InUse => "in_use",
            ComponentStatus::Maintenance => "maintenance",
        }
    }
}

/// Its names, and `in-use` where it is read.
impl JsonSchema for ComponentStatus {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ComponentStatus".into()
    }

    fn schema_id() -> std::borrow::Cow<'static, str> {
        concat!(module_path!(), "::ComponentStatus").into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut names: Vec<&str> = ComponentStatus::ALL.iter().map(|s| s.as_str()).collect();
        if generator.contract().is_deserialize() {
            names.push("in-use");
        }
        schemars::json_schema!({
            "description": "A component's operator-set status: `ready` (free to be operated on), `in_use` (running a workload; `in-use` is read too) or `maintenance`. Power and firmware tasks wait for components that are not ready.",
            "type": "string",
            "enum": names,
        })
    }
}

impl fmt::Display for ComponentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is none of [`ComponentStatus`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a component status (ready, in-use, maintenance)")]
pub struct UnknownComponentStatus(pub String);

impl FromStr for ComponentStatus {
    type Err = UnknownComponentStatus;

    /// The stored names, and `in-use` as operators type it.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ready" => Ok(ComponentStatus::Ready),
            "in_use" | "in-use" => Ok(ComponentStatus::InUse),
            "maintenance" => Ok(ComponentStatus::Maintenance),
            other => Err(UnknownComponentStatus(other.to_owned())),
        }
    }
}

/// A component that is not ready, as a gated task names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub struct NotReady {
    /// The component's name in its rack.
    pub component: String,
    /// Its status.
    pub status: ComponentStatus,
}

impl fmt::Display for NotReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.component, self.status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_operators_may_type_in_use() {
        for s in ComponentStatus::ALL {
            assert_eq!(s.as_str().parse::<ComponentStatus>(), Ok(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert_eq!("in-use".parse(), Ok(ComponentStatus::InUse));
        assert_eq!(
            "broken".parse::<ComponentStatus>().unwrap_err().to_string(),
            "\"broken\" is not a component status (ready, in-use, maintenance)"
        );
    }
}
