//! Where the CPU went while a scenario ran: the machine's busy cores
//! (`/proc/stat`) and each part's CPU seconds (`/proc/<pid>/stat`) between
//! the first submission and the last task's end. Every part shares the
//! machine, so a makespan far above its ideal with every core busy is
//! bounded by CPU, not by a wait. An average hides bursts (a site's
//! stage boundaries command thousands of BMCs at once), so the busy cores
//! are also sampled every [`SAMPLE`]: how long every core was busy, and
//! the longest such stretch.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// Seconds of the window in which the cores were at least
    /// [`SATURATED`] busy (from [`Saturation`]'s samples).
    pub saturated_s: f64,
    /// The longest run of such samples, seconds.
    pub longest_saturated_s: f64,
}

/// How often [`Saturation`] samples the machine's busy cores.
pub const SAMPLE: Duration = Duration::from_millis(100);

/// The share of the cores' time busy from which a sample counts as
/// saturated: what runs then waits for a core.
pub const SATURATED: f64 = 0.9;

/// Samples the machine's busy share every [`SAMPLE`] until dropped or
/// [`Saturation::finish`]ed.
pub struct Saturation {
    shares: Arc<Mutex<Vec<f64>>>,
    sampler: tokio::task::JoinHandle<()>,
}

impl Saturation {
    /// Starts sampling (nothing is sampled when `/proc/stat` cannot be read).
    pub fn start() -> Self {
        let shares = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&shares);
        let sampler = tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last = machine_ticks();
            loop {
                tick.tick().await;
                let now = machine_ticks();
                if let (Some((busy_a, total_a)), Some((busy_b, total_b))) = (last, now)
                    && total_b > total_a
                {
                    let share = busy_b.saturating_sub(busy_a) as f64 / (total_b - total_a) as f64;
                    into.lock().unwrap_or_else(|e| e.into_inner()).push(share);
                }
                last = now;
            }
        });
        Saturation { shares, sampler }
    }

    /// Stops sampling: (seconds saturated, longest saturated stretch in
    /// seconds).
    pub fn finish(self) -> (f64, f64) {
        self.sampler.abort();
        let shares = self.shares.lock().unwrap_or_else(|e| e.into_inner());
        saturated(&shares, SAMPLE)
    }
}

impl Drop for Saturation {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

/// Of samples `every` apart: the time at least [`SATURATED`] busy, and the
/// longest unbroken stretch of it.
fn saturated(shares: &[f64], every: Duration) -> (f64, f64) {
    let step = every.as_secs_f64();
    let (mut total, mut run, mut longest) = (0usize, 0usize, 0usize);
    for &share in shares {
        if share >= SATURATED {
            total += 1;
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    (total as f64 * step, longest as f64 * step)
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
    /// What happened between `a` and `b` (taken in that order), with the
    /// saturation `sampled` over the same window.
    pub fn between(a: &CpuReading, b: &CpuReading, sampled: Saturation) -> Self {
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
            saturated_s: 0.0,
            longest_saturated_s: 0.0,
        };
        (w.saturated_s, w.longest_saturated_s) = sampled.finish();
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
    fn saturation_counts_busy_samples_and_the_longest_unbroken_run() {
        let every = Duration::from_millis(100);
        let shares = [0.2, 0.95, 1.0, 0.5, 0.9, 0.91, 0.99, 0.89, 1.0];
        let (total, longest) = saturated(&shares, every);
        assert!((total - 0.6).abs() < 1e-9, "{total}");
        assert!((longest - 0.3).abs() < 1e-9, "{longest}");
        assert_eq!(saturated(&[], every), (0.0, 0.0));
        assert_eq!(saturated(&[0.1, 0.89], every), (0.0, 0.0));
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
