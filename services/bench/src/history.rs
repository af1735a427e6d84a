//! `flow-bench history`: a simulated year of a site's daily schedule
//! (generated rows, not real time) in a fresh database — rows and table
//! sizes, `task.list` and `task.get` latency — then the retention pass of
//! `services/scheduler/src/history.rs` at the year's end, and the same
//! figures after it (docs/benchmarks.md, "History: a simulated year").

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use flow_protocol::TaskId;
use flow_scheduler::history::{History, HistoryPolicy};
use flow_store::Store;
use serde::Serialize;
use time::OffsetDateTime;

/// What to generate.
#[derive(Debug, Clone)]
pub struct HistorySpec {
    /// Racks the schedule covers (one task per rack per day).
    pub racks: u32,
    /// Days of history.
    pub days: u32,
    /// Audit records per day (operators' changes).
    pub audit_per_day: u32,
    /// Detail kept, days.
    pub keep_detail_days: u64,
    /// Audit kept, days.
    pub keep_audit_days: u64,
}

/// One table's rows and size.
#[derive(Debug, Clone, Serialize)]
pub struct TableSize {
    /// The table.
    pub table: String,
    /// Live rows.
    pub rows: i64,
    /// Its files with indexes and TOAST, bytes.
    pub bytes: i64,
}

/// Read latencies, milliseconds (median of 21).
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// `task.list` (100 newest).
    pub list_ms: f64,
    /// `task.get` of a task a year old.
    pub get_old_ms: f64,
    /// `task.get` of yesterday's.
    pub get_recent_ms: f64,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryReport {
    /// Racks.
    pub racks: u32,
    /// Days.
    pub days: u32,
    /// Generating the year, seconds.
    pub generate_s: f64,
    /// Before retention.
    pub before: Vec<TableSize>,
    /// Reads before.
    pub before_latency: Latency,
    /// Sealing the year's audit records, seconds.
    pub seal_s: f64,
    /// The retention pass, seconds.
    pub pass_s: f64,
    /// Tasks whose detail was archived.
    pub archived_tasks: u64,
    /// Audit records exported.
    pub exported_audit: u64,
    /// Firings archived.
    pub archived_firings: u64,
    /// Outbox rows removed.
    pub removed_outbox: u64,
    /// Segments written.
    pub segments: usize,
    /// The archive on disk, bytes.
    pub archive_bytes: u64,
    /// After the pass and a plain VACUUM (space reusable, files unchanged).
    pub after_vacuum: Vec<TableSize>,
    /// After VACUUM FULL (the files rewritten to what is live).
    pub after_vacuum_full: Vec<TableSize>,
    /// Reads after.
    pub after_latency: Latency,
    /// `archive.verify` of the whole archive, seconds.
    pub verify_s: f64,
}

const TABLES: [&str; 5] = [
    "tasks",
    "task_steps",
    "outbox",
    "audit_log",
    "schedule_firings",
];

async fn sizes(store: &Store) -> anyhow::Result<Vec<TableSize>> {
    let mut out = Vec::new();
    for table in TABLES {
        let (rows, bytes): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = $1), \
             pg_total_relation_size($1::regclass)",
        )
        .bind(table)
        .fetch_one(store.pool())
        .await?;
        out.push(TableSize {
            table: table.to_owned(),
            rows,
            bytes,
        });
    }
    Ok(out)
}

async fn median_ms<F, Fut>(mut f: F) -> anyhow::Result<f64>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut times = Vec::with_capacity(21);
    for _ in 0..21 {
        let t = Instant::now();
        f().await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

async fn latency(store: &Store, old: TaskId, recent: TaskId) -> anyhow::Result<Latency> {
    Ok(Latency {
        list_ms: median_ms(|| async { Ok(store.list_tasks(100).await.map(drop)?) }).await?,
        get_old_ms: median_ms(|| async { Ok(store.task_record(old).await.map(drop)?) }).await?,
        get_recent_ms: median_ms(|| async { Ok(store.task_record(recent).await.map(drop)?) })
            .await?,
    })
}

/// The year's rows: racks, a daily schedule and its firings, a completed
/// power-on per rack per day (three steps: 8 shelves, 9 switch trays, 18
/// compute trays, each result with its action calls, as a worker writes
/// them), ten published outbox rows per task, operators' audit records.
async fn generate(store: &Store, spec: &HistorySpec) -> anyhow::Result<()> {
    let pool = store.pool();
    let start = OffsetDateTime::now_utc() - time::Duration::days(i64::from(spec.days));
    sqlx::query(
        "INSERT INTO racks (id, name, model) SELECT gen_random_uuid(), \
         'rack-' || lpad(r::text, 4, '0'), 'GB200 NVL72' FROM generate_series(1, $1) r",
    )
    .bind(i64::from(spec.racks))
    .execute(pool)
    .await?;
    sqlx::query(
        "INSERT INTO schedules (id, name, kind, spec, timezone, overlap, request) VALUES \
         (gen_random_uuid(), 'nightly', 'cron', '{\"cron\": \"0 3 * * *\"}', 'UTC', 'skip', \
          '{\"racks\": [], \"operation\": \"power_on\"}')",
    )
    .execute(pool)
    .await?;
    sqlx::query(
        "INSERT INTO schedule_firings (schedule_id, due_at, fired_at, trigger, claimed_at, done_at, outcome) \
         SELECT s.id, $1 + d * interval '1 day', $1 + d * interval '1 day', 'scheduled', \
         $1 + d * interval '1 day', $1 + d * interval '1 day' + interval '5 s', \
         jsonb_build_object('submitted', $3::int, 'refused', 0) \
         FROM schedules s, generate_series(0, $2 - 1) d",
    )
    .bind(start)
    .bind(i64::from(spec.days))
    .bind(i64::from(spec.racks))
    .execute(pool)
    .await?;
    // One day at a time: a statement per day keeps each transaction small.
    for day in 0..i64::from(spec.days) {
        let at = start + time::Duration::days(day);
        sqlx::query(
            "WITH t AS (INSERT INTO tasks (id, request_id, rack_id, rack_name, operation_type, \
               operation_code, status, rule_source, rule_name, rule_snapshot, components, \
               current_stage, created_at, started_at, finished_at, updated_at, schedule_id) \
             SELECT gen_random_uuid(), 'schedule-' || $2 || '-' || r.name, r.id, r.name, \
               'power_control', 'power_on', 'completed', 'builtin', 'power_on (built-in)', \
               jsonb_build_object('version', 'v1', 'steps', jsonb_build_array( \
                 jsonb_build_object('component_type', 'powershelf', 'stage', 1, 'main_operation', jsonb_build_object('name', 'PowerControl')), \
                 jsonb_build_object('component_type', 'nvswitch', 'stage', 2, 'main_operation', jsonb_build_object('name', 'PowerControl')), \
                 jsonb_build_object('component_type', 'compute', 'stage', 3, 'main_operation', jsonb_build_object('name', 'PowerControl'), \
                   'post_operation', jsonb_build_array(jsonb_build_object('name', 'VerifyPowerState', 'expected', 'On'))))), \
               (SELECT jsonb_object_agg(c.ty, (SELECT jsonb_agg(jsonb_build_object('rack', r.name, \
                  'name', c.ty || '-' || lpad(i::text, 2, '0'), 'component_type', c.ty, \
                  'bmc_url', 'https://10.' || (r.n % 250) || '.' || c.k || '.' || i, \
                  'credential_ref', 'vault:bmc/' || r.name, 'resource_id', NULL)) \
                  FROM generate_series(1, c.n) i)) \
                FROM (VALUES ('powershelf', 8, 1), ('nvswitch', 9, 2), ('compute', 18, 3)) c(ty, n, k)), \
               3, $1, $1 + interval '1 s', $1 + interval '60 s', $1 + interval '60 s', \
               (SELECT id FROM schedules LIMIT 1) \
             FROM (SELECT id, name, row_number() OVER (ORDER BY name) AS n FROM racks) r \
             RETURNING id, started_at, finished_at) \
           INSERT INTO task_steps (task_id, step_index, stage, component_type, status, generation, \
             components, budget_ms, started_at, finished_at, results, calls) \
           SELECT t.id, s.idx, s.stage, s.ty, 'completed', 1, s.n, 600000, t.started_at, t.finished_at, \
             (SELECT jsonb_object_agg(s.ty || '-' || lpad(i::text, 2, '0'), jsonb_build_object( \
                'status', 'done', 'result', 'sent On', 'calls', 3, 'error', NULL, 'actions', jsonb_build_array( \
                  jsonb_build_object('action', 'main_operation (PowerControl)', 'attempts', 1, 'error', NULL, \
                    'at_ms', jsonb_build_array(1765000000000 + i)), \
                  jsonb_build_object('action', 'post_operation (VerifyPowerState)', 'attempts', 2, 'error', NULL, \
                    'at_ms', jsonb_build_array(1765000001000 + i, 1765000006000 + i))))) \
              FROM generate_series(1, s.n) i), 3 * s.n \
           FROM t CROSS JOIN (VALUES (0, 1, 'powershelf', 8), (1, 2, 'nvswitch', 9), (2, 3, 'compute', 18)) s(idx, stage, ty, n)",
        )
        .bind(at)
        .bind(day)
        .execute(pool)
        .await
        .with_context(|| format!("day {day}'s tasks"))?;
        sqlx::query(
            "INSERT INTO outbox (subject, msg_id, payload, created_at, published_at) \
             SELECT 'flow.events.task.' || t.id, t.id || '-' || k, \
               jsonb_build_object('schema', 1, 'task_id', t.id, 'at_ms', 1765000000000 + k, \
                 'kind', 'step_finished', 'stage', k % 3 + 1, 'step_index', k % 3, 'generation', 1, \
                 'status', 'completed', 'error', NULL, 'calls', 54), \
               t.created_at, t.created_at + interval '1 s' \
             FROM tasks t, generate_series(1, 10) k WHERE t.created_at = $1",
        )
        .bind(at)
        .execute(pool)
        .await?;
        sqlx::query(
            "INSERT INTO audit_log (at, actor, actor_source, endpoint, kind, racks, request, outcome, message) \
             SELECT $1 + k * interval '1 minute', 'OPS/alice', 'verified', 'rack.label', 'change', \
               ARRAY['rack-' || lpad((k % 100 + 1)::text, 4, '0')], \
               jsonb_build_object('rack', 'rack-' || lpad((k % 100 + 1)::text, 4, '0'), \
                 'labels', jsonb_build_object('row', 'B', 'pdu', 'pdu-' || k)), 'ok', '' \
             FROM generate_series(1, $2) k",
        )
        .bind(at)
        .bind(i64::from(spec.audit_per_day))
        .execute(pool)
        .await?;
    }
    sqlx::query("ANALYZE").execute(pool).await?;
    Ok(())
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            total += dir_bytes(&path);
        } else if let Ok(m) = e.metadata() {
            total += m.len();
        }
    }
    total
}

/// Runs the measurement in database `url` (fresh), archiving to `archive`.
pub async fn run(url: &str, archive: &Path, spec: &HistorySpec) -> anyhow::Result<HistoryReport> {
    let store = Store::connect(url, 4).await?;
    store.migrate().await?;
    let t = Instant::now();
    eprintln!(
        "   generating {} days × {} racks (one power-on task per rack per day)",
        spec.days, spec.racks
    );
    generate(&store, spec).await?;
    let generate_s = t.elapsed().as_secs_f64();
    let ids: (uuid::Uuid, uuid::Uuid) = sqlx::query_as(
        "SELECT (SELECT id FROM tasks ORDER BY created_at LIMIT 1), \
                (SELECT id FROM tasks ORDER BY created_at DESC LIMIT 1)",
    )
    .fetch_one(store.pool())
    .await?;
    let (old, recent) = (TaskId(ids.0), TaskId(ids.1));
    let before = sizes(&store).await?;
    let before_latency = latency(&store, old, recent).await?;

    let mut policy = HistoryPolicy::new(archive);
    policy.detail_for = Duration::from_secs(spec.keep_detail_days * 86_400);
    policy.audit_for = Duration::from_secs(spec.keep_audit_days * 86_400);
    let history = History::open(policy)?;
    let t = Instant::now();
    history.seal(&store).await?;
    let seal_s = t.elapsed().as_secs_f64();
    eprintln!(
        "   retention pass (detail {} days, audit {} days)",
        spec.keep_detail_days, spec.keep_audit_days
    );
    let t = Instant::now();
    let report = history.pass(&store, OffsetDateTime::now_utc()).await?;
    let pass_s = t.elapsed().as_secs_f64();

    sqlx::query("VACUUM ANALYZE").execute(store.pool()).await?;
    let after_vacuum = sizes(&store).await?;
    sqlx::query("VACUUM FULL ANALYZE")
        .execute(store.pool())
        .await?;
    let after_vacuum_full = sizes(&store).await?;
    let after_latency = latency(&store, old, recent).await?;

    let t = Instant::now();
    let check = flow_archive::verify::archive(history.archive())?;
    let verify_s = t.elapsed().as_secs_f64();
    anyhow::ensure!(check.ok(), "the archive does not verify: {check:?}");
    store.pool().close().await;
    Ok(HistoryReport {
        racks: spec.racks,
        days: spec.days,
        generate_s,
        before,
        before_latency,
        seal_s,
        pass_s,
        archived_tasks: report.tasks,
        exported_audit: report.audit,
        archived_firings: report.firings,
        removed_outbox: report.outbox,
        segments: report.segments.len(),
        archive_bytes: dir_bytes(archive),
        after_vacuum,
        after_vacuum_full,
        after_latency,
        verify_s,
    })
}

/// The report as a table.
pub fn table(r: &HistoryReport) -> String {
    let mb = |b: i64| format!("{:.1} MB", b as f64 / 1e6);
    let mut out = format!(
        "history: {} racks × {} days, generated in {:.0} s\n\
         {:<18} {:>12} {:>12} {:>12} {:>12} {:>14}\n",
        r.racks,
        r.days,
        r.generate_s,
        "table",
        "rows before",
        "size before",
        "rows after",
        "after VACUUM",
        "after V. FULL"
    );
    for ((b, v), f) in r
        .before
        .iter()
        .zip(&r.after_vacuum)
        .zip(&r.after_vacuum_full)
    {
        out.push_str(&format!(
            "{:<18} {:>12} {:>12} {:>12} {:>12} {:>14}\n",
            b.table,
            b.rows,
            mb(b.bytes),
            f.rows,
            mb(v.bytes),
            mb(f.bytes)
        ));
    }
    out.push_str(&format!(
        "sealed the audit log in {:.1} s; pass {:.1} s: {} tasks' detail, {} audit records, {} firings archived in {} segments ({:.1} MB), {} outbox rows removed; archive verified in {:.1} s\n\
         task.list {:.1} → {:.1} ms, task.get (a year old) {:.1} → {:.1} ms, task.get (yesterday) {:.1} → {:.1} ms",
        r.seal_s, r.pass_s, r.archived_tasks, r.exported_audit, r.archived_firings, r.segments,
        r.archive_bytes as f64 / 1e6, r.removed_outbox, r.verify_s,
        r.before_latency.list_ms, r.after_latency.list_ms,
        r.before_latency.get_old_ms, r.after_latency.get_old_ms,
        r.before_latency.get_recent_ms, r.after_latency.get_recent_ms,
    ));
    out
}
