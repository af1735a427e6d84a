//! A whole Flow installation on this machine, started from the built
//! binaries: a private `nats-server` (JetStream, `sync_interval: always`)
//! or a JetStream cluster of N of them (routes on loopback, a store each,
//! every stream replicated N times), a fresh database (on the given
//! Postgres, or on a private Postgres the cluster starts itself so it can
//! be restarted), `flow-rack-sim`, S `flow-scheduler`s and W
//! `flow-worker`s, each process connected to another NATS node first.
//! Everything is a child process, so it can be measured, killed, paused and
//! restarted.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flow_protocol::rack::RackSpec;

use crate::api;
use crate::procs::{Proc, Recipe, Usage, free_port};

/// The credential reference the simulator's rack documents carry.
const CREDENTIAL_REF: &str = flow_rack_sim::CREDENTIAL_REF;
/// The environment variable the workers read the BMC password from.
const PASSWORD_ENV: &str = "FLOW_BENCH_BMC_PASSWORD";
/// Racks per simulator process.
pub const SIM_RACKS_PER_PROCESS: usize = 50;
/// BMCs of one simulated NVL72 rack.
const SIM_BMCS_PER_RACK: usize = 35;
/// Consecutive BMC ports are picked from here up (below Linux's ephemeral
/// range, 32768 and up, so no `bind(0)` of another process takes them).
const BMC_PORTS_FROM: usize = 10_000;
const BMC_PORTS_TO: usize = 32_768;
/// Bounded waits for start-up.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// Where the binaries and services are.
#[derive(Debug, Clone)]
pub struct Tools {
    /// Directory holding flow-scheduler, flow-worker and flow-rack-sim.
    pub bin_dir: PathBuf,
    /// Where the schedulers and workers start from (the upgrade drill's
    /// previous release; otherwise `bin_dir`).
    pub flow_bin_dir: PathBuf,
    /// A nats-server >= 2.10.
    pub nats_server: PathBuf,
    /// A Postgres URL whose user may create databases (ignored with
    /// `own_postgres`).
    pub database_url: String,
}

/// What to start.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Racks in the simulator.
    pub racks: usize,
    /// Workers.
    pub workers: usize,
    /// The simulator's time scale.
    pub time_scale: f64,
    /// Start with racks powered on.
    pub initial_power_on: bool,
    /// First BMC port (0: a free range below the ephemeral ports).
    pub bmc_base_port: u16,
    /// Start a private Postgres (so a drill can restart it).
    pub own_postgres: bool,
    /// How long a job may go without an ack before another worker gets it
    /// (`FLOW_JOB_ACK_WAIT`; unset: the scheduler's default).
    pub job_ack_wait: Option<Duration>,
    /// NATS servers: 1, or a cluster (3) with every stream replicated on
    /// each.
    pub nats_nodes: usize,
    /// Schedulers.
    pub schedulers: usize,
    /// Hardware watchers: the first `watchers.count` workers also watch
    /// the BMCs (`--watch`); they divide the racks among themselves.
    pub watchers: WatcherSpec,
}

/// Which workers watch the BMCs, and how often they read.
#[derive(Debug, Clone, Copy)]
pub struct WatcherSpec {
    /// Workers that also watch (0: none).
    pub count: usize,
    /// `--watch-poll-seconds`.
    pub poll_s: f64,
    /// `--watch-inventory-seconds`.
    pub inventory_s: f64,
    /// `--watch-power-seconds`.
    pub power_s: f64,
}

impl WatcherSpec {
    /// No watcher.
    pub const NONE: WatcherSpec = WatcherSpec {
        count: 0,
        poll_s: 60.0,
        inventory_s: 30.0,
        power_s: 20.0,
    };
}

/// A started installation.
pub struct Cluster {
    /// Working directory (logs, stores).
    pub work: PathBuf,
    /// NATS client of the harness.
    pub nats: async_nats::Client,
    /// The `nats-server`s (one, or the nodes of a cluster).
    pub nats_servers: Vec<Proc>,
    /// Their server names (`-n`), as JetStream names a stream's leader.
    pub nats_names: Vec<String>,
    /// Their monitoring ports.
    pub nats_monitor_ports: Vec<u16>,
    /// A private Postgres, when asked for.
    pub postgres: Option<Proc>,
    /// `flow-rack-sim`s, one per [`SIM_RACKS_PER_PROCESS`] racks.
    pub sims: Vec<Proc>,
    /// Their admin base URLs.
    pub sim_admins: Vec<String>,
    /// The `flow-scheduler`s.
    pub schedulers: Vec<Proc>,
    /// `flow-worker`s.
    pub workers: Vec<Proc>,
    /// Each worker's `/metrics` address (`ip:port`).
    pub worker_metrics: Vec<String>,
    /// The racks, as the simulator describes them.
    pub racks: Vec<RackSpec>,
    database_admin_url: String,
    database_name: String,
    http: reqwest::Client,
}

/// What each process used, at the end of a run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClusterUsage {
    /// The schedulers, summed.
    pub scheduler: Usage,
    /// Each worker.
    pub workers: Vec<Usage>,
    /// The simulators, summed (CPU seconds and peak RSS of every process).
    pub simulator: Usage,
    /// The nats-servers, summed.
    pub nats_server: Usage,
}

impl Cluster {
    /// Starts everything and waits until the API answers and the racks are
    /// registered.
    pub async fn start(tools: &Tools, spec: &ClusterSpec, work: &Path) -> anyhow::Result<Cluster> {
        std::fs::create_dir_all(work)?;
        let work = work.to_path_buf();
        // A reused directory keeps no old JetStream store.
        let _ = std::fs::remove_dir_all(work.join("jetstream"));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?;

        // NATS: a private server, or a cluster of them, that syncs every
        // write to disk.
        let nodes = spec.nats_nodes.max(1);
        let ports: Vec<(u16, u16, u16)> = (0..nodes)
            .map(|_| Ok((free_port()?, free_port()?, free_port()?)))
            .collect::<anyhow::Result<_>>()?;
        let routes: Vec<String> = ports
            .iter()
            .map(|(_, _, route)| format!("nats-route://127.0.0.1:{route}"))
            .collect();
        let mut nats_servers = Vec::new();
        let mut nats_names = Vec::new();
        for (i, (port, monitor, route)) in ports.iter().enumerate() {
            let name = format!("nats-{}", i + 1);
            let store = work.join(if nodes == 1 {
                "jetstream".to_owned()
            } else {
                format!("jetstream-{}", i + 1)
            });
            let _ = std::fs::remove_dir_all(&store);
            let mut conf = format!(
                "server_name: {name}\njetstream {{\n  store_dir: \"{}\"\n  sync_interval: always\n}}\n",
                store.display()
            );
            if nodes > 1 {
                conf.push_str(&format!(
                    "cluster {{\n  name: flow-bench\n  listen: 127.0.0.1:{route}\n  \
                     ping_interval: \"2s\"\n  ping_max: 3\n  routes: [{}]\n}}\n",
                    routes.join(", ")
                ));
            }
            let conf_path = work.join(format!("{name}.conf"));
            std::fs::write(&conf_path, conf)?;
            nats_servers.push(Proc::spawn(Recipe {
                name: name.clone(),
                program: tools.nats_server.clone(),
                args: vec![
                    "-c".into(),
                    conf_path.display().to_string(),
                    "-a".into(),
                    "127.0.0.1".into(),
                    "-p".into(),
                    port.to_string(),
                    "-m".into(),
                    monitor.to_string(),
                ],
                env: Vec::new(),
                log: work.join(if nodes == 1 {
                    "nats.log".to_owned()
                } else {
                    format!("{name}.log")
                }),
                run_as: None,
            })?);
            nats_names.push(name);
        }
        let nats_monitor_ports: Vec<u16> = ports.iter().map(|p| p.1).collect();
        for port in &nats_monitor_ports {
            wait_http(
                &http,
                &format!("http://127.0.0.1:{port}/healthz"),
                "nats-server",
            )
            .await?;
        }
        let nats_urls: Vec<String> = ports
            .iter()
            .map(|(port, _, _)| format!("nats://127.0.0.1:{port}"))
            .collect();
        // Process k connects to node k first.
        let urls_from = |k: usize| {
            (0..nodes)
                .map(|i| nats_urls[(k + i) % nodes].clone())
                .collect::<Vec<_>>()
                .join(",")
        };

        // Postgres: a fresh database.
        let (postgres, database_admin_url) = if spec.own_postgres {
            let (p, url) = start_postgres(&work).await?;
            (Some(p), url)
        } else {
            (None, tools.database_url.clone())
        };
        let database_name = format!("flow_bench_{}", uuid::Uuid::new_v4().simple());
        admin_sql(
            &database_admin_url,
            &format!("CREATE DATABASE \"{database_name}\""),
        )
        .await
        .context("cannot create the benchmark's database")?;
        let database_url = with_database(&database_admin_url, &database_name);

        // The simulators: one process per SIM_RACKS_PER_PROCESS racks (a
        // process holds a listener and a connection per BMC; one process
        // for a whole site runs out of file descriptors).
        // More BMCs than the port range holds (a 1,000-rack site is 35,000)
        // are spread over loopback addresses: each simulator process listens
        // on its own 127.1.x.y and they all use one port range.
        let spread = spec.racks * SIM_BMCS_PER_RACK >= BMC_PORTS_TO - BMC_PORTS_FROM;
        let bmc_base_port = match (spec.bmc_base_port, spread) {
            (0, false) => bmc_port_range(spec.racks * SIM_BMCS_PER_RACK)?,
            (0, true) => bmc_port_range(SIM_RACKS_PER_PROCESS * SIM_BMCS_PER_RACK)?,
            (p, _) => p,
        };
        let mut sims = Vec::new();
        let mut sim_admins = Vec::new();
        let mut racks = Vec::new();
        for (i, first) in (0..spec.racks).step_by(SIM_RACKS_PER_PROCESS).enumerate() {
            let count = SIM_RACKS_PER_PROCESS.min(spec.racks - first);
            let admin_port = free_port()?;
            let inventory = work.join(format!("racks-{i}"));
            if inventory.is_dir() {
                std::fs::remove_dir_all(&inventory)?;
            } else if inventory.exists() {
                std::fs::remove_file(&inventory)?;
            }
            let (listen, base) = if spread {
                (
                    format!("127.1.{}.{}", i / 250, i % 250 + 1),
                    usize::from(bmc_base_port),
                )
            } else {
                (
                    "127.0.0.1".to_owned(),
                    usize::from(bmc_base_port) + first * SIM_BMCS_PER_RACK,
                )
            };
            let mut sim_args = vec![
                "--listen".into(),
                listen.clone(),
                "--racks".into(),
                count.to_string(),
                "--first-rack".into(),
                (first + 1).to_string(),
                "--admin-port".into(),
                admin_port.to_string(),
                "--bmc-base-port".into(),
                base.to_string(),
                "--time-scale".into(),
                spec.time_scale.to_string(),
                "--inventory-out".into(),
                inventory.display().to_string(),
            ];
            if spec.initial_power_on {
                sim_args.extend(["--initial-power".into(), "on".into()]);
            }
            let sim = Proc::spawn(Recipe {
                name: format!("flow-rack-sim-{i}"),
                program: tools.bin_dir.join("flow-rack-sim"),
                args: sim_args,
                // FLOW_BENCH_SIM_LOG=flow_rack_sim=debug logs every
                // Redfish request the simulator serves (`docs/benchmarks.md`:
                // the requests per component).
                env: vec![(
                    "RUST_LOG".into(),
                    std::env::var("FLOW_BENCH_SIM_LOG").unwrap_or_else(|_| "warn".into()),
                )],
                log: work.join(format!("sim-{i}.log")),
                run_as: None,
            })?;
            let ready = wait_for(START_TIMEOUT, || {
                std::fs::read_to_string(sim.log()).is_ok_and(|l| l.contains("flow-rack-sim ready"))
            })
            .await;
            if !ready {
                bail!(
                    "flow-rack-sim did not start within {START_TIMEOUT:?}:\n{}",
                    sim.log_tail(20)
                );
            }
            racks.extend(read_inventory(&inventory, count)?);
            sims.push(sim);
            sim_admins.push(format!("http://{listen}:{admin_port}"));
        }
        // In rack-number order: the last is the highest.
        racks.sort_by_key(|r| {
            r.name
                .trim_start_matches("rack-")
                .parse::<usize>()
                .unwrap_or(usize::MAX)
        });
        let sim_admin = sim_admins[0].clone();

        // The schedulers and the workers.
        let mut common_env = vec![
            ("FLOW_NATS_SERVER_ORDER".to_owned(), "listed".to_owned()),
            (
                "FLOW_LOG".to_owned(),
                // FLOW_BENCH_LOG: e.g. `info,flow_scheduler=debug,flow_worker=debug`
                // to trace a stage advance (`services/bench/stage_hops.py`;
                // `services/bench/results/JOURNAL.md`, "A site's stage advance
                // waits for a core").
                std::env::var("FLOW_BENCH_LOG").unwrap_or_else(|_| "info".to_owned()),
            ),
        ];
        if let Some(wait) = spec.job_ack_wait {
            common_env.push((
                "FLOW_JOB_ACK_WAIT".into(),
                format!("{}ms", wait.as_millis()),
            ));
        }
        let mut schedulers = Vec::new();
        for n in 1..=spec.schedulers.max(1) {
            let mut env = common_env.clone();
            env.push(("FLOW_NATS_URL".into(), urls_from(n - 1)));
            env.push(("FLOW_JETSTREAM_REPLICAS".into(), nodes.to_string()));
            env.push(("FLOW_DATABASE_URL".into(), database_url.clone()));
            env.push((
                "FLOW_METRICS_LISTEN".into(),
                format!("127.0.0.1:{}", free_port()?),
            ));
            let name = if spec.schedulers <= 1 {
                "flow-scheduler".to_owned()
            } else {
                format!("flow-scheduler-{n}")
            };
            schedulers.push(Proc::spawn(Recipe {
                name: name.clone(),
                program: tools.flow_bin_dir.join("flow-scheduler"),
                args: Vec::new(),
                env,
                log: work.join(format!("{}.log", name.trim_start_matches("flow-"))),
                run_as: None,
            })?);
        }
        let credentials = work.join("credentials.yaml");
        std::fs::write(
            &credentials,
            format!(
                "{CREDENTIAL_REF}: {{user: {}, password_env: {PASSWORD_ENV}}}\n",
                flow_rack_sim::DEFAULT_USER
            ),
        )?;
        let mut workers = Vec::new();
        let mut worker_metrics = Vec::new();
        for n in 1..=spec.workers {
            let mut env = common_env.clone();
            env.push(("FLOW_NATS_URL".into(), urls_from(n)));
            env.push((PASSWORD_ENV.into(), flow_rack_sim::DEFAULT_PASSWORD.into()));
            let metrics = format!("127.0.0.1:{}", free_port()?);
            env.push(("FLOW_METRICS_LISTEN".into(), metrics.clone()));
            worker_metrics.push(metrics);
            let mut args = vec![
                "--credentials-file".into(),
                credentials.display().to_string(),
                "--lifecycle-url".into(),
                format!("{sim_admin}/lifecycle/v1"),
                "--lifecycle-credential".into(),
                CREDENTIAL_REF.into(),
            ];
            if n <= spec.watchers.count {
                args.extend([
                    "--watch".into(),
                    "--watch-poll-seconds".into(),
                    spec.watchers.poll_s.to_string(),
                    "--watch-inventory-seconds".into(),
                    spec.watchers.inventory_s.to_string(),
                    "--watch-power-seconds".into(),
                    spec.watchers.power_s.to_string(),
                ]);
            }
            workers.push(Proc::spawn(Recipe {
                name: format!("worker-{n}"),
                program: tools.flow_bin_dir.join("flow-worker"),
                args,
                env,
                log: work.join(format!("worker-{n}.log")),
                run_as: None,
            })?);
        }

        let nats = async_nats::ConnectOptions::new()
            .name("flow-bench")
            .ping_interval(flow_jetstream::connect::PING_INTERVAL)
            .retry_on_initial_connect()
            .connect(nats_urls.as_slice())
            .await?;
        let mut cluster = Cluster {
            work,
            nats,
            nats_servers,
            nats_names,
            nats_monitor_ports,
            postgres,
            sims,
            sim_admins,
            schedulers,
            workers,
            worker_metrics,
            racks,
            database_admin_url,
            database_name,
            http,
        };
        cluster.wait_api().await?;
        let settled = cluster.wait_workers(spec.workers).await?;
        tracing::info!(
            workers = spec.workers,
            settled_ms = settled.as_millis() as u64,
            "the workers divided the job partitions"
        );
        // Racks in parallel, a few at a time.
        let nats = cluster.nats.clone();
        let results: Vec<anyhow::Result<()>> = futures::stream::iter(cluster.racks.clone())
            .map(|rack| {
                let nats = nats.clone();
                async move { api::create_rack(&nats, &rack).await }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        for r in results {
            r?;
        }
        Ok(cluster)
    }

    /// Waits until the workers have divided the job partitions: `n` keys in
    /// the `flow_workers` bucket and one pull waiting on each partition's
    /// consumer, still so a whole fetch later (a pull given up on lasts
    /// until its fetch ends, `PULL_EXPIRES` in
    /// `services/worker/src/pull.rs`). A site's workers run long before its
    /// tasks; a scenario measures them settled.
    pub async fn wait_workers(&self, n: usize) -> anyhow::Result<Duration> {
        const STEADY: Duration = Duration::from_millis(2500);
        let start = Instant::now();
        if n == 0 {
            return Ok(Duration::ZERO);
        }
        let js = async_nats::jetstream::new(self.nats.clone());
        let mut since: Option<Instant> = None;
        let mut last = None;
        while start.elapsed() < START_TIMEOUT {
            let division = flow_jetstream::topology::partition_division(&js).await;
            let settled = division
                .as_ref()
                .is_some_and(|(members, waiting)| *members == n && waiting.iter().all(|&w| w == 1));
            if settled {
                let at = *since.get_or_insert_with(Instant::now);
                if at.elapsed() >= STEADY {
                    return Ok(start.elapsed());
                }
            } else {
                since = None;
            }
            last = division;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "the {n} workers did not divide the job partitions within {START_TIMEOUT:?} \
             (members, waiting pulls per partition: {last:?})"
        )
    }

    /// Ends a run: `result` with this cluster's usage given to it by
    /// `with_usage`, or its error naming where the logs are; the cluster
    /// is stopped either way.
    pub async fn finish<R>(
        self,
        result: anyhow::Result<R>,
        with_usage: impl FnOnce(&mut R, ClusterUsage),
    ) -> anyhow::Result<R> {
        let result = match result {
            Ok(mut r) => {
                with_usage(&mut r, self.usage());
                Ok(r)
            }
            Err(e) => Err(e.context(format!("logs in {}", self.work.display()))),
        };
        self.stop().await;
        result
    }

    /// Waits until `flow.api` answers (after a start or a restart).
    pub async fn wait_api(&mut self) -> anyhow::Result<Duration> {
        let start = Instant::now();
        while start.elapsed() < START_TIMEOUT {
            if api::task_counts(&self.nats).await.is_ok() {
                return Ok(start.elapsed());
            }
            for s in &mut self.schedulers {
                if !s.running() {
                    bail!("{} exited:\n{}", s.name(), s.log_tail(20));
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "flow.api did not answer within {START_TIMEOUT:?}:\n{}",
            self.schedulers[0].log_tail(20)
        )
    }

    /// Puts `bytes` on the first simulator's firmware origin as `name`
    /// (`services/rack-sim/src/origin.rs`): the URL a task names the image
    /// by, and its digest as the origin computed it.
    pub async fn origin_file(
        &self,
        name: &str,
        bytes: Vec<u8>,
    ) -> anyhow::Result<(String, String)> {
        let admin = self.sim_admins.first().context("no simulator")?;
        let info: serde_json::Value = self
            .http
            .put(format!("{admin}/admin/v1/files/{name}"))
            .body(bytes)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let digest = info["digest"]
            .as_str()
            .context("the origin answered no digest")?
            .to_owned();
        Ok((format!("{admin}/files/{name}"), digest))
    }
    /// The simulators' view of every component (all processes merged).
    pub async fn sim_state(&self) -> anyhow::Result<flow_rack_sim::SimState> {
        let mut all = flow_rack_sim::SimState {
            requests_total: 0,
            peak_concurrent_requests_per_bmc: 0,
            requests_by_purpose: std::collections::BTreeMap::new(),
            logins_total: 0,
            sessions_open: 0,
            racks: Vec::new(),
        };
        for admin in &self.sim_admins {
            let s: flow_rack_sim::SimState = self
                .http
                .get(format!("{admin}/admin/v1/state"))
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            all.requests_total += s.requests_total;
            for (purpose, n) in s.requests_by_purpose {
                *all.requests_by_purpose.entry(purpose).or_default() += n;
            }
            all.logins_total += s.logins_total;
            all.sessions_open += s.sessions_open;
            all.peak_concurrent_requests_per_bmc = all
                .peak_concurrent_requests_per_bmc
                .max(s.peak_concurrent_requests_per_bmc);
            all.racks.extend(s.racks);
        }
        Ok(all)
    }

    /// JetStream's and Postgres's write counters now ([`crate::writes`]).
    pub async fn writes_reading(&self) -> anyhow::Result<crate::writes::Reading> {
        crate::writes::read(
            &self.http,
            self.nats_monitor_ports[0],
            &with_database(&self.database_admin_url, &self.database_name),
            &self.database_name,
        )
        .await
    }

    /// What every process used so far.
    pub fn usage(&self) -> ClusterUsage {
        let sum = |procs: &[Proc]| {
            procs
                .iter()
                .map(Proc::usage)
                .fold(Usage::default(), |a, b| Usage {
                    cpu_seconds: a.cpu_seconds + b.cpu_seconds,
                    peak_rss_mib: a.peak_rss_mib + b.peak_rss_mib,
                })
        };
        ClusterUsage {
            scheduler: sum(&self.schedulers),
            workers: self.workers.iter().map(Proc::usage).collect(),
            simulator: sum(&self.sims),
            nats_server: sum(&self.nats_servers),
        }
    }

    /// Starts NATS node `i` again with the same ports and store (after a
    /// kill) and waits until it is healthy (in a cluster: caught up).
    pub async fn restart_nats(&mut self, i: usize) -> anyhow::Result<()> {
        self.nats_servers[i].start_again()?;
        wait_http(
            &self.http,
            &format!("http://127.0.0.1:{}/healthz", self.nats_monitor_ports[i]),
            "nats-server",
        )
        .await
    }

    /// The node leading `stream` now (its Raft leader), if JetStream
    /// names one.
    pub async fn stream_leader(&self, stream: &str) -> Option<usize> {
        let js = async_nats::jetstream::new(self.nats.clone());
        let mut s = js.get_stream(stream).await.ok()?;
        let info = s.info().await.ok()?;
        let leader = info.cluster.as_ref()?.leader.as_ref()?;
        self.nats_names.iter().position(|n| n == leader)
    }

    /// Restarts the private Postgres: an immediate (crash-like) stop, then
    /// a start on the same port and data.
    pub async fn restart_postgres(&mut self) -> anyhow::Result<()> {
        let Some(pg) = self.postgres.as_mut() else {
            bail!("this cluster uses a shared Postgres; start it with own_postgres to restart it");
        };
        pg.signal_and_wait("QUIT", Duration::from_secs(20));
        pg.start_again()?;
        let url = self.database_admin_url.clone();
        let up = wait_for_async(START_TIMEOUT, || {
            let url = url.clone();
            async move { admin_sql(&url, "SELECT 1").await.is_ok() }
        })
        .await;
        if !up {
            bail!("postgres did not come back:\n{}", pg.log_tail(20));
        }
        Ok(())
    }

    /// A backup of Flow's database as the operator's procedure takes one
    /// (`pg_dump --format=custom`; docs/operating.md, "Backup and
    /// restore") into `to`.
    pub async fn backup_database(&self, to: &Path) -> anyhow::Result<()> {
        let url = with_database(&self.database_admin_url, &self.database_name);
        let out = tokio::process::Command::new(postgres_bindir()?.join("pg_dump"))
            .arg("--format=custom")
            .arg("--file")
            .arg(to)
            .arg("--dbname")
            .arg(&url)
            .output()
            .await
            .context("pg_dump")?;
        if !out.status.success() {
            bail!("pg_dump: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(())
    }

    /// The database lost and restored: every scheduler killed (SIGKILL),
    /// the database dropped (its connections ended), created again and
    /// filled from `backup` with `pg_restore`; then the first scheduler
    /// started with `--restored` and, once it answers, the others.
    pub async fn lose_and_restore_database(&mut self, backup: &Path) -> anyhow::Result<()> {
        for s in &mut self.schedulers {
            s.kill9();
        }
        admin_sql(
            &self.database_admin_url,
            &format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                self.database_name
            ),
        )
        .await
        .context("dropping the database")?;
        admin_sql(
            &self.database_admin_url,
            &format!("CREATE DATABASE \"{}\"", self.database_name),
        )
        .await
        .context("creating the database again")?;
        let url = with_database(&self.database_admin_url, &self.database_name);
        let out = tokio::process::Command::new(postgres_bindir()?.join("pg_restore"))
            .arg("--exit-on-error")
            .arg("--dbname")
            .arg(&url)
            .arg(backup)
            .output()
            .await
            .context("pg_restore")?;
        if !out.status.success() {
            bail!(
                "pg_restore: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        self.schedulers
            .first_mut()
            .context("no scheduler")?
            .start_again_with(&["--restored"])?;
        self.wait_api().await?;
        for s in self.schedulers.iter_mut().skip(1) {
            s.start_again()?;
        }
        self.wait_api().await?;
        Ok(())
    }

    /// Stops everything (gently, workers first) and drops the database.
    pub async fn stop(mut self) {
        for w in &mut self.workers {
            w.terminate(Duration::from_secs(10));
        }
        for s in &mut self.schedulers {
            s.terminate(Duration::from_secs(10));
        }
        for sim in &mut self.sims {
            sim.terminate(Duration::from_secs(5));
        }
        let _ = admin_sql(
            &self.database_admin_url,
            &format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                self.database_name
            ),
        )
        .await;
        if let Some(pg) = self.postgres.as_mut() {
            pg.terminate(Duration::from_secs(10));
        }
        for n in &mut self.nats_servers {
            // A paused node would ignore the TERM.
            n.signal("CONT");
            n.terminate(Duration::from_secs(5));
        }
    }
}

use futures::StreamExt;

fn read_inventory(path: &Path, racks: usize) -> anyhow::Result<Vec<RackSpec>> {
    let read = |p: &Path| -> anyhow::Result<RackSpec> {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is not a rack", p.display()))
    };
    if racks == 1 {
        return Ok(vec![read(path)?]);
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(path)? {
        out.push(read(&entry?.path())?);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    if out.len() != racks {
        bail!("the simulator described {} racks, not {racks}", out.len());
    }
    Ok(out)
}

/// Runs one statement on the admin database.
pub(crate) async fn admin_sql(url: &str, sql: &str) -> anyhow::Result<()> {
    use sqlx::Connection;
    let mut conn = tokio::time::timeout(Duration::from_secs(5), sqlx::PgConnection::connect(url))
        .await
        .map_err(|_| anyhow::anyhow!("postgres at {url} did not answer"))??;
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await?;
    let _ = conn.close().await;
    Ok(())
}

/// The same server URL with another database.
pub(crate) fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let head = base.rsplit_once('/').map_or(base, |(h, _)| h);
    match query {
        Some(q) => format!("{head}/{name}?{q}"),
        None => format!("{head}/{name}"),
    }
}

async fn wait_http(http: &reqwest::Client, url: &str, what: &str) -> anyhow::Result<()> {
    let ok = wait_for_async(START_TIMEOUT, || async {
        http.get(url)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    })
    .await;
    if ok {
        Ok(())
    } else {
        bail!("{what} did not become healthy at {url} within {START_TIMEOUT:?}")
    }
}

/// Polls `cond` every 100 ms until it holds or `limit` passes.
pub async fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`wait_for`] with an async condition.
pub async fn wait_for_async<F, Fut>(limit: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if cond().await {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Where Debian keeps the Postgres server binaries (`initdb`, `postgres`).
fn postgres_bindir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("FLOW_PG_BINDIR") {
        return Ok(PathBuf::from(dir));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .context("no /usr/lib/postgresql: install postgresql or set FLOW_PG_BINDIR")?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").exists())
        .collect();
    found.sort();
    found
        .pop()
        .context("no initdb under /usr/lib/postgresql/*/bin: set FLOW_PG_BINDIR")
}

fn running_as_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A private Postgres: initdb into a fresh directory, then the server on a
/// free port with its socket in that directory. As root, both run as the
/// `postgres` user (Postgres refuses root).
async fn start_postgres(work: &Path) -> anyhow::Result<(Proc, String)> {
    let bindir = postgres_bindir()?;
    let root = running_as_root();
    // The postgres user must be able to reach the directory: /tmp, not the
    // (private) work directory.
    let dir = std::env::temp_dir().join(format!("flow-bench-pg-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir)?;
    let run_as = root.then(|| "postgres".to_owned());
    if root {
        let ok = std::process::Command::new("chown")
            .args(["postgres:postgres", &dir.display().to_string()])
            .status()?
            .success();
        if !ok {
            bail!("cannot hand {} to the postgres user", dir.display());
        }
    }
    let data = dir.join("data");
    let mut initdb = match &run_as {
        Some(u) => {
            let mut c = std::process::Command::new("setpriv");
            c.arg(format!("--reuid={u}"))
                .arg(format!("--regid={u}"))
                .arg("--init-groups")
                .arg("--")
                .arg(bindir.join("initdb"));
            c
        }
        None => std::process::Command::new(bindir.join("initdb")),
    };
    let out = initdb
        .args([
            "-D",
            &data.display().to_string(),
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
        ])
        .output()?;
    if !out.status.success() {
        bail!(
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let port = free_port()?;
    let log = work.join("postgres.log");
    let proc = Proc::spawn(Recipe {
        name: "postgres".into(),
        program: bindir.join("postgres"),
        args: vec![
            "-D".into(),
            data.display().to_string(),
            "-p".into(),
            port.to_string(),
            "-k".into(),
            dir.display().to_string(),
            "-c".into(),
            "listen_addresses=127.0.0.1".into(),
            "-c".into(),
            "max_connections=200".into(),
        ],
        env: Vec::new(),
        log,
        run_as,
    })?;
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let up = wait_for_async(START_TIMEOUT, || {
        let url = url.clone();
        async move { admin_sql(&url, "SELECT 1").await.is_ok() }
    })
    .await;
    if !up {
        bail!("private postgres did not start:\n{}", proc.log_tail(20));
    }
    Ok((proc, url))
}

/// A run of `n` consecutive ports that are free now, below the ephemeral
/// range. A tray BMC's listener is closed while its shelf is off; with
/// OS-chosen ports another process's `bind(0)` (a metrics listener, say)
/// could take the port meanwhile, and the BMC's requests would reach it.
fn bmc_port_range(n: usize) -> anyhow::Result<u16> {
    let span = BMC_PORTS_TO - BMC_PORTS_FROM;
    if n == 0 || n >= span {
        bail!("{n} BMC ports do not fit between {BMC_PORTS_FROM} and {BMC_PORTS_TO}");
    }
    for _ in 0..20 {
        let offset = (uuid::Uuid::new_v4().as_u128() % (span - n) as u128) as usize;
        let base = BMC_PORTS_FROM + offset;
        let free = (base..base + n).all(|p| {
            u16::try_from(p).is_ok_and(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        });
        if free {
            return Ok(u16::try_from(base)?);
        }
    }
    bail!("no run of {n} free ports between {BMC_PORTS_FROM} and {BMC_PORTS_TO}")
}
