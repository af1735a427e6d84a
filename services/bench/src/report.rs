//! Printing what the scenarios measured: one table for people, JSON for
//! the README and for comparisons between runs.

use comfy_table::{Table, presets::ASCII_MARKDOWN};

use crate::scenario::Report;

fn f1(x: f64) -> String {
    format!("{x:.1}")
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
        "stage adv p50/p99/max ms",
        "jobs/s",
        "calls/s",
        "raw JS msg/s",
        "jobs/raw",
        "peak req/BMC",
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
            format!("{:.2}", r.ratio),
            format!(
                "{:.0}/{:.0}/{:.0}",
                r.stage_advance.p50_ms, r.stage_advance.p99_ms, r.stage_advance.max_ms
            ),
            f1(r.jobs_per_s),
            f1(r.calls_per_s),
            format!("{:.0}", r.raw_jetstream.per_second),
            format!("{:.3}", r.jobs_vs_raw),
            r.peak_requests_per_bmc.to_string(),
        ]);
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
        ]);
    }
    t.to_string()
}
