//! `flow-rules`: Flow's operation rules — the schema of
//! `docs/rule-format.md`, JSON and YAML parsing, validation that reports
//! every error with its path, the defaults, the built-in rules for every
//! operation, and the execution budget of a step. No I/O: every other crate
//! builds on this one.
//!
//! ```
//! use flow_rules::RuleDefinition;
//!
//! let rule = RuleDefinition::from_json_str(
//!     r#"{"steps": [{"component_type": "compute", "stage": 1,
//!                    "main_operation": {"name": "PowerControl"}}]}"#,
//! )
//! .unwrap();
//! assert_eq!(rule.steps[0].component_type.as_str(), "Compute");
//!
//! let errors = RuleDefinition::from_json_str(
//!     r#"{"steps": [{"component_type": "compute", "stage": 1, "timeot": "5m",
//!                    "main_operation": {"name": "PowerControl"}}]}"#,
//! )
//! .unwrap_err();
//! assert!(errors.to_string().contains("steps[0]: unknown field `timeot` (did you mean `timeout`?)"));
//! ```

mod action;
mod batch;
pub mod budget;
mod builtin;
mod canonical;
mod check;
mod component;
pub mod defaults;
mod document;
pub mod duration;
mod error;
mod model;
mod operation;
mod parse;
mod retry;
mod schema;
mod serde_impls;

pub use action::{Action, ActionName, PowerState};
pub use batch::{RuleBatch, RuleSpec, check_for_operation, spec_from_parts};
pub use builtin::{BUILTIN_RULES_YAML, builtin_rule, builtin_rules};
pub use component::{ComponentType, UnknownComponentType};
pub use error::{Path, Problem, ValidationError, ValidationErrors};
pub use model::{RuleDefinition, SchemaVersion, Stage, Step};
pub use operation::{
    FirmwareOperation, InvalidOperation, OperationCode, OperationType, PowerOperation,
};
pub use parse::MAX_RETRY_ATTEMPTS;
pub use retry::RetryPolicy;
