//! What a segment's manifest says about it.

use serde::{Deserialize, Serialize};

/// The manifest format this release writes.
pub const FORMAT: u32 = 1;

/// What a segment holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Finished tasks: per line `{"task": <row>, "steps": [<step row>…]}`.
    Tasks,
    /// Audit records past their retention, chained: per line
    /// `{"seq", "prev", "hash", "record"}`.
    Audit,
    /// Hardware events with their executions: per line
    /// `{"event": <row>, "executions": [<row>…], "locks": […]}`.
    Events,
    /// Finished schedule firings: per line the row.
    Firings,
}

impl Kind {
    /// Every kind, in the order a listing shows them.
    pub const ALL: [Kind; 4] = [Kind::Tasks, Kind::Audit, Kind::Events, Kind::Firings];

    /// The kind's name: its directory and its segments' prefix.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Tasks => "tasks",
            Kind::Audit => "audit",
            Kind::Events => "events",
            Kind::Firings => "firings",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A segment's manifest (`<segment>.manifest.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The manifest's format ([`FORMAT`]).
    pub format: u32,
    /// The segment's name: `<kind>-<yyyymmddThhmmssZ>-<8 hex>`.
    pub segment: String,
    /// What it holds.
    pub kind: Kind,
    /// When it was written (RFC 3339, UTC).
    pub created_at: String,
    /// Its records (lines).
    pub records: u64,
    /// The earliest of its records' own times (a task's finish, an audit
    /// record's time), RFC 3339.
    pub first_at: Option<String>,
    /// The latest.
    pub last_at: Option<String>,
    /// The compressed file's size in bytes.
    pub bytes: u64,
    /// The compressed file's digest, `sha256:<hex>`.
    pub sha256: String,
    /// For the audit log: the ends of the chain it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainEnds>,
}

/// The ends of an audit segment's piece of the hash chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainEnds {
    /// The chain's record shape ([`crate::chain::VERSION`]).
    pub version: u32,
    /// The first seal's sequence number.
    pub first_seq: i64,
    /// The last one's.
    pub last_seq: i64,
    /// The hash the first record follows (the previous segment's
    /// `last_hash`, or [`crate::chain::GENESIS`]).
    pub prev_hash: String,
    /// The last record's hash: where the next segment, or the live log,
    /// goes on.
    pub last_hash: String,
}
