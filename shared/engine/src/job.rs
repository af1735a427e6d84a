//! A step job: everything a worker needs to run one step of one task,
//! carried in the job message (workers have no database).

use std::collections::BTreeMap;

use flow_hardware::ComponentTarget;
use flow_rules::{ComponentType, OperationCode, Step};
use serde::{Deserialize, Serialize};

/// The image for one component type of a firmware task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirmwareImage {
    /// Where the BMC fetches it.
    pub image_uri: String,
    /// The version it installs.
    pub version: Option<String>,
}

/// One step of one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepJob {
    /// The task's operation (PowerControl without `operation` uses it).
    pub operation: OperationCode,
    /// The step, from the task's rule snapshot.
    #[serde(with = "step_json")]
    pub step: Step,
    /// The components of the step's type.
    pub components: Vec<ComponentTarget>,
    /// Every component of the task by type (VerifyReachability probes other
    /// types).
    pub all_components: BTreeMap<ComponentType, Vec<ComponentTarget>>,
    /// Firmware images by type (firmware tasks).
    #[serde(default)]
    pub firmware: BTreeMap<ComponentType, FirmwareImage>,
}

/// Steps travel in their canonical JSON form and are validated on arrival.
mod step_json {
    use flow_rules::{RuleDefinition, Step};
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(step: &Step, s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(&step.to_json_value(), s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Step, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        let definition = serde_json::json!({"version": "v1", "steps": [value]});
        RuleDefinition::from_value(&definition)
            .map_err(|e| D::Error::custom(format!("invalid step: {e}")))?
            .steps
            .pop()
            .ok_or_else(|| D::Error::custom("invalid step: empty"))
    }
}
