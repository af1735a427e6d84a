//! `flow-worker`: runs step jobs until SIGINT/SIGTERM.

/// jemalloc rather than glibc's malloc (see docs/architecture.md, "Worker
/// memory").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use flow_config::Settings;
use flow_jetstream::{InitialConnect, connect_nats};
use flow_metrics::{MetricsListen, MetricsRegistry};
use flow_redfish::CredentialStore;
use flow_redfish::RedfishSettings;
use flow_redfish::lifecycle::LifecycleClient;
use flow_worker::WorkerConfig;
use flow_worker::metrics::WorkerMetrics;

/// Flow worker: pulls step jobs and drives the hardware.
#[derive(Debug, Parser)]
#[command(name = "flow-worker", version, about)]
struct Args {
    /// Config file (YAML); also FLOW_CONFIG.
    #[arg(long)]
    config: Option<PathBuf>,
    /// NATS URL; overrides FLOW_NATS_URL.
    #[arg(long)]
    nats_url: Option<String>,
    /// BMC credentials file (YAML: reference → user and password_env/password_file).
    #[arg(long, env = "FLOW_BMC_CREDENTIALS_FILE")]
    credentials_file: PathBuf,
    /// Lifecycle API base URL for decommissioning, e.g. http://127.0.0.1:8800/lifecycle/v1.
    #[arg(long, env = "FLOW_LIFECYCLE_URL")]
    lifecycle_url: Option<String>,
    /// Credential reference for the lifecycle API.
    #[arg(long, env = "FLOW_LIFECYCLE_CREDENTIAL", default_value = "")]
    lifecycle_credential: String,
    /// Jobs held at once (a job in a durable wait holds none; hardware
    /// calls are bounded by the two request caps below).
    #[arg(long, env = "FLOW_WORKER_MAX_JOBS", default_value_t = flow_worker::DEFAULT_MAX_JOBS)]
    max_jobs: usize,
    /// Redfish requests in flight at once across every BMC.
    #[arg(long, env = "FLOW_WORKER_MAX_REQUESTS", default_value_t = flow_redfish::DEFAULT_MAX_REQUESTS)]
    max_requests: usize,
    /// Redfish requests in flight at once at one BMC.
    #[arg(long, env = "FLOW_BMC_MAX_REQUESTS", default_value_t = flow_redfish::DEFAULT_MAX_CONCURRENT_PER_BMC)]
    max_requests_per_bmc: usize,
    /// Seconds a kept-alive BMC connection may stay unused before it is
    /// closed (each costs the worker ~22 KiB and the BMC a connection).
    #[arg(long, env = "FLOW_BMC_IDLE_SECONDS", default_value_t = flow_redfish::IDLE_CONNECTION_TIMEOUT.as_secs_f64())]
    bmc_idle_seconds: f64,
    /// Extra CA certificates (PEM) for BMC TLS.
    #[arg(long, env = "FLOW_BMC_CA_FILE")]
    bmc_ca_file: Option<PathBuf>,
    /// Skip BMC TLS verification (labs only).
    #[arg(long, env = "FLOW_BMC_INSECURE")]
    bmc_insecure: bool,
    /// Follow BMCs' Redfish event streams (SSE) so that a verification
    /// polls as soon as an event comes (`off`: poll on the rule's interval
    /// only).
    #[arg(long, env = "FLOW_BMC_EVENTS", value_parser = ["on", "off"], default_value = "on")]
    bmc_events: String,
    /// The directory of the firmware image store: images by digest,
    /// fetched from their origin once and verified (workers on one host
    /// may share it) [default: <temp dir>/flow-images].
    #[arg(long, env = "FLOW_IMAGE_STORE")]
    image_store: Option<PathBuf>,
    /// Where BMCs fetch verified images from this worker: ip:port (port 0:
    /// any free port). Must be reachable from the BMC network.
    #[arg(long, env = "FLOW_IMAGE_LISTEN", default_value = "127.0.0.1:0")]
    image_listen: std::net::SocketAddr,
    /// The base URL BMCs are given for this worker's images, e.g.
    /// http://worker-3.bmc.example:9460 [default: http:// and the address
    /// listened on].
    #[arg(long, env = "FLOW_IMAGE_URL")]
    image_url: Option<String>,
    /// Where to serve GET /metrics (Prometheus): ip:port (port 0 = any
    /// free port), or `off` [default: 127.0.0.1:9451; if taken, no listener].
    #[arg(long, env = "FLOW_METRICS_LISTEN")]
    metrics_listen: Option<MetricsListen>,
    /// Also watch BMCs for hardware events (leaks, critical temperatures)
    /// and publish them. Watchers divide the racks among themselves (each
    /// BMC has one; a dead watcher's racks move to the others within
    /// seconds): run it on two or more workers.
    #[arg(long, env = "FLOW_WORKER_WATCH")]
    watch: bool,
    /// At most this many BMC event streams open in this watcher; its other
    /// BMCs are polled every --watch-poll-seconds.
    #[arg(long, env = "FLOW_WATCH_MAX_STREAMS", default_value_t = 8192)]
    watch_max_streams: usize,
    /// How often a BMC without an event stream is read, in seconds.
    #[arg(long, env = "FLOW_WATCH_POLL_SECONDS", default_value_t = 60.0)]
    watch_poll_seconds: f64,
    /// How often the watcher reads the inventory again, in seconds.
    #[arg(long, env = "FLOW_WATCH_INVENTORY_SECONDS", default_value_t = 30.0)]
    watch_inventory_seconds: f64,
    /// How often the watcher reads every BMC's power, in seconds: keep it
    /// well inside the schedulers' --power-known-for (60 s), so that power
    /// budgets count components by what is known of them
    /// (docs/operating-safety.md, "What counts").
    #[arg(long, env = "FLOW_WATCH_POWER_SECONDS", default_value_t = 20.0)]
    watch_power_seconds: f64,
    /// How often the watcher reads a BMC's measured draw, in seconds.
    #[arg(long, env = "FLOW_WATCH_TELEMETRY_SECONDS", default_value_t = 60.0)]
    watch_telemetry_seconds: f64,
}

/// The worker's metrics port; the scheduler's is 9450. Several workers on
/// one host need one each (`--metrics-listen 127.0.0.1:9452`, …).
const DEFAULT_METRICS_LISTEN: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9451);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // From here on SIGINT/SIGTERM stop the worker cleanly, also while it is
    // still connecting.
    let mut shutdown = Box::pin(flow_telemetry::shutdown_signal());
    let args = Args::parse();
    let mut settings = Settings::from_env(args.config.as_deref())?;
    if let Some(url) = args.nats_url {
        settings.nats.url = url;
    }
    settings.validate_nats()?;
    flow_telemetry::init(&settings.log);
    let credentials = Arc::new(
        CredentialStore::from_yaml_file(&args.credentials_file, &|k| std::env::var(k).ok())
            .context("BMC credentials (FLOW_BMC_CREDENTIALS_FILE)")?,
    );
    if args.max_jobs == 0 || args.max_requests == 0 || args.max_requests_per_bmc == 0 {
        anyhow::bail!("--max-jobs, --max-requests and --max-requests-per-bmc must be at least 1");
    }
    let bmc_idle = std::time::Duration::try_from_secs_f64(args.bmc_idle_seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--bmc-idle-seconds (FLOW_BMC_IDLE_SECONDS): a positive number of seconds, not {}",
                args.bmc_idle_seconds
            )
        })?;
    let redfish = RedfishSettings {
        max_concurrent_per_bmc: args.max_requests_per_bmc,
        max_requests: flow_redfish::RequestCap::new(args.max_requests),
        ca_file: args.bmc_ca_file,
        insecure: args.bmc_insecure,
        events: args.bmc_events == "on",
        idle_connection_timeout: bmc_idle,
        ..RedfishSettings::default()
    };
    let lifecycle = match &args.lifecycle_url {
        Some(url) => Some(LifecycleClient::new(
            url,
            redfish.http_client()?,
            Arc::clone(&credentials),
            &args.lifecycle_credential,
        )),
        None => None,
    };
    // One set of BMC connections for the managers and the watcher: the
    // per-BMC request cap and the Redfish sessions count both.
    let bmcs = flow_redfish::Connections::new(&redfish, credentials)?;
    let registry = flow_redfish::registry_with(&redfish, &bmcs, lifecycle)?;
    let mut metrics_registry = MetricsRegistry::new();
    let metrics = WorkerMetrics::register(&mut metrics_registry);
    let watch_metrics = args
        .watch
        .then(|| flow_worker::metrics::WatchMetrics::register(&mut metrics_registry));
    let metrics_server = flow_metrics::start(
        args.metrics_listen,
        DEFAULT_METRICS_LISTEN,
        metrics_registry,
    )
    .await
    .context("--metrics-listen (FLOW_METRICS_LISTEN)")?;
    let client = tokio::select! {
        client = connect_nats(&settings.nats, "flow-worker", InitialConnect::Retry) => {
            client.context("cannot connect to NATS (FLOW_NATS_URL)")?
        }
        () = &mut shutdown => {
            tracing::info!("stopped before start-up finished");
            return Ok(());
        }
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let signal = stop.clone();
    tokio::spawn(async move {
        shutdown.await;
        tracing::info!("stopping: no new jobs; jobs in flight checkpoint and hand back");
        signal.cancel();
    });
    if let Some(watch_metrics) = watch_metrics {
        let seconds = |s: f64, what: &str| {
            if s.is_finite() && s > 0.0 {
                Ok(std::time::Duration::from_secs_f64(s))
            } else {
                Err(anyhow::anyhow!(
                    "{what}: a positive number of seconds, not {s}"
                ))
            }
        };
        let config = flow_worker::watch::WatchConfig {
            poll_every: seconds(args.watch_poll_seconds, "--watch-poll-seconds")?,
            inventory_every: seconds(args.watch_inventory_seconds, "--watch-inventory-seconds")?,
            max_streams: args.watch_max_streams,
            power_every: seconds(args.watch_power_seconds, "--watch-power-seconds")?,
            telemetry_every: seconds(args.watch_telemetry_seconds, "--watch-telemetry-seconds")?,
            ..Default::default()
        };
        tracing::info!(poll_every = ?config.poll_every, "watching BMCs for hardware events");
        // The watcher reads power through managers of its own (not counted
        // as job calls), on the same connections.
        let managers = Arc::new(flow_redfish::registry_with(&redfish, &bmcs, None)?);
        tokio::spawn(flow_worker::watch::run(
            client.clone(),
            bmcs,
            managers,
            config,
            watch_metrics,
            stop.clone(),
        ));
    }
    let images = flow_worker::images::ImageStore::start(flow_worker::images::ImageStoreConfig {
        dir: args
            .image_store
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("flow-images")),
        listen: args.image_listen,
        url: args.image_url.clone(),
    })
    .await?;
    tracing::info!(
        max_jobs = args.max_jobs,
        max_requests = args.max_requests,
        max_requests_per_bmc = args.max_requests_per_bmc,
        "worker running"
    );
    flow_worker::run_with_metrics(
        client.clone(),
        registry,
        WorkerConfig {
            max_jobs: args.max_jobs,
            images: Some(images),
        },
        stop,
        metrics,
    )
    .await?;
    client.drain().await?;
    if let Some(server) = metrics_server {
        server.stop().await;
    }
    Ok(())
}
