//! Fault drills: racks power-cycle (power on, then off) while processes are
//! killed and servers restarted under them; afterwards every task must be
//! completed, every component in the state its rule demands, and no
//! component commanded more often than one redelivered in-flight call
//! explains.
//!
//! Faults, per phase (offsets from the phase's submission): a worker is
//! killed with SIGKILL and started again every `worker_kill_every`; at 3 s
//! the scheduler is killed (SIGKILL) and started again; at 8 s the NATS
//! server is killed (SIGKILL, `sync_interval: always`) and started again on
//! the same port and store; at 13 s the private Postgres is stopped
//! immediately (SIGQUIT: no checkpoint, crash recovery at start) and
//! started again.
//!
//! On a JetStream cluster (`--cluster`: 3 nodes, every stream R3, three
//! schedulers and the workers each connected to another node first) the
//! faults are the nodes': in the power-on phase, at 3 s the node leading
//! `FLOW_JOBS` is killed (SIGKILL) and, once a probe has completed without
//! it, started again; at 8 s (or when that is over) the same for the node
//! leading `FLOW_RESULTS`; in the power-off phase, at 3 s the node leading
//! `FLOW_TASKS` is paused (SIGSTOP, a partition: its sockets stay
//! open and nothing answers) for [`PARTITION`], longer than JetStream's
//! Raft election timeout, then resumed (SIGCONT). During each, the harness
//! publishes [`SUBMISSIONS_PER_FAULT`] task requests to `flow.tasks.submit`
//! and keeps those JetStream acknowledged; at the end each is submitted
//! again through the API, which must answer that the request ID already
//! made its task (no acknowledged submission lost).
//!
//! Time to resume = from the moment the fault is cleared (process back) to
//! the end of a probe task (for a node's fault: from the fault itself, as
//! the cluster is meant to go on without the node): a one-step GetPowerStatus task on the power
//! shelves of an extra rack that the drill does not power-cycle, submitted
//! through the API and run through the whole pipeline (Postgres, outbox,
//! JetStream, a worker, the BMCs, the result). Submitted again every second
//! until one completes, so it measures when the whole system works again,
//! not when the drill's own racks happen to finish a settle.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::ValueEnum;
use flow_protocol::TaskStatus;
use flow_protocol::api::{ConflictStrategy, TaskSubmit};
use flow_protocol::ids::RackRef;
use flow_rules::OperationCode;
use futures::StreamExt;
use serde::Serialize;

use crate::api;
use crate::cluster::{Cluster, ClusterSpec, Tools, WatcherSpec};

/// The drill's rules.
pub const DRILL_RULES: &str = include_str!("../rules/drill-rules.yaml");

/// A fault the drill can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// SIGKILL a worker every few seconds (started again at once).
    WorkerKill,
    /// SIGKILL the scheduler, start it again.
    SchedulerKill,
    /// SIGKILL the NATS server, start it again on the same store.
    NatsRestart,
    /// Immediate stop of Postgres, start it again.
    PostgresRestart,
    /// SIGKILL the NATS node leading `FLOW_JOBS`, start it again later.
    JobsLeaderKill,
    /// SIGKILL the NATS node leading `FLOW_RESULTS`, start it again later.
    ResultsLeaderKill,
    /// SIGSTOP the NATS node leading `FLOW_TASKS` for [`PARTITION`], then
    /// SIGCONT.
    NodePartition,
    /// Back the database up (`pg_dump`) while the phase's tasks run; once
    /// they have moved on past it, kill the schedulers, drop the database,
    /// restore the backup (`pg_restore`) and start the schedulers again,
    /// the first with `--restored` (docs/operating.md, "Backup and
    /// restore").
    DatabaseRestore,
}

/// How long a partitioned node stays stopped: longer than JetStream's Raft
/// election timeout (at most 9 s in nats-server), so its groups elect
/// leaders elsewhere.
pub const PARTITION: Duration = Duration::from_secs(15);

/// Task requests published to `flow.tasks.submit` during each node fault.
pub const SUBMISSIONS_PER_FAULT: usize = 3;

impl Fault {
    /// Every fault of one NATS server.
    pub const ALL: [Fault; 4] = [
        Fault::WorkerKill,
        Fault::SchedulerKill,
        Fault::NatsRestart,
        Fault::PostgresRestart,
    ];

    /// Every fault of a cluster's nodes.
    pub const CLUSTER: [Fault; 3] = [
        Fault::JobsLeaderKill,
        Fault::ResultsLeaderKill,
        Fault::NodePartition,
    ];

    /// Faults after which no component may get a second command: none of
    /// them kills a worker between a command and its record.
    pub const RECORDED: [Fault; 3] = [
        Fault::SchedulerKill,
        Fault::PostgresRestart,
        Fault::DatabaseRestore,
    ];

    /// A fault of one node of a cluster.
    fn is_node(self) -> bool {
        Fault::CLUSTER.contains(&self)
    }

    /// Whether it is injected in phase `phase` (0: power on, 1: power off):
    /// the node kills in the first, the partition in the second (a node
    /// fault lasts until a probe completed without the node and the node
    /// is back, 7-15 s, so three do not fit in one phase of the short
    /// drill); every other fault in both.
    fn in_phase(self, phase: usize) -> bool {
        match self {
            Fault::JobsLeaderKill | Fault::ResultsLeaderKill => phase == 0,
            Fault::NodePartition => phase == 1,
            _ => true,
        }
    }

    /// Offset from the start of a phase (the one-off faults).
    fn offset(self) -> Option<Duration> {
        match self {
            Fault::WorkerKill => None,
            Fault::SchedulerKill | Fault::JobsLeaderKill => Some(Duration::from_secs(3)),
            Fault::NatsRestart | Fault::ResultsLeaderKill => Some(Duration::from_secs(8)),
            Fault::PostgresRestart => Some(Duration::from_secs(13)),
            Fault::NodePartition => Some(Duration::from_secs(3)),
            // Early: the backup catches the first stage running.
            Fault::DatabaseRestore => Some(Duration::from_secs(1)),
        }
    }
}

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct DrillSpec {
    /// Racks.
    pub racks: usize,
    /// Workers.
    pub workers: usize,
    /// Faults to inject.
    pub faults: Vec<Fault>,
    /// How often a worker is killed.
    pub worker_kill_every: Duration,
    /// Simulator time scale.
    pub time_scale: f64,
    /// Bound on each phase.
    pub phase_limit: Duration,
    /// NATS servers (3: a cluster, every stream R3).
    pub nats_nodes: usize,
    /// Schedulers.
    pub schedulers: usize,
}

/// One injected fault.
#[derive(Debug, Clone, Serialize)]
pub struct FaultReport {
    /// Which.
    pub fault: Fault,
    /// The phase it hit.
    pub phase: String,
    /// Seconds since the phase began.
    pub at_s: f64,
    /// The NATS node it hit (node faults).
    pub node: Option<String>,
    /// Injection → cleared (process back and healthy), ms.
    pub outage_ms: f64,
    /// Cleared → a probe task completed end to end, ms (None: none did
    /// within 60 s).
    pub resumed_after_ms: Option<f64>,
    /// Cleared → the first task event of the drill's racks, ms.
    pub first_event_after_ms: Option<f64>,
}

/// One phase (power on, power off).
#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    /// The operation.
    pub operation: String,
    /// Tasks.
    pub tasks: usize,
    /// Final statuses.
    pub statuses: BTreeMap<String, usize>,
    /// Submission → all finished, seconds.
    pub seconds: f64,
    /// Components not in the demanded state afterwards.
    pub wrong_state: Vec<String>,
    /// Power commands per component in this phase → how many components.
    pub commands_per_component: BTreeMap<usize, usize>,
}

/// The drill's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct DrillReport {
    /// What ran.
    pub spec: DrillSpec,
    /// Phases.
    pub phases: Vec<PhaseReport>,
    /// Faults, in order.
    pub faults: Vec<FaultReport>,
    /// Workers killed.
    pub worker_kills: usize,
    /// Task requests JetStream acknowledged during node faults, and how
    /// many of them the API later knew (all, or a submission was lost).
    pub submissions_acked: usize,
    /// Of those, the ones whose task the API found again.
    pub submissions_found: usize,
    /// How long after the last phase `FLOW_TASKS` still held task requests
    /// the scheduler had not taken (a request consumed late is not lost).
    pub submissions_drained_after_ms: Option<f64>,
    /// What is wrong (empty: passed).
    pub problems: Vec<String>,
}

/// Most power commands one component may receive in a phase: its one
/// command, plus one more when the worker holding its call was killed
/// after the BMC accepted the command but before the checkpoint recorded it.
pub const MAX_COMMANDS_PER_COMPONENT: usize = 2;

/// The most power commands one component may receive in a phase of a drill
/// with `faults`: one when none of them can kill a worker between a command
/// and its record ([`Fault::RECORDED`]), else [`MAX_COMMANDS_PER_COMPONENT`].
pub fn max_commands(faults: &[Fault]) -> usize {
    if faults.iter().all(|f| Fault::RECORDED.contains(f)) {
        1
    } else {
        MAX_COMMANDS_PER_COMPONENT
    }
}

/// How long a restore drill waits, after its backup, for the tasks to move
/// on (task events) before it loses the database.
const MOVE_ON_LIMIT: Duration = Duration::from_secs(30);

/// Task events seen, with the time each arrived.
struct Events {
    at: Arc<Mutex<Vec<Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Events {
    async fn subscribe(nats: &async_nats::Client) -> anyhow::Result<Events> {
        let mut sub = nats.subscribe("flow.events.>").await?;
        let at = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&at);
        let task = tokio::spawn(async move {
            while sub.next().await.is_some() {
                into.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Instant::now());
            }
        });
        Ok(Events { at, task })
    }

    fn count_after(&self, t: Instant) -> usize {
        self.at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|x| **x > t)
            .count()
    }

    fn first_after(&self, t: Instant) -> Option<Instant> {
        self.at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .find(|x| *x > t)
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs the drill on a fresh cluster under `work`.
pub async fn run(tools: &Tools, spec: &DrillSpec, work: &Path) -> anyhow::Result<DrillReport> {
    let cluster_spec = ClusterSpec {
        // One more rack for the resume probe.
        racks: spec.racks + 1,
        workers: spec.workers,
        time_scale: spec.time_scale,
        initial_power_on: false,
        bmc_base_port: 0,
        own_postgres: spec.faults.contains(&Fault::PostgresRestart),
        // Workers send a progress ack every third of it; short enough that
        // a killed worker's job comes back quickly.
        job_ack_wait: Some(Duration::from_secs(15)),
        nats_nodes: spec.nats_nodes,
        schedulers: spec.schedulers,
        watchers: WatcherSpec::NONE,
    };
    let mut cluster = Cluster::start(tools, &cluster_spec, work).await?;
    let result = drive(&mut cluster, spec).await;
    let result = result.map_err(|e| e.context(format!("logs in {}", cluster.work.display())));
    cluster.stop().await;
    result
}

async fn drive(cluster: &mut Cluster, spec: &DrillSpec) -> anyhow::Result<DrillReport> {
    api::load_rules(&cluster.nats, DRILL_RULES).await?;
    let probe = Probe::create(cluster).await?;
    let drill_racks: Vec<String> = cluster.racks[..spec.racks]
        .iter()
        .map(|r| r.name.clone())
        .collect();
    let events = Events::subscribe(&cluster.nats).await?;
    let mut report = DrillReport {
        spec: spec.clone(),
        phases: Vec::new(),
        faults: Vec::new(),
        worker_kills: 0,
        submissions_acked: 0,
        submissions_found: 0,
        submissions_drained_after_ms: None,
        problems: Vec::new(),
    };
    let mut acked: Vec<TaskSubmit> = Vec::new();
    let mut next_worker = 0;
    let mut commands_before: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (phase, (operation, expected)) in [("power_on", "On"), ("power_off", "Off")]
        .into_iter()
        .enumerate()
    {
        let code: OperationCode = operation.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
        let started = Instant::now();
        let reply = api::submit(
            &cluster.nats,
            &TaskSubmit::new(
                uuid::Uuid::new_v4().to_string(),
                code,
                drill_racks.iter().map(|r| RackRef(r.clone())).collect(),
            ),
        )
        .await?;
        let ids: std::collections::BTreeSet<String> = reply
            .results
            .iter()
            .filter_map(|r| r.submission.task_id().map(|t| t.to_string()))
            .collect();
        let tasks = ids.len();
        if tasks != drill_racks.len() {
            bail!(
                "{operation}: only {tasks} of {} racks got a task: {:?}",
                drill_racks.len(),
                reply.results
            );
        }
        let mut pending: Vec<Fault> = spec
            .faults
            .iter()
            .copied()
            .filter(|f| f.offset().is_some() && f.in_phase(phase))
            .collect();
        let mut last_worker_kill = Instant::now();
        let statuses = loop {
            let elapsed = started.elapsed();
            if let Ok(map) = finished(cluster, &ids).await {
                break map;
            }
            if elapsed > spec.phase_limit {
                report.problems.push(format!(
                    "{operation}: tasks still unfinished after {:?} (stuck)",
                    spec.phase_limit
                ));
                break BTreeMap::new();
            }
            if spec.faults.contains(&Fault::WorkerKill)
                && last_worker_kill.elapsed() >= spec.worker_kill_every
                && !cluster.workers.is_empty()
            {
                let i = next_worker % cluster.workers.len();
                let w = &mut cluster.workers[i];
                tracing::info!(worker = w.name(), "fault: SIGKILL worker");
                w.restart()?;
                next_worker += 1;
                report.worker_kills += 1;
                last_worker_kill = Instant::now();
            }
            if let Some(i) = pending
                .iter()
                .position(|f| f.offset().is_some_and(|o| elapsed >= o))
            {
                let fault = pending.remove(i);
                let injected = Instant::now();
                let (cleared, node, resumed) = if fault.is_node() {
                    let hit = node_fault(cluster, &probe, fault, &mut acked).await?;
                    (hit.cleared, Some(hit.node), hit.resumed)
                } else {
                    if fault == Fault::DatabaseRestore {
                        lose_and_restore(cluster, &events, operation, drill_racks.len()).await?;
                    } else {
                        inject(cluster, fault).await?;
                    }
                    let cleared = Instant::now();
                    let resumed = probe.run(cluster, Duration::from_secs(60)).await;
                    (cleared, None, resumed)
                };
                let measured_from = if fault.is_node() { injected } else { cleared };
                let first_event = events.first_after(measured_from);
                report.faults.push(FaultReport {
                    fault,
                    phase: operation.into(),
                    at_s: (injected - started).as_secs_f64(),
                    node,
                    outage_ms: ms(cleared - injected),
                    resumed_after_ms: resumed
                        .map(|t| ms(t.saturating_duration_since(measured_from))),
                    first_event_after_ms: first_event.map(|t| ms(t - measured_from)),
                });
                if resumed.is_none() {
                    report.problems.push(format!(
                        "{operation}: no probe task completed within 60 s of {fault:?}"
                    ));
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let seconds = started.elapsed().as_secs_f64();
        for f in pending {
            report.problems.push(format!(
                "{operation}: finished in {seconds:.1} s, before {f:?} was due: nothing proven"
            ));
        }
        // Check the hardware.
        let state = cluster.sim_state().await?;
        let mut wrong_state = Vec::new();
        let mut per_component: BTreeMap<usize, usize> = BTreeMap::new();
        for rack in state.racks.iter().filter(|r| drill_racks.contains(&r.name)) {
            for c in &rack.components {
                let power = serde_json::to_value(c.power_state)?;
                if power.as_str() != Some(expected) {
                    wrong_state.push(format!(
                        "{}/{}: {power} (want {expected})",
                        rack.name, c.name
                    ));
                }
                let total = c.command_count(flow_rack_sim::CommandKind::Reset);
                let key = (rack.name.clone(), c.name.clone());
                let now = total - commands_before.get(&key).copied().unwrap_or(0);
                commands_before.insert(key, total);
                *per_component.entry(now).or_default() += 1;
                let most = max_commands(&spec.faults);
                if now > most {
                    report.problems.push(format!(
                        "{operation}: {}/{} was commanded {now} times (at most {most})",
                        rack.name, c.name
                    ));
                }
                if now == 0 {
                    report.problems.push(format!(
                        "{operation}: {}/{} was never commanded",
                        rack.name, c.name
                    ));
                }
            }
        }
        let completed = statuses.get("completed").copied().unwrap_or(0);
        if completed != tasks {
            report.problems.push(format!(
                "{operation}: {completed} of {tasks} tasks completed: {statuses:?}"
            ));
        }
        if !wrong_state.is_empty() {
            report.problems.push(format!(
                "{operation}: {} components not {expected}, e.g. {}",
                wrong_state.len(),
                wrong_state[0]
            ));
        }
        report.phases.push(PhaseReport {
            operation: operation.into(),
            tasks,
            statuses,
            seconds,
            wrong_state,
            commands_per_component: per_component,
        });
    }
    check_submissions(cluster, &acked, &mut report).await;
    Ok(report)
}

/// Longest the scheduler may take to consume the task requests published
/// during node faults once the drill's phases are over (its pull requests
/// to a consumer whose leader moved are renewed within seconds).
const SUBMISSIONS_DRAIN_LIMIT: Duration = Duration::from_secs(90);

/// Every task request JetStream acknowledged is known to the API: once the
/// scheduler has taken every request off `FLOW_TASKS` (a work queue: a
/// message stays until the scheduler acknowledges it), the same request
/// submitted again is answered as a duplicate of its task.
async fn check_submissions(cluster: &Cluster, acked: &[TaskSubmit], report: &mut DrillReport) {
    report.submissions_acked = acked.len();
    if acked.is_empty() {
        return;
    }
    let js = async_nats::jetstream::new(cluster.nats.clone());
    let start = Instant::now();
    let mut left = None;
    // Which node answered the last count: a leader cut off a moment ago
    // may still answer for a stream it no longer leads.
    let mut counted_by = None;
    while start.elapsed() < SUBMISSIONS_DRAIN_LIMIT {
        let info = match js.get_stream(flow_protocol::jobs::STREAM_TASKS).await {
            Ok(mut stream) => stream.info().await.ok().cloned(),
            Err(_) => None,
        };
        let messages = info.as_ref().map(|i| i.state.messages);
        counted_by = info.and_then(|i| i.cluster.and_then(|c| c.leader));
        left = messages;
        if messages == Some(0) {
            report.submissions_drained_after_ms = Some(ms(start.elapsed()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if report.submissions_drained_after_ms.is_none() {
        report.problems.push(format!(
            "FLOW_TASKS still held {left:?} task request(s) {} s after the last phase",
            SUBMISSIONS_DRAIN_LIMIT.as_secs()
        ));
    }
    for request in acked {
        let again = api::submit(&cluster.nats, request).await;
        let found = again
            .as_ref()
            .ok()
            .and_then(|r| r.results.first())
            .map(|o| &o.submission);
        match found {
            Some(flow_protocol::api::Submission::Duplicate(_)) => report.submissions_found += 1,
            other => report.problems.push(format!(
                "submission {} was acknowledged by JetStream but the API did not know it: {:?} \
                 ({STREAM_TASKS} counted empty by {counted_by:?})",
                request.request_id,
                other.map_or_else(|| format!("{again:?}"), |s| format!("{s:?}")),
                STREAM_TASKS = flow_protocol::jobs::STREAM_TASKS,
            )),
        }
    }
}

/// What a node fault did.
struct NodeHit {
    /// The node's server name.
    node: String,
    /// When it was back (restarted or resumed) and healthy.
    cleared: Instant,
    /// When a probe task completed after the fault (None: none in 60 s).
    resumed: Option<Instant>,
}

/// Kills (or pauses) the node leading the fault's stream, publishes task
/// requests to JetStream while it is gone, waits for a probe task to
/// complete without it, then brings it back.
async fn node_fault(
    cluster: &mut Cluster,
    probe: &Probe,
    fault: Fault,
    acked: &mut Vec<TaskSubmit>,
) -> anyhow::Result<NodeHit> {
    use flow_protocol::jobs::{STREAM_JOBS, STREAM_RESULTS, STREAM_TASKS};
    let stream = match fault {
        Fault::JobsLeaderKill => STREAM_JOBS,
        Fault::ResultsLeaderKill => STREAM_RESULTS,
        _ => STREAM_TASKS,
    };
    let Some(i) = cluster.stream_leader(stream).await else {
        bail!("{fault:?}: JetStream names no leader of {stream} (not a cluster?)");
    };
    let node = cluster.nats_names[i].clone();
    tracing::info!(?fault, node, stream, "fault: injecting");
    let hit = Instant::now();
    if fault == Fault::NodePartition {
        cluster.nats_servers[i].signal("STOP");
    } else {
        cluster.nats_servers[i].kill9();
    }
    // Task requests to JetStream and the probe, side by side.
    let submissions = async {
        let mut sent = Vec::new();
        for _ in 0..SUBMISSIONS_PER_FAULT {
            if let Some(request) = probe.submit_to_jetstream(cluster).await {
                sent.push(request);
            }
        }
        sent
    };
    let (sent, resumed) = tokio::join!(submissions, probe.run(cluster, Duration::from_secs(60)));
    acked.extend(sent);
    if fault == Fault::NodePartition {
        tokio::time::sleep(PARTITION.saturating_sub(hit.elapsed())).await;
        cluster.nats_servers[i].signal("CONT");
    }
    cluster.restart_nats(i).await?;
    tracing::info!(?fault, node, "fault: cleared");
    Ok(NodeHit {
        node,
        cleared: Instant::now(),
        resumed,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Statuses of `ids` once every one of them is final; an error while any
/// is open (or the API is unreachable, e.g. during a fault).
async fn finished(
    cluster: &Cluster,
    ids: &std::collections::BTreeSet<String>,
) -> anyhow::Result<BTreeMap<String, usize>> {
    let tasks = api::task_list(&cluster.nats).await?;
    let mut statuses = BTreeMap::new();
    for t in tasks.iter().filter(|t| ids.contains(&t.id.to_string())) {
        if t.status.is_open() {
            bail!("task {} is {}", t.id, t.status);
        }
        *statuses.entry(t.status.as_str().to_owned()).or_default() += 1;
    }
    let seen: usize = statuses.values().sum();
    if seen != ids.len() {
        bail!("only {seen} of {} tasks listed", ids.len());
    }
    Ok(statuses)
}

async fn inject(cluster: &mut Cluster, fault: Fault) -> anyhow::Result<()> {
    tracing::info!(?fault, "fault: injecting");
    match fault {
        // Node faults are node_fault's.
        Fault::WorkerKill
        | Fault::JobsLeaderKill
        | Fault::ResultsLeaderKill
        | Fault::NodePartition
        | Fault::DatabaseRestore => {}
        Fault::SchedulerKill => {
            cluster.schedulers[0].kill9();
            tokio::time::sleep(Duration::from_secs(1)).await;
            cluster.schedulers[0].start_again()?;
            cluster.wait_api().await?;
        }
        Fault::NatsRestart => {
            cluster.nats_servers[0].kill9();
            tokio::time::sleep(Duration::from_secs(1)).await;
            cluster.restart_nats(0).await?;
        }
        Fault::PostgresRestart => {
            cluster.restart_postgres().await?;
        }
    }
    tracing::info!(?fault, "fault: cleared");
    Ok(())
}

/// The restore fault: a backup while the phase's tasks run; once they
/// have moved on past it (a task event per drill rack, or
/// [`MOVE_ON_LIMIT`]), the database lost and the backup restored, the
/// schedulers started again (the first with `--restored`).
async fn lose_and_restore(
    cluster: &mut Cluster,
    events: &Events,
    phase: &str,
    racks: usize,
) -> anyhow::Result<()> {
    let backup = cluster.work.join(format!("backup-{phase}.dump"));
    cluster.backup_database(&backup).await?;
    let backed_up = Instant::now();
    tracing::info!(backup = %backup.display(), "fault: database backed up");
    let moved_on =
        crate::cluster::wait_for(MOVE_ON_LIMIT, || events.count_after(backed_up) >= racks).await;
    tracing::info!(
        moved_on,
        events = events.count_after(backed_up),
        "fault: losing the database and restoring the backup"
    );
    cluster.lose_and_restore_database(&backup).await?;
    tracing::info!("fault: database restored, schedulers back");
    Ok(())
}

/// The resume probe: a one-step GetPowerStatus rule on the shelves of the
/// extra rack.
struct Probe {
    rule: flow_protocol::ids::RuleId,
    rack: String,
}

impl Probe {
    async fn create(cluster: &Cluster) -> anyhow::Result<Probe> {
        let rack = cluster
            .racks
            .last()
            .map(|r| r.name.clone())
            .ok_or_else(|| anyhow::anyhow!("no probe rack"))?;
        let definition = serde_json::json!({
            "version": "v1",
            "steps": [{
                "component_type": "powershelf",
                "stage": 1,
                "timeout": "1m",
                "main_operation": {"name": "GetPowerStatus", "timeout": "10s"}
            }]
        });
        let rule =
            api::create_rule(&cluster.nats, "Drill resume probe", "power_on", definition).await?;
        Ok(Probe { rule, rack })
    }

    /// Submits probe tasks (one at a time, again every second while the
    /// API or a task fails) until one completes; when it did.
    async fn run(&self, cluster: &Cluster, limit: Duration) -> Option<Instant> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if self
                .once(cluster, limit.saturating_sub(start.elapsed()))
                .await
            {
                return Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        None
    }

    /// A probe task request, published to `flow.tasks.submit` and kept
    /// only once JetStream acknowledged it (tried for at most 10 s).
    async fn submit_to_jetstream(&self, cluster: &Cluster) -> Option<TaskSubmit> {
        let request = self.request();
        let body = serde_json::to_vec(&request).ok()?;
        let js = async_nats::jetstream::new(cluster.nats.clone());
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            let sent = js
                .send_publish(
                    flow_protocol::jobs::SUBJECT_SUBMIT,
                    async_nats::jetstream::message::PublishMessage::build()
                        .payload(body.clone().into())
                        .message_id(request.request_id.clone()),
                )
                .await;
            if let Ok(ack) = sent
                && ack.await.is_ok()
            {
                return Some(request);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }

    fn request(&self) -> TaskSubmit {
        TaskSubmit {
            component_types: vec![flow_rules::ComponentType::PowerShelf],
            rule_id: Some(self.rule),
            // A probe still running from an earlier try: wait behind it.
            conflict: ConflictStrategy::Queue {
                timeout_seconds: 60,
            },
            ..TaskSubmit::new(
                uuid::Uuid::new_v4().to_string(),
                OperationCode::Power(flow_rules::PowerOperation::PowerOn),
                vec![RackRef(self.rack.clone())],
            )
        }
    }

    async fn once(&self, cluster: &Cluster, limit: Duration) -> bool {
        let submit = self.request();
        let Ok(reply) = api::submit(&cluster.nats, &submit).await else {
            return false;
        };
        let Some(task) = reply.results.first().and_then(|r| r.submission.task_id()) else {
            return false;
        };
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(t) = api::task_get(&cluster.nats, task).await {
                match t.status {
                    TaskStatus::Completed => return true,
                    s if s.is_open() => {}
                    _ => return false,
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}
