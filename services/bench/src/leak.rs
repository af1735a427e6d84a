//! The `leak` benchmark (`docs/leak-containment.md`): leaks raised in the
//! simulator (its admin API, as a drip sensor would) on one compute tray of
//! every rack at once, first while the racks are idle, then while a
//! two-minute task runs on each rack's compute trays; measured from the
//! raise to the tray's `ForceOff` as the simulator recorded it, and how
//! many long tasks the leak's power-off preempted. A worker watches the
//! BMCs (`flow-worker --watch`), so the path is the real one: BMC event
//! stream → watcher → `flow.hardware` → scheduler → rule → task → worker →
//! BMC.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flow_protocol::api::{Submission, TaskSubmit, endpoint};
use flow_protocol::event::{EventClear, EventList};
use flow_protocol::ids::RackRef;
use flow_protocol::{TaskId, TaskStatus};
use flow_rules::{ComponentType, OperationCode, PowerOperation};
use serde::Serialize;
use serde_json::json;
use time::OffsetDateTime;

use crate::api;
use crate::cluster::{
    Cluster, ClusterSpec, ClusterUsage, SIM_RACKS_PER_PROCESS, Tools, WatcherSpec,
};

/// What the leak benchmark runs.
#[derive(Debug, Clone, Serialize)]
pub struct LeakSpec {
    /// Racks (one leak each per round).
    pub racks: usize,
    /// Workers (the first also watches).
    pub workers: usize,
    /// Simulator time scale.
    pub time_scale: f64,
    /// The long task's wait after its command, seconds.
    pub long_task_s: u64,
}

/// One round's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Round {
    /// Leaks raised.
    pub leaks: usize,
    /// Trays forced off (as the simulator recorded).
    pub cut: usize,
    /// Raise → ForceOff, milliseconds: median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// The slowest.
    pub max_ms: f64,
}

/// What it measured.
#[derive(Debug, Clone, Serialize)]
pub struct LeakReport {
    /// The spec.
    pub spec: LeakSpec,
    /// Leaks on idle racks.
    pub idle: Round,
    /// Leaks on racks each running a long task on its compute trays.
    pub busy: Round,
    /// Long tasks submitted.
    pub long_tasks: usize,
    /// Of those, terminated with `preempted_by` naming the leak's event.
    pub preempted: usize,
    /// CPU and memory of each process.
    pub usage: ClusterUsage,
}

/// The wall clock now (the simulator's command records are wall-clock).
fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The `n`th compute tray (by name) of rack `i`.
pub(crate) fn tray(cluster: &Cluster, i: usize, n: usize) -> anyhow::Result<String> {
    let mut trays: Vec<&str> = cluster.racks[i]
        .components
        .iter()
        .filter(|c| c.component_type.parse::<ComponentType>().ok() == Some(ComponentType::Compute))
        .map(|c| c.name.as_str())
        .collect();
    trays.sort_unstable();
    trays
        .get(n)
        .map(|s| (*s).to_owned())
        .with_context(|| format!("rack {} has no compute tray {n}", cluster.racks[i].name))
}

/// Raises a leak on `tray` of rack `i` through the simulator's admin API.
pub(crate) async fn raise(
    http: &reqwest::Client,
    cluster: &Cluster,
    i: usize,
    tray: &str,
) -> anyhow::Result<()> {
    let admin = &cluster.sim_admins[i / SIM_RACKS_PER_PROCESS];
    http.post(format!(
        "{admin}/admin/v1/racks/{}/components/{tray}/conditions",
        cluster.racks[i].name
    ))
    .json(&json!({"kind": "leak"}))
    .send()
    .await?
    .error_for_status()?;
    Ok(())
}

/// Raises a leak on one tray of every rack at once and waits (bounded)
/// until the simulator recorded each tray's ForceOff; the round's figures.
async fn round(cluster: &Cluster, trays: &[String], limit: Duration) -> anyhow::Result<Round> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let raised_at = now();
    let raises = (0..trays.len()).map(|i| raise(&http, cluster, i, &trays[i]));
    for r in futures::future::join_all(raises).await {
        r?;
    }
    let start = Instant::now();
    loop {
        let state = cluster.sim_state().await?;
        let mut latencies = Vec::new();
        for (i, tray) in trays.iter().enumerate() {
            let name = &cluster.racks[i].name;
            if let Some(at) = first_force_off(&state, name, tray, raised_at) {
                latencies.push((at - raised_at).as_seconds_f64() * 1000.0);
            }
        }
        if latencies.len() == trays.len() || start.elapsed() > limit {
            latencies.sort_by(f64::total_cmp);
            return Ok(Round {
                leaks: trays.len(),
                cut: latencies.len(),
                p50_ms: percentile(&latencies, 50.0),
                p99_ms: percentile(&latencies, 99.0),
                max_ms: latencies.last().copied().unwrap_or(f64::NAN),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The first `ForceOff` the simulator recorded for `tray` of `rack` at or
/// after `since`.
pub(crate) fn first_force_off(
    state: &flow_rack_sim::SimState,
    rack: &str,
    tray: &str,
    since: OffsetDateTime,
) -> Option<OffsetDateTime> {
    state
        .component(rack, tray)
        .into_iter()
        .flat_map(|c| c.commands.iter())
        .filter(|x| x.kind == flow_rack_sim::CommandKind::Reset && x.value == "ForceOff")
        .filter_map(|x| {
            OffsetDateTime::parse(&x.at, &time::format_description::well_known::Rfc3339).ok()
        })
        .filter(|at| *at >= since)
        .min()
}

/// The latest 1,000 hardware events.
pub(crate) async fn events(
    cluster: &Cluster,
) -> anyhow::Result<Vec<flow_protocol::event::EventRecord>> {
    Ok(api::call::<endpoint::EventList>(
        &cluster.nats,
        &EventList {
            rack: None,
            limit: Some(1000),
        },
    )
    .await?
    .events)
}

/// Clears every event (the idle round's leaks are dealt with), so that the
/// busy round's leak is each rack's only leaking tray.
async fn clear_all(cluster: &Cluster) -> anyhow::Result<usize> {
    let events = events(cluster).await?;
    let mut cleared = 0;
    for e in events.iter().filter(|e| e.cleared_at.is_none()) {
        api::call::<endpoint::EventClear>(
            &cluster.nats,
            &EventClear {
                id: e.id,
                reason: "flow-bench: the idle round's leak is dealt with".to_owned(),
                by: "flow-bench".to_owned(),
            },
        )
        .await?;
        cleared += 1;
    }
    Ok(cleared)
}

/// Runs the benchmark on a fresh cluster under `work`.
pub async fn run(tools: &Tools, spec: &LeakSpec, work: &Path) -> anyhow::Result<LeakReport> {
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
            watchers: WatcherSpec {
                count: 1,
                poll_s: 1.0,
                inventory_s: 1.0,
                ..WatcherSpec::NONE
            },
        },
        work,
    )
    .await?;
    let result = measure(&cluster, spec).await;
    cluster.finish(result, |r, usage| r.usage = usage).await
}

async fn measure(cluster: &Cluster, spec: &LeakSpec) -> anyhow::Result<LeakReport> {
    let limit = Duration::from_secs(60);
    // The watcher reads the inventory every second: let it see every rack
    // (its streams open) before the first leak.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let n = cluster.racks.len();

    // Idle: the sixth compute tray of each rack.
    let idle_trays = (0..n)
        .map(|i| tray(cluster, i, 5))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let idle = round(cluster, &idle_trays, limit).await?;
    eprintln!(
        "   idle: {}/{} trays off, p50 {:.0} ms, p99 {:.0} ms",
        idle.cut, idle.leaks, idle.p50_ms, idle.p99_ms
    );
    let cleared = clear_all(cluster).await?;
    eprintln!("   cleared {cleared} events");

    // Busy: a long power-on task on every rack's compute trays (the
    // command, then a wait), started, then a leak on the twelfth tray.
    let rule = api::create_rule(
        &cluster.nats,
        "bench long power-on",
        "power_on",
        json!({"version": "v1", "steps": [
            {"component_type": "compute", "stage": 1, "timeout": "30m",
             "main_operation": {"name": "PowerControl"},
             "post_operation": [{"name": "Sleep",
                                 "parameters": {"duration": format!("{}s", spec.long_task_s)}}]}
        ]}),
    )
    .await?;
    let mut long = Vec::new();
    for (i, rack) in cluster.racks.iter().enumerate() {
        let mut request = TaskSubmit::new(
            format!("bench-long-{i}"),
            OperationCode::Power(PowerOperation::PowerOn),
            vec![RackRef(rack.name.clone())],
        );
        request.component_types = vec![ComponentType::Compute];
        request.rule_id = Some(rule);
        request.override_readiness = true;
        request.reason = Some("bench: the long task under test, readiness not measured".into());
        let reply = api::submit(&cluster.nats, &request).await?;
        match &reply.results[0].submission {
            Submission::Created(id) => long.push(*id),
            other => bail!("the long task on {}: {other:?}", rack.name),
        }
    }
    let start = Instant::now();
    loop {
        let mut running = 0;
        for id in &long {
            let t = api::task_get(&cluster.nats, *id).await?;
            if t.status == TaskStatus::Running
                && t.steps
                    .first()
                    .is_some_and(|s| s.status == flow_protocol::StepStatus::Running)
            {
                running += 1;
            }
        }
        if running == long.len() {
            break;
        }
        if start.elapsed() > limit {
            bail!(
                "{running} of {} long tasks running after {limit:?}",
                long.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let busy_trays = (0..n)
        .map(|i| tray(cluster, i, 11))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let busy = round(cluster, &busy_trays, limit).await?;
    eprintln!(
        "   busy: {}/{} trays off, p50 {:.0} ms, p99 {:.0} ms",
        busy.cut, busy.leaks, busy.p50_ms, busy.p99_ms
    );
    // Each long task ends, cancelled at its next action boundary, naming
    // the event.
    let preempted = preempted(cluster, &long, limit).await?;
    Ok(LeakReport {
        spec: spec.clone(),
        idle,
        busy,
        long_tasks: long.len(),
        preempted,
        usage: cluster.usage(),
    })
}

/// How many of `tasks` ended terminated and preempted by an event (waits,
/// bounded, until each has ended).
async fn preempted(cluster: &Cluster, tasks: &[TaskId], limit: Duration) -> anyhow::Result<usize> {
    let start = Instant::now();
    loop {
        let mut ended = 0;
        let mut preempted = 0;
        for id in tasks {
            let t = api::task_get(&cluster.nats, *id).await?;
            if t.status.is_final() {
                ended += 1;
            }
            if t.status == TaskStatus::Terminated && t.preempted_by.is_some() {
                preempted += 1;
            }
        }
        if ended == tasks.len() || start.elapsed() > limit {
            return Ok(preempted);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
