//! The validated rule model: a definition is stages of steps; a step targets
//! one component type and runs pre, main and post actions.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::{Action, ComponentType, RetryPolicy, defaults};

/// The schema version of a rule definition. Only `v1` exists, the default
/// (`docs/rule-format.md`, "Document"); anything else is refused on write
/// and on read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchemaVersion {
    /// The format of `docs/rule-format.md`.
    #[default]
    V1,
}

impl SchemaVersion {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        "v1"
    }
}

/// A stage number (≥ 1). Stages run in ascending order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stage(pub NonZeroU32);

impl Stage {
    /// The number.
    pub fn get(self) -> u32 {
        self.0.get()
    }
}

/// One step: one component type, in one stage.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The component type this step acts on.
    pub component_type: ComponentType,
    /// The stage it belongs to.
    pub stage: Stage,
    /// Most components in flight at once; 0 = unlimited.
    pub max_parallel: u32,
    /// Activity timeout; `None` (absent or zero) = 20 min.
    pub timeout: Option<Duration>,
    /// Retry policy; `None` = 3 attempts, 1 s, ×2, 1 min cap.
    pub retry: Option<RetryPolicy>,
    /// Actions before the main one, in order.
    pub pre_operation: Vec<Action>,
    /// The main action.
    pub main_operation: Action,
    /// Actions after the main one, in order.
    pub post_operation: Vec<Action>,
}

impl Step {
    /// The activity timeout after defaults.
    pub fn activity_timeout(&self) -> Duration {
        self.timeout.unwrap_or(defaults::ACTIVITY_TIMEOUT)
    }

    /// The retry policy after defaults.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry.unwrap_or_else(RetryPolicy::step_default)
    }

    /// Every action in execution order.
    pub fn actions(&self) -> impl Iterator<Item = &Action> {
        self.pre_operation
            .iter()
            .chain(std::iter::once(&self.main_operation))
            .chain(self.post_operation.iter())
    }
}

/// A validated rule definition: `{version, steps}`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuleDefinition {
    /// The schema version.
    pub version: SchemaVersion,
    /// The steps in document order.
    pub steps: Vec<Step>,
}

impl RuleDefinition {
    /// The steps grouped by stage, stages ascending, steps in document order.
    pub fn stages(&self) -> BTreeMap<Stage, Vec<&Step>> {
        let mut stages: BTreeMap<Stage, Vec<&Step>> = BTreeMap::new();
        for step in &self.steps {
            stages.entry(step.stage).or_default().push(step);
        }
        stages
    }

    /// The component types any step targets.
    pub fn component_types(&self) -> Vec<ComponentType> {
        let mut types: Vec<_> = self.steps.iter().map(|s| s.component_type).collect();
        types.sort();
        types.dedup();
        types
    }
}
