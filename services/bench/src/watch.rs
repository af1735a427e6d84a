//! The `watch-1000` benchmark: hardware watchers over a whole site. W
//! workers also watch (`flow-worker --watch`) and divide the racks'
//! BMCs among themselves (`services/worker/src/watch.rs`); once they hold
//! every BMC, a site-wide power-on starts (racks off: the trays' BMCs come
//! up with the shelves), and once every compute tray's event stream is
//! open, leaks are raised through the simulators' admin API on random
//! compute trays of distinct racks, one every `spacing`; halfway, one watcher is killed (SIGKILL) and its racks
//! are left to the others. Measured: how long the watchers took to cover
//! the site, raise → event recorded and raise → the tray's first `ForceOff`
//! (the simulator's record) p50/p99, the takeover after the kill, each
//! watcher's peak memory (VmHWM) and open sockets sampled during the run,
//! and the leaks lost (no event) or duplicated (more than one event).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use flow_protocol::TaskStatus;
use flow_protocol::api::TaskSubmit;
use flow_protocol::event::{EventRecord, EventType};
use flow_protocol::ids::RackRef;
use flow_rules::{OperationCode, PowerOperation};
use serde::Serialize;
use time::OffsetDateTime;

use crate::api;
use crate::cluster::{Cluster, ClusterSpec, ClusterUsage, Tools, WatcherSpec};
use crate::leak::{events, first_force_off, percentile, raise, tray};

/// What the benchmark runs.
#[derive(Debug, Clone, Serialize)]
pub struct WatchSpec {
    /// Racks.
    pub racks: usize,
    /// Workers; the first `watchers` also watch.
    pub workers: usize,
    /// Watchers.
    pub watchers: usize,
    /// Leaks raised (each on a different rack).
    pub leaks: usize,
    /// The pause between two leaks.
    pub spacing_ms: u64,
    /// Simulator time scale.
    pub time_scale: f64,
    /// `--watch-poll-seconds` of each watcher.
    pub poll_s: f64,
}

/// Latencies, milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    /// How many were measured.
    pub n: usize,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// The slowest.
    pub max_ms: f64,
}

impl Latency {
    fn of(mut ms: Vec<f64>) -> Self {
        ms.sort_by(f64::total_cmp);
        Latency {
            n: ms.len(),
            p50_ms: percentile(&ms, 50.0),
            p99_ms: percentile(&ms, 99.0),
            max_ms: ms.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// One watcher's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WatcherFigures {
    /// The worker's name.
    pub name: String,
    /// BMCs it watched once every stream was open.
    pub bmcs: f64,
    /// Event streams it held open then.
    pub streams: f64,
    /// Peak resident memory (VmHWM) sampled during the run, MiB.
    pub peak_rss_mib: f64,
    /// The most sockets it held open at one sample.
    pub peak_sockets: usize,
    /// Killed halfway.
    pub killed: bool,
}

/// What it measured.
#[derive(Debug, Clone, Serialize)]
pub struct WatchReport {
    /// The spec.
    pub spec: WatchSpec,
    /// BMCs in the site.
    pub bmcs: usize,
    /// Start of the watchers → every BMC and partition held once.
    pub cover_s: f64,
    /// The power-on submitted → every compute tray's event stream open
    /// (their BMCs come up with the shelves).
    pub streams_s: f64,
    /// Leaks raised.
    pub raised: usize,
    /// Of those, raised while the power-on's tasks were open.
    pub during_power_on: usize,
    /// Of those, with no event recorded.
    pub lost: usize,
    /// Events recorded beyond one per leak.
    pub duplicated: usize,
    /// Raise → event recorded.
    pub to_event: Latency,
    /// Raise → the tray's first ForceOff (trays the power-off found on;
    /// one still off is left so, without a command).
    pub to_force_off: Latency,
    /// Raise → the power-off task its rule submitted completed (the tray
    /// and those below it confirmed off).
    pub to_contained: Latency,
    /// Raise → event recorded, for leaks raised in the first 10 s after
    /// the kill (the dead watcher's racks among them).
    pub after_kill: Latency,
    /// Kill → the survivors hold all 32 partitions.
    pub takeover_s: f64,
    /// The power-on's tasks by final status (leak power-offs included).
    pub statuses: BTreeMap<String, usize>,
    /// Each watcher.
    pub watchers: Vec<WatcherFigures>,
    /// CPU and memory of each process.
    pub usage: ClusterUsage,
}

/// A small deterministic generator (xorshift64*), so that runs pick the
/// same trays.
struct Pick(u64);

impl Pick {
    fn next(&mut self, below: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x % below as u64) as usize
    }
}

/// The value of an unlabelled sample on a worker's `/metrics`.
async fn gauge(http: &reqwest::Client, addr: &str, name: &str) -> Option<f64> {
    let page = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// `name` summed over the watchers at `addrs` (None: a page not read).
async fn total(http: &reqwest::Client, addrs: &[String], name: &str) -> Option<f64> {
    let mut sum = 0.0;
    for a in addrs {
        sum += gauge(http, a, name).await?;
    }
    Some(sum)
}

/// The watchers at `addrs` hold `bmcs` BMCs and the 32 partitions between
/// them.
async fn holds_all(http: &reqwest::Client, addrs: &[String], bmcs: usize) -> bool {
    total(http, addrs, "flow_watch_bmcs").await == Some(bmcs as f64)
        && total(http, addrs, "flow_watch_partitions").await == Some(32.0)
}

/// VmHWM (MiB) and open sockets of a process now.
fn sample(pid: u32) -> Option<(f64, usize)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let sockets = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))
        })
        .count();
    Some((hwm_kib / 1024.0, sockets))
}

/// Runs the benchmark on a fresh cluster under `work`.
pub async fn run(tools: &Tools, spec: &WatchSpec, work: &Path) -> anyhow::Result<WatchReport> {
    if spec.watchers < 2 || spec.watchers > spec.workers {
        bail!(
            "--watchers: 2 to --workers ({}), not {} (one is killed)",
            spec.workers,
            spec.watchers
        );
    }
    if spec.leaks > spec.racks {
        bail!(
            "--leaks: at most one per rack ({}), not {}",
            spec.racks,
            spec.leaks
        );
    }
    let cluster = Cluster::start(
        tools,
        &ClusterSpec {
            racks: spec.racks,
            workers: spec.workers,
            time_scale: spec.time_scale,
            initial_power_on: false,
            bmc_base_port: 0,
            own_postgres: false,
            job_ack_wait: None,
            nats_nodes: 1,
            schedulers: 1,
            watchers: WatcherSpec {
                count: spec.watchers,
                poll_s: spec.poll_s,
                // The racks are registered after the watchers start.
                inventory_s: 10.0,
                ..WatcherSpec::NONE
            },
        },
        work,
    )
    .await?;
    let mut cluster = cluster;
    let result = measure(&mut cluster, spec).await;
    cluster.finish(result, |r, usage| r.usage = usage).await
}

async fn measure(cluster: &mut Cluster, spec: &WatchSpec) -> anyhow::Result<WatchReport> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let watchers: Vec<String> = cluster.worker_metrics[..spec.watchers].to_vec();
    let pids: Vec<u32> = cluster.workers[..spec.watchers]
        .iter()
        .filter_map(|w| w.pid())
        .collect();
    let bmcs: usize = cluster.racks.iter().map(|r| r.components.len()).sum();
    // The BMCs with an event stream: the trays' (compute and switch), not
    // the shelves'.
    let streamed = cluster
        .racks
        .iter()
        .flat_map(|r| &r.components)
        .filter(|c| {
            flow_rack_sim::ComponentKind::ALL.iter().any(|k| {
                k.has_event_service()
                    && c.component_type
                        .eq_ignore_ascii_case(k.component_type().as_str())
            })
        })
        .count();

    // Peak memory and sockets of each watcher, sampled every second.
    let peaks = Arc::new(Mutex::new(vec![(0.0_f64, 0_usize); pids.len()]));
    // Aborted below, or with the runtime when the run fails early.
    let sampler = {
        let peaks = Arc::clone(&peaks);
        let pids = pids.clone();
        tokio::spawn(async move {
            loop {
                for (i, pid) in pids.iter().enumerate() {
                    if let Some((mib, sockets)) = sample(*pid) {
                        let mut p = peaks.lock().unwrap_or_else(|e| e.into_inner());
                        p[i].0 = p[i].0.max(mib);
                        p[i].1 = p[i].1.max(sockets);
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };

    // The watchers cover the site: every BMC and partition once.
    let started = Instant::now();
    let limit = Duration::from_secs(900);
    while !holds_all(&http, &watchers, bmcs).await {
        if started.elapsed() > limit {
            bail!(
                "the watchers did not take {bmcs} BMCs within {limit:?}: {:?}",
                total(&http, &watchers, "flow_watch_bmcs").await
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let cover_s = started.elapsed().as_secs_f64();
    eprintln!("   the watchers hold the {bmcs} BMCs after {cover_s:.1} s");

    // A site-wide power-on: the shelves come on, the trays' BMCs with
    // them, and the watchers open the trays' event streams.
    api::load_rules(&cluster.nats, crate::scenario::rule_yaml("reference")).await?;
    let submitted = Instant::now();
    let mut tasks = 0;
    // Ten racks a call: a loaded scheduler takes a few hundred ms a rack,
    // and a call must answer within the harness's 10 s.
    for chunk in cluster.racks.chunks(10) {
        let reply = api::submit(
            &cluster.nats,
            &TaskSubmit::new(
                uuid::Uuid::new_v4().to_string(),
                OperationCode::Power(PowerOperation::PowerOn),
                chunk.iter().map(|r| RackRef(r.name.clone())).collect(),
            ),
        )
        .await?;
        tasks += reply
            .results
            .iter()
            .filter(|r| r.submission.task_id().is_some())
            .count();
    }
    while total(&http, &watchers, "flow_watch_streams").await != Some(streamed as f64) {
        if submitted.elapsed() > limit {
            bail!(
                "the watchers did not open {streamed} streams within {limit:?}: {:?}",
                total(&http, &watchers, "flow_watch_streams").await
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let streams_s = submitted.elapsed().as_secs_f64();
    let mut figures = Vec::new();
    for (i, addr) in watchers.iter().enumerate() {
        figures.push(WatcherFigures {
            name: cluster.workers[i].name().to_owned(),
            bmcs: gauge(&http, addr, "flow_watch_bmcs")
                .await
                .unwrap_or(f64::NAN),
            streams: gauge(&http, addr, "flow_watch_streams")
                .await
                .unwrap_or(f64::NAN),
            ..WatcherFigures::default()
        });
    }
    eprintln!(
        "   every compute tray's stream open {streams_s:.1} s after the power-on was submitted"
    );

    // Leaks on distinct racks, one every spacing; the last watcher is
    // killed halfway.
    let mut pick = Pick(0x9e37_79b9_7f4a_7c15);
    let mut racks: Vec<usize> = (0..cluster.racks.len()).collect();
    let mut raised: Vec<(usize, String, OffsetDateTime)> = Vec::new();
    let victim = spec.watchers - 1;
    let mut killed_at = None;
    let mut during_power_on = 0;
    for n in 0..spec.leaks {
        if n == spec.leaks / 2 {
            let pid = pids[victim];
            if let Some((mib, sockets)) = sample(pid) {
                let mut p = peaks.lock().unwrap_or_else(|e| e.into_inner());
                p[victim].0 = p[victim].0.max(mib);
                p[victim].1 = p[victim].1.max(sockets);
            }
            cluster.workers[victim].kill9();
            killed_at = Some((Instant::now(), OffsetDateTime::now_utc()));
            figures[victim].killed = true;
            eprintln!("   killed {}", cluster.workers[victim].name());
        }
        let i = racks.swap_remove(pick.next(racks.len()));
        let trays = cluster.racks[i]
            .components
            .iter()
            .filter(|c| c.component_type.eq_ignore_ascii_case("compute"))
            .count();
        let tray = tray(cluster, i, pick.next(trays.max(1)))?;
        let at = OffsetDateTime::now_utc();
        raise(&http, cluster, i, &tray).await?;
        raised.push((i, tray, at));
        if api::task_counts(&cluster.nats)
            .await
            .is_ok_and(|c| c.by_status.iter().any(|(s, n)| s.is_open() && *n > 0))
        {
            during_power_on += 1;
        }
        tokio::time::sleep(Duration::from_millis(spec.spacing_ms)).await;
    }
    let survivors: Vec<String> = watchers
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != victim)
        .map(|(_, a)| a.clone())
        .collect();
    let (kill_instant, kill_wall) =
        killed_at.unwrap_or((Instant::now(), OffsetDateTime::now_utc()));
    let takeover_limit = Duration::from_secs(120);
    let takeover_s = loop {
        if total(&http, &survivors, "flow_watch_partitions").await == Some(32.0) {
            break kill_instant.elapsed().as_secs_f64();
        }
        if kill_instant.elapsed() > takeover_limit {
            break f64::NAN;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    // Every leak's event, or the limit: the poll interval and the takeover
    // bound how late one may be.
    let limit = Duration::from_secs_f64(spec.poll_s) + Duration::from_secs(180);
    let waited = Instant::now();
    let recorded = loop {
        let events = events(cluster).await?;
        let mut by_tray: BTreeMap<(String, String), Vec<EventRecord>> = BTreeMap::new();
        for e in events
            .into_iter()
            .filter(|e| e.event.event_type == EventType::LeakDetected)
        {
            by_tray
                .entry((e.event.rack.clone(), e.event.component.clone()))
                .or_default()
                .push(e);
        }
        let all = raised
            .iter()
            .all(|(i, t, _)| by_tray.contains_key(&(cluster.racks[*i].name.clone(), t.clone())));
        if all || waited.elapsed() > limit {
            break by_tray;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let statuses = crate::scenario::wait_finished(cluster, tasks, Duration::from_secs(900))
        .await
        .unwrap_or_default();
    sampler.abort();
    let sim = cluster.sim_state().await?;

    let ms = |from: OffsetDateTime, to: OffsetDateTime| (to - from).as_seconds_f64() * 1000.0;
    let mut to_event = Vec::new();
    let mut after_kill = Vec::new();
    let mut to_off = Vec::new();
    let mut to_contained = Vec::new();
    let mut lost = 0;
    for (i, t, at) in &raised {
        let rack = &cluster.racks[*i].name;
        let first = recorded
            .get(&(rack.clone(), t.clone()))
            .and_then(|v| v.iter().min_by_key(|e| e.received_at));
        let Some(first) = first else {
            lost += 1;
            continue;
        };
        to_event.push(ms(*at, first.received_at));
        if *at >= kill_wall && (*at - kill_wall) < time::Duration::seconds(10) {
            after_kill.push(ms(*at, first.received_at));
        }
        // The power-off its rule submitted, finished.
        let mut done = None;
        for task in first.executions.iter().flat_map(|x| &x.tasks) {
            let record = api::task_get(&cluster.nats, *task).await?;
            if record.status == TaskStatus::Completed {
                done = done.into_iter().chain(record.finished_at).min();
            }
        }
        if let Some(done) = done {
            to_contained.push(ms(*at, done));
        }
        if let Some(off) = first_force_off(&sim, rack, t, *at) {
            to_off.push(ms(*at, off));
        }
    }
    let duplicated = raised
        .iter()
        .filter_map(|(i, t, _)| recorded.get(&(cluster.racks[*i].name.clone(), t.clone())))
        .map(|v| v.len().saturating_sub(1))
        .sum();
    let peaks = peaks.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for (f, (mib, sockets)) in figures.iter_mut().zip(peaks) {
        f.peak_rss_mib = mib;
        f.peak_sockets = sockets;
    }
    Ok(WatchReport {
        spec: spec.clone(),
        bmcs,
        cover_s,
        streams_s,
        raised: raised.len(),
        during_power_on,
        lost,
        duplicated,
        to_event: Latency::of(to_event),
        to_force_off: Latency::of(to_off),
        to_contained: Latency::of(to_contained),
        after_kill: Latency::of(after_kill),
        takeover_s,
        statuses,
        watchers: figures,
        usage: cluster.usage(),
    })
}
