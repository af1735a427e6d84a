//! `flow-console`: serves the web console until SIGINT/SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use flow_config::Settings;
use flow_console::Access;
use flow_jetstream::{InitialConnect, connect_nats};

/// Flow web console: racks, tasks, rollouts and schedules, live.
#[derive(Debug, Parser)]
#[command(name = "flow-console", version, about)]
struct Args {
    /// Config file (YAML, the NATS and log settings); also FLOW_CONFIG.
    #[arg(long)]
    config: Option<PathBuf>,
    /// NATS URL; overrides FLOW_NATS_URL.
    #[arg(long)]
    nats_url: Option<String>,
    /// Where to listen (ip:port; port 0 = any free port).
    #[arg(long, env = "FLOW_CONSOLE_LISTEN", default_value = "127.0.0.1:8480")]
    listen: SocketAddr,
    /// Users (YAML: `users: [{name, role: viewer|operator, secret_env}]`);
    /// FLOW_CONSOLE_OPERATOR_TOKEN / FLOW_CONSOLE_VIEWER_TOKEN add the users
    /// `operator` and `viewer`.
    #[arg(long, env = "FLOW_CONSOLE_ACCESS_FILE")]
    access_file: Option<PathBuf>,
    /// Write the address served (`http://ip:port/`) to this file once
    /// listening (for scripts that pick port 0).
    #[arg(long)]
    url_file: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let shutdown = flow_telemetry::shutdown_signal();
    let args = Args::parse();
    let mut settings = Settings::from_env(args.config.as_deref())?;
    if let Some(url) = args.nats_url {
        settings.nats.url = url;
    }
    settings.validate_nats()?;
    flow_telemetry::init(&settings.log);
    let csrf_key = std::env::var("FLOW_CONSOLE_CSRF_KEY").ok();
    let access = Access::load(
        args.access_file.as_deref(),
        &|k| std::env::var(k).ok(),
        csrf_key.as_deref().map(str::as_bytes),
    )?;
    let nats = connect_nats(&settings.nats, "flow-console", InitialConnect::Retry)
        .await
        .with_context(|| format!("cannot connect to NATS at {}", settings.nats.url))?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {} (--listen)", args.listen))?;
    let addr = listener.local_addr()?;
    let url = flow_console::url_of(addr);
    if let Some(path) = &args.url_file {
        std::fs::write(path, format!("{url}\n"))
            .with_context(|| format!("cannot write --url-file {}", path.display()))?;
    }
    tracing::info!(%url, "flow-console serving");
    let state = flow_console::state(nats, &settings.nats.url, access);
    flow_console::serve(listener, state, shutdown).await?;
    tracing::info!("flow-console stopped");
    Ok(())
}
