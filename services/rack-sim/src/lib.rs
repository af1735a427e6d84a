//! `flow-rack-sim`: a Redfish simulator of whole GB200 NVL72 racks — power
//! shelves, NVLink switch trays and compute trays — with power physics,
//! firmware update tasks, a lifecycle (decommission) API and fault
//! injection. One process serves many racks; every BMC has its own origin.
//!
//! Start it in-process with [`start`] (tests) or run the `flow-rack-sim`
//! binary. All durations are multiplied by [`SimConfig::time_scale`].
//!
//! # URL layout
//!
//! Each BMC listens on its own `<listen IP>:<port>` (base URL
//! `http[s]://IP:PORT`, Redfish under `/redfish/v1`); the admin and
//! lifecycle APIs share the admin port. HTTP Basic auth (default
//! `root`/`0penBmc`) or a session's `X-Auth-Token` (login:
//! `POST /redfish/v1/SessionService/Sessions`, or the same POST to
//! `…/Sessions/Members`) guards everything except `GET /redfish`,
//! `GET /redfish/v1`, `GET /redfish/v1/$metadata`, `GET /redfish/v1/odata`
//! and the login; failures answer `401` with
//! `WWW-Authenticate: Basic realm="flow-rack-sim"`. A trailing slash is
//! tolerated; an unknown path is `404` and a wrong method `405` (`Allow`
//! names the right ones), both with a DMTF error body
//! (`{"error":{"code":"Base.1.15.0.<MessageId>","message",…,"@Message.ExtendedInfo":[…]}}`).
//! A request's body is read whole before any answer, refusals included (so
//! a client's kept-alive connection survives a refused POST).
//!
//! Headers (DSP0266): a request with an `OData-Version` other than `4.0` is
//! `412 HeaderInvalid`; every answer has `OData-Version: 4.0` and
//! `Cache-Control: no-store` (the SSE stream: `no-cache`); every successful
//! read has `Allow` (the URI's methods, e.g. `GET, POST` on the sessions)
//! and, for a typed body, `Link: <http://redfish.dmtf.org/schemas/v1/<Namespace>.json>;
//! rel=describedby`, the DMTF JSON schema of its `@odata.type`
//! (`ServiceRoot.v1_15_0.json`, `ComputerSystemCollection.json`).
//!
//! | path (under `/redfish/v1`) | compute tray | NVSwitch tray | power shelf |
//! |---|---|---|---|
//! | `` (service root) | Vendor `NVIDIA`, Product `GB200 NVL`, 1.17.0 | `NVIDIA`, `P3809`, 1.17.0 | no Vendor/Product, 1.9.0 |
//! | `Systems` | `System_0` | `System_0` | empty |
//! | `Systems/System_0` (+ `Actions/ComputerSystem.Reset`) | host power | host power | — |
//! | `Chassis/<id>` | `BMC_0` | `BMC_eeprom` | `powershelf` (+ `Actions/Chassis.Reset`, `PowerSubsystem/PowerSupplies/0..5`) |
//! | `Managers/<id>` | `BMC_0` | `BMC_0` | `bmc` |
//! | `UpdateService/FirmwareInventory/<id>` | `FW_BMC_0`\*, `UEFI` | `FW_NVOS_0`\*, `FW_BMC_0` | `FW_PMC_0`\* |
//! | `UpdateService/Actions/UpdateService.SimpleUpdate` | ✓ | ✓ | ✓ |
//! | `TaskService/Tasks/<n>` (root link `Tasks`) | ✓ | ✓ | ✓ |
//! | `SessionService/Sessions/<n>` | ✓ | ✓ | ✓ |
//! | `EventService` (+ `SSE`, `Subscriptions/<n>`) | ✓ | ✓ | — |
//! | `$metadata`, `odata` | ✓ | ✓ | ✓ |
//!
//! (\* primary member: updated when `Targets` is absent or empty; its
//! initial version is the inventory's `firmware_version`.)
//!
//! Vendor profiles ([`VendorProfile`], `--profile`, per rack or component)
//! change how a BMC presents these: no `Links` on the root, UUID ids, a DPU
//! system or backplane chassis listed first, reset values through an
//! ActionInfo, `200` for a reset.
//!
//! Events (compute and switch trays): `GET EventService/SSE` is a `text/event-stream`
//! of Redfish `Event`s. While a stream is open it is an EventDestination
//! (`SubscriptionType` `SSE`, `Destination` `redfish-sse://<client>`, an
//! opaque `Context`) in `EventService/Subscriptions`, listed before the
//! stream's answer is sent and removed when it ends; `DELETE` of it ends the
//! stream (`204`). Push subscriptions are not taken: `POST` to
//! `Subscriptions` is `405` (`Allow: GET`).
//!
//! DMTF's Redfish Service Validator finds nothing wrong with any kind in
//! any profile but `no-links`' missing root `Links`
//! (`tests/dmtf_service_validator.rs`); `scripts/redfish-validators` runs it
//! and the Protocol Validator in a loopback-only network namespace.
//!
//! Resets (`POST <target>` with `{"ResetType": "<v>"}`): `204` when
//! accepted; `400 ActionParameterMissing` for a body that is not a JSON
//! object or lacks `ResetType`; `400 ActionParameterValueNotInList` for a
//! value outside the resource's `ResetType@Redfish.AllowableValues`;
//! `409 ResourceInUse` during a transition, for `On`/`ForceOn` while `On`,
//! and for `GracefulShutdown`/`ForceOff`/`GracefulRestart`/`ForceRestart`
//! while `Off` (`PowerCycle` while `Off` turns the host on).
//!
//! SimpleUpdate answers `202` with `Location: /redfish/v1/TaskService/Tasks/<n>`
//! and the Task; the task goes `New` → `Running` (`PercentComplete` rising)
//! → `Completed` (the targets' `Version`, and the Manager's
//! `FirmwareVersion` for `FW_BMC_0`/`FW_PMC_0`, change) or `Exception`.
//! A second update of a member while one runs is `409 ResourceInUse`.
//!
//! # Physics
//!
//! A rack is powered while at least one shelf is `On` (a shelf's outputs
//! stay up while it is `PoweringOff`). Tray BMCs are unreachable — their
//! listener is closed and open connections dropped — while the rack is
//! unpowered and for `bmc_boot` after power returns; the port is bound again
//! afterwards. Losing power turns every tray host `Off` and fails running
//! update tasks ("power lost"). Shelf BMCs are always reachable.
//!
//! # Version from an `ImageURI`
//!
//! 1. A non-empty `version=<v>` query parameter wins.
//! 2. Otherwise the last path segment, with `.bin`, `.fwpkg`, `.pldm`,
//!    `.img`, `.tar`, `.gz`, `.tgz`, `.zip` stripped from its end
//!    (repeatedly, any case), is the *stem*.
//! 3. The version is the stem from its first token start: the stem's start
//!    or a position right after `-` or `_`, holding a digit, or `v`/`V`/`r`/`R`
//!    followed by a digit. `compute-bmc-25.09-1.bin` → `25.09-1`,
//!    `pmc-r1.4.0.tar.gz` → `r1.4.0`, `GB200_uefi-02.05.01.bin` → `02.05.01`.
//! 4. Without a token start the whole stem is the version; an empty stem is
//!    `400 ActionParameterValueFormatError`.
//!
//! # Lifecycle API (admin port, Basic auth)
//!
//! `GET /lifecycle/v1/racks/{rack}/components/{component}` →
//! `200 {"rack","component","state","updated_at"}` with state `Ready`,
//! `Maintenance(<reason>)`, `Decommissioning/Draining|Wiping|Releasing` or
//! `Decommissioned`. `POST …/decommission` → `202` when it starts (each
//! phase lasts `decommission_phase`), `200` when already decommissioning or
//! decommissioned. `POST …/maintenance` `{"reason": "…"}` and `POST …/ready`
//! set those states (cancelling a decommission). Unknown names →
//! `404 {"error":{"code":"NotFound","message":…}}`.
//!
//! # Admin and fault API (admin port, no auth)
//!
//! `GET /admin/v1/state` → [`SimState`] (with every accepted reset, update
//! and started decommission per component); `GET|POST|DELETE
//! /admin/v1/faults`, `DELETE /admin/v1/faults/{id}`; `POST /admin/v1/reset`
//! restores power, firmware, lifecycle, command logs and the configured
//! faults (and starts every power domain's records again).
//! `GET /admin/v1/power`, `GET|PUT|DELETE /admin/v1/power/domains/{name}`:
//! power domains — each component draws its type's inrush at its power-on
//! instant, falling linearly to its steady draw ([`Draw`], `--draw`); a
//! domain reports its draw, its exact peak, its power-on commands, its
//! shelves off and, given `breaker_kw`, its trips (every rack of the domain
//! loses power); see `services/rack-sim/src/domains.rs`. A fault is `{"target": "<glob on rack/component>", "kind": …}`
//! with kinds `latency {ms}`, `error_rate {rate, status}`,
//! `fail_next {count, status}`, `unreachable {}`, `stuck_power {state}`,
//! `firmware_fails {message}` and `decommission_stalls {}` (see
//! [`FaultKind`]). Request faults (latency, error_rate, fail_next) apply to
//! every request of a targeted BMC, before authentication. A fault change
//! through the admin API is answered once the BMC listeners have followed
//! it (an `unreachable` BMC's socket closed and its connections dropped),
//! so the caller's next request already sees it.

mod admin;
mod api_error;
mod clock;
mod config;
mod destinations;
mod domains;
mod faults;
mod gauge;
mod inventory;
mod lifecycle;
mod model;
pub mod origin;
mod redfish;
mod server;
mod sessions;
mod state;
mod sync;
mod vendor;
mod world;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use flow_protocol::rack::RackSpec;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::{
    ConfigError, DEFAULT_ADMIN_PORT, DEFAULT_PASSWORD, DEFAULT_USER, Draw, Draws, InitialPower,
    SimConfig, Timings, TlsPem, parse_duration,
};
pub use domains::{DomainError, DomainReport, PowerOnRecord, PowerReport, TripRecord};
pub use faults::{Fault, FaultError, FaultId, FaultKind, FaultSpec};
pub use inventory::CREDENTIAL_REF;
pub use lifecycle::LifecycleStatus;
pub use model::{CommandKind, ComponentKind, PowerState, ResetType, version_from_image_uri};
pub use server::TlsError;
pub use state::{CommandRecord, ComponentState, RackState, RefusedRecord, SimState};
pub use vendor::{
    EventChoice, EventProfile, ProfileChoice, ProfileScope, VendorProfile, event_profile_of,
    profile_of,
};

use crate::clock::Clock;
use crate::server::Listener;
use crate::world::World;

/// Why the simulator cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A setting is unusable.
    #[error("invalid configuration")]
    Config(#[from] ConfigError),
    /// The TLS certificate or key is unusable.
    #[error("invalid TLS certificate or key")]
    Tls(#[from] TlsError),
    /// A port cannot be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A configured fault is invalid.
    #[error("invalid configured fault")]
    Fault(#[from] FaultError),
}

/// A running simulator. Dropping it stops every listener (in the
/// background); [`Simulator::shutdown`] stops and waits.
pub struct Simulator {
    world: Arc<World>,
    admin_url: String,
    bmc_count: usize,
    shutdown: watch::Sender<bool>,
    _admin_open: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), SimError> {
    let listener = server::bind(addr).map_err(|source| SimError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| SimError::Bind { addr, source })?;
    Ok((listener, local))
}

/// Starts a simulator: binds the admin port and every BMC port (BMCs that
/// start unpowered are closed again before this returns), and returns once
/// every listener is in place.
///
/// # Errors
///
/// [`SimError`] for an invalid configuration, TLS material or fault, or a
/// port that cannot be bound.
pub async fn start(config: SimConfig) -> Result<Simulator, SimError> {
    config.validate()?;
    let tls = config.tls.as_ref().map(server::tls_acceptor).transpose()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let (admin_listener, admin_addr) = bind(SocketAddr::new(config.listen, config.admin_port))?;

    let per_rack = config.components_per_rack();
    let mut bmc_listeners = Vec::with_capacity(config.racks * per_rack);
    let mut urls = Vec::with_capacity(config.racks);
    for r in 0..config.racks {
        let mut rack_urls = Vec::with_capacity(per_rack);
        for c in 0..per_rack {
            let port = if config.bmc_base_port == 0 {
                0
            } else {
                // validate() checked that the last port fits.
                let offset = u16::try_from(r * per_rack + c).unwrap_or(u16::MAX);
                config.bmc_base_port.saturating_add(offset)
            };
            let (listener, local) = bind(SocketAddr::new(config.listen, port))?;
            rack_urls.push(format!("{scheme}://{local}"));
            bmc_listeners.push((listener, local));
        }
        urls.push(rack_urls);
    }

    let clock = Clock::new(config.time_scale);
    let world = Arc::new(World::new(config, clock, urls)?);

    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut tasks = Vec::with_capacity(bmc_listeners.len() + 2);
    let bmc_count = bmc_listeners.len();
    let refs: Vec<_> = world.all().collect();
    for (at, (listener, addr)) in refs.into_iter().zip(bmc_listeners) {
        let open = world.reachability(at);
        let initial = (*open.borrow()).then_some(listener);
        let task = Listener {
            label: format!("{}/{}", world.rack_name(at), world.component_name(at)),
            addr,
            router: redfish::router(world.clone(), at),
            tls: tls.clone(),
            open,
            listening: world.endpoint(at).listening.clone(),
            shutdown: shutdown_rx.clone(),
            on_close: Some(Box::new({
                let world = world.clone();
                move || world.sessions.drop_bmc(at)
            })),
        };
        tasks.push(tokio::spawn(task.run(initial)));
    }
    let (admin_open, admin_open_rx) = watch::channel(true);
    let admin = Listener {
        label: "admin".to_owned(),
        addr: admin_addr,
        router: admin::router(world.clone()),
        tls,
        open: admin_open_rx,
        listening: watch::Sender::new(false),
        shutdown: shutdown_rx.clone(),
        on_close: None,
    };
    tasks.push(tokio::spawn(admin.run(Some(admin_listener))));
    tasks.push(tokio::spawn(drive(world.clone(), shutdown_rx)));

    let admin_url = format!("{scheme}://{admin_addr}");
    tracing::info!(admin = %admin_url, bmcs = bmc_count, racks = world.rack_count(), "simulator started");
    Ok(Simulator {
        world,
        admin_url,
        bmc_count,
        shutdown,
        _admin_open: admin_open,
        tasks,
    })
}

/// The background driver: applies due steps on time and opens or closes
/// BMC listeners. It sweeps a rack when the rack was changed (a reset, an
/// update, a lifecycle or fault change) or when its next step is due. One
/// loop; every arm is cancel-safe (a watch change, a `Notify` permit, a
/// sleep).
async fn drive(world: Arc<World>, mut shutdown: watch::Receiver<bool>) {
    let mut due: Vec<Option<tokio::time::Instant>> = vec![None; world.rack_count()];
    loop {
        let now = tokio::time::Instant::now();
        for (r, next) in due.iter_mut().enumerate() {
            if world.take_dirty(r) || next.is_some_and(|at| at <= now) {
                *next = world.sweep_rack(r, true);
            }
        }
        let next = due.iter().flatten().min().copied();
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = shutdown.changed() => return,
            () = world.poked() => {}
            () = sleep => {}
        }
    }
}

impl Simulator {
    /// One rack document per rack (what `--inventory-out` writes).
    pub fn inventory(&self) -> Vec<RackSpec> {
        inventory::inventory(&self.world)
    }

    /// Base URL of the admin and lifecycle APIs, e.g. `http://127.0.0.1:8800`.
    pub fn admin_url(&self) -> String {
        self.admin_url.clone()
    }

    /// Base URL of a component's BMC (Redfish at `<url>/redfish/v1`).
    pub fn bmc_url(&self, rack: &str, component: &str) -> Option<String> {
        let at = self.world.locate(rack, component)?;
        Some(self.world.url(at).to_owned())
    }

    /// Number of BMCs served.
    pub fn bmc_count(&self) -> usize {
        self.bmc_count
    }

    /// Same as `GET /admin/v1/state`.
    pub fn state(&self) -> SimState {
        state::snapshot(&self.world)
    }

    /// Installs a fault; returns it with its id.
    ///
    /// # Errors
    ///
    /// [`FaultError::Invalid`] for a malformed fault.
    pub fn set_fault(&self, spec: FaultSpec) -> Result<Fault, FaultError> {
        let fault = self.world.faults.add(spec)?;
        if matches!(fault.kind, FaultKind::EventsDown {}) {
            // As the admin API does: open streams look at the faults again.
            self.world.cut_streams();
        }
        self.world.refresh();
        Ok(fault)
    }

    /// Removes one fault.
    ///
    /// # Errors
    ///
    /// [`FaultError::NotFound`] if no fault has this id.
    pub fn remove_fault(&self, id: FaultId) -> Result<(), FaultError> {
        self.world.faults.remove(id)?;
        self.world.refresh();
        Ok(())
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        self.world.faults.clear();
        self.world.refresh();
    }

    /// The installed faults.
    pub fn faults(&self) -> Vec<Fault> {
        self.world.faults.list()
    }

    /// Same as `GET /admin/v1/power`.
    pub fn power(&self) -> PowerReport {
        self.world.power_report()
    }

    /// Same as `PUT /admin/v1/power/domains/{name}`: creates or replaces a
    /// power domain over `racks` with an optional breaker limit (kW).
    ///
    /// # Errors
    ///
    /// [`DomainError`] naming the bad field or the unknown rack.
    pub fn set_power_domain(
        &self,
        name: &str,
        racks: &[String],
        breaker_kw: Option<f64>,
    ) -> Result<DomainReport, DomainError> {
        self.world.set_domain(name, racks, breaker_kw)
    }

    /// Same as `POST /admin/v1/reset`.
    pub fn reset(&self) {
        self.world.reset();
        self.world.refresh();
    }

    /// Stops every listener and the driver, and waits for them.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        for task in std::mem::take(&mut self.tasks) {
            if let Err(error) = task.await {
                tracing::warn!(error = %flow_telemetry::ErrorChain(&error), "a simulator task failed");
            }
        }
        tracing::info!("simulator stopped");
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}
