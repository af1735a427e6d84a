//! `flow-bench`: Flow's benchmark harness and fault drills.
//!
//! It starts a whole installation from the built binaries (a private
//! `nats-server`, a fresh database, `flow-rack-sim`, `flow-scheduler`, W
//! `flow-worker`s, each a child process), submits one operation to every
//! rack and reports what it measured: makespan beside the ideal that the
//! rule and the simulator's timing model allow, stage-advance latency, step
//! jobs and hardware calls per second beside the raw JetStream rate of the
//! same server, CPU and peak RSS per process, and the most requests any one
//! BMC saw at once. `drill` power-cycles racks while killing workers, the
//! scheduler, NATS and Postgres under them (or, `drill restore`, losing
//! the database and restoring a backup), and checks that nothing was lost,
//! stuck or commanded twice too often.
//!
//! ```text
//! scripts/bench                       # every scenario, release build
//! scripts/bench run nvl72 firmware    # some scenarios
//! scripts/bench drill                 # the full drill: 50 racks
//! scripts/bench drill restore         # the database lost and restored
//! scripts/bench drill upgrade         # a rollout across a rolling upgrade
//! scripts/bench leak                  # leak containment: 25 racks
//! scripts/bench watch-1000            # watchers over 1,000 racks, one killed
//! ```

mod api;
mod cluster;
mod cost;
mod cpu;
mod drill;
mod history;
mod ideal;
mod leak;
mod measure;
mod power;
mod procs;
mod report;
mod rollout;
mod scenario;
mod upgrade;
mod watch;
mod writes;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};

use crate::cluster::Tools;
use crate::drill::{DrillSpec, Fault};

/// Prints a report as JSON, writes it where `--json` says, and removes
/// the work directory unless `--work-dir` named it.
fn publish<R: serde::Serialize>(
    tools: &ToolArgs,
    work: &std::path::Path,
    r: &R,
) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(r)?);
    if let Some(path) = &tools.json {
        std::fs::write(path, serde_json::to_vec_pretty(r)?)?;
    }
    if tools.work_dir.is_none() {
        let _ = std::fs::remove_dir_all(work);
    }
    Ok(())
}

/// Flow's benchmark harness and fault drills.
#[derive(Debug, Parser)]
#[command(name = "flow-bench", version, about)]
struct Cli {
    #[command(flatten)]
    tools: ToolArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct ToolArgs {
    /// Directory with flow-scheduler, flow-worker and flow-rack-sim
    /// (default: next to this binary).
    #[arg(long, global = true)]
    bin_dir: Option<PathBuf>,
    /// A nats-server >= 2.10 (default: $FLOW_NATS_SERVER, then PATH).
    #[arg(long, global = true, env = "FLOW_NATS_SERVER")]
    nats_server: Option<PathBuf>,
    /// Postgres URL of a user that may create databases.
    #[arg(
        long,
        global = true,
        env = "FLOW_TEST_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    database_url: String,
    /// Keep logs and stores here (default: a fresh temporary directory,
    /// removed after a successful run).
    #[arg(long, global = true)]
    work_dir: Option<PathBuf>,
    /// Write the JSON report here.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run benchmark scenarios (default: all of them) and print a table.
    Run {
        /// Scenarios: nvl72, site, site-1000, firmware, scale-w1, scale-w2, scale-w4,
        /// smoke (tests), or all.
        scenarios: Vec<String>,
        /// Override the number of racks of every scenario.
        #[arg(long)]
        racks: Option<usize>,
        /// Override the number of workers of every scenario.
        #[arg(long)]
        workers: Option<usize>,
    },
    /// A firmware rollout over a site (phases 1, 10, 50, 100 %,
    /// auto-advance) against the ideal of its plan, then the time from a
    /// failure to its gate's pause.
    Rollout {
        /// Racks.
        #[arg(long, default_value_t = 1000)]
        racks: usize,
        /// Workers.
        #[arg(long, default_value_t = 4)]
        workers: usize,
        /// Racks' tasks open at once.
        #[arg(long, default_value_t = 100)]
        max_concurrent: u32,
        /// Racks of the gate run.
        #[arg(long, default_value_t = 20)]
        gate_racks: usize,
    },
    /// Leaks raised in the simulator on one tray of every rack, idle and
    /// while a long task runs on each rack: raise → tray off (p50/p99),
    /// and how many long tasks were preempted.
    Leak {
        /// Racks.
        #[arg(long, default_value_t = 25)]
        racks: usize,
        /// Workers (the first also watches the BMCs).
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// The long task's wait, seconds.
        #[arg(long, default_value_t = 120)]
        long_task_seconds: u64,
    },
    /// Hardware watchers over a site: W workers also watch and divide the
    /// BMCs; during a site-wide power-on leaks are raised on random trays
    /// and one watcher is killed halfway: raise → event → ForceOff
    /// (p50/p99), takeover, each watcher's memory and sockets, leaks lost
    /// and duplicated.
    #[command(name = "watch-1000")]
    Watch1000 {
        /// Racks.
        #[arg(long, default_value_t = 1000)]
        racks: usize,
        /// Workers.
        #[arg(long, default_value_t = 4)]
        workers: usize,
        /// Of those, watchers (at least 2: one is killed).
        #[arg(long, default_value_t = 4)]
        watchers: usize,
        /// Leaks raised, each on a different rack.
        #[arg(long, default_value_t = 100)]
        leaks: usize,
        /// The pause between two leaks, milliseconds.
        #[arg(long, default_value_t = 250)]
        spacing_ms: u64,
        /// Each watcher's poll interval for BMCs without an event stream.
        #[arg(long, default_value_t = 60.0)]
        poll_seconds: f64,
        /// The simulator's time scale (0.2: a power-on long enough for the
        /// leaks to land in it).
        #[arg(long, default_value_t = 0.2)]
        time_scale: f64,
    },
    /// A site powered on unbudgeted, then with each row's budget set from
    /// the first run's peaks: peaks and trips from the simulator's record.
    Power {
        /// Racks.
        #[arg(long, default_value_t = 250)]
        racks: usize,
        /// Workers.
        #[arg(long, default_value_t = 4)]
        workers: usize,
        /// The share of the unbudgeted peak's excess over steady draw a
        /// row's budget allows.
        #[arg(long, default_value_t = 0.6)]
        fraction: f64,
    },
    /// A simulated year of a site's daily schedule (generated rows) in a
    /// fresh database: rows, table sizes and task.list/task.get latency
    /// before and after the retention pass.
    History {
        /// Racks (one task per rack per day).
        #[arg(long, default_value_t = 100)]
        racks: u32,
        /// Days of history.
        #[arg(long, default_value_t = 365)]
        days: u32,
        /// Operators' audit records per day.
        #[arg(long, default_value_t = 20)]
        audit_per_day: u32,
        /// Detail kept, days.
        #[arg(long, default_value_t = 90)]
        keep_detail_days: u64,
        /// Audit records kept, days.
        #[arg(long, default_value_t = 400)]
        keep_audit_days: u64,
    },
    /// Power-cycle racks under faults and check nothing was lost.
    Drill {
        /// A named drill: `restore` (the database backed up, lost and
        /// restored in each phase; no other fault unless --faults names
        /// more), or `upgrade` (a rollout started on the previous release,
        /// its processes replaced one at a time: --from-bin).
        #[arg(value_enum)]
        preset: Option<DrillPreset>,
        /// Racks.
        #[arg(long, default_value_t = 50)]
        racks: usize,
        /// Workers.
        #[arg(long, default_value_t = 3)]
        workers: usize,
        /// Faults (default: all).
        #[arg(long, value_enum, value_delimiter = ',')]
        faults: Vec<Fault>,
        /// Kill a worker this often (seconds).
        #[arg(long, default_value_t = 3.0)]
        worker_kill_every: f64,
        /// The short drill for `scripts/test`: 3 racks, 2 workers.
        #[arg(long)]
        short: bool,
        /// On a 3-node JetStream cluster (every stream R3) with 3
        /// schedulers; the faults are the nodes' (leader kills, a
        /// partition).
        #[arg(long)]
        cluster: bool,
        /// `drill upgrade`: the previous release's flow-scheduler and
        /// flow-worker (scripts/bench drill upgrade builds them).
        #[arg(long)]
        from_bin: Option<PathBuf>,
        /// `drill upgrade`: what they were built from, for the report.
        #[arg(long, default_value = "previous")]
        from: String,
    },
}

/// Prints a drill's report (and writes it with `--json`); an error listing
/// its problems (the logs kept in `work`), else the work directory removed
/// unless it was given, and `passed` said.
fn drill_verdict<R: serde::Serialize>(
    args: &ToolArgs,
    report: &R,
    problems: &[String],
    work: &std::path::Path,
    what: &str,
    passed: &str,
) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(report)?);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(report)?)?;
    }
    if !problems.is_empty() {
        bail!(
            "{what} found {} problem(s); logs in {}:\n  {}",
            problems.len(),
            work.display(),
            problems.join("\n  ")
        );
    }
    if args.work_dir.is_none() {
        let _ = std::fs::remove_dir_all(work);
    }
    eprintln!("{what} passed: {passed}");
    Ok(())
}

/// A named drill (`scripts/bench drill restore`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DrillPreset {
    /// Tasks running, the database backed up, lost, restored and the
    /// scheduler started again with `--restored`.
    Restore,
    /// A rollout started on the previous release's binaries; the
    /// scheduler, then each worker, replaced by the current build.
    Upgrade,
}

fn tools(a: &ToolArgs) -> anyhow::Result<Tools> {
    let bin_dir = match &a.bin_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("this binary has no directory")?
            .to_path_buf(),
    };
    for b in ["flow-scheduler", "flow-worker", "flow-rack-sim"] {
        if !bin_dir.join(b).exists() {
            bail!(
                "{} is missing: build the binaries first (cargo build --bins, or --release for \
                 benchmarks) or pass --bin-dir",
                bin_dir.join(b).display()
            );
        }
    }
    let nats_server = match &a.nats_server {
        Some(p) => p.clone(),
        None => which("nats-server").context(
            "no nats-server: set FLOW_NATS_SERVER (scripts/test and scripts/bench install one)",
        )?,
    };
    Ok(Tools {
        flow_bin_dir: bin_dir.clone(),
        bin_dir,
        nats_server,
        database_url: a.database_url.clone(),
    })
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| PathBuf::from(d).join(name))
        .find(|p| p.exists())
}

fn work_dir(a: &ToolArgs, what: &str) -> PathBuf {
    a.work_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "flow-bench-{what}-{}",
            uuid::Uuid::new_v4().simple()
        ))
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FLOW_BENCH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let tools = tools(&cli.tools)?;
    // On SIGINT or SIGTERM the run is dropped, and with it every child
    // process (each is killed when its handle drops): nothing is left over.
    tokio::select! {
        result = run(cli, tools) => result,
        () = flow_telemetry::shutdown_signal() => bail!("interrupted: every process this run started was stopped"),
    }
}

async fn run(cli: Cli, tools: Tools) -> anyhow::Result<()> {
    match cli.command {
        Command::Run {
            scenarios,
            racks,
            workers,
        } => {
            let catalogue = scenario::catalogue();
            let mut chosen = Vec::new();
            if scenarios.is_empty() || scenarios.iter().any(|s| s == "all") {
                chosen = catalogue;
            } else {
                for name in &scenarios {
                    let s = if name == "smoke" {
                        scenario::smoke()
                    } else {
                        catalogue
                            .iter()
                            .find(|s| &s.name == name)
                            .cloned()
                            .with_context(|| {
                                format!(
                                    "unknown scenario {name:?}; known: {}, smoke, all",
                                    catalogue
                                        .iter()
                                        .map(|s| s.name.as_str())
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                )
                            })?
                    };
                    chosen.push(s);
                }
            }
            let mut reports = Vec::new();
            for mut s in chosen {
                if let Some(r) = racks {
                    s.racks = r;
                }
                if let Some(w) = workers {
                    s.workers = w;
                }
                let work = work_dir(&cli.tools, &s.name);
                eprintln!(
                    "== {}: {} ({} racks, {} workers)",
                    s.name, s.about, s.racks, s.workers
                );
                let r = scenario::run(&tools, &s, &work).await?;
                if cli.tools.work_dir.is_none() {
                    let _ = std::fs::remove_dir_all(&work);
                }
                eprintln!(
                    "   makespan {:.1} s (ideal {:.1} s, polled {:.1} s), {:.1} jobs/s, {:.1} calls/s",
                    r.makespan_s, r.ideal_s, r.polled_ideal_s, r.jobs_per_s, r.calls_per_s
                );
                reports.push(r);
            }
            println!("{}", report::table(&reports));
            println!();
            println!("{}", report::requests_table(&reports));
            println!();
            println!("{}", report::usage_table(&reports));
            println!();
            println!("{}", report::cpu_table(&reports));
            println!();
            println!("{}", report::writes_table(&reports));
            println!();
            println!("{}", report::cost_table(&reports));
            if let Some(path) = &cli.tools.json {
                std::fs::write(path, serde_json::to_vec_pretty(&reports)?)?;
            }
            for r in &reports {
                if r.statuses.get("completed").copied().unwrap_or(0) != r.tasks {
                    bail!(
                        "{}: not every task completed: {:?}\n  {}",
                        r.scenario.name,
                        r.statuses,
                        r.failures.join("\n  ")
                    );
                }
            }
            Ok(())
        }
        Command::Rollout {
            racks,
            workers,
            max_concurrent,
            gate_racks,
        } => {
            let spec = rollout::RolloutSpec {
                racks,
                workers,
                max_concurrent,
                phases: vec![1, 10, 50, 100],
                time_scale: 0.05,
                gate_racks: gate_racks.min(racks),
            };
            let work = work_dir(&cli.tools, "rollout");
            eprintln!(
                "== rollout: firmware over {racks} racks, phases 1/10/50/100 %, at most {max_concurrent} at once, {workers} workers"
            );
            let r = rollout::run(&tools, &spec, &work).await?;
            publish(&cli.tools, &work, &r)?;
            eprintln!(
                "   {} in {:.1} s (ideal {:.1} s, ratio {:.2}); gate paused {:.0} ms after the failure, {} started after it",
                r.status, r.makespan_s, r.ideal_s, r.ratio, r.gate_pause_ms, r.started_after_trip
            );
            if r.started_after_trip > 0 || r.completed != racks {
                bail!("the rollout did not hold: {r:?}");
            }
            Ok(())
        }
        Command::History {
            racks,
            days,
            audit_per_day,
            keep_detail_days,
            keep_audit_days,
        } => {
            let spec = history::HistorySpec {
                racks,
                days,
                audit_per_day,
                keep_detail_days,
                keep_audit_days,
            };
            let work = work_dir(&cli.tools, "history");
            eprintln!("== history: a simulated year, then retention");
            let name = format!("flow_bench_{}", uuid::Uuid::new_v4().simple());
            cluster::admin_sql(
                &cli.tools.database_url,
                &format!("CREATE DATABASE \"{name}\""),
            )
            .await?;
            let url = cluster::with_database(&cli.tools.database_url, &name);
            let r = history::run(&url, &work.join("archive"), &spec).await;
            cluster::admin_sql(
                &cli.tools.database_url,
                &format!("DROP DATABASE \"{name}\" WITH (FORCE)"),
            )
            .await?;
            let r = r?;
            eprintln!("{}", history::table(&r));
            publish(&cli.tools, &work, &r)
        }
        Command::Power {
            racks,
            workers,
            fraction,
        } => {
            let spec = power::PowerSpec {
                racks,
                workers,
                time_scale: 0.05,
                fraction,
            };
            let work = work_dir(&cli.tools, "power");
            eprintln!(
                "== power: {racks} racks powered on unbudgeted, then each row budgeted at steady draw + {:.0} % of the peak's excess",
                fraction * 100.0
            );
            let r = power::run(&tools, &spec, &work).await?;
            println!("{}", power::table(&r));
            if let Some(path) = &cli.tools.json {
                std::fs::write(path, serde_json::to_vec_pretty(&r)?)?;
            }
            if cli.tools.work_dir.is_none() {
                let _ = std::fs::remove_dir_all(&work);
            }
            let broken: Vec<_> = r
                .budgeted
                .rows
                .iter()
                .filter(|row| row.trips > 0 || row.budget_kw.is_some_and(|b| row.peak_kw > b))
                .collect();
            if !broken.is_empty() {
                bail!("budgets broken: {broken:?}");
            }
            Ok(())
        }
        Command::Watch1000 {
            racks,
            workers,
            watchers,
            leaks,
            spacing_ms,
            poll_seconds,
            time_scale,
        } => {
            let spec = watch::WatchSpec {
                racks,
                workers,
                watchers,
                leaks,
                spacing_ms,
                time_scale,
                poll_s: poll_seconds,
            };
            let work = work_dir(&cli.tools, "watch-1000");
            eprintln!(
                "== watch-1000: {racks} racks, {watchers} of {workers} workers watching, {leaks} leaks during a site power-on, one watcher killed halfway"
            );
            let r = watch::run(&tools, &spec, &work).await?;
            publish(&cli.tools, &work, &r)?;
            eprintln!(
                "   held in {:.1} s, streams open {:.1} s into the power-on; {} of {} leaks during it; raise → event p50 {:.0} ms p99 {:.0} ms; raise → ForceOff p50 {:.0} ms p99 {:.0} ms ({} trays found on); raise → power-off completed p50 {:.0} ms p99 {:.0} ms ({}); after the kill p50 {:.0} ms p99 {:.0} ms ({}); takeover {:.1} s; lost {}, duplicated {}",
                r.cover_s,
                r.streams_s,
                r.during_power_on,
                r.raised,
                r.to_event.p50_ms,
                r.to_event.p99_ms,
                r.to_force_off.p50_ms,
                r.to_force_off.p99_ms,
                r.to_force_off.n,
                r.to_contained.p50_ms,
                r.to_contained.p99_ms,
                r.to_contained.n,
                r.after_kill.p50_ms,
                r.after_kill.p99_ms,
                r.after_kill.n,
                r.takeover_s,
                r.lost,
                r.duplicated
            );
            for w in &r.watchers {
                eprintln!(
                    "   {}: {} BMCs, {} streams, peak RSS {:.0} MiB, peak sockets {}{}",
                    w.name,
                    w.bmcs,
                    w.streams,
                    w.peak_rss_mib,
                    w.peak_sockets,
                    if w.killed { " (killed)" } else { "" }
                );
            }
            if r.lost != 0 || r.duplicated != 0 {
                bail!("leaks lost ({}) or duplicated ({})", r.lost, r.duplicated);
            }
            Ok(())
        }
        Command::Leak {
            racks,
            workers,
            long_task_seconds,
        } => {
            let spec = leak::LeakSpec {
                racks,
                workers,
                time_scale: 0.01,
                long_task_s: long_task_seconds,
            };
            let work = work_dir(&cli.tools, "leak");
            eprintln!(
                "== leak: a leak on one tray of each of {racks} racks, idle then under a {long_task_seconds} s task, {workers} workers"
            );
            let r = leak::run(&tools, &spec, &work).await?;
            publish(&cli.tools, &work, &r)?;
            eprintln!(
                "   raise → tray off: idle p50 {:.0} ms p99 {:.0} ms; under a long task p50 {:.0} ms p99 {:.0} ms; {} of {} long tasks preempted",
                r.idle.p50_ms,
                r.idle.p99_ms,
                r.busy.p50_ms,
                r.busy.p99_ms,
                r.preempted,
                r.long_tasks
            );
            if r.idle.cut != racks || r.busy.cut != racks || r.preempted != r.long_tasks {
                bail!("not every leak was contained: {r:?}");
            }
            Ok(())
        }
        Command::Drill {
            preset: Some(DrillPreset::Upgrade),
            racks,
            workers,
            short,
            from_bin,
            from,
            ..
        } => {
            let spec = upgrade::UpgradeSpec {
                racks: if short { 3 } else { racks },
                workers: if short { 2 } else { workers },
                from_bin: from_bin.context("drill upgrade needs --from-bin")?,
                from,
                time_scale: 0.05,
                every: Duration::from_secs(5),
                limit: Duration::from_secs(if short { 240 } else { 600 }),
            };
            let work = work_dir(&cli.tools, "drill-upgrade");
            let report = upgrade::run(&tools, &spec, &work).await?;
            drill_verdict(
                &cli.tools,
                &report,
                &report.problems,
                &work,
                "the upgrade drill",
                "the rollout completed across the upgrade, every component commanded once",
            )
        }
        Command::Drill {
            preset,
            racks,
            workers,
            faults,
            worker_kill_every,
            short,
            cluster,
            ..
        } => {
            let spec = DrillSpec {
                racks: if short { 3 } else { racks },
                workers: if short { 2 } else { workers },
                faults: match (faults.is_empty(), preset, cluster) {
                    (false, _, _) => faults,
                    (true, Some(DrillPreset::Restore), _) => vec![Fault::DatabaseRestore],
                    (true, _, false) => Fault::ALL.to_vec(),
                    (true, _, true) => Fault::CLUSTER.to_vec(),
                },
                nats_nodes: if cluster { 3 } else { 1 },
                schedulers: if cluster { 3 } else { 1 },
                worker_kill_every: Duration::from_secs_f64(worker_kill_every.max(0.5)),
                time_scale: 0.05,
                phase_limit: Duration::from_secs(if short { 240 } else { 600 }),
            };
            let work = work_dir(&cli.tools, "drill");
            let report = drill::run(&tools, &spec, &work).await?;
            drill_verdict(
                &cli.tools,
                &report,
                &report.problems,
                &work,
                "the drill",
                "every task completed, every component as demanded",
            )
        }
    }
}
