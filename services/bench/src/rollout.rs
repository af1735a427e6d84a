//! The `rollout` benchmark: a firmware rollout (`run.create`) over a whole
//! site in phases with auto-advance, measured against the ideal of the
//! same plan; then a small run with one rack made to fail its flash,
//! measuring the time from the failure to the gate's pause and checking
//! that nothing started after it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flow_protocol::api::{TaskSubmit, endpoint};
use flow_protocol::ids::RackRef;
use flow_protocol::jobs::FirmwareImage;
use flow_protocol::run::{
    Gate, GateKind, GateScope, Ordering, PhasePolicy, RetryPolicy, RunByRef, RunCreate, RunRecord,
    RunTargets, TargetStatus,
};
use flow_rules::{ComponentType, OperationCode};
use serde::Serialize;

use crate::api;
use crate::cluster::{Cluster, ClusterSpec, ClusterUsage, Tools, WatcherSpec};
use crate::measure::{RawRate, raw_jetstream};
use crate::scenario::{BENCH_RULES, rule_and_ideal};

/// What the rollout benchmark runs.
#[derive(Debug, Clone, Serialize)]
pub struct RolloutSpec {
    /// Racks in the site.
    pub racks: usize,
    /// Workers.
    pub workers: usize,
    /// Racks' tasks open at once.
    pub max_concurrent: u32,
    /// Cumulative phase shares.
    pub phases: Vec<u32>,
    /// Simulator time scale.
    pub time_scale: f64,
    /// Racks of the gate run.
    pub gate_racks: usize,
}

/// What it measured.
#[derive(Debug, Clone, Serialize)]
pub struct RolloutReport {
    /// The spec.
    pub spec: RolloutSpec,
    /// Racks per phase.
    pub phase_sizes: Vec<usize>,
    /// How the run ended.
    pub status: String,
    /// Targets completed / failed.
    pub completed: usize,
    /// Failed targets.
    pub failed: usize,
    /// Run created → run finished (the database's times), seconds.
    pub makespan_s: f64,
    /// One rack's firmware task at its ideal, seconds.
    pub rack_ideal_s: f64,
    /// Σ over phases of ⌈phase / max_concurrent⌉ × the rack's ideal: the
    /// plan at the rule's speed with no overhead.
    pub ideal_s: f64,
    /// makespan / ideal.
    pub ratio: f64,
    /// Failing task finished → run paused at its gate, milliseconds.
    pub gate_pause_ms: f64,
    /// Targets of the gate run submitted after the gate tripped (must be 0).
    pub started_after_trip: usize,
    /// Targets of the gate run not started when it paused.
    pub left_pending: usize,
    /// The same server's raw JetStream rate, after the run.
    pub raw_jetstream: RawRate,
    /// CPU and memory of each process.
    pub usage: ClusterUsage,
}

/// The images of firmware `version`, published on the simulator's origin
/// (the simulator installs the version the image's file name carries).
async fn images(
    cluster: &Cluster,
    version: &str,
) -> anyhow::Result<BTreeMap<ComponentType, FirmwareImage>> {
    let bytes = format!("flow-bench gb200 firmware {version}\n")
        .repeat(64)
        .into_bytes();
    let (url, digest) = cluster
        .origin_file(&format!("gb200/fw-{version}.bin"), bytes)
        .await?;
    Ok([ComponentType::Compute, ComponentType::NVSwitch]
        .into_iter()
        .map(|t| {
            (
                t,
                FirmwareImage {
                    image_uri: url.clone(),
                    version: Some(version.into()),
                    sub_targets: Vec::new(),
                    digest: Some(digest.clone()),
                    size: None,
                },
            )
        })
        .collect())
}

fn run_request(
    name: &str,
    racks: &[String],
    firmware: BTreeMap<ComponentType, FirmwareImage>,
    phases: PhasePolicy,
    max_concurrent: u32,
    gate: Gate,
    ordering: Ordering,
) -> RunCreate {
    RunCreate {
        name: name.into(),
        description: String::new(),
        task: TaskSubmit {
            firmware,
            ..TaskSubmit::new(
                String::new(),
                OperationCode::Firmware(flow_rules::FirmwareOperation::Upgrade),
                racks.iter().cloned().map(RackRef).collect(),
            )
        },
        phases,
        max_concurrent,
        gates: vec![gate],
        auto_advance: true,
        ordering,
        windows: Vec::new(),
        timezone: String::new(),
        retry: RetryPolicy::default(),
    }
}

async fn until_run(
    cluster: &Cluster,
    name: &str,
    limit: Duration,
    done: impl Fn(&RunRecord) -> bool,
) -> anyhow::Result<RunRecord> {
    let start = Instant::now();
    loop {
        let r = api::call::<endpoint::RunGet>(
            &cluster.nats,
            &RunByRef {
                run: name.to_owned(),
            },
        )
        .await?;
        if done(&r) {
            return Ok(r);
        }
        if start.elapsed() > limit {
            bail!(
                "run {name} after {limit:?}: {} ({}), phases {:?}",
                r.status,
                r.reason,
                r.phases
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn seconds(d: time::Duration) -> f64 {
    d.as_seconds_f64()
}

/// Runs the benchmark on a fresh cluster under `work`.
pub async fn run(tools: &Tools, spec: &RolloutSpec, work: &Path) -> anyhow::Result<RolloutReport> {
    let cluster = Cluster::start(
        tools,
        &ClusterSpec {
            racks: spec.racks,
            workers: spec.workers,
            time_scale: spec.time_scale,
            initial_power_on: true,
            bmc_base_port: 0,
            own_postgres: false,
            job_ack_wait: None,
            nats_nodes: 1,
            schedulers: 1,
            watchers: WatcherSpec::NONE,
        },
        work,
    )
    .await?;
    let result = measure(&cluster, spec).await;
    cluster.finish(result, |r, usage| r.usage = usage).await
}

async fn measure(cluster: &Cluster, spec: &RolloutSpec) -> anyhow::Result<RolloutReport> {
    api::load_rules(&cluster.nats, BENCH_RULES).await?;
    let upgrade = OperationCode::Firmware(flow_rules::FirmwareOperation::Upgrade);
    let rack_ideal = rule_and_ideal(cluster, BENCH_RULES, upgrade, spec.time_scale)?
        .1
        .total;
    let names: Vec<String> = cluster.racks.iter().map(|r| r.name.clone()).collect();
    let sizes = flow_decisions::rollout::phase_sizes(
        names.len(),
        &PhasePolicy::Percentages(spec.phases.clone()),
    )?;
    let c = usize::try_from(spec.max_concurrent).unwrap_or(1).max(1);
    let waves: usize = sizes.iter().map(|n| n.div_ceil(c)).sum();
    let ideal_s = rack_ideal.as_secs_f64() * waves as f64;

    // The site: every rack, phases 1/10/50/100 %, auto-advance.
    tracing::info!(racks = names.len(), ?sizes, "rollout: creating the run");
    api::call::<endpoint::RunCreate>(
        &cluster.nats,
        &run_request(
            "site rollout",
            &names,
            images(cluster, "99.1.0").await?,
            PhasePolicy::Percentages(spec.phases.clone()),
            spec.max_concurrent,
            Gate {
                kind: GateKind::FailureRate { percent: 5 },
                scope: GateScope::Phase,
            },
            Ordering::Random { seed: Some(1) },
        ),
    )
    .await?;
    let limit = Duration::from_secs_f64(ideal_s * 4.0) + Duration::from_secs(600);
    let done = until_run(cluster, "site rollout", limit, |r| {
        r.status.is_final() || r.status == flow_protocol::run::RunStatus::Paused
    })
    .await?;
    if !done.status.is_final() {
        bail!(
            "the site rollout paused ({}): {:?}",
            done.reason,
            done.gate.as_ref().map(|g| &g.figure)
        );
    }
    let makespan = done
        .finished_at
        .map(|f| seconds(f - done.created_at))
        .unwrap_or(f64::NAN);
    let completed: usize = done.phases.iter().map(|p| p.completed).sum();
    let failed: usize = done.phases.iter().map(|p| p.failed).sum();

    // The gate: one rack of a small run fails its flash.
    let gate_racks: Vec<String> = names.iter().take(spec.gate_racks).cloned().collect();
    let failing = gate_racks
        .first()
        .context("the gate run needs a rack")?
        .clone();
    let admin = cluster.sim_admins.first().context("no simulator")?;
    reqwest::Client::new()
        .post(format!("{admin}/admin/v1/faults"))
        .json(&serde_json::json!({"target": format!("{failing}/compute-*"),
                                  "kind": {"firmware_fails": {"message": "bench: flash verify failed"}}}))
        .send()
        .await?
        .error_for_status()
        .context("installing the firmware fault")?;
    api::call::<endpoint::RunCreate>(
        &cluster.nats,
        &run_request(
            "gate",
            &gate_racks,
            images(cluster, "99.2.0").await?,
            PhasePolicy::Equal(1),
            5,
            Gate {
                kind: GateKind::FailureCount { count: 1 },
                scope: GateScope::Phase,
            },
            Ordering::RowByRow,
        ),
    )
    .await?;
    let paused = until_run(cluster, "gate", limit, |r| r.gate.is_some()).await?;
    let tripped_at = paused.gate.as_ref().map(|g| g.at).context("no trip")?;
    let targets = api::call::<endpoint::RunTargets>(
        &cluster.nats,
        &RunTargets {
            run: "gate".into(),
            phase: None,
        },
    )
    .await?
    .targets;
    let left_pending = targets
        .iter()
        .filter(|t| t.status == TargetStatus::Pending)
        .count();
    let failed_task = targets
        .iter()
        .find(|t| t.rack == failing)
        .and_then(|t| t.task_id)
        .context("the failing rack has no task")?;
    let task = api::task_get(&cluster.nats, failed_task).await?;
    let failed_at = task
        .finished_at
        .context("the failing task has not finished")?;
    // Wait for what had started, then count what started after the trip.
    until_run(cluster, "gate", limit, |r| {
        r.phases.iter().all(|p| p.running == 0)
    })
    .await?;
    let mut started_after_trip = 0;
    for t in api::call::<endpoint::RunTargets>(
        &cluster.nats,
        &RunTargets {
            run: "gate".into(),
            phase: None,
        },
    )
    .await?
    .targets
    {
        if let Some(id) = t.task_id {
            let task = api::task_get(&cluster.nats, id).await?;
            if task.created_at > tripped_at {
                started_after_trip += 1;
            }
        }
    }
    let raw = raw_jetstream(&cluster.nats, 5_000, 2048).await?;
    Ok(RolloutReport {
        spec: spec.clone(),
        phase_sizes: sizes,
        status: done.status.to_string(),
        completed,
        failed,
        makespan_s: makespan,
        rack_ideal_s: rack_ideal.as_secs_f64(),
        ideal_s,
        ratio: makespan / ideal_s.max(f64::EPSILON),
        gate_pause_ms: seconds(tripped_at - failed_at) * 1000.0,
        started_after_trip,
        left_pending,
        raw_jetstream: raw,
        usage: cluster.usage(),
    })
}
