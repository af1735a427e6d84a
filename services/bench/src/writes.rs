//! What a run wrote, counted from the outside: JetStream's own figures
//! (each stream's appended messages, each consumer's deliveries, read from
//! the server's monitoring port `/jsz`) and Postgres's (`pg_stat_database`
//! and `pg_stat_wal`), read before and after the run; the report divides
//! them by the step jobs.
//!
//! Every JetStream append is a write synced to disk (`sync_interval:
//! always`, as the bench's server runs); every delivery is answered once by
//! an ack or a nak (progress acks are not counted). A Postgres connection
//! flushes its statistics at most once a second, and one gone idle within
//! about 10 s, so the last seconds of a run may be missing from the
//! "after" reading.

use std::collections::BTreeMap;

use anyhow::Context;
use serde::Serialize;

/// One reading of the counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// Messages appended, by stream (its last sequence number).
    pub appended: BTreeMap<String, u64>,
    /// Messages delivered, by `stream/consumer`.
    pub delivered: BTreeMap<String, u64>,
    /// Transactions committed in the run's database (reads included).
    pub pg_commits: u64,
    /// Rows inserted, updated and deleted in the run's database.
    pub pg_rows: u64,
    /// WAL flushes to disk of the whole Postgres server.
    pub pg_wal_syncs: u64,
}

/// What a run wrote: the difference of two readings, per step job.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Writes {
    /// Step jobs the figures are divided by.
    pub step_jobs: usize,
    /// Messages appended, by stream.
    pub appended: BTreeMap<String, u64>,
    /// Messages delivered (each answered by one ack or nak), by
    /// `stream/consumer`.
    pub delivered: BTreeMap<String, u64>,
    /// JetStream appends per step job (every stream and the KV bucket).
    pub js_writes_per_job: f64,
    /// Acks and naks per step job (every consumer).
    pub js_acks_per_job: f64,
    /// Postgres transactions per step job (reads included).
    pub pg_commits_per_job: f64,
    /// Postgres rows written per step job.
    pub pg_rows_per_job: f64,
    /// Postgres WAL flushes per step job (group commit shares one flush).
    pub pg_wal_syncs_per_job: f64,
}

impl Writes {
    /// `after - before`, per `step_jobs`.
    pub fn between(before: &Reading, after: &Reading, step_jobs: usize) -> Writes {
        let diff = |a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>| {
            a.iter()
                .map(|(k, v)| (k.clone(), v.saturating_sub(*b.get(k).unwrap_or(&0))))
                .filter(|(_, v)| *v > 0)
                .collect::<BTreeMap<_, _>>()
        };
        let appended = diff(&after.appended, &before.appended);
        let delivered = diff(&after.delivered, &before.delivered);
        let per = |n: u64| n as f64 / step_jobs.max(1) as f64;
        Writes {
            step_jobs,
            js_writes_per_job: per(appended.values().sum()),
            js_acks_per_job: per(delivered.values().sum()),
            pg_commits_per_job: per(after.pg_commits.saturating_sub(before.pg_commits)),
            pg_rows_per_job: per(after.pg_rows.saturating_sub(before.pg_rows)),
            pg_wal_syncs_per_job: per(after.pg_wal_syncs.saturating_sub(before.pg_wal_syncs)),
            appended,
            delivered,
        }
    }
}

/// Reads JetStream's counters from the monitoring port and Postgres's for
/// `database` over `database_url`.
pub async fn read(
    http: &reqwest::Client,
    monitor_port: u16,
    database_url: &str,
    database: &str,
) -> anyhow::Result<Reading> {
    let jsz: serde_json::Value = http
        .get(format!(
            "http://127.0.0.1:{monitor_port}/jsz?streams=true&consumers=true&config=true"
        ))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await
        .context("reading /jsz")?;
    let mut reading = jetstream_counts(&jsz);
    let (commits, rows, syncs) = postgres_counts(database_url, database).await?;
    reading.pg_commits = commits;
    reading.pg_rows = rows;
    reading.pg_wal_syncs = syncs;
    Ok(reading)
}

/// Each stream's last sequence and each consumer's delivered count, from a
/// `/jsz?streams=true&consumers=true&config=true` answer (without
/// `config=true` the server leaves out each consumer's config, and a watch
/// could not be told from a consumer that is acknowledged).
fn jetstream_counts(jsz: &serde_json::Value) -> Reading {
    let mut reading = Reading::default();
    let accounts = jsz["account_details"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for account in &accounts {
        for stream in account["stream_detail"].as_array().into_iter().flatten() {
            let Some(name) = stream["name"].as_str() else {
                continue;
            };
            let last = stream["state"]["last_seq"].as_u64().unwrap_or(0);
            *reading.appended.entry(name.to_owned()).or_default() += last;
            for consumer in stream["consumer_detail"].as_array().into_iter().flatten() {
                // A watch (an ordered consumer) is never acknowledged.
                if consumer["config"]["ack_policy"] == "none" {
                    continue;
                }
                let cname = consumer["name"].as_str().unwrap_or("?");
                let delivered = consumer["delivered"]["consumer_seq"].as_u64().unwrap_or(0);
                *reading
                    .delivered
                    .entry(format!("{name}/{cname}"))
                    .or_default() += delivered;
            }
        }
    }
    reading
}

async fn postgres_counts(url: &str, database: &str) -> anyhow::Result<(u64, u64, u64)> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let (commits,): (i64,) =
        sqlx::query_as("SELECT xact_commit FROM pg_stat_database WHERE datname = $1")
            .bind(database)
            .fetch_one(&mut conn)
            .await?;
    // The run's database only (this connection is to it).
    let (rows,): (i64,) = sqlx::query_as(
        "SELECT COALESCE(SUM(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint FROM pg_stat_user_tables",
    )
    .fetch_one(&mut conn)
    .await?;
    let (syncs,): (i64,) = sqlx::query_as("SELECT wal_sync FROM pg_stat_wal")
        .fetch_one(&mut conn)
        .await?;
    let _ = conn.close().await;
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok((n(commits), n(rows), n(syncs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_come_from_streams_and_consumers_and_differences_are_per_job() {
        let jsz = serde_json::json!({"account_details": [{"stream_detail": [
            {"name": "FLOW_JOBS", "state": {"last_seq": 30},
             "consumer_detail": [{"name": "flow-workers", "delivered": {"consumer_seq": 45}}]},
            {"name": "KV_flow_workers", "state": {"last_seq": 7},
             "consumer_detail": [{"name": "watch", "config": {"ack_policy": "none"},
                                  "delivered": {"consumer_seq": 28}}]},
            {"name": "KV_flow_job_state", "state": {"last_seq": 60}}
        ]}]});
        let after = Reading {
            pg_commits: 110,
            pg_rows: 50,
            pg_wal_syncs: 20,
            ..jetstream_counts(&jsz)
        };
        let before = Reading {
            appended: BTreeMap::from([("FLOW_JOBS".to_owned(), 10)]),
            pg_commits: 10,
            ..Reading::default()
        };
        let w = Writes::between(&before, &after, 20);
        assert_eq!(w.appended["FLOW_JOBS"], 20);
        assert_eq!(w.appended["KV_flow_job_state"], 60);
        assert_eq!(w.delivered["FLOW_JOBS/flow-workers"], 45);
        assert!(
            !w.delivered.contains_key("KV_flow_workers/watch"),
            "a watch acks nothing"
        );
        assert!((w.js_writes_per_job - 4.35).abs() < 1e-9);
        assert!((w.js_acks_per_job - 2.25).abs() < 1e-9);
        assert!((w.pg_commits_per_job - 5.0).abs() < 1e-9);
        assert!((w.pg_rows_per_job - 2.5).abs() < 1e-9);
        assert!((w.pg_wal_syncs_per_job - 1.0).abs() < 1e-9);
    }
}
