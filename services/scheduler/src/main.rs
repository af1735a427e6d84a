//! `flow-scheduler`: applies migrations, then serves `flow.api` until
//! SIGINT/SIGTERM.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use flow_config::{InitialConnect, Secret, Settings, connect_nats};
use flow_scheduler::{Scheduler, telemetry};
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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut settings = Settings::from_env(args.config.as_deref())?;
    if let Some(url) = args.nats_url {
        settings.nats.url = url;
    }
    if let Some(url) = args.database_url {
        settings.database.url = Secret::new(url);
    }
    settings.validate_nats()?;
    settings.validate_database()?;
    telemetry::init(&settings.log);

    let store = Store::connect(
        settings.database.url.expose(),
        settings.database.max_connections,
    )
    .await
    .context("cannot connect to Postgres (FLOW_DATABASE_URL)")?;
    store.migrate().await.context("cannot apply migrations")?;
    tracing::info!("migrations applied");
    let client = connect_nats(&settings.nats, "flow-scheduler", InitialConnect::Retry)
        .await
        .context("cannot connect to NATS (FLOW_NATS_URL)")?;
    let scheduler = Scheduler::start(client.clone(), store)
        .await
        .map_err(|e| anyhow::anyhow!(e))
        .context("cannot start the scheduler (JetStream set-up or flow.api)")?;
    tracing::info!(nats = %settings.nats.url, "serving flow.api");

    shutdown_signal().await;
    tracing::info!("shutting down");
    scheduler.stop().await.map_err(|e| anyhow::anyhow!(e))?;
    client.drain().await?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
