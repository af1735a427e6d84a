//! Bounded history's contract: what a task whose detail went to the
//! archive still says ([`ArchivedDetail`]), and the `archive.*` and
//! `audit.verify` requests and replies (docs/operating.md, "History and
//! the archive").

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use crate::TaskId;
use crate::task::timestamp;
use flow_rules::ComponentType;

/// The endpoint name of the audit records retention writes when it moves
/// records to the archive and removes them (not a `flow.api` endpoint:
/// `audit.list --endpoint history.expire` finds them).
pub const EXPIRE_ENDPOINT: &str = "history.expire";

/// The most failures a task's summary keeps (the archive keeps them all).
pub const SUMMARY_FAILURES: usize = 20;

/// A finished task whose steps and component results were archived and
/// removed: where they went and what they came to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArchivedDetail {
    /// When.
    #[schemars(with = "crate::contract::Timestamp")]
    #[serde(with = "timestamp")]
    pub at: OffsetDateTime,
    /// The archive segment holding the task with its steps
    /// (`flow admin archive show <segment> --task <id>`).
    pub segment: String,
    /// Who submitted it, as the audit log recorded (none for a task a
    /// schedule, rollout or event rule submitted, or whose record is gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_by: Option<String>,
    /// Its steps.
    pub steps: u32,
    /// Component results, every step together.
    pub components: u32,
    /// Of those, the ones that did not end done.
    pub failed: u32,
    /// Hardware calls, every step together.
    pub calls: u64,
    /// The first failures ([`SUMMARY_FAILURES`] at most).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<ArchivedFailure>,
}

/// A component that did not end done, as a summary keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArchivedFailure {
    /// The step's index.
    pub step_index: u32,
    /// Its component type.
    pub component_type: ComponentType,
    /// The component.
    pub component: String,
    /// How it ended.
    pub status: crate::ComponentOutcome,
    /// Its last error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What an archive segment holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SegmentKind {
    /// Finished tasks with their steps.
    Tasks,
    /// Audit records, hash-chained.
    Audit,
    /// Hardware events with their executions.
    Events,
    /// Schedule firings.
    Firings,
}

/// An archive segment, as its manifest describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArchiveSegment {
    /// Its name.
    pub segment: String,
    /// What it holds.
    pub kind: SegmentKind,
    /// When it was written (RFC 3339).
    pub created_at: String,
    /// Records.
    pub records: u64,
    /// Its records' earliest time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_at: Option<String>,
    /// Their latest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_at: Option<String>,
    /// The compressed file's size.
    pub bytes: u64,
    /// Its digest, `sha256:<hex>`.
    pub sha256: String,
    /// For the audit log: the seals it holds and the hashes at its ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainSpan>,
}

/// The ends of an audit segment's piece of the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChainSpan {
    /// First seal.
    pub first_seq: i64,
    /// Last seal.
    pub last_seq: i64,
    /// The hash the first record follows.
    pub prev_hash: String,
    /// The last record's hash.
    pub last_hash: String,
}

/// `archive.list`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArchiveList {
    /// Only segments of this kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<SegmentKind>,
}

/// `archive.list` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArchiveListReply {
    /// The archive's directory, as the scheduler that answered has it.
    pub dir: String,
    /// Its segments, by kind then time written.
    pub segments: Vec<ArchiveSegment>,
}

/// `archive.show`: a segment, or one task in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArchiveShow {
    /// The segment.
    pub segment: String,
    /// Only this task's record (a `tasks` segment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskId>,
}

/// `archive.show` reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArchiveShowReply {
    /// The segment's manifest.
    pub segment: ArchiveSegment,
    /// The task's archived record — the task as `task.get` showed it, with
    /// its steps — when one was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<Value>,
}

/// `archive.verify`: every segment, or one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArchiveVerify {
    /// Only this segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<String>,
}

/// What checking one segment found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SegmentVerdict {
    /// The segment.
    pub segment: String,
    /// Records read.
    pub records: u64,
    /// What is wrong with it (empty: it verifies).
    pub problems: Vec<String>,
}

/// `archive.verify` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArchiveVerifyReply {
    /// Whether everything checked verifies.
    pub ok: bool,
    /// Each segment.
    pub segments: Vec<SegmentVerdict>,
    /// Problems of the audit chain across segments.
    pub chain_problems: Vec<String>,
}

/// `audit.verify`: the audit log's chain, archived then live.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditVerify {}

/// `audit.verify` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AuditVerifyReply {
    /// Whether the whole chain verifies.
    pub ok: bool,
    /// Archived records checked (none without an archive).
    pub archived: u64,
    /// Live records checked against their seals.
    pub sealed: u64,
    /// Live records not sealed yet (written since the last seal pass,
    /// seconds ago): not covered until they are.
    pub unsealed: u64,
    /// The chain's last hash: keep it elsewhere, and a later `verify`
    /// proves nothing before it was removed from the end.
    pub head: String,
    /// What is wrong, each naming the seal or segment.
    pub problems: Vec<String>,
}
