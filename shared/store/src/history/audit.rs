//! The audit log's hash chain in Postgres (migrations/20261208000001_history.sql).
//!
//! **Sealing**: records are sealed in the order of their ids, each seal
//! holding `flow_archive::chain::link(previous seal's hash, record)`.
//! Sealing takes a transaction-scoped advisory lock, so two schedulers
//! never fork the chain. A record whose transaction committed after later
//! ones were sealed is sealed at the next pass (the chain follows seal
//! order, not id order).
//!
//! **Export**: the oldest sealed records past their retention are read as
//! chain links; once the archive holds them ([`Store::record_audit_export`])
//! the export is recorded, then the records and their seals are removed —
//! the audit log's guard lets a DELETE through only for records an export
//! covers — and the removal is itself an audit record.
//!
//! **Verification** ([`Store::verify_audit_chain`]): from the last export's
//! hash (or the genesis), every seal in order against its record.

use flow_archive::chain::{self, Link};
use flow_protocol::audit::AuditOutcome;
use serde_json::json;
use time::OffsetDateTime;

use crate::audit::{AuditRow, audit_columns};
use crate::{Store, StoreError};

/// The advisory lock sealing and exporting take (`flowaudt`).
const CHAIN_LOCK: i64 = 0x666c_6f77_6175_6474;

/// How far below the last sealed record sealing looks for records that
/// committed late.
const LATE_WINDOW: i64 = 10_000;

/// Seals read per page while verifying.
const VERIFY_PAGE: i64 = 5_000;

/// Sealed records ready to go to the archive.
#[derive(Debug, Clone, Default)]
pub struct AuditExport {
    /// The links, in seal order.
    pub links: Vec<Link>,
    /// The oldest record's time.
    pub first_at: Option<OffsetDateTime>,
    /// The newest's.
    pub last_at: Option<OffsetDateTime>,
}

/// What checking the live chain found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveChain {
    /// Where the last export left the chain: `(last seal, its hash)`.
    pub exported: Option<(i64, String)>,
    /// Seals checked.
    pub sealed: u64,
    /// Records without a seal yet.
    pub unsealed: u64,
    /// The chain's last hash.
    pub head: String,
    /// What is wrong.
    pub problems: Vec<String>,
}

#[derive(sqlx::FromRow)]
struct SealRow {
    seq: i64,
    record_id: i64,
    prev_hash: String,
    hash: String,
}

/// `seals` with their records (none for a seal whose record is gone).
async fn with_records(
    conn: &mut sqlx::PgConnection,
    seals: Vec<SealRow>,
) -> Result<Vec<(SealRow, Option<AuditRow>)>, StoreError> {
    let ids: Vec<i64> = seals.iter().map(|s| s.record_id).collect();
    let rows: Vec<AuditRow> = sqlx::query_as(concat!(
        "SELECT ",
        audit_columns!(),
        " FROM audit_log a WHERE a.id = ANY($1)"
    ))
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    let mut by_id: std::collections::HashMap<i64, AuditRow> =
        rows.into_iter().map(|r| (r.id(), r)).collect();
    Ok(seals
        .into_iter()
        .map(|s| {
            let record = by_id.remove(&s.record_id);
            (s, record)
        })
        .collect())
}

impl Store {
    /// Seals up to `limit` records not sealed yet, continuing the chain;
    /// returns how many.
    pub async fn seal_audit(&self, limit: i64) -> Result<u64, StoreError> {
        let mut tx = self.pool().begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(CHAIN_LOCK)
            .execute(&mut *tx)
            .await?;
        let head: Option<(String, i64)> = sqlx::query_as(
            "SELECT hash, (SELECT max(record_id) FROM audit_seals) FROM audit_seals \
             ORDER BY seq DESC LIMIT 1",
        )
        .fetch_optional(&mut *tx)
        .await?;
        let (mut prev, max_sealed) = match head {
            Some((hash, max)) => (hash, max),
            None => {
                let exported: Option<String> = sqlx::query_scalar(
                    "SELECT last_hash FROM audit_exports ORDER BY last_seq DESC LIMIT 1",
                )
                .fetch_optional(&mut *tx)
                .await?;
                (exported.unwrap_or_else(|| chain::GENESIS.to_owned()), 0)
            }
        };
        let rows: Vec<AuditRow> = sqlx::query_as(concat!(
            "SELECT ",
            audit_columns!(),
            " FROM audit_log a WHERE a.id > $1 \
             AND NOT EXISTS (SELECT 1 FROM audit_seals s WHERE s.record_id = a.id) \
             ORDER BY a.id LIMIT $2"
        ))
        .bind(max_sealed - LATE_WINDOW)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        if rows.is_empty() {
            return Ok(0);
        }
        let mut ids = Vec::with_capacity(rows.len());
        let mut prevs = Vec::with_capacity(rows.len());
        let mut hashes = Vec::with_capacity(rows.len());
        for row in &rows {
            let hash = chain::link(&prev, &row.chain_record());
            ids.push(row.id());
            prevs.push(std::mem::replace(&mut prev, hash.clone()));
            hashes.push(hash);
        }
        // `WITH ORDINALITY` keeps the order the chain was built in.
        sqlx::query(
            "INSERT INTO audit_seals (record_id, version, prev_hash, hash) \
             SELECT r, $4, p, h FROM unnest($1::bigint[], $2::text[], $3::text[]) \
             WITH ORDINALITY AS v(r, p, h, n) ORDER BY n",
        )
        .bind(&ids)
        .bind(&prevs)
        .bind(&hashes)
        .bind(i32::try_from(chain::VERSION).unwrap_or(1))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(rows.len() as u64)
    }

    /// The oldest sealed, unexported records written before `before`, in
    /// seal order, at most `limit`: a prefix of what is left of the chain
    /// (it stops at the first record too new).
    pub async fn audit_to_export(
        &self,
        before: OffsetDateTime,
        limit: i64,
    ) -> Result<AuditExport, StoreError> {
        let mut conn = self.pool().acquire().await?;
        let seals: Vec<SealRow> = sqlx::query_as(
            "SELECT seq, record_id, prev_hash, hash FROM audit_seals \
             WHERE seq > coalesce((SELECT max(last_seq) FROM audit_exports), 0) \
             ORDER BY seq LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?;
        let rows = with_records(&mut conn, seals).await?;
        let mut out = AuditExport::default();
        for (row, record) in rows {
            let Some(record) = record else {
                return Err(StoreError::Corrupt {
                    what: format!("audit seal {}", row.seq),
                    reason: format!("its audit record {} is gone", row.record_id),
                });
            };
            if record.at() >= before {
                break;
            }
            out.first_at.get_or_insert(record.at());
            out.last_at = Some(record.at());
            out.links.push(Link {
                seq: row.seq,
                prev: row.prev_hash,
                hash: row.hash,
                record: record.chain_record(),
            });
        }
        Ok(out)
    }

    /// Records that `segment` holds `export`'s links, then removes those
    /// records and their seals, writing an audit record of the removal —
    /// all in one transaction. The links must continue the chain from the
    /// last export. Returns the records removed.
    pub async fn record_audit_export(
        &self,
        segment: &str,
        export: &AuditExport,
        reason: String,
    ) -> Result<u64, StoreError> {
        let (Some(first), Some(last)) = (export.links.first(), export.links.last()) else {
            return Ok(0);
        };
        let mut tx = self.pool().begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(CHAIN_LOCK)
            .execute(&mut *tx)
            .await?;
        let exported: Option<(i64, String)> = sqlx::query_as(
            "SELECT last_seq, last_hash FROM audit_exports ORDER BY last_seq DESC LIMIT 1",
        )
        .fetch_optional(&mut *tx)
        .await?;
        let expected = exported
            .as_ref()
            .map_or(chain::GENESIS, |(_, hash)| hash.as_str());
        if first.prev != expected || exported.as_ref().is_some_and(|(seq, _)| first.seq <= *seq) {
            return Err(StoreError::Conflict(format!(
                "audit export to {segment}: seal {} does not continue the last export (another scheduler exported meanwhile)",
                first.seq
            )));
        }
        let records = export.links.len() as i64;
        sqlx::query(
            "INSERT INTO audit_exports (segment, first_seq, last_seq, prev_hash, last_hash, records) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(segment)
        .bind(first.seq)
        .bind(last.seq)
        .bind(&first.prev)
        .bind(&last.hash)
        .bind(records)
        .execute(&mut *tx)
        .await?;
        let removed = sqlx::query(
            "DELETE FROM audit_log WHERE id IN \
             (SELECT record_id FROM audit_seals WHERE seq BETWEEN $1 AND $2)",
        )
        .bind(first.seq)
        .bind(last.seq)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query("DELETE FROM audit_seals WHERE seq BETWEEN $1 AND $2")
            .bind(first.seq)
            .bind(last.seq)
            .execute(&mut *tx)
            .await?;
        let entry = super::expire_entry(
            segment,
            json!({
                "kind": "audit", "segment": segment, "records": records,
                "first_seq": first.seq, "last_seq": last.seq, "last_hash": last.hash,
            }),
            reason,
        );
        let message = format!(
            "exported {records} audit records (seals {}..{}) to segment {segment}, verified, and removed them",
            first.seq, last.seq
        );
        crate::audit::insert(&mut tx, &entry, AuditOutcome::Ok, &message).await?;
        tx.commit().await?;
        Ok(removed)
    }

    /// Checks the live chain: from where the last export left it, every
    /// seal in order against its record; counts records not sealed yet.
    pub async fn verify_audit_chain(&self) -> Result<LiveChain, StoreError> {
        let mut tx = self.pool().begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let exported: Option<(i64, String)> = sqlx::query_as(
            "SELECT last_seq, last_hash FROM audit_exports ORDER BY last_seq DESC LIMIT 1",
        )
        .fetch_optional(&mut *tx)
        .await?;
        let mut head = exported
            .as_ref()
            .map_or_else(|| chain::GENESIS.to_owned(), |(_, h)| h.clone());
        let mut after = exported.as_ref().map_or(0, |(seq, _)| *seq);
        let mut problems = Vec::new();
        let mut sealed = 0u64;
        loop {
            let seals: Vec<SealRow> = sqlx::query_as(
                "SELECT seq, record_id, prev_hash, hash FROM audit_seals \
                 WHERE seq > $1 ORDER BY seq LIMIT $2",
            )
            .bind(after)
            .bind(VERIFY_PAGE)
            .fetch_all(&mut *tx)
            .await?;
            let Some(last) = seals.last() else { break };
            after = last.seq;
            let mut links = Vec::with_capacity(seals.len());
            for (seal, record) in with_records(&mut tx, seals).await? {
                sealed += 1;
                let Some(record) = record else {
                    // Check what came before, then go on from this seal.
                    let (next, found) = chain::check(&head, &links);
                    problems.extend(found);
                    links.clear();
                    if seal.prev_hash != next {
                        problems.push(format!(
                            "seal {}: follows {} but the chain before it ends at {next}",
                            seal.seq, seal.prev_hash
                        ));
                    }
                    problems.push(format!(
                        "seal {}: its audit record {} is gone (removed without an export)",
                        seal.seq, seal.record_id
                    ));
                    head = seal.hash;
                    continue;
                };
                links.push(Link {
                    seq: seal.seq,
                    prev: seal.prev_hash,
                    hash: seal.hash,
                    record: record.chain_record(),
                });
            }
            let (next, found) = chain::check(&head, &links);
            problems.extend(found);
            head = next;
        }
        let unsealed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM audit_log a \
             WHERE NOT EXISTS (SELECT 1 FROM audit_seals s WHERE s.record_id = a.id)",
        )
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(LiveChain {
            exported,
            sealed,
            unsealed: u64::try_from(unsealed).unwrap_or(0),
            head,
            problems,
        })
    }
}
