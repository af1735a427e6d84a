//! `flow-archive`: where Flow's history goes when retention takes it out of
//! Postgres (docs/operating.md, "History and the archive").
//!
//! An archive is a directory of **segments**, one per retention batch:
//! `<dir>/<kind>/<segment>.jsonl.gz` holds the records, one JSON object per
//! line, gzip-compressed; `<segment>.manifest.json` beside it says what
//! the segment holds (kind, count, time range), its size and its SHA-256,
//! and for the audit log the ends of its piece of the hash chain. Both are
//! written to a temporary name, synced, then renamed, manifest last: a
//! segment without a manifest is an interrupted write and is not listed.
//!
//! The audit log's records are chained ([`chain`]): each record's hash
//! covers the one before it, so an archived or live record that was
//! changed, removed or reordered breaks the chain at that point, and
//! [`verify`] says where.
//!
//! Nothing here knows Postgres: the store builds the records and the
//! scheduler's retention pass decides what goes (services/scheduler/src/history.rs).

pub mod canonical;
pub mod chain;
mod error;
pub mod manifest;
pub mod segment;
pub mod verify;

pub use error::ArchiveError;
pub use manifest::{ChainEnds, Kind, Manifest};
pub use segment::Archive;
pub use verify::{ArchiveCheck, SegmentCheck};
