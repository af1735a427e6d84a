//! `flow-scheduler`: owns tasks. It serves the `flow.api` request/reply
//! service (a NATS micro service named `flow`), creates tasks, publishes
//! their step jobs through an outbox, applies step results and enforces step
//! deadlines, fires schedules and moves phased rollouts on. The decisions are the lifecycle's (`flow_decisions::lifecycle`);
//! this crate loads, applies and persists them ([`transition`]). All state
//! is in Postgres, so any number of schedulers can run at once. Its
//! Prometheus metrics are in [`metrics`].

pub mod access;
pub mod api;
pub mod audit;
pub mod background;
pub mod error;
pub mod events;
pub mod history;
pub mod identity;
pub mod metrics;
pub mod observations;
pub mod outbox;
pub mod preview;
pub mod restore;
pub mod results;
pub mod runs;
pub mod schedules;
pub mod service;
pub mod submit;
pub mod transition;

use std::time::Duration;

pub use flow_jetstream::Topology;
use flow_store::Store;
pub use identity::IdentityMode;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use error::SchedulerError;
pub use service::{JOB_ACK_WAIT, TaskService};

/// How long [`Scheduler::stop`] waits for its loops to finish what they
/// started (a result being applied, an outbox batch) before it aborts them.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// How many times a scheduler tries to set up the JetStream topology when
/// JetStream does not answer in time or cannot place replicas yet
/// (`flow_jetstream::topology::TopologyError::is_transient`).
const TOPOLOGY_ATTEMPTS: u32 = 6;
/// The pause between two such tries.
const TOPOLOGY_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// How a scheduler starts ([`Scheduler::start_with_options`]).
#[derive(Debug, Clone)]
pub struct Options {
    /// The job ack wait (fault drills use a short one so that a killed
    /// worker's job comes back quickly), the replicas and placement of the
    /// streams.
    pub topology: Topology,
    /// Where it counts (registered by the caller, who serves them; their
    /// database gauges are refreshed every [`metrics::GAUGE_REFRESH`]).
    pub metrics: Option<metrics::SchedulerMetrics>,
    /// How callers are known: in verified mode it refuses to start on a
    /// nats-server that does not strip forged `Nats-Request-Info` headers
    /// ([`identity::server_strips_forgeries`]).
    pub identity: IdentityMode,
    /// Verified users trusted to act on behalf of their own users.
    pub intermediaries: Vec<String>,
    /// How history is kept (none: everything is kept, and `archive.*`
    /// answers that there is no archive): [`history::History`].
    pub history: Option<history::HistoryPolicy>,
    /// The database was just restored from a backup: before serving, send
    /// every running step's job again in a new epoch ([`restore`]).
    pub restored: bool,
}

impl Options {
    /// Development identity, no metrics, no intermediaries, history kept in
    /// full, not restored.
    pub fn new(topology: Topology) -> Options {
        Options {
            topology,
            metrics: None,
            identity: IdentityMode::Development,
            intermediaries: Vec::new(),
            history: None,
            restored: false,
        }
    }
}

/// A running scheduler: the API service and the execution loops.
pub struct Scheduler {
    api: api::ApiService,
    stop: CancellationToken,
    loops: Vec<JoinHandle<()>>,
}

impl Scheduler {
    /// Creates the JetStream streams, consumers and bucket, then starts the
    /// outbox publisher, the deadline sweeper, the result and submission
    /// consumers and the API.
    pub async fn start(
        client: async_nats::Client,
        store: Store,
    ) -> Result<Scheduler, SchedulerError> {
        Self::start_with(client, store, Topology::single(JOB_ACK_WAIT)).await
    }

    /// [`Scheduler::start`] with a topology of choice: the job ack wait
    /// (fault drills use a short one so that a killed worker's job comes
    /// back quickly), the replicas and placement of the streams.
    pub async fn start_with(
        client: async_nats::Client,
        store: Store,
        topology: Topology,
    ) -> Result<Scheduler, SchedulerError> {
        Self::start_with_options(client, store, Options::new(topology)).await
    }

    /// Starts a scheduler as `options` say: [`Scheduler::start`] is
    /// `Options::new(Topology::single(JOB_ACK_WAIT))`.
    pub async fn start_with_options(
        client: async_nats::Client,
        store: Store,
        options: Options,
    ) -> Result<Scheduler, SchedulerError> {
        let Options {
            topology,
            metrics,
            identity,
            intermediaries,
            history,
            restored,
        } = options;
        let history = history
            .map(history::History::open)
            .transpose()
            .map_err(SchedulerError::History)?
            .map(std::sync::Arc::new);
        if identity == IdentityMode::Verified {
            let version = client.server_info().version;
            if !identity::server_strips_forgeries(&version) {
                return Err(SchedulerError::ServerTooOld { version });
            }
        }
        tracing::info!(
            identity = identity.as_str(),
            "callers known by identity mode"
        );
        let js = async_nats::jetstream::new(client.clone());
        // Every scheduler creates the topology at start; on a cluster that
        // is still electing, or busy with the others doing the same, a
        // request may time out, and one whose meta leader has not yet
        // heard from a node cannot place replicas: tried again, a few
        // times, then an error.
        let mut attempt = 1;
        loop {
            match flow_jetstream::topology::ensure(&js, &topology).await {
                Ok(()) => break,
                Err(error) if error.is_transient() && attempt < TOPOLOGY_ATTEMPTS => {
                    tracing::warn!(
                        attempt,
                        error = %flow_telemetry::ErrorChain(&error),
                        "JetStream set-up not possible yet; trying again"
                    );
                    attempt += 1;
                    tokio::time::sleep(TOPOLOGY_RETRY).await;
                }
                Err(error) => return Err(SchedulerError::Topology(error)),
            }
        }
        let stop = CancellationToken::new();
        let mut loops = Vec::new();
        let tasks = match metrics {
            Some(metrics) => {
                loops.push(tokio::spawn(metrics.clone().run_refresh(
                    store.clone(),
                    js.clone(),
                    stop.clone(),
                )));
                TaskService::with_metrics(store.clone(), js, metrics)
            }
            None => TaskService::new(store.clone(), js),
        }
        .with_identity(identity)
        .with_history(history.clone());
        // Before anything reads or sweeps tasks: a restored database's
        // running steps get their jobs again and deadlines from now, and
        // everything is published in the newest epoch.
        if restored {
            tasks.send_again_after_restore().await?;
        }
        tasks.load_epoch().await?;
        if let Some(history) = history {
            loops.push(tokio::spawn(history.run(store.clone(), stop.clone())));
        }
        loops.push(tokio::spawn(tasks.clone().run_sweeps(stop.clone())));
        loops.push(tokio::spawn(tasks.clone().run_results(stop.clone())));
        loops.push(tokio::spawn(
            tasks.clone().run_submissions(stop.clone(), identity),
        ));
        loops.push(tokio::spawn(tasks.clone().run_schedules(stop.clone())));
        loops.push(tokio::spawn(tasks.clone().run_runs(stop.clone())));
        loops.push(tokio::spawn(
            tasks.clone().run_hardware_events(stop.clone()),
        ));
        loops.push(tokio::spawn(
            tasks.clone().run_event_executions(stop.clone()),
        ));
        loops.push(tokio::spawn(observations::run(
            client.clone(),
            store.clone(),
            stop.clone(),
        )));
        let api = api::ApiService::start(client, store, tasks, identity, intermediaries)
            .await
            .map_err(SchedulerError::Api)?;
        Ok(Scheduler { api, stop, loops })
    }

    /// Ends the scheduler as a crash would (tests): every loop and the API
    /// are aborted mid-await, nothing is finished or handed back; the
    /// connection closes when the last handle on it goes.
    pub fn kill(self) {
        self.api.abort();
        self.stop.cancel();
        for l in self.loops {
            l.abort();
        }
    }

    /// Stops the API, then the loops: they pull no more and finish what
    /// they started (each result applied or handed back), within
    /// [`STOP_GRACE`].
    pub async fn stop(self) -> Result<(), SchedulerError> {
        self.api.stop().await.map_err(SchedulerError::Api)?;
        self.stop.cancel();
        let deadline = tokio::time::Instant::now() + STOP_GRACE;
        for l in self.loops {
            let abort = l.abort_handle();
            if tokio::time::timeout_at(deadline, l).await.is_err() {
                tracing::warn!("a scheduler loop did not stop in time; aborted");
                abort.abort();
            }
        }
        Ok(())
    }
}
