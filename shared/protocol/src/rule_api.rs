//! The rule endpoints' requests and replies (`rule.*`).

use flow_rules::{OperationCode, OperationType};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::ids::{RackId, RackRef, RuleId};

// ---- requests ---------------------------------------------------------------

/// `rule.create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleCreate {
    /// Rule name.
    pub name: String,
    /// Description.
    #[serde(default)]
    pub description: String,
    /// `power_control`, `firmware_control` or `decommission`.
    #[schemars(with = "OperationType")]
    pub operation_type: String,
    /// The operation code.
    #[schemars(with = "OperationCode")]
    pub operation: String,
    /// The rule definition `{"version", "steps"}`.
    #[schemars(with = "flow_rules::RuleDefinition")]
    pub definition: Value,
    /// Make it the default; refused if a default exists.
    #[serde(default)]
    pub is_default: bool,
}

/// `rule.batch_create`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleBatchCreate {
    /// The batch document `{"version", "rules": […]}` (the YAML batch as JSON).
    #[schemars(with = "flow_rules::RuleBatch")]
    pub batch: Value,
    /// Replace existing rules for the same operations (as new revisions of
    /// those rules, keeping their rack associations).
    #[serde(default)]
    pub overwrite: bool,
}

/// `rule.get`, `rule.set_default`, `rule.history`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleById {
    /// The rule.
    pub id: RuleId,
}

/// `rule.delete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleDelete {
    /// The rule.
    pub id: RuleId,
    /// Also remove its rack associations (otherwise a rule bound to racks is
    /// not deleted).
    #[serde(default)]
    pub force: bool,
}

/// `rule.list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleList {
    /// Only this operation type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_type: Option<OperationType>,
    /// Only this operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<OperationCode>,
    /// Only default rules.
    #[serde(default)]
    pub default_only: bool,
    /// Skip this many (newest first).
    #[serde(default)]
    pub offset: u32,
    /// At most this many (default 100, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `rule.update`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleUpdate {
    /// The rule.
    pub id: RuleId,
    /// New name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// New description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// New definition (a new revision).
    #[schemars(with = "Option<flow_rules::RuleDefinition>")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<Value>,
}

/// `rule.associate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleAssociate {
    /// The rack, by ID or name.
    pub rack: RackRef,
    /// The rule; its operation decides which binding it replaces.
    pub rule_id: RuleId,
}

/// `rule.disassociate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleDisassociate {
    /// The rack, by ID or name.
    pub rack: RackRef,
    /// The operation whose binding to remove.
    pub operation: OperationCode,
}

/// `rule.resolve`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleResolve {
    /// The rack, by ID or name.
    pub rack: RackRef,
    /// The operation.
    pub operation: OperationCode,
    /// An explicit rule, as a task request may name one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<RuleId>,
}

// ---- replies ------------------------------------------------------------------

/// A stored rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RuleRecord {
    /// ID.
    pub id: RuleId,
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Operation type.
    pub operation_type: OperationType,
    /// Operation code.
    pub operation: OperationCode,
    /// The default for its operation.
    pub is_default: bool,
    /// Revision of the definition (1 on create, +1 on each change).
    pub revision: u32,
    /// The canonical definition.
    #[schemars(with = "flow_rules::RuleDefinition")]
    pub definition: Value,
    /// Racks bound to this rule.
    #[serde(default)]
    pub associations: Vec<Association>,
    /// Created.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// Last changed.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

/// A rule in a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RuleSummary {
    /// ID.
    pub id: RuleId,
    /// Name.
    pub name: String,
    /// Operation type.
    pub operation_type: OperationType,
    /// Operation code.
    pub operation: OperationCode,
    /// The default for its operation.
    pub is_default: bool,
    /// Current revision.
    pub revision: u32,
    /// Created.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// `rule.list` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RuleListReply {
    /// This page, newest first.
    pub rules: Vec<RuleSummary>,
    /// How many match in all.
    pub total: u64,
}

/// A rule a batch created, replaced or skipped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BatchItem {
    /// The rule (for a skip: the existing rule that caused it).
    pub id: RuleId,
    /// Its name.
    pub name: String,
    /// Its operation.
    pub operation: OperationCode,
}

/// `rule.batch_create` reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BatchCreateReply {
    /// New rules.
    pub created: Vec<BatchItem>,
    /// Existing rules given a new revision.
    pub overwritten: Vec<BatchItem>,
    /// Operations that already had a rule (without `overwrite`).
    pub skipped: Vec<BatchItem>,
}

/// `rule.delete` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RuleDeleteReply {
    /// False when no such rule existed (deleting is idempotent).
    pub deleted: bool,
    /// Rack associations removed with it.
    pub associations_removed: u64,
}

/// A rack's binding of a rule to an operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Association {
    /// The rack.
    pub rack_id: RackId,
    /// Its name.
    pub rack_name: String,
    /// The operation.
    pub operation: OperationCode,
    /// The rule.
    pub rule_id: RuleId,
}

/// `rule.disassociate` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DisassociateReply {
    /// False when nothing was bound.
    pub removed: bool,
}

/// Where a resolved rule came from, in resolution order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleSource {
    /// Named by the request.
    Explicit,
    /// Bound to the rack.
    RackAssociation,
    /// The operation's default.
    Default,
    /// Flow's built-in rule.
    Builtin,
}

impl RuleSource {
    /// Every source, in resolution order.
    pub const ALL: [RuleSource; 4] = [
        RuleSource::Explicit,
        RuleSource::RackAssociation,
        RuleSource::Default,
        RuleSource::Builtin,
    ];

    /// The name, as serialised and stored.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleSource::Explicit => "explicit",
            RuleSource::RackAssociation => "rack_association",
            RuleSource::Default => "default",
            RuleSource::Builtin => "builtin",
        }
    }

    /// The source named `text`.
    pub fn parse(text: &str) -> Option<RuleSource> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// `rule.resolve` reply: which rule would run, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResolveReply {
    /// Where it came from.
    pub source: RuleSource,
    /// Why, in words.
    pub reason: String,
    /// The stored rule (none for a built-in rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<RuleId>,
    /// Its revision (none for a built-in rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u32>,
    /// Its name.
    pub name: String,
    /// The operation.
    pub operation: OperationCode,
    /// The canonical definition that would run.
    #[schemars(with = "flow_rules::RuleDefinition")]
    pub definition: Value,
}

/// One saved definition of a rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RevisionRecord {
    /// Revision number.
    pub revision: u32,
    /// Name at that revision.
    pub name: String,
    /// Description at that revision.
    pub description: String,
    /// The canonical definition.
    #[schemars(with = "flow_rules::RuleDefinition")]
    pub definition: Value,
    /// When it was saved.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

/// `rule.history` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HistoryReply {
    /// The rule (it may since have been deleted).
    pub rule_id: RuleId,
    /// Operation.
    pub operation: OperationCode,
    /// Oldest first.
    pub revisions: Vec<RevisionRecord>,
}
