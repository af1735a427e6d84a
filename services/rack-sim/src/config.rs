//! What a simulator is started with: [`SimConfig`], its [`Timings`] and how a
//! `--timing name=duration` flag is parsed.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;
use std::time::Duration;

use crate::faults::FaultSpec;
use crate::vendor::ProfileChoice;

/// Default admin port (`--admin-port`).
pub const DEFAULT_ADMIN_PORT: u16 = 8800;
/// Default BMC user: OpenBMC's factory account.
pub const DEFAULT_USER: &str = "root";
/// Default BMC password: OpenBMC's factory password.
pub const DEFAULT_PASSWORD: &str = "0penBmc";
/// A GB200 NVL72 rack has 18 compute trays.
pub const DEFAULT_COMPUTE: usize = 18;
/// A GB200 NVL72 rack has 9 NVLink switch trays.
pub const DEFAULT_NVSWITCH: usize = 9;
/// A GB200 NVL72 rack has 8 power shelves.
pub const DEFAULT_POWERSHELF: usize = 8;
/// The highest rack number (a site of several simulators): names are
/// `rack-01` … `rack-9999`.
pub const MAX_RACKS: usize = 9999;

/// Everything a simulator is started with. `Default` gives the binary's
/// defaults: one NVL72 rack on 127.0.0.1, admin on 8800, OS-chosen BMC ports,
/// real-time durations, shelves off.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Address every listener binds (`--listen`).
    pub listen: IpAddr,
    /// Admin and lifecycle port; 0 lets the OS pick (`--admin-port`).
    pub admin_port: u16,
    /// First BMC port; 0 gives each BMC an OS-chosen port, N gives
    /// consecutive ports N, N+1, … in inventory order (`--bmc-base-port`).
    pub bmc_base_port: u16,
    /// Number of racks, named `rack-01`, `rack-02`, … (`--racks`).
    pub racks: usize,
    /// Number of the first rack (`--first-rack`), so several simulators
    /// can serve one site without clashing names: 51 gives `rack-51`, ….
    pub first_rack: usize,
    /// Compute trays per rack (`--compute`).
    pub compute: usize,
    /// NVLink switch trays per rack (`--nvswitch`).
    pub nvswitch: usize,
    /// Power shelves per rack (`--powershelf`).
    pub powershelf: usize,
    /// Every simulated duration is multiplied by this (`--time-scale`).
    pub time_scale: f64,
    /// Power at start and after `POST /admin/v1/reset` (`--initial-power`).
    pub initial_power: InitialPower,
    /// HTTP Basic user of every BMC and of the lifecycle API (`--user`).
    pub user: String,
    /// HTTP Basic password (`--password`).
    pub password: String,
    /// Serve HTTPS everywhere with this certificate (`--tls-cert`/`--tls-key`).
    pub tls: Option<TlsPem>,
    /// Unscaled durations of every transition (`--timing name=duration`).
    pub timings: Timings,
    /// Faults installed at start and after a reset (`--faults`).
    pub faults: Vec<FaultSpec>,
    /// Vendor profiles of the BMCs (`--profile`, later ones win; none:
    /// every BMC standard).
    pub profiles: Vec<ProfileChoice>,
    /// What the BMCs' event streams announce (`--events`, later ones win;
    /// none: standard).
    pub events: Vec<crate::vendor::EventChoice>,
    /// Power draw per component type (`--draw`), for the power domains
    /// (`services/rack-sim/src/domains.rs`).
    pub draw: Draws,
    /// Whether a BMC fetches (and hashes) the image an update names before
    /// its task starts; an image it cannot fetch fails the update
    /// (`--no-image-fetch`: accepted unfetched, for tests of the update
    /// API alone).
    pub fetch_images: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            listen: IpAddr::V4(Ipv4Addr::LOCALHOST),
            admin_port: DEFAULT_ADMIN_PORT,
            bmc_base_port: 0,
            racks: 1,
            first_rack: 1,
            compute: DEFAULT_COMPUTE,
            nvswitch: DEFAULT_NVSWITCH,
            powershelf: DEFAULT_POWERSHELF,
            time_scale: 1.0,
            initial_power: InitialPower::Off,
            user: DEFAULT_USER.to_owned(),
            password: DEFAULT_PASSWORD.to_owned(),
            tls: None,
            timings: Timings::default(),
            faults: Vec::new(),
            profiles: Vec::new(),
            events: Vec::new(),
            draw: Draws::default(),
            fetch_images: true,
        }
    }
}

impl SimConfig {
    /// Number of BMCs in one rack.
    pub fn components_per_rack(&self) -> usize {
        self.powershelf + self.nvswitch + self.compute
    }

    /// Checks what the types cannot.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the first bad setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            return Err(ConfigError::TimeScale(self.time_scale));
        }
        if self.racks == 0 || self.racks > MAX_RACKS {
            return Err(ConfigError::Racks(self.racks));
        }
        if self.first_rack == 0 || self.first_rack + self.racks - 1 > MAX_RACKS {
            return Err(ConfigError::FirstRack {
                first: self.first_rack,
                racks: self.racks,
            });
        }
        if self.components_per_rack() == 0 {
            return Err(ConfigError::NoComponents);
        }
        if self.powershelf == 0 && self.compute + self.nvswitch > 0 {
            return Err(ConfigError::TraysWithoutShelves);
        }
        if self.user.is_empty() {
            return Err(ConfigError::EmptyUser);
        }
        if self.bmc_base_port != 0 {
            let needed = self.racks * self.components_per_rack();
            let last = usize::from(self.bmc_base_port) + needed - 1;
            if last > usize::from(u16::MAX) {
                return Err(ConfigError::PortRange {
                    base: self.bmc_base_port,
                    needed,
                });
            }
        }
        Ok(())
    }
}

/// Power of the racks at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialPower {
    /// Shelves off, so tray BMCs are down and hosts are off.
    #[default]
    Off,
    /// Shelves on, tray BMCs up, hosts on.
    On,
}

impl FromStr for InitialPower {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "on" => Ok(InitialPower::On),
            "off" => Ok(InitialPower::Off),
            other => Err(ConfigError::InitialPower(other.to_owned())),
        }
    }
}

/// A certificate chain and its private key, both PEM.
#[derive(Clone)]
pub struct TlsPem {
    /// Certificate chain, leaf first.
    pub cert_pem: String,
    /// Private key (PKCS#8, PKCS#1 or SEC1).
    pub key_pem: String,
}

impl fmt::Debug for TlsPem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsPem")
            .field("cert_pem", &format_args!("{} bytes", self.cert_pem.len()))
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// The named durations of the power, boot, firmware and lifecycle models, at
/// time-scale 1.0. Each default is what a GB200 NVL72 part roughly takes,
/// shortened where the real figure is minutes and adds nothing to a test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timings {
    /// `On`/`ForceOn`: `PoweringOn` for this long, then `On`.
    pub power_on: Duration,
    /// `GracefulShutdown`: `PoweringOff` for this long, then `Off`.
    pub graceful_shutdown: Duration,
    /// `ForceOff`: `PoweringOff` for this long, then `Off`.
    pub force_off: Duration,
    /// `GracefulRestart`: `PoweringOff` for this long, then `power_on`.
    pub restart: Duration,
    /// `ForceRestart`: `PoweringOff` for this long, then `power_on`.
    pub force_restart: Duration,
    /// `PowerCycle`: `Off` for this long, then `power_on`.
    pub power_cycle: Duration,
    /// Power shelf `On`: `PoweringOn` for this long, then `On`.
    pub shelf_on: Duration,
    /// Power shelf `ForceOff`: `PoweringOff` for this long, then `Off`.
    pub shelf_off: Duration,
    /// A tray BMC stays unreachable this long after shelf power returns.
    pub bmc_boot: Duration,
    /// A firmware update task runs this long.
    pub firmware_update: Duration,
    /// Each decommission phase (Draining, Wiping, Releasing) lasts this long.
    pub decommission_phase: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            power_on: Duration::from_secs(5),
            graceful_shutdown: Duration::from_secs(10),
            force_off: Duration::from_secs(1),
            restart: Duration::from_secs(10),
            force_restart: Duration::from_secs(1),
            power_cycle: Duration::from_secs(3),
            shelf_on: Duration::from_secs(2),
            shelf_off: Duration::from_secs(1),
            bmc_boot: Duration::from_secs(20),
            firmware_update: Duration::from_secs(30),
            decommission_phase: Duration::from_secs(5),
        }
    }
}

impl Timings {
    /// The names `--timing` accepts, in declaration order.
    pub const NAMES: [&'static str; 11] = [
        "power_on",
        "graceful_shutdown",
        "force_off",
        "restart",
        "force_restart",
        "power_cycle",
        "shelf_on",
        "shelf_off",
        "bmc_boot",
        "firmware_update",
        "decommission_phase",
    ];

    fn slot(&mut self, name: &str) -> Option<&mut Duration> {
        Some(match name {
            "power_on" => &mut self.power_on,
            "graceful_shutdown" => &mut self.graceful_shutdown,
            "force_off" => &mut self.force_off,
            "restart" => &mut self.restart,
            "force_restart" => &mut self.force_restart,
            "power_cycle" => &mut self.power_cycle,
            "shelf_on" => &mut self.shelf_on,
            "shelf_off" => &mut self.shelf_off,
            "bmc_boot" => &mut self.bmc_boot,
            "firmware_update" => &mut self.firmware_update,
            "decommission_phase" => &mut self.decommission_phase,
            _ => return None,
        })
    }

    /// Applies one `name=duration` override, e.g. `bmc_boot=500ms`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Timing`] for an unknown name or a bad duration.
    pub fn apply(&mut self, assignment: &str) -> Result<(), ConfigError> {
        let bad = |reason: String| ConfigError::Timing {
            input: assignment.to_owned(),
            reason,
        };
        let (name, value) = assignment
            .split_once('=')
            .ok_or_else(|| bad("expected name=duration".to_owned()))?;
        let duration = parse_duration(value.trim()).map_err(bad)?;
        let slot = self.slot(name.trim()).ok_or_else(|| {
            bad(format!(
                "unknown timing {:?}; known: {}",
                name.trim(),
                Self::NAMES.join(", ")
            ))
        })?;
        *slot = duration;
        Ok(())
    }
}

/// The power one component type draws: from its power-on instant (an `On`,
/// or the "on" half of a restart or power cycle) it draws `inrush_w`,
/// falling linearly to `steady_w` over `settle` (at time-scale 1.0); off it
/// draws nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Draw {
    /// Watts at the power-on instant.
    pub inrush_w: f64,
    /// Watts once settled.
    pub steady_w: f64,
    /// From inrush to steady (simulated time: scaled by the time scale).
    pub settle: Duration,
}

impl Draw {
    /// A GB200 compute tray: 9,000 W inrush, 5,400 W steady, 2 s settle.
    /// Flow's control plane uses the same figures.
    pub const COMPUTE: Draw = Draw {
        inrush_w: 9_000.0,
        steady_w: 5_400.0,
        settle: Duration::from_secs(2),
    };
    /// An NVLink switch tray: 1,500 W inrush, 900 W steady, 2 s settle.
    pub const NVSWITCH: Draw = Draw {
        inrush_w: 1_500.0,
        steady_w: 900.0,
        settle: Duration::from_secs(2),
    };
    /// A power shelf's own draw: 400 W inrush, 200 W steady, 1 s settle.
    pub const POWERSHELF: Draw = Draw {
        inrush_w: 400.0,
        steady_w: 200.0,
        settle: Duration::from_secs(1),
    };

    /// Watts drawn `elapsed` after the power-on instant: `inrush_w` at 0,
    /// linearly down to `steady_w` at `settle`, `steady_w` from then on (at
    /// once when `settle` is zero).
    pub fn at(&self, elapsed: Duration) -> f64 {
        if elapsed >= self.settle {
            return self.steady_w;
        }
        let fraction = elapsed.as_secs_f64() / self.settle.as_secs_f64();
        self.inrush_w - (self.inrush_w - self.steady_w) * fraction
    }
}

/// The [`Draw`] of every component type (`--draw type=inrush/steady/settle`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Draws {
    /// Compute trays.
    pub compute: Draw,
    /// NVLink switch trays.
    pub nvswitch: Draw,
    /// Power shelves.
    pub powershelf: Draw,
}

impl Default for Draws {
    fn default() -> Self {
        Draws {
            compute: Draw::COMPUTE,
            nvswitch: Draw::NVSWITCH,
            powershelf: Draw::POWERSHELF,
        }
    }
}

impl Draws {
    /// The type names `--draw` accepts (any case).
    pub const NAMES: [&'static str; 3] = ["compute", "nvswitch", "powershelf"];

    /// The draw of `kind`.
    pub fn of(&self, kind: crate::model::ComponentKind) -> Draw {
        use crate::model::ComponentKind;
        match kind {
            ComponentKind::Compute => self.compute,
            ComponentKind::NvSwitch => self.nvswitch,
            ComponentKind::PowerShelf => self.powershelf,
        }
    }

    /// Applies one `type=inrush_w/steady_w/settle` override, e.g.
    /// `compute=9000/5400/2s`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Draw`] naming what is wrong: an unknown type, a
    /// missing part, a number that is negative or not finite, an inrush
    /// below the steady draw, a bad duration.
    pub fn apply(&mut self, assignment: &str) -> Result<(), ConfigError> {
        let bad = |reason: String| ConfigError::Draw {
            input: assignment.to_owned(),
            reason,
        };
        let (name, value) = assignment
            .split_once('=')
            .ok_or_else(|| bad("expected type=inrush_w/steady_w/settle".to_owned()))?;
        let name = name.trim().to_ascii_lowercase();
        let slot = match name.as_str() {
            "compute" => &mut self.compute,
            "nvswitch" => &mut self.nvswitch,
            "powershelf" => &mut self.powershelf,
            other => {
                return Err(bad(format!(
                    "unknown component type {other:?}; known: {}",
                    Self::NAMES.join(", ")
                )));
            }
        };
        let parts: Vec<&str> = value.split('/').map(str::trim).collect();
        let [inrush, steady, settle] = parts.as_slice() else {
            return Err(bad(
                "expected three parts, inrush_w/steady_w/settle, e.g. 9000/5400/2s".to_owned(),
            ));
        };
        let watts = |field: &str, text: &str| -> Result<f64, ConfigError> {
            match text.parse::<f64>() {
                Ok(w) if w.is_finite() && w >= 0.0 => Ok(w),
                _ => Err(bad(format!(
                    "{field} must be a non-negative number of watts, got {text:?}"
                ))),
            }
        };
        let inrush_w = watts("inrush_w", inrush)?;
        let steady_w = watts("steady_w", steady)?;
        if inrush_w < steady_w {
            return Err(bad(format!(
                "inrush_w ({inrush_w}) must not be below steady_w ({steady_w})"
            )));
        }
        let settle = parse_duration(settle).map_err(|e| bad(format!("settle: {e}")))?;
        *slot = Draw {
            inrush_w,
            steady_w,
            settle,
        };
        Ok(())
    }
}

/// Parses `250ms`, `5s`, `1.5s` or `2m`.
///
/// # Errors
///
/// A message saying what is wrong.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{text:?} has no unit (ms, s or m)"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{number:?} is not a number"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        other => return Err(format!("unknown unit {other:?} (ms, s or m)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

/// A setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The time scale is not a positive finite number.
    #[error("time scale must be a positive finite number, got {0}")]
    TimeScale(f64),
    /// Too few or too many racks.
    #[error("racks must be between 1 and {MAX_RACKS}, got {0}")]
    Racks(usize),
    /// The rack numbers run outside 1..=MAX_RACKS.
    #[error("racks {first}..{} run outside 1..={MAX_RACKS}", first + racks - 1)]
    FirstRack {
        /// `--first-rack`.
        first: usize,
        /// `--racks`.
        racks: usize,
    },
    /// A rack would have no component at all.
    #[error("a rack needs at least one component")]
    NoComponents,
    /// Trays but no power shelf: the trays (and their BMCs) draw their
    /// power from the rack's shelves and could never come up.
    #[error(
        "--powershelf 0 with trays: trays draw their power from the rack's power shelves and could never come up; give at least one shelf"
    )]
    TraysWithoutShelves,
    /// The BMC user is empty.
    #[error("the BMC user must not be empty")]
    EmptyUser,
    /// Consecutive BMC ports would run past 65535.
    #[error("{needed} BMC ports from {base} run past 65535")]
    PortRange {
        /// `--bmc-base-port`.
        base: u16,
        /// BMCs that need a port.
        needed: usize,
    },
    /// `--initial-power` is neither `on` nor `off`.
    #[error("initial power must be `on` or `off`, got {0:?}")]
    InitialPower(String),
    /// A `--draw` override is malformed.
    #[error("bad draw {input:?}: {reason}")]
    Draw {
        /// The flag's value.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A `--timing` override is malformed.
    #[error("bad timing {input:?}: {reason}")]
    Timing {
        /// The flag's value.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("5h").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn timing_overrides_name_their_slot() {
        let mut t = Timings::default();
        t.apply("bmc_boot=500ms").expect("known timing");
        assert_eq!(t.bmc_boot, Duration::from_millis(500));
        let err = t.apply("warp=1s").expect_err("unknown timing");
        assert!(err.to_string().contains("unknown timing \"warp\""), "{err}");
        assert!(t.apply("bmc_boot").is_err());
    }

    #[test]
    fn draw_overrides_name_what_is_wrong() {
        let mut d = Draws::default();
        assert_eq!(d.compute, Draw::COMPUTE);
        d.apply("Compute=10000/6000/1.5s").expect("valid override");
        assert_eq!(
            d.compute,
            Draw {
                inrush_w: 10_000.0,
                steady_w: 6_000.0,
                settle: Duration::from_millis(1500)
            }
        );
        assert_eq!(d.nvswitch, Draw::NVSWITCH, "other types untouched");
        for (input, names) in [
            ("gpu=1/1/1s", "unknown component type \"gpu\""),
            ("compute=1/1", "three parts"),
            ("compute=-1/0/1s", "inrush_w must be a non-negative"),
            ("compute=1/x/1s", "steady_w must be a non-negative"),
            (
                "compute=100/200/1s",
                "inrush_w (100) must not be below steady_w (200)",
            ),
            ("compute=200/100/1", "settle:"),
            ("compute", "expected type="),
        ] {
            let err = d.apply(input).expect_err(input).to_string();
            assert!(err.contains(names), "{input}: {err}");
        }
    }

    #[test]
    fn defaults_validate_and_bad_values_do_not() {
        SimConfig::default().validate().expect("defaults are valid");
        let bad = SimConfig {
            time_scale: 0.0,
            ..SimConfig::default()
        };
        assert!(matches!(bad.validate(), Err(ConfigError::TimeScale(_))));
        let bad = SimConfig {
            bmc_base_port: 65530,
            ..SimConfig::default()
        };
        assert!(matches!(bad.validate(), Err(ConfigError::PortRange { .. })));
        // Trays with no shelf to power them are refused; shelves alone are
        // a valid rack.
        let bad = SimConfig {
            powershelf: 0,
            ..SimConfig::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(ConfigError::TraysWithoutShelves)
        ));
        let shelves_only = SimConfig {
            compute: 0,
            nvswitch: 0,
            ..SimConfig::default()
        };
        shelves_only.validate().expect("shelves alone");
    }
}
