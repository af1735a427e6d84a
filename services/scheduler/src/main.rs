//! `flow-scheduler`: applies migrations, then serves `flow.api` until
//! SIGINT/SIGTERM.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use flow_config::{Secret, Settings};
use flow_jetstream::{InitialConnect, connect_nats};
use flow_metrics::{MetricsListen, MetricsRegistry};
use flow_scheduler::metrics::SchedulerMetrics;
use flow_scheduler::{Scheduler, Topology};
use flow_store::Store;

/// Flow scheduler: owns tasks and serves the flow.api service.
#[derive(Debug, Parser)]
#[command(name = "flow-scheduler", version, about)]
struct Args {
    /// Config file (YAML); also FLOW_CONFIG.
    #[arg(long)]
    config: Option<PathBuf>,
    /// NATS URL; overrides FLOW_NATS_URL.
    #[arg(long)]
    nats_url: Option<String>,
    /// Postgres URL; overrides FLOW_DATABASE_URL.
    #[arg(long)]
    database_url: Option<String>,
    /// Where to serve GET /metrics (Prometheus): ip:port (port 0 = any
    /// free port), or `off` [default: 127.0.0.1:9450; if taken, no listener].
    #[arg(long, env = "FLOW_METRICS_LISTEN")]
    metrics_listen: Option<MetricsListen>,
    /// How long a worker may hold a job without an ack or progress before
    /// JetStream gives it to another worker (Go duration, e.g. 30s). Only
    /// applies when the jobs consumer is first created.
    #[arg(long, env = "FLOW_JOB_ACK_WAIT", value_parser = parse_ack_wait)]
    job_ack_wait: Option<std::time::Duration>,
    /// How long a read of a component's power counts as known for power
    /// budgets: after it, the component is counted at its steady draw
    /// until read again (Go duration; default 60s; docs/operating-safety.md,
    /// "What counts").
    #[arg(long, env = "FLOW_POWER_KNOWN_FOR", value_parser = parse_ack_wait)]
    power_known_for: Option<std::time::Duration>,
    /// Who callers are: `development` (nothing verified; every caller is
    /// the development user) or `verified` (the account and user the NATS
    /// server stamps in `Nats-Request-Info`; deploy/nats/flow-verified.conf,
    /// docs/audit.md "Who").
    #[arg(long, env = "FLOW_IDENTITY", default_value = "development")]
    identity: flow_scheduler::IdentityMode,
    /// Verified users (`ACCOUNT/user`) made sure of an admin grant over
    /// every rack at start (comma-separated): who may grant the rest
    /// (`flow access grant`, docs/audit.md "Who may").
    #[arg(long = "admin", env = "FLOW_ADMINS", value_delimiter = ',')]
    admins: Vec<String>,
    /// Verified users (`ACCOUNT/user`) trusted to act on behalf of their
    /// own users (comma-separated; the console's service user): a request
    /// of theirs naming a user in `Flow-On-Behalf-Of` acts as
    /// `ACCOUNT/<that user>`, under that user's grants (docs/audit.md,
    /// "Through the console").
    #[arg(
        long = "intermediary",
        env = "FLOW_INTERMEDIARIES",
        value_delimiter = ','
    )]
    intermediaries: Vec<String>,
    /// Where history past its retention goes (docs/operating.md, "History
    /// and the archive"). Unset: history is kept in full.
    #[arg(long, env = "FLOW_ARCHIVE_DIR")]
    archive_dir: Option<PathBuf>,
    /// How long a finished task keeps its steps and component results (and
    /// a schedule its finished firings) before they go to the archive:
    /// days (`90d`) or a Go duration [default: 90d].
    #[arg(long, env = "FLOW_KEEP_DETAIL", value_parser = parse_keep)]
    keep_detail: Option<std::time::Duration>,
    /// How long audit records stay in the database before they are
    /// exported to the archive as a hash chain [default: 400d].
    #[arg(long, env = "FLOW_KEEP_AUDIT", value_parser = parse_keep)]
    keep_audit: Option<std::time::Duration>,
    /// How often the retention pass runs [default: 1h].
    #[arg(long, env = "FLOW_HISTORY_EVERY", value_parser = parse_keep)]
    history_every: Option<std::time::Duration>,
    /// The database was just restored from a backup: before serving, send
    /// every running step's job again in a new restore epoch (workers
    /// resume each from its checkpoint; docs/operating.md, "Backup and
    /// restore"). Once, on one scheduler, with the others stopped.
    #[arg(long)]
    restored: bool,
}

/// `90d`, or a Go duration (`2160h`, `30s`); `0` keeps nothing past the pass.
fn parse_keep(text: &str) -> Result<std::time::Duration, String> {
    if let Some(days) = text.strip_suffix('d') {
        let days: u64 = days
            .parse()
            .map_err(|_| format!("{text:?} is not a number of days (90d) or a Go duration"))?;
        return Ok(std::time::Duration::from_secs(days.saturating_mul(86_400)));
    }
    let d = flow_rules::duration::parse_go(text).map_err(|e| e.to_string())?;
    d.non_negative()
        .ok_or_else(|| format!("{text:?} must not be negative"))
}

fn parse_ack_wait(text: &str) -> Result<std::time::Duration, String> {
    let d = flow_rules::duration::parse_go(text).map_err(|e| e.to_string())?;
    match d.non_negative() {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(format!("{text:?} must be a positive duration")),
    }
}

/// The scheduler's metrics port; workers default to 9451.
const DEFAULT_METRICS_LISTEN: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9450);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // From here on SIGINT/SIGTERM stop the scheduler cleanly, also while it
    // is still starting (e.g. waiting for NATS).
    let shutdown = flow_telemetry::shutdown_signal();
    tokio::pin!(shutdown);
    let mut args = Args::parse();
    let mut settings = Settings::from_env(args.config.as_deref())?;
    if let Some(url) = args.nats_url.take() {
        settings.nats.url = url;
    }
    if let Some(url) = args.database_url.take() {
        settings.database.url = Secret::new(url);
    }
    settings.validate_nats()?;
    settings.validate_jetstream()?;
    settings.validate_database()?;
    flow_telemetry::init(&settings.log);
    let mut metrics_registry = MetricsRegistry::new();
    let metrics = SchedulerMetrics::register(&mut metrics_registry);
    let metrics_server = flow_metrics::start(
        args.metrics_listen,
        DEFAULT_METRICS_LISTEN,
        metrics_registry,
    )
    .await
    .context("--metrics-listen (FLOW_METRICS_LISTEN)")?;
    let ack_wait = args.job_ack_wait.unwrap_or(flow_scheduler::JOB_ACK_WAIT);
    let known_for = args
        .power_known_for
        .unwrap_or(flow_store::observed::DEFAULT_KNOWN_FOR);
    let history = match &args.archive_dir {
        Some(dir) => {
            let mut policy = flow_scheduler::history::HistoryPolicy::new(dir);
            policy.detail_for = args.keep_detail.unwrap_or(policy.detail_for);
            policy.audit_for = args.keep_audit.unwrap_or(policy.audit_for);
            policy.every = args.history_every.unwrap_or(policy.every);
            tracing::info!(
                archive = %dir.display(),
                keep_detail_s = policy.detail_for.as_secs(),
                keep_audit_s = policy.audit_for.as_secs(),
                "history bounded: past retention it goes to the archive"
            );
            Some(policy)
        }
        None => {
            tracing::warn!(
                "no --archive-dir (FLOW_ARCHIVE_DIR): history is kept in full, and grows"
            );
            None
        }
    };
    let started = tokio::select! {
        started = start(
            &settings,
            ack_wait,
            known_for,
            metrics,
            &args,
            history,
        ) => started?,
        () = &mut shutdown => {
            tracing::info!("stopped before start-up finished");
            return Ok(());
        }
    };
    let (scheduler, client) = started;
    tracing::info!(nats = %settings.nats.url, "serving flow.api");

    shutdown.await;
    tracing::info!("shutting down");
    scheduler.stop().await?;
    client.drain().await?;
    if let Some(server) = metrics_server {
        server.stop().await;
    }
    Ok(())
}

/// Migrates the database, connects to NATS and starts the scheduler.
async fn start(
    settings: &Settings,
    ack_wait: std::time::Duration,
    known_for: std::time::Duration,
    metrics: SchedulerMetrics,
    args: &Args,
    history: Option<flow_scheduler::history::HistoryPolicy>,
) -> anyhow::Result<(Scheduler, async_nats::Client)> {
    let (identity, admins, intermediaries) = (args.identity, &args.admins, &args.intermediaries);
    for intermediary in intermediaries {
        flow_protocol::access::check_subject(intermediary)
            .ok()
            .filter(|()| !intermediary.ends_with("/*"))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "--intermediary (FLOW_INTERMEDIARIES): {intermediary:?} is not one verified user ACCOUNT/user"
                )
            })?;
    }
    for admin in admins {
        flow_protocol::access::check_subject(admin)
            .map_err(|e| anyhow::anyhow!("--admin (FLOW_ADMINS): {}", e.message))?;
    }
    let store = Store::connect(
        settings.database.url.expose(),
        settings.database.max_connections,
    )
    .await
    .context("cannot connect to Postgres (FLOW_DATABASE_URL)")?
    .with_power_known_for(known_for);
    store.migrate().await.context("cannot apply migrations")?;
    tracing::info!("migrations applied");
    store
        .ensure_admins(admins)
        .await
        .context("cannot record the --admin grants")?;
    if identity == flow_scheduler::IdentityMode::Verified
        && store
            .access_grants(None)
            .await
            .context("cannot read the access policy")?
            .is_empty()
    {
        tracing::warn!(
            "verified identity and no access grant: every operator's request is refused until an admin is named (--admin)"
        );
    }
    let client = connect_nats(&settings.nats, "flow-scheduler", InitialConnect::Retry)
        .await
        .context("cannot connect to NATS (FLOW_NATS_URL)")?;
    let topology = Topology {
        job_ack_wait: ack_wait,
        replicas: settings.jetstream.replicas,
        placement_tags: settings.jetstream.placement_tags.clone(),
    };
    tracing::info!(
        replicas = topology.replicas,
        placement = ?topology.placement_tags,
        "JetStream topology"
    );
    let options = flow_scheduler::Options {
        metrics: Some(metrics),
        identity,
        intermediaries: intermediaries.to_vec(),
        history,
        restored: args.restored,
        ..flow_scheduler::Options::new(topology)
    };
    let scheduler = Scheduler::start_with_options(client.clone(), store, options)
        .await
        .context(
            "cannot start the scheduler (identity, JetStream set-up, a restore's jobs or flow.api)",
        )?;
    Ok((scheduler, client))
}
