//! `flow-rack-sim`: serves simulated GB200 NVL72 racks over Redfish until
//! SIGINT/SIGTERM. Rack documents go to stdout (or `--inventory-out`), logs
//! and the ready line to stderr.

use std::fs;
use std::io::{IsTerminal, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use flow_protocol::rack::RackSpec;
use flow_rack_sim::{Draws, FaultSpec, InitialPower, SimConfig, Timings, TlsPem};
use tracing_subscriber::EnvFilter;

/// Simulated GB200 NVL72 racks: one Redfish BMC per power shelf, NVLink
/// switch tray and compute tray, plus admin and lifecycle APIs.
#[derive(Debug, Parser)]
#[command(name = "flow-rack-sim", version, about)]
struct Args {
    /// Address every listener binds.
    #[arg(long, default_value = "127.0.0.1")]
    listen: IpAddr,
    /// Admin and lifecycle port (0: the OS picks).
    #[arg(long, default_value_t = flow_rack_sim::DEFAULT_ADMIN_PORT)]
    admin_port: u16,
    /// First BMC port; 0 gives each BMC an OS-chosen port.
    #[arg(long, default_value_t = 0)]
    bmc_base_port: u16,
    /// Number of racks (rack-01, rack-02, …).
    #[arg(long, default_value_t = 1)]
    racks: usize,
    /// Number of the first rack (several simulators for one site).
    #[arg(long, default_value_t = 1)]
    first_rack: usize,
    /// Compute trays per rack.
    #[arg(long, default_value_t = 18)]
    compute: usize,
    /// NVLink switch trays per rack.
    #[arg(long, default_value_t = 9)]
    nvswitch: usize,
    /// Power shelves per rack.
    #[arg(long, default_value_t = 8)]
    powershelf: usize,
    /// Multiplies every simulated duration (0.01: a 10 s transition takes 100 ms).
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Power at start: off (shelves off, tray BMCs down) or on.
    #[arg(long, value_enum, default_value_t = PowerArg::Off)]
    initial_power: PowerArg,
    /// BMC and lifecycle user.
    #[arg(long, default_value = flow_rack_sim::DEFAULT_USER)]
    user: String,
    /// BMC and lifecycle password.
    #[arg(long, default_value = flow_rack_sim::DEFAULT_PASSWORD)]
    password: String,
    /// Certificate chain (PEM): serve HTTPS everywhere.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Private key (PEM) for --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Write the rack document here (several racks: a directory of <rack>.json).
    #[arg(long)]
    inventory_out: Option<PathBuf>,
    /// JSON array of faults to install at start.
    #[arg(long)]
    faults: Option<PathBuf>,
    /// A vendor profile: PROFILE for every BMC, RACK=PROFILE or
    /// RACK/COMPONENT=PROFILE (repeatable; later flags win). Profiles:
    /// standard, no-links, uuid-ids, multi-system, action-info, session-only,
    /// reset-200.
    #[arg(long = "profile", value_name = "[RACK[/COMPONENT]=]PROFILE")]
    profiles: Vec<flow_rack_sim::ProfileChoice>,
    /// What the BMCs' event streams announce: PROFILE for every BMC,
    /// RACK=PROFILE or RACK/COMPONENT=PROFILE (repeatable; later flags
    /// win). Profiles: standard (ResourceEvent power events), openbmc-log
    /// (OpenBMC DCPowerOn/DCPowerOff log events), none.
    #[arg(long = "events", value_name = "[RACK[/COMPONENT]=]PROFILE")]
    events: Vec<flow_rack_sim::EventChoice>,
    /// Override a duration, e.g. --timing bmc_boot=2s (repeatable).
    #[arg(long = "timing", value_name = "NAME=DURATION")]
    timings: Vec<String>,
    /// Override a component type's power draw, e.g. --draw
    /// compute=9000/5400/2s (inrush W / steady W / settle; types compute,
    /// nvswitch, powershelf; repeatable).
    #[arg(long = "draw", value_name = "TYPE=INRUSH/STEADY/SETTLE")]
    draws: Vec<String>,
    /// BMCs accept an update's image URI without fetching it (tests of the
    /// update API alone; by default each BMC fetches and hashes the image,
    /// and an update whose image cannot be fetched fails).
    #[arg(long)]
    no_image_fetch: bool,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PowerArg {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn config(args: &Args) -> anyhow::Result<SimConfig> {
    let mut timings = Timings::default();
    for assignment in &args.timings {
        timings.apply(assignment)?;
    }
    let mut draw = Draws::default();
    for assignment in &args.draws {
        draw.apply(assignment)?;
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsPem {
            cert_pem: fs::read_to_string(cert)
                .with_context(|| format!("cannot read {}", cert.display()))?,
            key_pem: fs::read_to_string(key)
                .with_context(|| format!("cannot read {}", key.display()))?,
        }),
        _ => None,
    };
    let faults: Vec<FaultSpec> = match &args.faults {
        Some(path) => {
            let text = fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("{} is not a JSON array of faults", path.display()))?
        }
        None => Vec::new(),
    };
    Ok(SimConfig {
        listen: args.listen,
        admin_port: args.admin_port,
        bmc_base_port: args.bmc_base_port,
        racks: args.racks,
        first_rack: args.first_rack,
        compute: args.compute,
        nvswitch: args.nvswitch,
        powershelf: args.powershelf,
        time_scale: args.time_scale,
        initial_power: match args.initial_power {
            PowerArg::On => InitialPower::On,
            PowerArg::Off => InitialPower::Off,
        },
        user: args.user.clone(),
        password: args.password.clone(),
        tls,
        timings,
        faults,
        profiles: args.profiles.clone(),
        events: args.events.clone(),
        draw,
        fetch_images: !args.no_image_fetch,
    })
}

fn write_inventory(racks: &[RackSpec], out: Option<&Path>) -> anyhow::Result<()> {
    match out {
        None => {
            let mut stdout = std::io::stdout().lock();
            for rack in racks {
                serde_json::to_writer_pretty(&mut stdout, rack)?;
                writeln!(stdout)?;
            }
            stdout.flush()?;
        }
        Some(path) if racks.len() == 1 => {
            fs::write(path, serde_json::to_vec_pretty(&racks[0])?)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        Some(dir) => {
            if dir.is_file() {
                bail!(
                    "--inventory-out {} must be a directory for several racks",
                    dir.display()
                );
            }
            fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            for rack in racks {
                let path = dir.join(format!("{}.json", rack.name));
                fs::write(&path, serde_json::to_vec_pretty(rack)?)
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Listening from the start: a SIGTERM during start-up stops it cleanly.
    let shutdown = flow_telemetry::shutdown_signal();
    let args = Args::parse();
    init_logging(args.log_format);
    let config = config(&args)?;
    let sim = flow_rack_sim::start(config)
        .await
        .context("cannot start the simulator")?;
    write_inventory(&sim.inventory(), args.inventory_out.as_deref())?;
    eprintln!(
        "flow-rack-sim ready: admin {}, {} BMCs",
        sim.admin_url(),
        sim.bmc_count()
    );
    shutdown.await;
    tracing::info!("shutting down");
    sim.shutdown().await;
    Ok(())
}
