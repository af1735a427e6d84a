//! Benchmark scenarios: one operation submitted to every rack of a fresh
//! cluster, measured from the outside.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flow_protocol::TaskStatus;
use flow_protocol::api::TaskSubmit;
use flow_protocol::ids::RackRef;
use flow_protocol::jobs::{ComponentTarget, FirmwareImage};
use flow_rules::{ComponentType, OperationCode, RuleBatch};
use serde::Serialize;

use crate::api;
use crate::cluster::{Cluster, ClusterSpec, ClusterUsage, Tools, WatcherSpec};
use crate::cost::{Costs, raw_http};
use crate::cpu::{CpuReading, CpuWindow, Saturation};
use crate::ideal::{Ideal, ideal};
use crate::measure::{RawRate, Results, Spread, raw_jetstream, stage_advance};
use crate::writes::Writes;

/// The reference rules, unchanged.
pub const REFERENCE_RULES: &str = include_str!("../../../examples/operation-rules.yaml");
/// The benchmark's own rules (quick power-on, firmware with a 5 s poll).
pub const BENCH_RULES: &str = include_str!("../rules/bench-rules.yaml");

/// The upgrade scenarios' image on the simulator's origin (the simulator
/// installs the version its file name carries).
const FIRMWARE_FILE: &str = "gb200/fw-2.1.0.bin";

/// One scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    /// Its name on the command line.
    pub name: String,
    /// What it shows.
    pub about: String,
    /// Racks.
    pub racks: usize,
    /// Workers.
    pub workers: usize,
    /// Simulator time scale.
    pub time_scale: f64,
    /// The operation submitted to every rack.
    pub operation: String,
    /// `reference` or `bench` rules.
    pub rules: String,
    /// Racks start powered on.
    pub initial_power_on: bool,
    /// Messages of the raw JetStream measurement.
    pub raw_messages: usize,
}

impl Scenario {
    fn new(
        name: &str,
        about: &str,
        racks: usize,
        workers: usize,
        time_scale: f64,
        operation: &str,
        rules: &str,
    ) -> Scenario {
        Scenario {
            name: name.into(),
            about: about.into(),
            racks,
            workers,
            time_scale,
            operation: operation.into(),
            rules: rules.into(),
            initial_power_on: operation == "upgrade",
            raw_messages: 5_000,
        }
    }
}

/// Every scenario `run` knows, in the order `all` runs them.
pub fn catalogue() -> Vec<Scenario> {
    let zero = 0.0001;
    vec![
        Scenario::new(
            "nvl72",
            "one NVL72 rack, graceful power-on (reference rule)",
            1,
            2,
            0.05,
            "power_on",
            "reference",
        ),
        Scenario::new(
            "site",
            "250 racks (a site) graceful power-on at once (reference rule)",
            250,
            4,
            0.05,
            "power_on",
            "reference",
        ),
        Scenario::new(
            "site-1000",
            "1,000 racks (35,000 BMCs) graceful power-on at once (reference rule)",
            1000,
            4,
            0.05,
            "power_on",
            "reference",
        ),
        Scenario::new(
            "firmware",
            "firmware upgrade of 50 racks (reference shape, 5 s task poll)",
            50,
            2,
            0.05,
            "upgrade",
            "bench",
        ),
        Scenario::new(
            "scale-w1",
            "throughput: 50 racks quick power-on, zero-latency simulator, 1 worker",
            50,
            1,
            zero,
            "power_on",
            "bench",
        ),
        Scenario::new(
            "scale-w2",
            "throughput: as scale-w1 with 2 workers",
            50,
            2,
            zero,
            "power_on",
            "bench",
        ),
        Scenario::new(
            "scale-w4",
            "throughput: as scale-w1 with 4 workers",
            50,
            4,
            zero,
            "power_on",
            "bench",
        ),
    ]
}

/// A small scenario for tests: 2 racks, quick rule, the simulator at 1/50
/// of real time. Not at zero latency: the ideal counts a verification's
/// first poll at once and a wait as whole poll intervals, a lower bound only
/// while each transition outlasts the calls before its first poll (shelves
/// 40 ms, trays 100 ms here); at time scale 0.0001 (0.2 ms) a poll made a
/// few milliseconds after the command can find the transition done, and a
/// fast enough pipeline beats that "ideal" (`services/bench/src/ideal.rs`).
pub fn smoke() -> Scenario {
    let mut s = Scenario::new(
        "smoke",
        "2 racks quick power-on (tests)",
        2,
        1,
        0.02,
        "power_on",
        "bench",
    );
    s.raw_messages = 500;
    s
}

/// What one scenario measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The scenario.
    pub scenario: Scenario,
    /// Tasks submitted.
    pub tasks: usize,
    /// Tasks by final status.
    pub statuses: BTreeMap<String, usize>,
    /// Why tasks that did not complete ended (at most 10).
    pub failures: Vec<String>,
    /// First submission → last task finished, seconds.
    pub makespan_s: f64,
    /// The physical ideal of one rack (racks are independent): the
    /// hardware's timing and the rule's sleeps, seconds
    /// (`services/bench/src/ideal.rs`).
    pub ideal_s: f64,
    /// makespan / ideal: at least 1.
    pub ratio: f64,
    /// Ideal per stage, seconds.
    pub ideal_stages_s: Vec<f64>,
    /// The polled ideal (waits rounded up to poll intervals), the figure
    /// reported before 2026-12-06, seconds.
    pub polled_ideal_s: f64,
    /// makespan / polled ideal, to compare with earlier runs.
    pub polled_ratio: f64,
    /// What the control plane and the workers spent per operation, beside
    /// the simulator's and a raw HTTP client's cost per request
    /// (`services/bench/src/cost.rs`).
    pub cost: Costs,
    /// Last result of a stage → first job of the next starting on a worker.
    pub stage_advance: Spread,
    /// Step jobs finished.
    pub step_jobs: usize,
    /// Step jobs per second of makespan.
    pub jobs_per_s: f64,
    /// Hardware calls the workers made.
    pub hardware_calls: u64,
    /// Hardware calls per second of makespan.
    pub calls_per_s: f64,
    /// Redfish requests the simulator served (calls plus discovery).
    pub redfish_requests: u64,
    /// Most requests in flight at once at any one BMC.
    pub peak_requests_per_bmc: usize,
    /// Redfish requests per hardware call (a power command is a state read
    /// and the POST once the BMC's resource is known; `shared/redfish/src/power.rs`).
    pub requests_per_call: f64,
    /// Redfish requests per component the run drove.
    pub requests_per_component: f64,
    /// Those by what they were for (`read`, `command`, `session`,
    /// `discovery`, `events`), per component.
    #[serde(default)]
    pub requests_per_component_by_purpose: BTreeMap<String, f64>,
    /// The same server's raw JetStream rate.
    pub raw_jetstream: RawRate,
    /// jobs_per_s / raw rate.
    pub jobs_vs_raw: f64,
    /// JetStream writes and acks and Postgres commits, per step job.
    pub writes: Writes,
    /// CPU and memory of each process.
    pub usage: ClusterUsage,
    /// The machine's CPU from the first submission to the last task's end.
    pub cpu: CpuWindow,
}

pub(crate) fn rule_yaml(which: &str) -> &'static str {
    if which == "reference" {
        REFERENCE_RULES
    } else {
        BENCH_RULES
    }
}

/// Runs one scenario on a fresh cluster under `work`.
pub async fn run(tools: &Tools, s: &Scenario, work: &Path) -> anyhow::Result<Report> {
    let operation: OperationCode = s
        .operation
        .parse()
        .map_err(|e| anyhow::anyhow!("scenario {}: {e}", s.name))?;
    let spec = ClusterSpec {
        racks: s.racks,
        workers: s.workers,
        time_scale: s.time_scale,
        initial_power_on: s.initial_power_on,
        bmc_base_port: 0,
        own_postgres: false,
        job_ack_wait: None,
        nats_nodes: 1,
        schedulers: 1,
        watchers: WatcherSpec::NONE,
    };
    tracing::info!(scenario = %s.name, racks = s.racks, workers = s.workers, "starting the cluster");
    let cluster = Cluster::start(tools, &spec, work).await?;
    let result = measure(&cluster, s, operation).await;
    cluster.finish(result, |r, usage| r.usage = usage).await
}

async fn measure(
    cluster: &Cluster,
    s: &Scenario,
    operation: OperationCode,
) -> anyhow::Result<Report> {
    let yaml = rule_yaml(&s.rules);
    api::load_rules(&cluster.nats, yaml).await?;
    let (rule, ideal) = rule_and_ideal(cluster, yaml, operation, s.time_scale)?;
    let stage_of = |step: usize| rule.steps.get(step).map_or(0, |st| st.stage.get());

    let results = Results::subscribe(&cluster.nats).await?;
    let firmware = if s.operation == "upgrade" {
        let bytes = b"flow-bench gb200 firmware 2.1.0\n".repeat(64);
        let (url, digest) = cluster.origin_file(FIRMWARE_FILE, bytes).await?;
        [ComponentType::Compute, ComponentType::NVSwitch]
            .into_iter()
            .map(|t| {
                (
                    t,
                    FirmwareImage {
                        image_uri: url.clone(),
                        version: Some("2.1.0".into()),
                        sub_targets: Vec::new(),
                        digest: Some(digest.clone()),
                        size: None,
                    },
                )
            })
            .collect()
    } else {
        BTreeMap::new()
    };
    let before = cluster.writes_reading().await?;
    let cpu_before = CpuReading::now(cluster);
    let saturation = Saturation::start();
    let started = Instant::now();
    let mut tasks = 0;
    for chunk in cluster.racks.chunks(50) {
        let reply = api::submit(
            &cluster.nats,
            &TaskSubmit {
                firmware: firmware.clone(),
                ..TaskSubmit::new(
                    uuid::Uuid::new_v4().to_string(),
                    operation,
                    chunk.iter().map(|r| RackRef(r.name.clone())).collect(),
                )
            },
        )
        .await?;
        for r in &reply.results {
            if r.submission.task_id().is_none() {
                bail!("rack {} got no task: {:?}", r.rack, r);
            }
            tasks += 1;
        }
    }
    let limit = ideal.polled_total * 4 + Duration::from_secs(180);
    let statuses = wait_finished(cluster, tasks, limit).await?;
    let wall = started.elapsed();
    let cpu = CpuWindow::between(&cpu_before, &CpuReading::now(cluster), saturation);
    // Let the last results arrive at the subscription.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = results.snapshot();
    let makespan = task_makespan(cluster).await.unwrap_or(wall);
    let failures: Vec<String> = api::task_list(&cluster.nats)
        .await
        .unwrap_or_default()
        .iter()
        .filter(|t| t.status != TaskStatus::Completed)
        .take(10)
        .map(|t| format!("{} {}: {}", t.rack, t.status, t.message))
        .collect();

    let mut last: BTreeMap<(flow_protocol::ids::TaskId, u32), &flow_protocol::jobs::ResultMessage> =
        BTreeMap::new();
    for r in &seen {
        let key = (r.id.task, r.id.step_index);
        if last
            .get(&key)
            .is_none_or(|p| p.finished_ms <= r.finished_ms)
        {
            last.insert(key, r);
        }
    }
    let step_jobs = last.len();
    let hardware_calls: u64 = last.values().map(|r| r.calls).sum();
    let sim = cluster.sim_state().await?;
    let components: usize = last.values().map(|r| r.components.len()).sum();
    // Before the raw measurements, whose messages and requests are not the
    // run's.
    let after = cluster.writes_reading().await?;
    let raw = raw_jetstream(&cluster.nats, s.raw_messages, 2048).await?;
    let raw_http = raw_http(cluster).await?;
    let secs = makespan.as_secs_f64();
    let jobs_per_s = step_jobs as f64 / secs;
    let sim_components = sim
        .racks
        .iter()
        .map(|r| r.components.len())
        .sum::<usize>()
        .max(1) as f64;
    Ok(Report {
        scenario: s.clone(),
        tasks,
        statuses,
        failures,
        makespan_s: secs,
        ideal_s: ideal.total.as_secs_f64(),
        ratio: secs / ideal.total.as_secs_f64().max(f64::EPSILON),
        ideal_stages_s: ideal.stages.iter().map(Duration::as_secs_f64).collect(),
        polled_ideal_s: ideal.polled_total.as_secs_f64(),
        polled_ratio: secs / ideal.polled_total.as_secs_f64().max(f64::EPSILON),
        cost: Costs::of(&cpu, components, step_jobs, sim.requests_total, raw_http),
        stage_advance: stage_advance(&seen, &stage_of),
        step_jobs,
        jobs_per_s,
        hardware_calls,
        calls_per_s: hardware_calls as f64 / secs,
        redfish_requests: sim.requests_total,
        peak_requests_per_bmc: sim.peak_concurrent_requests_per_bmc,
        requests_per_call: sim.requests_total as f64 / (hardware_calls.max(1) as f64),
        requests_per_component: sim.requests_total as f64 / sim_components,
        requests_per_component_by_purpose: sim
            .requests_by_purpose
            .iter()
            .map(|(p, n)| (p.clone(), *n as f64 / sim_components))
            .collect(),
        raw_jetstream: raw,
        jobs_vs_raw: jobs_per_s / raw.per_second,
        writes: Writes::between(&before, &after, step_jobs),
        usage: cluster.usage(),
        cpu,
    })
}

/// The rule of `operation` in the rule batch `yaml`, and the ideal of one
/// of the cluster's racks under it (racks are alike).
pub fn rule_and_ideal(
    cluster: &Cluster,
    yaml: &str,
    operation: OperationCode,
    time_scale: f64,
) -> anyhow::Result<(flow_rules::RuleDefinition, Ideal)> {
    let rule = RuleBatch::from_yaml_str(yaml)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .rules
        .into_iter()
        .find(|r| r.operation == operation)
        .with_context(|| format!("no {operation} rule in the rules"))?
        .definition;
    let rack = cluster.racks.first().context("the cluster has no racks")?;
    let components: Vec<ComponentTarget> = rack
        .components
        .iter()
        .filter_map(|c| {
            Some(ComponentTarget {
                rack: rack.name.clone(),
                name: c.name.clone(),
                component_type: c.component_type.parse::<ComponentType>().ok()?,
                bmc_url: c.bmc_url.clone(),
                credential_ref: c.credential_ref.clone(),
                resource_id: None,
            })
        })
        .collect();
    let ideal = ideal(
        &rule,
        operation,
        &components,
        &flow_rack_sim::Timings::default(),
        time_scale,
    )?;
    Ok((rule, ideal))
}

/// Waits until `n` tasks are in a final state; their statuses.
pub async fn wait_finished(
    cluster: &Cluster,
    n: usize,
    limit: Duration,
) -> anyhow::Result<BTreeMap<String, usize>> {
    let start = Instant::now();
    loop {
        if let Ok(counts) = api::task_counts(&cluster.nats).await {
            let map: BTreeMap<String, usize> = counts
                .by_status
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), usize::try_from(*v).unwrap_or(0)))
                .collect();
            let open: usize = counts
                .by_status
                .iter()
                .filter(|(s, _)| s.is_open())
                .map(|(_, n)| usize::try_from(*n).unwrap_or(0))
                .sum();
            let total: usize = map.values().sum();
            if total >= n && open == 0 {
                return Ok(map);
            }
        }
        if start.elapsed() > limit {
            bail!(
                "tasks still unfinished after {limit:?}: {}",
                api::task_counts(&cluster.nats)
                    .await
                    .map(|c| format!("{:?}", c.by_status))
                    .unwrap_or_else(|e| e.to_string())
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// First task created → last task finished, from the tasks' own times.
async fn task_makespan(cluster: &Cluster) -> Option<Duration> {
    let tasks = api::task_list(&cluster.nats).await.ok()?;
    let first = tasks.iter().map(|t| t.created_at).min()?;
    let last = tasks.iter().filter_map(|t| t.finished_at).max()?;
    Duration::try_from(last - first).ok()
}
