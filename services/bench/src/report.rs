//! Printing what the scenarios measured: one table for people, JSON for
//! `docs/benchmarks.md`, the journal (`services/bench/results/JOURNAL.md`)
//! and comparisons between runs.

use comfy_table::{Table, presets::ASCII_MARKDOWN};

use crate::scenario::Report;

fn f1(x: f64) -> String {
    format!("{x:.1}")
}

fn f2(x: f64) -> String {
    format!("{x:.2}")
}

/// Ideals below this are a zero-latency scenario's (the throughput
/// scenarios): its ratio says nothing about the run, and is not shown.
const MEANINGFUL_IDEAL_S: f64 = 0.1;

fn ratio(ideal_s: f64, ratio: f64) -> String {
    if ideal_s < MEANINGFUL_IDEAL_S {
        "–".to_owned()
    } else {
        format!("{ratio:.2}")
    }
}

/// The summary table, one row per scenario.
pub fn table(reports: &[Report]) -> String {
    let mut t = Table::new();
    t.load_preset(ASCII_MARKDOWN);
    t.set_header([
        "scenario",
        "racks",
        "workers",
        "tasks ok",
        "makespan s",
        "ideal s",
        "ratio",
        "polled ideal s (ratio)",
        "stage adv p50/p99/max ms",
        "jobs/s",
        "calls/s",
        "raw JS msg/s",
        "jobs/raw",
        "peak req/BMC",
        "req/call",
        "req/component",
    ]);
    for r in reports {
        let ok = r.statuses.get("completed").copied().unwrap_or(0);
        t.add_row([
            r.scenario.name.clone(),
            r.scenario.racks.to_string(),
            r.scenario.workers.to_string(),
            format!("{ok}/{}", r.tasks),
            f1(r.makespan_s),
            f1(r.ideal_s),
            ratio(r.ideal_s, r.ratio),
            format!(
                "{} ({})",
                f1(r.polled_ideal_s),
                ratio(r.polled_ideal_s, r.polled_ratio)
            ),
            format!(
                "{:.0}/{:.0}/{:.0}",
                r.stage_advance.p50_ms, r.stage_advance.p99_ms, r.stage_advance.max_ms
            ),
            f1(r.jobs_per_s),
            f1(r.calls_per_s),
            format!("{:.0}", r.raw_jetstream.per_second),
            format!("{:.3}", r.jobs_vs_raw),
            r.peak_requests_per_bmc.to_string(),
            format!("{:.2}", r.requests_per_call),
            f1(r.requests_per_component),
        ]);
    }
    t.to_string()
}

/// Redfish requests per component by what they were for, as the
/// simulator tells them apart (`services/rack-sim/src/gauge.rs`): the
/// reads and commands an operation needs, and what reaching a BMC costs
/// once (a login, discovering its resources, opening its event stream).
pub fn requests_table(reports: &[Report]) -> String {
    const PURPOSES: [&str; 5] = ["read", "command", "session", "discovery", "events"];
    let mut t = Table::new();
    t.load_preset(ASCII_MARKDOWN);
    let mut header = vec!["scenario".to_owned(), "req/component".to_owned()];
    header.extend(PURPOSES.iter().map(|p| (*p).to_owned()));
    header.push("read + command".to_owned());
    t.set_header(header);
    for r in reports {
        let of = |p: &str| {
            r.requests_per_component_by_purpose
                .get(p)
                .copied()
                .unwrap_or_default()
        };
        let mut row = vec![r.scenario.name.clone(), f1(r.requests_per_component)];
        row.extend(PURPOSES.iter().map(|p| format!("{:.2}", of(p))));
        row.push(format!("{:.2}", of("read") + of("command")));
        t.add_row(row);
    }
    t.to_string()
}

/// CPU seconds and peak RSS per process, one row per scenario.
pub fn usage_table(reports: &[Report]) -> String {
    let mut t = Table::new();
    t.load_preset(ASCII_MARKDOWN);
    t.set_header([
        "scenario",
        "scheduler CPU s / RSS MiB",
        "workers CPU s / RSS MiB (each)",
        "simulator CPU s / RSS MiB",
        "nats-server CPU s / RSS MiB",
        "RSS KiB per rack: scheduler / workers",
    ]);
    for r in reports {
        let u = &r.usage;
        let pair =
            |x: &crate::procs::Usage| format!("{:.1} / {:.0}", x.cpu_seconds, x.peak_rss_mib);
        t.add_row([
            r.scenario.name.clone(),
            pair(&u.scheduler),
            u.workers.iter().map(pair).collect::<Vec<_>>().join("; "),
            pair(&u.simulator),
            pair(&u.nats_server),
            {
                let racks = r.scenario.racks.max(1) as f64;
                let workers: f64 = u.workers.iter().map(|w| w.peak_rss_mib).sum();
                format!(
                    "{:.0} / {:.0}",
                    u.scheduler.peak_rss_mib * 1024.0 / racks,
                    workers * 1024.0 / racks
                )
            },
        ]);
    }
    t.to_string()
}

/// Where the CPU went between the first submission and the last task's
/// end, one row per scenario (`services/bench/src/cpu.rs`).
pub fn cpu_table(reports: &[Report]) -> String {
    let mut t = Table::new();
    t.load_preset(ASCII_MARKDOWN);
    t.set_header([
        "scenario",
        "window s",
        "cores busy",
        "all busy s (longest)",
        "CPU s: scheduler",
        "workers",
        "simulator",
        "nats-server",
        "postgres",
        "other",
    ]);
    for r in reports {
        let c = &r.cpu;
        t.add_row([
            r.scenario.name.clone(),
            f1(c.wall_s),
            format!("{:.2} of {}", c.busy_cores, c.cores),
            format!("{:.1} ({:.1})", c.saturated_s, c.longest_saturated_s),
            format!("{:.2}", c.scheduler_s),
            format!("{:.2}", c.workers_s),
            format!("{:.2}", c.simulator_s),
            format!("{:.2}", c.nats_server_s),
            format!("{:.2}", c.postgres_s),
            format!("{:.2}", c.other_s),
        ]);
    }
    t.to_string()
}

/// What each step job cost in writes, one row per scenario.
pub fn writes_table(reports: &[Report]) -> String {
    let mut t = Table::new();
    t.load_preset(ASCII_MARKDOWN);
    t.set_header([
        "scenario",
        "step jobs",
        "JS writes/job",
        "of which: jobs, results, events, checkpoints, membership",
        "acks+naks/job",
        "PG commits/job",
        "PG rows/job",
        "PG WAL syncs/job",
    ]);
    for r in reports {
        let w = &r.writes;
        let per = |stream: &str| {
            w.appended.get(stream).copied().unwrap_or(0) as f64 / w.step_jobs.max(1) as f64
        };
        t.add_row([
            r.scenario.name.clone(),
            w.step_jobs.to_string(),
            f1(w.js_writes_per_job),
            format!(
                "{} / {} / {} / {} / {}",
                f1(per("FLOW_JOBS")),
                f1(per("FLOW_RESULTS")),
                f1(per("FLOW_EVENTS")),
                f1(per("KV_flow_job_state")),
                f2(per("KV_flow_workers"))
            ),
            f1(w.js_acks_per_job),
            f1(w.pg_commits_per_job),
            f1(w.pg_rows_per_job),
            f1(w.pg_wal_syncs_per_job),
        ]);
    }
    t.to_string()
}

/// What an operation cost, one row per scenario, the goals beside
/// (`services/bench/src/cost.rs`).
pub fn cost_table(reports: &[Report]) -> String {
    use crate::cost::{GOAL_CONTROL_MS_PER_COMPONENT, GOAL_JS_WRITES_PER_JOB, GOAL_WORKER_VS_RAW};
    let mut t = Table::new();
    t.load_preset(ASCII_MARKDOWN);
    t.set_header([
        "scenario".to_owned(),
        "components".to_owned(),
        format!("control plane ms/component (goal ≤ {GOAL_CONTROL_MS_PER_COMPONENT})"),
        "control plane ms/job (nats)".to_owned(),
        format!("JS writes/job (goal ≤ {GOAL_JS_WRITES_PER_JOB})"),
        "worker ms/component".to_owned(),
        "worker µs/request".to_owned(),
        "raw client µs/request".to_owned(),
        format!("worker/raw (goal ≤ {GOAL_WORKER_VS_RAW})"),
        "simulator µs/request (raw loop)".to_owned(),
    ]);
    for r in reports {
        let c = &r.cost;
        t.add_row([
            r.scenario.name.clone(),
            c.components.to_string(),
            format!("{:.3}", c.control_ms_per_component),
            format!("{:.2} ({:.2})", c.control_ms_per_job, c.nats_ms_per_job),
            f1(r.writes.js_writes_per_job),
            format!("{:.3}", c.worker_ms_per_component),
            format!("{:.0}", c.worker_us_per_request),
            format!("{:.0}", c.raw.client_us_per_request),
            format!("{:.2}", c.worker_vs_raw),
            format!(
                "{:.0} ({:.0})",
                c.simulator_us_per_request, c.raw.simulator_us_per_request
            ),
        ]);
    }
    t.to_string()
}
