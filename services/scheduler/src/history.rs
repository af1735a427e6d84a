//! Bounded history (docs/operating.md, "History and the archive"): the
//! retention pass that moves what is past its retention out of Postgres
//! into the archive (`flow_archive`), and the sealing of the audit log's
//! hash chain.
//!
//! Every few seconds the pass seals the audit records written since the
//! last time. Every [`HistoryPolicy::every`] it also, oldest first and in
//! batches: archives finished tasks' detail (then removes their steps,
//! keeping each task's row with a summary), exports sealed audit records
//! past their retention as a chained segment (then removes them, recording
//! the removal in the audit log), archives finished schedule firings, and
//! removes outbox rows long published. Each segment is written, synced and
//! read back against its manifest (and, for the audit log, its chain)
//! **before** anything is removed: a crash between the two leaves the
//! records in Postgres and, at worst, a second copy in the archive.
//!
//! One scheduler at a time runs the full pass (a Postgres advisory lock);
//! give every scheduler the same archive directory, or the policy only to
//! one of them.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flow_archive::segment::Span;
use flow_archive::{Archive, ArchiveError, ChainEnds, Kind, Manifest};
use flow_store::{Store, StoreError};
use serde_json::{Value, json};
use time::OffsetDateTime;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::background::{Driver, Next, Period};

/// A finished task's detail is archived this long after it ended unless
/// configured otherwise.
pub const DEFAULT_DETAIL_FOR: Duration = Duration::from_secs(90 * 24 * 3600);
/// Audit records are exported after this long.
pub const DEFAULT_AUDIT_FOR: Duration = Duration::from_secs(400 * 24 * 3600);
/// Outbox rows go this long after they were published.
pub const DEFAULT_OUTBOX_FOR: Duration = Duration::from_secs(24 * 3600);
/// How often the full pass runs.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(3600);
/// How often new audit records are sealed.
pub const DEFAULT_SEAL_EVERY: Duration = Duration::from_secs(10);
/// Records per segment at most.
pub const DEFAULT_BATCH: i64 = 500;

/// Records sealed per statement.
const SEAL_BATCH: i64 = 1000;

/// What is kept how long, and where the rest goes.
#[derive(Debug, Clone)]
pub struct HistoryPolicy {
    /// The archive's directory.
    pub archive_dir: PathBuf,
    /// A finished task's steps and component results, and a schedule's
    /// finished firings, stay this long.
    pub detail_for: Duration,
    /// Audit records stay this long.
    pub audit_for: Duration,
    /// Published outbox rows stay this long.
    pub outbox_for: Duration,
    /// How often the full pass runs.
    pub every: Duration,
    /// How often new audit records are sealed.
    pub seal_every: Duration,
    /// Records per segment at most.
    pub batch: i64,
}

impl HistoryPolicy {
    /// The default policy, archiving to `archive_dir`.
    pub fn new(archive_dir: impl Into<PathBuf>) -> HistoryPolicy {
        HistoryPolicy {
            archive_dir: archive_dir.into(),
            detail_for: DEFAULT_DETAIL_FOR,
            audit_for: DEFAULT_AUDIT_FOR,
            outbox_for: DEFAULT_OUTBOX_FOR,
            every: DEFAULT_EVERY,
            seal_every: DEFAULT_SEAL_EVERY,
            batch: DEFAULT_BATCH,
        }
    }
}

/// What went wrong in a retention pass.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The store failed.
    #[error("the store failed")]
    Store(#[from] StoreError),
    /// The archive could not be written or read.
    #[error("the archive failed")]
    Archive(#[from] ArchiveError),
    /// A segment just written did not read back as written: nothing was
    /// removed.
    #[error("segment {segment} did not verify after writing (nothing removed): {problems}")]
    Unverified {
        /// The segment.
        segment: String,
        /// What was wrong.
        problems: String,
    },
    /// The blocking writer could not finish.
    #[error("the archive writer stopped")]
    Join(#[source] tokio::task::JoinError),
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Audit records sealed.
    pub sealed: u64,
    /// Tasks whose detail was archived.
    pub tasks: u64,
    /// Audit records exported and removed.
    pub audit: u64,
    /// Schedule firings archived and removed.
    pub firings: u64,
    /// Outbox rows removed.
    pub outbox: u64,
    /// Segments written.
    pub segments: Vec<String>,
    /// Whether another scheduler held the pass (this one did nothing but seal).
    pub skipped: bool,
}

/// The policy with its archive.
#[derive(Debug)]
pub struct History {
    policy: HistoryPolicy,
    archive: Archive,
    last_full: Mutex<Option<Instant>>,
}

impl History {
    /// Opens the archive directory (creating it).
    pub fn open(policy: HistoryPolicy) -> Result<History, HistoryError> {
        let archive = Archive::open(&policy.archive_dir)?;
        Ok(History {
            policy,
            archive,
            last_full: Mutex::new(None),
        })
    }

    /// The archive.
    pub fn archive(&self) -> &Archive {
        &self.archive
    }

    /// The policy.
    pub fn policy(&self) -> &HistoryPolicy {
        &self.policy
    }

    /// Seals every audit record not sealed yet; returns how many.
    pub async fn seal(&self, store: &Store) -> Result<u64, HistoryError> {
        let mut total = 0;
        loop {
            let n = store.seal_audit(SEAL_BATCH).await?;
            total += n;
            if n < SEAL_BATCH as u64 {
                return Ok(total);
            }
        }
    }

    /// The full pass at `now`: seal, then archive and remove what is past
    /// its retention, oldest first.
    pub async fn pass(
        &self,
        store: &Store,
        now: OffsetDateTime,
    ) -> Result<PassReport, HistoryError> {
        let mut report = PassReport {
            sealed: self.seal(store).await?,
            ..PassReport::default()
        };
        let Some(lock) = store.try_history_lock().await? else {
            report.skipped = true;
            return Ok(report);
        };
        let result = self.expire(store, now, &mut report).await;
        lock.release().await;
        result?;
        if report.tasks + report.audit + report.firings + report.outbox > 0 {
            tracing::info!(
                tasks = report.tasks,
                audit = report.audit,
                firings = report.firings,
                outbox = report.outbox,
                segments = report.segments.len(),
                "history: archived and removed what is past its retention"
            );
        }
        Ok(report)
    }

    async fn expire(
        &self,
        store: &Store,
        now: OffsetDateTime,
        report: &mut PassReport,
    ) -> Result<(), HistoryError> {
        let batch = self.policy.batch;
        let full = |n: usize| n as i64 >= batch;

        let before = now - self.policy.detail_for;
        let reason = format!(
            "retention: task detail kept {}",
            days(self.policy.detail_for)
        );
        loop {
            let tasks = store.tasks_to_archive(before, batch).await?;
            if tasks.is_empty() {
                break;
            }
            let span = Span {
                first_at: tasks.first().map(|t| t.finished_at),
                last_at: tasks.last().map(|t| t.finished_at),
                chain: None,
            };
            let lines: Vec<Value> = tasks.iter().map(|t| t.line.clone()).collect();
            let manifest = self.write(Kind::Tasks, lines, span).await?;
            let marked = store
                .mark_tasks_archived(&manifest.segment, &tasks, reason.clone())
                .await?;
            report.tasks += marked.len() as u64;
            report.segments.push(manifest.segment);
            if !full(tasks.len()) {
                break;
            }
        }

        let before = now - self.policy.audit_for;
        let reason = format!(
            "retention: audit records kept {}",
            days(self.policy.audit_for)
        );
        loop {
            let export = store.audit_to_export(before, batch).await?;
            let (Some(first), Some(last)) = (export.links.first(), export.links.last()) else {
                break;
            };
            let span = Span {
                first_at: export.first_at,
                last_at: export.last_at,
                chain: Some(ChainEnds {
                    version: flow_archive::chain::VERSION,
                    first_seq: first.seq,
                    last_seq: last.seq,
                    prev_hash: first.prev.clone(),
                    last_hash: last.hash.clone(),
                }),
            };
            let lines: Vec<Value> = export
                .links
                .iter()
                .map(|l| json!({"seq": l.seq, "prev": l.prev, "hash": l.hash, "record": l.record}))
                .collect();
            let manifest = self.write(Kind::Audit, lines, span).await?;
            report.audit += store
                .record_audit_export(&manifest.segment, &export, reason.clone())
                .await?;
            report.segments.push(manifest.segment);
            if !full(export.links.len()) {
                break;
            }
        }

        let before = now - self.policy.detail_for;
        let reason = format!(
            "retention: schedule firings kept {}",
            days(self.policy.detail_for)
        );
        loop {
            let firings = store.firings_to_archive(before, batch).await?;
            if firings.is_empty() {
                break;
            }
            let span = Span {
                first_at: firings.first().map(|f| f.done_at),
                last_at: firings.last().map(|f| f.done_at),
                chain: None,
            };
            let lines: Vec<Value> = firings.iter().map(|f| f.line.clone()).collect();
            let manifest = self.write(Kind::Firings, lines, span).await?;
            report.firings += store
                .remove_firings(&manifest.segment, &firings, reason.clone())
                .await?;
            report.segments.push(manifest.segment);
            if !full(firings.len()) {
                break;
            }
        }

        report.outbox = store.expire_outbox(now - self.policy.outbox_for).await?;
        Ok(())
    }

    /// Writes a segment and reads it back against its manifest.
    async fn write(
        &self,
        kind: Kind,
        lines: Vec<Value>,
        span: Span,
    ) -> Result<Manifest, HistoryError> {
        let archive = self.archive.clone();
        tokio::task::spawn_blocking(move || {
            let manifest = archive.write(kind, &lines, span)?;
            let (check, _) = flow_archive::verify::segment(&archive, &manifest);
            if check.problems.is_empty() {
                Ok(manifest)
            } else {
                Err(HistoryError::Unverified {
                    segment: manifest.segment,
                    problems: check.problems.join("; "),
                })
            }
        })
        .await
        .map_err(HistoryError::Join)?
    }

    /// Seals every [`HistoryPolicy::seal_every`] and runs the full pass
    /// every [`HistoryPolicy::every`], until `stop`.
    pub async fn run(self: Arc<Self>, store: Store, stop: CancellationToken) {
        let driver = Driver {
            name: "history",
            period: Period::Rest(self.policy.seal_every),
            poke: None,
        };
        driver
            .drive(&stop, |_| async {
                let due = {
                    let last = self.last_full.lock().unwrap_or_else(|e| e.into_inner());
                    last.is_none_or(|at| at.elapsed() >= self.policy.every)
                };
                if due {
                    let report = self.pass(&store, OffsetDateTime::now_utc()).await;
                    *self.last_full.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(Instant::now());
                    report.map(|_| Next::Wait)
                } else {
                    self.seal(&store).await.map(|_| Next::Wait)
                }
            })
            .await;
    }
}

/// `90 days`, `36 hours`, `90 s`.
fn days(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 2 * 86_400 && s.is_multiple_of(86_400) {
        format!("{} days", s / 86_400)
    } else if s >= 3600 && s.is_multiple_of(3600) {
        format!("{} hours", s / 3600)
    } else {
        format!("{s} s")
    }
}
