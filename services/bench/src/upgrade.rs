//! The upgrade drill (`scripts/bench drill upgrade`): a rollout starts on
//! the previous release's binaries — the scheduler and the workers built
//! from an earlier commit of this repository (`--from-bin`; the script
//! builds them) — and, while it runs, the scheduler and then each worker
//! are replaced by the current build one at a time, as an operator rolls
//! an upgrade: stopped gently (SIGTERM: a worker checkpoints and hands its
//! jobs back) and started from the new binary on the same database and
//! streams. The current scheduler migrates the database at its start while
//! tasks are open. Afterwards, from the run, its tasks and the simulator's
//! record: the rollout completed, every component is in the state the
//! operation demands, and every component was commanded exactly once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::bail;
use flow_protocol::api::{TaskSubmit, endpoint};
use flow_protocol::ids::RackRef;
use flow_protocol::run::{
    Gate, GateKind, GateScope, Ordering, PhasePolicy, RetryPolicy, RunByRef, RunCreate, RunStatus,
};
use flow_rules::OperationCode;
use serde::Serialize;

use crate::api;
use crate::cluster::{Cluster, ClusterSpec, Tools, WatcherSpec};
use crate::drill::DRILL_RULES;

/// What the upgrade drill runs.
#[derive(Debug, Clone, Serialize)]
pub struct UpgradeSpec {
    /// Racks in the rollout.
    pub racks: usize,
    /// Workers.
    pub workers: usize,
    /// The previous release's binaries (flow-scheduler, flow-worker).
    pub from_bin: PathBuf,
    /// What they were built from (a commit), for the report.
    pub from: String,
    /// Simulator time scale.
    pub time_scale: f64,
    /// The time between two replacements (the first comes this long after
    /// the run was created).
    pub every: Duration,
    /// Bound on the whole rollout.
    pub limit: Duration,
}

/// One process replaced by the current build.
#[derive(Debug, Clone, Serialize)]
pub struct Replaced {
    /// Which (`flow-scheduler`, `worker-2`).
    pub process: String,
    /// Seconds after the run was created.
    pub at_s: f64,
    /// Stopped → the current build answering (`flow.api` for the
    /// scheduler; started for a worker), ms.
    pub took_ms: f64,
}

/// What the drill found.
#[derive(Debug, Clone, Serialize)]
pub struct UpgradeReport {
    /// What ran.
    pub spec: UpgradeSpec,
    /// The run's final status.
    pub run_status: String,
    /// Its targets completed, and failed.
    pub completed: usize,
    /// Failed targets.
    pub failed: usize,
    /// Run created → finished, seconds.
    pub seconds: f64,
    /// The processes replaced, in order.
    pub replaced: Vec<Replaced>,
    /// Components not On afterwards.
    pub wrong_state: Vec<String>,
    /// Power commands per component → how many components.
    pub commands_per_component: BTreeMap<usize, usize>,
    /// What is wrong (empty: passed).
    pub problems: Vec<String>,
}

/// The rollout's name.
const RUN: &str = "upgrade rollout";

/// Runs the drill on a fresh cluster under `work`, started from the
/// previous release's binaries.
pub async fn run(tools: &Tools, spec: &UpgradeSpec, work: &Path) -> anyhow::Result<UpgradeReport> {
    for b in ["flow-scheduler", "flow-worker"] {
        if !spec.from_bin.join(b).exists() {
            bail!(
                "{} is missing: --from-bin names the previous release's binaries (scripts/bench drill upgrade builds them)",
                spec.from_bin.join(b).display()
            );
        }
    }
    let previous = Tools {
        flow_bin_dir: spec.from_bin.clone(),
        ..tools.clone()
    };
    let cluster_spec = ClusterSpec {
        racks: spec.racks,
        workers: spec.workers,
        time_scale: spec.time_scale,
        initial_power_on: false,
        bmc_base_port: 0,
        own_postgres: false,
        job_ack_wait: Some(Duration::from_secs(15)),
        nats_nodes: 1,
        schedulers: 1,
        watchers: WatcherSpec::NONE,
    };
    let mut cluster = Cluster::start(&previous, &cluster_spec, work).await?;
    let result = drive(&mut cluster, &tools.bin_dir, spec).await;
    let result = result.map_err(|e| e.context(format!("logs in {}", cluster.work.display())));
    cluster.stop().await;
    result
}

async fn drive(
    cluster: &mut Cluster,
    current: &Path,
    spec: &UpgradeSpec,
) -> anyhow::Result<UpgradeReport> {
    api::load_rules(&cluster.nats, DRILL_RULES).await?;
    let racks: Vec<String> = cluster.racks.iter().map(|r| r.name.clone()).collect();
    let code: OperationCode = "power_on".parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    api::call::<endpoint::RunCreate>(
        &cluster.nats,
        &RunCreate {
            name: RUN.into(),
            description: "the upgrade drill".into(),
            task: TaskSubmit::new(
                String::new(),
                code,
                racks.iter().cloned().map(RackRef).collect(),
            ),
            phases: PhasePolicy::Equal(3.min(racks.len())),
            max_concurrent: u32::try_from(racks.len()).unwrap_or(u32::MAX),
            gates: vec![Gate {
                kind: GateKind::FailureRate { percent: 50 },
                scope: GateScope::Phase,
            }],
            auto_advance: true,
            ordering: Ordering::Random { seed: Some(1) },
            windows: Vec::new(),
            timezone: String::new(),
            retry: RetryPolicy::default(),
        },
    )
    .await?;
    let started = Instant::now();
    let mut report = UpgradeReport {
        spec: spec.clone(),
        run_status: String::new(),
        completed: 0,
        failed: 0,
        seconds: 0.0,
        replaced: Vec::new(),
        wrong_state: Vec::new(),
        commands_per_component: BTreeMap::new(),
        problems: Vec::new(),
    };
    // The scheduler first, then each worker.
    let mut next: Vec<Option<usize>> = std::iter::once(None)
        .chain((0..cluster.workers.len()).map(Some))
        .collect();
    next.reverse();
    let mut due = started + spec.every;
    let finished = loop {
        let run = api::call::<endpoint::RunGet>(&cluster.nats, &RunByRef { run: RUN.into() }).await;
        match run {
            Ok(r) if r.status.is_final() || r.status == RunStatus::Paused => break Some(r),
            Ok(_) => {}
            // A scheduler being replaced answers nothing for a moment.
            Err(error) => tracing::debug!(error = %error, "run.get not answered"),
        }
        if started.elapsed() > spec.limit {
            report.problems.push(format!(
                "the rollout did not finish within {:?}",
                spec.limit
            ));
            break None;
        }
        if Instant::now() >= due
            && let Some(which) = next.pop()
        {
            let at_s = started.elapsed().as_secs_f64();
            let t = Instant::now();
            let process = match which {
                None => {
                    let s = &mut cluster.schedulers[0];
                    tracing::info!("upgrade: replacing the scheduler");
                    s.replace_program(&current.join("flow-scheduler"), Duration::from_secs(10))?;
                    cluster.wait_api().await?;
                    cluster.schedulers[0].name().to_owned()
                }
                Some(i) => {
                    let w = &mut cluster.workers[i];
                    tracing::info!(worker = w.name(), "upgrade: replacing a worker");
                    w.replace_program(&current.join("flow-worker"), Duration::from_secs(10))?;
                    w.name().to_owned()
                }
            };
            report.replaced.push(Replaced {
                process,
                at_s,
                took_ms: t.elapsed().as_secs_f64() * 1e3,
            });
            due = Instant::now() + spec.every;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    report.seconds = started.elapsed().as_secs_f64();
    if !next.is_empty() {
        report.problems.push(format!(
            "the rollout ended after {:.1} s with {} process(es) still on the previous release: nothing proven for them",
            report.seconds,
            next.len()
        ));
    }
    for p in cluster.schedulers.iter().chain(&cluster.workers) {
        if p.program().parent() != Some(current) {
            report
                .problems
                .push(format!("{} still runs {}", p.name(), p.program().display()));
        }
    }
    if let Some(run) = finished {
        report.run_status = run.status.to_string();
        report.completed = run.phases.iter().map(|p| p.completed).sum();
        report.failed = run.phases.iter().map(|p| p.failed).sum();
        if run.status != RunStatus::Completed {
            report.problems.push(format!(
                "the rollout ended {} ({}), {} of {} racks completed",
                run.status,
                run.reason,
                report.completed,
                racks.len()
            ));
        }
    }
    // The hardware, from the simulator's record.
    let state = cluster.sim_state().await?;
    for rack in &state.racks {
        for c in &rack.components {
            let power = serde_json::to_value(c.power_state)?;
            if power.as_str() != Some("On") {
                report
                    .wrong_state
                    .push(format!("{}/{}: {power} (want On)", rack.name, c.name));
            }
            let n = c.command_count(flow_rack_sim::CommandKind::Reset);
            *report.commands_per_component.entry(n).or_default() += 1;
            if n != 1 {
                report.problems.push(format!(
                    "{}/{} was commanded {n} times (exactly once wanted)",
                    rack.name, c.name
                ));
            }
        }
    }
    if !report.wrong_state.is_empty() {
        report.problems.push(format!(
            "{} components not On, e.g. {}",
            report.wrong_state.len(),
            report.wrong_state[0]
        ));
    }
    Ok(report)
}
