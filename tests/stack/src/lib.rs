//! `flow-testenv`: the whole Flow stack for tests, real parts only.
//!
//! [`Stack::builder`] starts a private `nats-server` (its own ports and
//! store), a fresh Postgres database with the migrations applied, a
//! scheduler, and — when asked — the rack simulator with its rack loaded
//! and in-process workers driving it over HTTP. A test then calls the API
//! typed ([`Stack::call`]) or as JSON ([`Stack::ok`], [`Stack::raw`] for
//! hostile bodies), waits with a bound ([`Stack::until_task`],
//! [`flow_tests::eventually`]), kills and restarts workers and the
//! scheduler, and stops everything with [`Stack::stop`]. A stack dropped
//! without it goes with the test: the server and the database on drop,
//! the in-process schedulers and workers with the test's runtime.
//!
//! Every crate's integration tests use it; the lower-level pieces
//! (`NatsServer`, `TestDb`, bounded waits) are in `flow-tests`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use async_nats::jetstream;
use flow_hardware::ManagerRegistry;
use flow_protocol::api::{ApiError, Endpoint, decode_reply, endpoint};
use flow_rack_sim::{SimConfig, Simulator};
use flow_redfish::lifecycle::LifecycleClient;
use flow_redfish::{CredentialStore, RedfishSettings};
use flow_scheduler::Scheduler;
use flow_scheduler::Topology;
use flow_scheduler::metrics::SchedulerMetrics;
use flow_store::Store;
use flow_tests::{NatsCluster, NatsServer, TestDb};
use flow_worker::WorkerConfig;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long an API call waits for its reply.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`Stack::finish`] waits for a task to end.
pub const FINISH_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the bounded waits look again.
pub const POLL: Duration = Duration::from_millis(50);
/// How long a stopping worker may take to hand its jobs back.
const WORKER_STOP: Duration = Duration::from_secs(10);

/// The registry a worker of the simulator uses: the Redfish managers with
/// the simulator's credentials, and its lifecycle API for decommissioning.
pub fn sim_registry(sim: &Simulator) -> ManagerRegistry {
    let credentials = Arc::new(CredentialStore::single(
        flow_rack_sim::CREDENTIAL_REF,
        flow_rack_sim::DEFAULT_USER,
        flow_rack_sim::DEFAULT_PASSWORD,
    ));
    let settings = RedfishSettings::default();
    let lifecycle = LifecycleClient::new(
        &format!("{}/lifecycle/v1", sim.admin_url()),
        settings.http_client().expect("an HTTP client"),
        Arc::clone(&credentials),
        flow_rack_sim::CREDENTIAL_REF,
    );
    flow_redfish::registry(&settings, credentials, Some(lifecycle)).expect("the Redfish managers")
}

/// What [`Stack`] to start.
#[derive(Clone)]
pub struct StackBuilder {
    nats_config: String,
    sim: Option<SimConfig>,
    workers: usize,
    worker: WorkerConfig,
    job_ack_wait: Duration,
    scheduler: bool,
    load_rack: bool,
    metrics: Option<SchedulerMetrics>,
    cluster: usize,
    power_known_for: Option<Duration>,
    history: Option<flow_scheduler::history::HistoryPolicy>,
}

impl StackBuilder {
    /// Every scheduler keeps history as `policy` says (`flow-scheduler
    /// --archive-dir`).
    pub fn history(mut self, policy: flow_scheduler::history::HistoryPolicy) -> Self {
        self.history = Some(policy);
        self
    }

    /// How long the schedulers hold a read of a component's power as known
    /// (`flow-scheduler --power-known-for`).
    pub fn power_known_for(mut self, known_for: Duration) -> Self {
        self.power_known_for = Some(known_for);
        self
    }

    /// A JetStream cluster of `nodes` servers instead of one server, with
    /// every stream and the bucket replicated on each (R`nodes`); each
    /// scheduler and worker connects to another node first.
    pub fn cluster(mut self, nodes: usize) -> Self {
        self.cluster = nodes;
        self
    }

    /// The first scheduler counts in `metrics` (registered and served by
    /// the test).
    pub fn scheduler_metrics(mut self, metrics: SchedulerMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Extra `nats-server` configuration (e.g. `max_payload: 65536`).
    pub fn nats_config(mut self, extra: &str) -> Self {
        self.nats_config = extra.to_owned();
        self
    }

    /// Starts the rack simulator with `config` (admin port 0) and loads its
    /// first rack; one worker unless [`StackBuilder::workers`] says otherwise
    /// (after this call).
    pub fn simulator(mut self, config: SimConfig) -> Self {
        self.sim = Some(SimConfig {
            admin_port: 0,
            ..config
        });
        self.workers = self.workers.max(1);
        self
    }

    /// How many in-process workers run against the simulator.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// The workers' settings.
    pub fn worker_config(mut self, config: WorkerConfig) -> Self {
        self.worker = config;
        self
    }

    /// The jobs consumer's ack wait.
    pub fn job_ack_wait(mut self, wait: Duration) -> Self {
        self.job_ack_wait = wait;
        self
    }

    /// The simulator's rack is not loaded: the test creates it.
    pub fn without_rack(mut self) -> Self {
        self.load_rack = false;
        self
    }

    /// No scheduler at first ([`Stack::start_scheduler`] starts one).
    pub fn without_scheduler(mut self) -> Self {
        self.scheduler = false;
        self
    }

    /// Starts it.
    pub async fn start(self) -> Stack {
        let (nats, peers) = if self.cluster > 0 {
            let mut nodes = NatsCluster::start(self.cluster).into_nodes();
            let first = nodes.remove(0);
            (first, nodes)
        } else if self.nats_config.is_empty() {
            (NatsServer::start(), Vec::new())
        } else {
            (NatsServer::start_with_config(&self.nats_config), Vec::new())
        };
        let db = TestDb::create().await;
        let mut store = Store::connect(db.url(), 5)
            .await
            .expect("connect the store");
        store.migrate().await.expect("migrate");
        if let Some(known_for) = self.power_known_for {
            store = store.with_power_known_for(known_for);
        }
        let urls = std::iter::once(&nats)
            .chain(&peers)
            .map(NatsServer::url)
            .collect::<Vec<_>>();
        let client = async_nats::connect(urls.as_slice())
            .await
            .expect("connect to NATS");
        let sim = match self.sim.clone() {
            Some(config) => Some(flow_rack_sim::start(config).await.expect("the simulator")),
            None => None,
        };
        let mut stack = Stack {
            schedulers: Vec::new(),
            workers: Vec::new(),
            watchers: Vec::new(),
            sim,
            worker_config: self.worker.clone(),
            job_ack_wait: self.job_ack_wait,
            history: self.history.clone(),
            js: jetstream::new(client.clone()),
            api: flow_client::Client::new(client.clone(), nats.url()),
            client,
            store,
            db,
            nats,
            peers,
            connections: std::collections::HashMap::new(),
        };
        if self.scheduler {
            match self.metrics {
                Some(metrics) => {
                    let client = stack.connect("flow-scheduler").await;
                    let scheduler = Scheduler::start_with_options(
                        client,
                        stack.store.clone(),
                        flow_scheduler::Options {
                            metrics: Some(metrics),
                            ..flow_scheduler::Options::new(stack.topology())
                        },
                    )
                    .await
                    .expect("the scheduler");
                    stack.schedulers.push(scheduler);
                    stack.wait_until_answering().await;
                }
                None => stack.start_scheduler().await,
            }
        }
        for _ in 0..self.workers {
            stack.start_worker().await;
        }
        if self.scheduler
            && self.load_rack
            && let Some(sim) = &stack.sim
        {
            let rack = serde_json::to_value(&sim.inventory()[0]).expect("a rack document");
            stack.ok("rack.create", json!({ "rack": rack })).await;
        }
        stack
    }
}

struct WorkerTask {
    stop: CancellationToken,
    handle: JoinHandle<()>,
}

/// A running stack. Field order is drop order: schedulers and workers go
/// before the simulator, the database and the server.
pub struct Stack {
    schedulers: Vec<Scheduler>,
    workers: Vec<WorkerTask>,
    watchers: Vec<WorkerTask>,
    sim: Option<Simulator>,
    worker_config: WorkerConfig,
    job_ack_wait: Duration,
    history: Option<flow_scheduler::history::HistoryPolicy>,
    /// A connection of the test's own.
    pub client: async_nats::Client,
    /// JetStream on [`Stack::client`].
    pub js: jetstream::Context,
    /// `flow.api` on [`Stack::client`], as every Flow client calls it
    /// (`shared/client/src/lib.rs`).
    pub api: flow_client::Client,
    /// The database the schedulers use.
    pub store: Store,
    /// The database itself (dropped last but one).
    pub db: TestDb,
    /// The server (dropped last); in a cluster, its first node.
    pub nats: NatsServer,
    /// The other nodes of a cluster (none: a single server).
    pub peers: Vec<NatsServer>,
    /// Connections made so far per process kind (each starts at the next
    /// node; workers one node after schedulers).
    connections: std::collections::HashMap<String, usize>,
}

impl Stack {
    /// A stack with a scheduler and nothing else; see [`StackBuilder`].
    pub fn builder() -> StackBuilder {
        StackBuilder {
            nats_config: String::new(),
            sim: None,
            workers: 0,
            worker: WorkerConfig::default(),
            job_ack_wait: flow_scheduler::JOB_ACK_WAIT,
            scheduler: true,
            load_rack: true,
            metrics: None,
            cluster: 0,
            power_known_for: None,
            history: None,
        }
    }

    /// Node `i` of the cluster (0: [`Stack::nats`]).
    ///
    /// # Panics
    ///
    /// If there is no such node.
    pub fn node(&mut self, i: usize) -> &mut NatsServer {
        match i {
            0 => &mut self.nats,
            i => &mut self.peers[i - 1],
        }
    }

    /// The node whose server name is `name` (a stream's leader).
    pub fn node_named(&self, name: &str) -> Option<usize> {
        std::iter::once(&self.nats)
            .chain(&self.peers)
            .position(|n| n.name() == name)
    }

    /// The server that leads `stream` now (its Raft leader; the only
    /// server when there is one).
    pub async fn stream_leader(&self, stream: &str) -> Option<String> {
        let mut s = self.js.get_stream(stream).await.ok()?;
        s.info().await.ok()?.cluster.as_ref()?.leader.clone()
    }

    /// The topology the schedulers create: R1 on a single server, R(nodes)
    /// on a cluster.
    pub fn topology(&self) -> Topology {
        Topology {
            replicas: 1 + self.peers.len(),
            ..Topology::single(self.job_ack_wait)
        }
    }

    /// A connection of its own for one process, as the binaries make it:
    /// every node's URL, listed from the next node on, so processes of a
    /// kind (`name`) spread over the cluster's nodes: schedulers from node
    /// 0, workers from node 1.
    pub async fn connect(&mut self, name: &str) -> async_nats::Client {
        let nodes: Vec<&NatsServer> = std::iter::once(&self.nats).chain(&self.peers).collect();
        let made = self.connections.entry(name.to_owned()).or_default();
        let offset = usize::from(name == "flow-worker");
        let first = (*made + offset) % nodes.len();
        *made += 1;
        let url = (0..nodes.len())
            .map(|i| nodes[(first + i) % nodes.len()].url())
            .collect::<Vec<_>>()
            .join(",");
        let settings = flow_config::NatsSettings {
            url,
            server_order: flow_config::ServerOrder::Listed,
            ..Default::default()
        };
        flow_jetstream::connect_nats(&settings, name, flow_jetstream::InitialConnect::FailFast)
            .await
            .expect("connect to NATS")
    }

    /// The simulator.
    ///
    /// # Panics
    ///
    /// When the stack has none.
    pub fn sim(&self) -> &Simulator {
        self.sim.as_ref().expect("the stack has a simulator")
    }

    /// Starts another scheduler on its own connection, same database.
    pub async fn start_scheduler(&mut self) {
        self.start_scheduler_with(false).await;
    }

    /// Starts another scheduler as one starts on a database just restored
    /// from a backup (`flow-scheduler --restored`).
    pub async fn start_restored_scheduler(&mut self) {
        self.start_scheduler_with(true).await;
    }

    async fn start_scheduler_with(&mut self, restored: bool) {
        let client = self.connect("flow-scheduler").await;
        let options = flow_scheduler::Options {
            history: self.history.clone(),
            restored,
            ..flow_scheduler::Options::new(self.topology())
        };
        let scheduler = Scheduler::start_with_options(client, self.store.clone(), options)
            .await
            .expect("the scheduler");
        self.schedulers.push(scheduler);
        self.wait_until_answering().await;
    }

    /// Waits (at most [`CALL_TIMEOUT`]) until the API answers on the test's
    /// own connection. A flush only puts the scheduler's subscriptions on
    /// the wire; the server may still read a request of another connection
    /// first and answer "no responders" (seen under a loaded CI machine).
    pub async fn wait_until_answering(&self) {
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            match self
                .api
                .request_raw(
                    <endpoint::RuleList as Endpoint>::NAME,
                    b"{}".to_vec(),
                    CALL_TIMEOUT,
                    None,
                )
                .await
            {
                Ok(_) => return,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("the scheduler's API never answered: {e}"),
            }
        }
    }

    /// Stops every scheduler (gracefully).
    pub async fn stop_schedulers(&mut self) {
        for s in self.schedulers.drain(..) {
            s.stop().await.expect("stop the scheduler");
        }
    }

    /// Kills every scheduler as `kill -9` would: their loops are dropped
    /// mid-await, nothing is finished, and their connections close.
    pub fn kill_schedulers(&mut self) {
        for s in self.schedulers.drain(..) {
            s.kill();
        }
    }

    /// Puts `bytes` on the simulator's firmware origin as `name`
    /// (`services/rack-sim/src/origin.rs`); its URL and `sha256:` digest.
    pub async fn origin_file(&self, name: &str, bytes: Vec<u8>) -> (String, String) {
        let admin = self.sim().admin_url();
        let put: serde_json::Value = reqwest::Client::new()
            .put(format!("{admin}/admin/v1/files/{name}"))
            .body(bytes)
            .send()
            .await
            .expect("the origin takes the file")
            .json()
            .await
            .expect("the origin answers JSON");
        let digest = put["digest"].as_str().expect("a digest").to_owned();
        (format!("{admin}/files/{name}"), digest)
    }

    /// A task's firmware images (`{"Compute": {"image_uri": …, "version":
    /// …}, …}`, or a request holding them under `firmware`) served from the
    /// simulator's origin: each image's file — named as its URI's last
    /// segment, its bytes derived from that name — is put there, and the
    /// image names its URL there and the digest of those bytes.
    pub async fn served_images(&self, mut request: serde_json::Value) -> serde_json::Value {
        let map = if request.get("firmware").is_some() {
            &mut request["firmware"]
        } else {
            &mut request
        };
        let Some(images) = map.as_object_mut() else {
            return request;
        };
        for image in images.values_mut() {
            let uri = image["image_uri"].as_str().unwrap_or_default().to_owned();
            let name = uri
                .split(['?', '#'])
                .next()
                .unwrap_or_default()
                .rsplit('/')
                .next()
                .unwrap_or("image.bin")
                .to_owned();
            let bytes = format!("firmware image {name}\n").repeat(32).into_bytes();
            let (url, digest) = self.origin_file(&name, bytes).await;
            image["image_uri"] = serde_json::Value::String(url);
            image["digest"] = serde_json::Value::String(digest);
        }
        request
    }

    /// Starts another worker against the simulator, on a connection of its
    /// own.
    pub async fn start_worker(&mut self) {
        let stop = CancellationToken::new();
        let mut config = self.worker_config.clone();
        if config.images.is_none() {
            // Each worker serves BMCs from a store of its own on loopback;
            // the stack's workers share its directory, as workers on one
            // host may.
            config.images = Some(
                flow_worker::images::ImageStore::start(flow_worker::images::ImageStoreConfig {
                    dir: self.nats.store_dir().with_file_name("images"),
                    listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
                    url: None,
                })
                .await
                .expect("the worker's image store starts"),
            );
        }
        let (client, registry, token) = (
            self.connect("flow-worker").await,
            sim_registry(self.sim()),
            stop.clone(),
        );
        let handle = tokio::spawn(async move {
            flow_worker::run(client.clone(), registry, config, token)
                .await
                .expect("the worker");
            // What it handed back on the way out reaches the server before
            // its connection goes (the binary drains it).
            let _ = client.flush().await;
        });
        self.workers.push(WorkerTask { stop, handle });
    }

    /// Starts a hardware watcher (`flow-worker --watch`) on the simulator's
    /// BMCs; it stops with the workers (or [`Stack::kill_watchers`]).
    pub fn start_watcher(&mut self, config: flow_worker::watch::WatchConfig) {
        let stop = CancellationToken::new();
        let credentials = Arc::new(CredentialStore::single(
            flow_rack_sim::CREDENTIAL_REF,
            flow_rack_sim::DEFAULT_USER,
            flow_rack_sim::DEFAULT_PASSWORD,
        ));
        let bmcs = flow_redfish::Connections::new(&RedfishSettings::default(), credentials)
            .expect("BMC connections");
        let managers = Arc::new(
            flow_redfish::registry_with(&RedfishSettings::default(), &bmcs, None)
                .expect("the watcher's managers"),
        );
        let handle = tokio::spawn(flow_worker::watch::run(
            self.client.clone(),
            bmcs,
            managers,
            config,
            flow_worker::metrics::WatchMetrics::default(),
            stop.clone(),
        ));
        self.watchers.push(WorkerTask { stop, handle });
    }

    /// Kills every watcher as a crash would.
    pub async fn kill_watchers(&mut self) {
        for w in self.watchers.drain(..) {
            w.handle.abort();
            let _ = w.handle.await;
        }
    }

    /// Kills every worker as a crash would: their futures are dropped
    /// mid-await, nothing is checkpointed or acknowledged on the way out.
    pub async fn kill_workers(&mut self) {
        for w in self.workers.drain(..).chain(self.watchers.drain(..)) {
            w.handle.abort();
            let _ = w.handle.await;
        }
    }

    /// Kills the `i`-th running worker as a crash would (see
    /// [`Stack::kill_workers`]); the others run on.
    pub async fn kill_worker(&mut self, i: usize) {
        let w = self.workers.remove(i);
        w.handle.abort();
        let _ = w.handle.await;
    }

    /// Stops every worker gracefully (they hand their jobs back); false
    /// when one did not return within 10 s.
    pub async fn stop_workers(&mut self) -> bool {
        let mut in_time = true;
        for w in self.workers.drain(..).chain(self.watchers.drain(..)) {
            w.stop.cancel();
            in_time &= tokio::time::timeout(WORKER_STOP, w.handle).await.is_ok();
        }
        in_time
    }

    /// Calls endpoint `E`; a refusal is the service's error, anything
    /// else (no reply) fails the test.
    pub async fn call<E: Endpoint>(&self, request: &E::Request) -> Result<E::Reply, ApiError> {
        match self.api.call::<E>(request).await {
            Ok(reply) => Ok(reply),
            Err(flow_client::ClientError::Api(e)) => Err(e),
            Err(e) => panic!("flow.api.{}: {e}", E::NAME),
        }
    }

    /// Sends raw bytes to an endpoint (waiting at most `wait`) and decodes
    /// the envelope.
    pub async fn raw(
        &self,
        endpoint: &str,
        body: Vec<u8>,
        wait: Duration,
    ) -> Result<Value, ApiError> {
        let reply = self
            .api
            .request_raw(endpoint, body, wait, None)
            .await
            .unwrap_or_else(|e| panic!("flow.api.{endpoint}: no reply: {e}"));
        decode_reply(&reply)
    }

    /// Calls an endpoint with a JSON body.
    pub async fn call_json(&self, endpoint: &str, body: Value) -> Result<Value, ApiError> {
        self.raw(
            endpoint,
            serde_json::to_vec(&body).expect("JSON"),
            CALL_TIMEOUT,
        )
        .await
    }

    /// Calls an endpoint with a JSON body that must succeed.
    pub async fn ok(&self, endpoint: &str, body: Value) -> Value {
        self.call_json(endpoint, body)
            .await
            .unwrap_or_else(|e| panic!("{endpoint}: {e} {:?}", e.details))
    }

    /// Calls an endpoint with a JSON body that must fail; the error.
    pub async fn err(&self, endpoint: &str, body: Value) -> ApiError {
        match self.call_json(endpoint, body).await {
            Ok(v) => panic!("{endpoint} succeeded: {v}"),
            Err(e) => e,
        }
    }

    /// A task as JSON (`task.get`).
    pub async fn task(&self, id: &str) -> Value {
        self.ok("task.get", json!({ "id": id })).await
    }

    /// Waits (bounded by `timeout`) until `done` holds for the task; the
    /// task then. Panics naming `what` and the last state when it does not.
    pub async fn until_task(
        &self,
        id: &str,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let last = std::sync::Mutex::new(Value::Null);
        let found = flow_tests::eventually(timeout, POLL, || async {
            let task = self.task(id).await;
            let ok = done(&task);
            *last.lock().unwrap_or_else(|e| e.into_inner()) = task.clone();
            ok.then_some(task)
        })
        .await;
        found.unwrap_or_else(|e| {
            panic!(
                "{what}: {e}; the task: {}",
                last.lock().unwrap_or_else(|e| e.into_inner())
            )
        })
    }

    /// Waits (bounded) for a task to reach a final status.
    pub async fn finish(&self, id: &str) -> Value {
        self.until_task(id, "the task never finished", FINISH_TIMEOUT, |t| {
            ["completed", "failed", "terminated"].contains(&t["status"].as_str().unwrap_or(""))
        })
        .await
    }

    /// Messages a stream holds now.
    pub async fn stream_messages(&self, stream: &str) -> u64 {
        let mut s = self.js.get_stream(stream).await.expect("the stream");
        s.info().await.expect("its info").state.messages
    }

    /// Stops everything: workers (handing their jobs back), schedulers, the
    /// simulator.
    pub async fn stop(mut self) {
        self.stop_workers().await;
        self.stop_schedulers().await;
        if let Some(sim) = self.sim.take() {
            sim.shutdown().await;
        }
    }
}
