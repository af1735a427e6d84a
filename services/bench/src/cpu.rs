//! Where the CPU went while a scenario ran: the machine's busy cores
//! (`/proc/stat`) and each part's CPU seconds (`/proc/<pid>/stat`) between
//! the first submission and the last task's end. Every part shares the
//! machine, so a makespan far above its ideal with every core busy is
//! bounded by CPU, not by a wait.

use std::time::Instant;

use serde::Serialize;

use crate::cluster::Cluster;
use crate::procs::usage_of;

/// The cumulative figures at one moment.
#[derive(Debug, Clone)]
pub struct CpuReading {
    at: Instant,
    /// Busy and total ticks of every core (`/proc/stat`'s `cpu` line).
    machine: Option<(u64, u64)>,
    scheduler: f64,
    workers: f64,
    simulator: f64,
    nats_server: f64,
    postgres: f64,
}

/// CPU between two readings.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CpuWindow {
    /// Seconds between the readings.
    pub wall_s: f64,
    /// The machine's cores.
    pub cores: usize,
    /// Cores busy on average (0 when `/proc/stat` was not readable).
    pub busy_cores: f64,
    /// CPU seconds of the scheduler(s).
    pub scheduler_s: f64,
    /// CPU seconds of every worker together.
    pub workers_s: f64,
    /// CPU seconds of the rack simulators.
    pub simulator_s: f64,
    /// CPU seconds of nats-server.
    pub nats_server_s: f64,
    /// CPU seconds of every `postgres` process (the server is shared: other
    /// databases' work counts too; nothing else runs during a bench).
    pub postgres_s: f64,
    /// The machine's busy CPU seconds not in the parts above: the harness,
    /// the kernel's own threads, anything else.
    pub other_s: f64,
}

/// `/proc/stat`'s first line: (busy, total) ticks. Idle and iowait are not
/// busy.
fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_cpu_line(stat.lines().next()?)
}

fn parse_cpu_line(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let ticks: Vec<u64> = fields.filter_map(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest is in user).
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0);
    Some((total.saturating_sub(idle), total))
}

/// CPU seconds of every process whose command name is `name`.
fn cpu_of_named(name: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim_end() == name)
        })
        .map(|pid| usage_of(pid).cpu_seconds)
        .sum()
}

impl CpuReading {
    /// Reads the machine and every part of `cluster` now.
    pub fn now(cluster: &Cluster) -> Self {
        let usage = cluster.usage();
        CpuReading {
            at: Instant::now(),
            machine: machine_ticks(),
            scheduler: usage.scheduler.cpu_seconds,
            workers: usage.workers.iter().map(|w| w.cpu_seconds).sum(),
            simulator: usage.simulator.cpu_seconds,
            nats_server: usage.nats_server.cpu_seconds,
            postgres: cpu_of_named("postgres"),
        }
    }
}

impl CpuWindow {
    /// What happened between `a` and `b` (taken in that order).
    pub fn between(a: &CpuReading, b: &CpuReading) -> Self {
        let wall_s = b.at.duration_since(a.at).as_secs_f64();
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let d = |x: f64, y: f64| (y - x).max(0.0);
        let (busy_s, busy_cores) = match (a.machine, b.machine) {
            (Some((busy_a, total_a)), Some((busy_b, total_b))) if total_b > total_a => {
                let share = (busy_b - busy_a) as f64 / (total_b - total_a) as f64;
                (share * cores as f64 * wall_s, share * cores as f64)
            }
            _ => (0.0, 0.0),
        };
        let mut w = CpuWindow {
            wall_s,
            cores,
            busy_cores,
            scheduler_s: d(a.scheduler, b.scheduler),
            workers_s: d(a.workers, b.workers),
            simulator_s: d(a.simulator, b.simulator),
            nats_server_s: d(a.nats_server, b.nats_server),
            postgres_s: d(a.postgres, b.postgres),
            other_s: 0.0,
        };
        let parts = w.scheduler_s + w.workers_s + w.simulator_s + w.nats_server_s + w.postgres_s;
        w.other_s = (busy_s - parts).max(0.0);
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_line_counts_idle_and_iowait_as_not_busy() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let line = "cpu  100 5 50 800 40 3 2 0 0 0";
        assert_eq!(parse_cpu_line(line), Some((160, 1000)));
        assert_eq!(parse_cpu_line("cpu0 1 2 3 4"), None);
        assert_eq!(parse_cpu_line("intr 1 2"), None);
    }

    #[test]
    fn this_machine_is_read_and_its_ticks_only_grow() {
        let (busy_a, total_a) = machine_ticks().expect("/proc/stat is readable on Linux");
        let mut x = 0u64;
        let start = Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        assert_ne!(x, 1);
        let (busy_b, total_b) = machine_ticks().expect("/proc/stat is readable on Linux");
        assert!(
            total_b > total_a && busy_b > busy_a,
            "{busy_a}/{total_a} -> {busy_b}/{total_b}"
        );
    }
}
