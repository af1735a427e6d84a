//! A rack: its components and the physics that ties them together.
//!
//! Time only moves in [`Rack::advance`]: every due step (power steps, BMC
//! boots, task decisions, lifecycle phases) is applied in time order, so a
//! read at any instant sees exactly what the timeline says, whether or not
//! the background driver has run yet.
//!
//! Physics: a rack is *powered* while at least one shelf is `On` (or still
//! `PoweringOff`: its outputs stay up until it reaches `Off`). When power is
//! lost every tray host goes `Off` at once, its BMC goes down, and running
//! update tasks end in `Exception` ("power lost"). When power returns the
//! tray BMCs boot for `bmc_boot`; hosts stay `Off`.

use tokio::time::Instant;

use super::component::{BmcStatus, CommandKind, Component};
use super::firmware::UpdateTask;
use super::kind::{ComponentKind, PowerResource};
use super::lifecycle::DecommissionStart;
use super::power::{PowerDomain, PowerState, ResetRefused, ResetType};
use crate::config::{InitialPower, SimConfig, Timings};
use crate::faults::Faults;

/// What the rack needs from outside to move in time.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    /// Scaled timings.
    pub timings: &'a Timings,
    /// Installed faults.
    pub faults: &'a Faults,
}

/// The result of an accepted reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetOutcome {
    /// The transition started.
    Started,
    /// A `stuck_power` fault swallowed it.
    Stuck,
}

/// Why an update cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateRefused {
    /// A running task already updates this member.
    #[error("an update of {member} is already in progress (task {task})")]
    Busy {
        /// The member.
        member: &'static str,
        /// The running task.
        task: u32,
    },
}

#[derive(Debug, Clone, Copy)]
enum Due {
    Power(usize),
    Boot(usize),
    Task(usize, usize),
    Lifecycle(usize),
}

/// A change a BMC announces on its event stream (drained by the world
/// after each advance, `services/rack-sim/src/world.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A component reached a steady power state (`On` or `Off`).
    Power {
        /// Its index in the rack.
        component: usize,
        /// The state reached.
        state: PowerState,
    },
    /// A component's update task ended.
    TaskEnded {
        /// Its index in the rack.
        component: usize,
        /// The task's id.
        task: u32,
        /// Completed (`true`) or failed.
        completed: bool,
    },
}

/// A moment of a component's power draw (drained by the world after each
/// advance or command, `services/rack-sim/src/world.rs`, and kept by the
/// power domains, `services/rack-sim/src/domains.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerNote {
    /// The power-on instant: the component starts drawing its inrush (it
    /// entered `PoweringOn`: an `On`, or the "on" half of a restart or
    /// power cycle).
    On {
        /// Its index in the rack.
        component: usize,
        /// When.
        at: Instant,
    },
    /// The component stopped drawing (it reached `Off`, or lost power).
    Off {
        /// Its index in the rack.
        component: usize,
        /// When.
        at: Instant,
    },
    /// A power-on or reset command (`On`, `ForceOn`, `GracefulRestart`,
    /// `ForceRestart`, `PowerCycle`) was accepted, a `stuck_power` fault's
    /// swallowed ones included.
    Command {
        /// Its index in the rack.
        component: usize,
        /// When it was received.
        at: Instant,
    },
}

/// What a power state change means for the draw: entering `PoweringOn` is
/// a power-on instant, entering `Off` ends the draw.
fn note_of(
    component: usize,
    before: PowerState,
    after: PowerState,
    at: Instant,
) -> Option<PowerNote> {
    match after {
        PowerState::PoweringOn if before != PowerState::PoweringOn => {
            Some(PowerNote::On { component, at })
        }
        PowerState::Off if before != PowerState::Off => Some(PowerNote::Off { component, at }),
        _ => None,
    }
}

/// One simulated rack.
#[derive(Debug, Clone)]
pub struct Rack {
    /// Its name, e.g. `rack-01`.
    pub name: String,
    /// Shelves, then switch trays, then compute trays.
    pub components: Vec<Component>,
    powered: bool,
    /// Changes since the last [`Rack::take_changes`], in time order.
    changes: Vec<Change>,
    /// Power notes since the last [`Rack::take_power_notes`], in time order.
    notes: Vec<PowerNote>,
}

impl Rack {
    /// A rack in its initial state.
    pub fn new(name: String, config: &SimConfig, now: Instant) -> Self {
        let powered = config.initial_power == InitialPower::On && config.powershelf > 0;
        let (power, bmc) = if powered {
            (PowerState::On, BmcStatus::Up)
        } else {
            (PowerState::Off, BmcStatus::Down)
        };
        let mut components = Vec::with_capacity(config.components_per_rack());
        for kind in ComponentKind::ALL {
            let count = match kind {
                ComponentKind::PowerShelf => config.powershelf,
                ComponentKind::NvSwitch => config.nvswitch,
                ComponentKind::Compute => config.compute,
            };
            let bmc = if kind.needs_shelf_power() {
                bmc
            } else {
                BmcStatus::Up
            };
            for slot in 1..=count {
                let slot = u32::try_from(slot).unwrap_or(u32::MAX);
                components.push(Component::new(&name, kind, slot, power, bmc, now));
            }
        }
        Rack {
            name,
            components,
            powered,
            changes: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// The power notes since the last call, for the power domains.
    pub fn take_power_notes(&mut self) -> Vec<PowerNote> {
        std::mem::take(&mut self.notes)
    }

    fn note(&mut self, component: usize, before: PowerState, at: Instant) {
        let after = self.components[component].power.state();
        if let Some(note) = note_of(component, before, after, at) {
            self.notes.push(note);
        }
    }

    /// Whether the shelves deliver power.
    #[cfg(test)]
    pub fn powered(&self) -> bool {
        self.powered
    }

    fn shelf_output(&self) -> bool {
        self.components.iter().any(|c| {
            c.kind == ComponentKind::PowerShelf
                && matches!(c.power.state(), PowerState::On | PowerState::PoweringOff)
        })
    }

    /// The changes since the last call, for the BMCs' event streams.
    pub fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.changes)
    }

    /// When the next step of any component is due.
    pub fn next_event(&self) -> Option<Instant> {
        self.earliest().map(|(at, _)| at)
    }

    fn earliest(&self) -> Option<(Instant, Due)> {
        let mut best: Option<(Instant, Due)> = None;
        let mut consider = |at: Option<Instant>, due: Due| {
            if let Some(at) = at
                && best.is_none_or(|(b, _)| at < b)
            {
                best = Some((at, due));
            }
        };
        for (i, c) in self.components.iter().enumerate() {
            consider(c.power.next_step(), Due::Power(i));
            if let BmcStatus::Booting { until } = c.bmc {
                consider(Some(until), Due::Boot(i));
            }
            for (j, t) in c.tasks.iter().enumerate() {
                consider(t.next_event(), Due::Task(i, j));
            }
            consider(c.lifecycle.next_change(), Due::Lifecycle(i));
        }
        best
    }

    /// Applies everything due up to `now`, in time order.
    pub fn advance(&mut self, now: Instant, ctx: Ctx<'_>) {
        for c in &mut self.components {
            if c.lifecycle.is_stalled() && !ctx.faults.decommission_stalls(&self.name, &c.name) {
                c.lifecycle.resume(now);
            }
        }
        while let Some((at, due)) = self.earliest() {
            if at > now {
                break;
            }
            self.apply(at, due, ctx);
        }
    }

    fn apply(&mut self, at: Instant, due: Due, ctx: Ctx<'_>) {
        match due {
            Due::Power(i) => {
                let before = self.components[i].power.state();
                let reached = self.components[i].power.take_step();
                self.note(i, before, at);
                if let Some(state @ (PowerState::On | PowerState::Off)) = reached {
                    self.changes.push(Change::Power {
                        component: i,
                        state,
                    });
                }
                self.settle_power(at, ctx);
            }
            Due::Boot(i) => {
                let c = &mut self.components[i];
                c.bmc = BmcStatus::Up;
                tracing::info!(rack = %self.name, component = %c.name, "BMC booted");
            }
            Due::Task(i, j) => {
                let c = &mut self.components[i];
                let failure = ctx.faults.firmware_failure(&self.name, &c.name);
                let task = &mut c.tasks[j];
                let completed = task.apply_event(at, failure);
                if completed {
                    let (targets, version) = (task.targets.clone(), task.version.clone());
                    for target in targets {
                        c.firmware.install(target, &version);
                    }
                    tracing::info!(rack = %self.name, component = %c.name, version, "firmware update completed");
                }
                let task = &c.tasks[j];
                if completed || !task.is_running() {
                    self.changes.push(Change::TaskEnded {
                        component: i,
                        task: task.id,
                        completed,
                    });
                }
            }
            Due::Lifecycle(i) => {
                let c = &mut self.components[i];
                let stall = ctx.faults.decommission_stalls(&self.name, &c.name);
                c.lifecycle
                    .advance(at, ctx.timings.decommission_phase, stall);
            }
        }
    }

    /// Applies a change of shelf output to the trays.
    fn settle_power(&mut self, at: Instant, ctx: Ctx<'_>) {
        let powered = self.shelf_output();
        if powered == self.powered {
            return;
        }
        self.powered = powered;
        tracing::info!(rack = %self.name, powered, "rack power changed");
        for (i, c) in self
            .components
            .iter_mut()
            .enumerate()
            .filter(|(_, c)| c.kind.needs_shelf_power())
        {
            if powered {
                c.bmc = if ctx.timings.bmc_boot.is_zero() {
                    BmcStatus::Up
                } else {
                    BmcStatus::Booting {
                        until: at + ctx.timings.bmc_boot,
                    }
                };
            } else {
                c.bmc = BmcStatus::Down;
                let before = c.power.state();
                c.power.force(PowerState::Off);
                if let Some(note) = note_of(i, before, PowerState::Off, at) {
                    self.notes.push(note);
                }
                for task in c.tasks.iter_mut().filter(|t| t.is_running()) {
                    task.fail(at, "power lost".to_owned());
                }
            }
        }
    }

    /// The domain a component's reset acts on.
    fn domain(kind: ComponentKind) -> PowerDomain {
        match kind.profile().power_resource {
            PowerResource::System => PowerDomain::Host,
            PowerResource::Chassis => PowerDomain::Shelf,
        }
    }

    /// Carries out an (allowed) reset of component `i` at `now`.
    ///
    /// # Errors
    ///
    /// [`ResetRefused`] when the state rules forbid it.
    pub fn reset(
        &mut self,
        i: usize,
        reset: ResetType,
        now: Instant,
        ctx: Ctx<'_>,
    ) -> Result<ResetOutcome, ResetRefused> {
        let rack = self.name.as_str();
        let c = &mut self.components[i];
        let powers_on = !matches!(reset, ResetType::GracefulShutdown | ResetType::ForceOff);
        if ctx.faults.stuck_power(rack, &c.name).is_some() {
            c.record(now, CommandKind::Reset, reset.as_str());
            if powers_on {
                self.notes.push(PowerNote::Command {
                    component: i,
                    at: now,
                });
            }
            return Ok(ResetOutcome::Stuck);
        }
        c.power.check(reset)?;
        let before = c.power.state();
        c.power.start(reset, Self::domain(c.kind), now, ctx.timings);
        c.record(now, CommandKind::Reset, reset.as_str());
        if powers_on {
            self.notes.push(PowerNote::Command {
                component: i,
                at: now,
            });
        }
        self.note(i, before, now);
        self.settle_power(now, ctx);
        Ok(ResetOutcome::Started)
    }

    /// A breaker trip at `now`: every shelf loses power at once (so every
    /// tray host goes `Off` and its BMC down, as when the shelves are
    /// turned off), whatever it was doing; each component that was not
    /// `Off` announces `Off`. Shelf BMCs keep their standby power.
    pub fn trip(&mut self, now: Instant, ctx: Ctx<'_>) {
        let before: Vec<PowerState> = self.components.iter().map(|c| c.power.state()).collect();
        for (i, was) in before.iter().enumerate() {
            if self.components[i].kind == ComponentKind::PowerShelf {
                self.components[i].power.force(PowerState::Off);
                self.note(i, *was, now);
            }
        }
        self.settle_power(now, ctx);
        for (i, was) in before.into_iter().enumerate() {
            if was != PowerState::Off {
                self.changes.push(Change::Power {
                    component: i,
                    state: PowerState::Off,
                });
            }
        }
        tracing::warn!(rack = %self.name, "breaker trip: every component lost power");
    }

    /// Starts an update of `targets` on component `i`; returns the task id.
    ///
    /// # Errors
    ///
    /// [`UpdateRefused::Busy`] when a running task updates one of them.
    #[allow(clippy::too_many_arguments)]
    pub fn start_update(
        &mut self,
        i: usize,
        image_uri: &str,
        version: String,
        targets: Vec<&'static str>,
        fetched: Option<Result<crate::origin::Fetched, String>>,
        now: Instant,
        ctx: Ctx<'_>,
    ) -> Result<u32, UpdateRefused> {
        let c = &mut self.components[i];
        for task in c.tasks.iter().filter(|t| t.is_running()) {
            if let Some(member) = task.targets.iter().find(|m| targets.contains(m)) {
                return Err(UpdateRefused::Busy {
                    member,
                    task: task.id,
                });
            }
        }
        let duration = ctx.timings.firmware_update;
        let id = c.add_task(|id| {
            UpdateTask::new(id, image_uri.to_owned(), version, targets, now, duration)
        });
        match fetched {
            None => c.record(now, CommandKind::Update, image_uri),
            Some(Ok(f)) => c.record_update(now, image_uri, f),
            Some(Err(message)) => {
                c.record(now, CommandKind::Update, image_uri);
                if let Some(task) = c.tasks.iter_mut().find(|t| t.id == id) {
                    task.fail(now, message);
                }
            }
        }
        Ok(id)
    }

    /// Starts decommissioning component `i` unless already under way.
    pub fn decommission(&mut self, i: usize, now: Instant, ctx: Ctx<'_>) -> DecommissionStart {
        let c = &mut self.components[i];
        let start = c
            .lifecycle
            .decommission(now, ctx.timings.decommission_phase);
        if start == DecommissionStart::Started {
            c.record(now, CommandKind::Decommission, "decommission");
        }
        start
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::faults::{FaultKind, FaultSpec};
    use crate::model::TaskState;

    fn config(power: InitialPower) -> SimConfig {
        SimConfig {
            compute: 2,
            nvswitch: 1,
            powershelf: 2,
            initial_power: power,
            ..SimConfig::default()
        }
    }

    #[test]
    fn components_come_in_inventory_order() {
        let rack = Rack::new("rack-01".into(), &config(InitialPower::Off), Instant::now());
        let names: Vec<_> = rack.components.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "powershelf-01",
                "powershelf-02",
                "nvswitch-01",
                "compute-01",
                "compute-02"
            ]
        );
        assert!(!rack.powered());
        assert!(rack.components[0].bmc_up());
        assert!(!rack.components[2].bmc_up());
    }

    #[test]
    fn shelf_power_boots_trays_and_losing_it_stops_them() {
        let t = Timings::default();
        let faults = Faults::default();
        let ctx = Ctx {
            timings: &t,
            faults: &faults,
        };
        let t0 = Instant::now();
        let mut rack = Rack::new("r".into(), &config(InitialPower::Off), t0);
        rack.reset(0, ResetType::On, t0, ctx).expect("shelf on");
        rack.advance(t0 + t.shelf_on, ctx);
        assert!(rack.powered());
        assert!(!rack.components[3].bmc_up());
        rack.advance(t0 + t.shelf_on + t.bmc_boot, ctx);
        assert!(rack.components[3].bmc_up());
        let t1 = t0 + t.shelf_on + t.bmc_boot;
        rack.reset(3, ResetType::On, t1, ctx).expect("host on");
        let task = rack
            .start_update(
                4,
                "http://i/bmc-1.0.bin",
                "1.0".into(),
                vec!["FW_BMC_0"],
                Some(Ok(crate::origin::Fetched {
                    digest: crate::origin::sha256(b"bmc-1.0"),
                    bytes: 7,
                })),
                t1,
                ctx,
            )
            .expect("update");
        rack.reset(0, ResetType::ForceOff, t1, ctx)
            .expect("shelf off");
        rack.advance(t1 + t.shelf_off, ctx);
        assert!(!rack.powered());
        let host = &rack.components[3];
        assert_eq!(host.power.state(), PowerState::Off);
        assert!(!host.power.in_transition());
        assert!(!host.bmc_up());
        let view = rack.components[4]
            .task(task)
            .expect("task")
            .view(t1 + t.shelf_off);
        assert_eq!(view.state, TaskState::Exception);
        assert_eq!(view.failure, Some("power lost"));
        assert_eq!(rack.components[0].commands.len(), 2);
    }

    #[test]
    fn power_notes_mark_each_power_on_instant_and_a_trip_cuts_everything() {
        let t = Timings::default();
        let faults = Faults::default();
        let ctx = Ctx {
            timings: &t,
            faults: &faults,
        };
        let t0 = Instant::now();
        let mut rack = Rack::new("r".into(), &config(InitialPower::On), t0);
        // A forced restart: drawing through PoweringOff, a new power-on
        // instant when the "on" half starts.
        rack.reset(3, ResetType::ForceRestart, t0, ctx)
            .expect("restart");
        assert_eq!(
            rack.take_power_notes(),
            vec![PowerNote::Command {
                component: 3,
                at: t0
            }]
        );
        rack.advance(t0 + t.force_restart + t.power_on, ctx);
        assert_eq!(
            rack.take_power_notes(),
            vec![PowerNote::On {
                component: 3,
                at: t0 + t.force_restart
            }]
        );
        // A power cycle: off at once, on after power_cycle.
        let t1 = t0 + t.force_restart + t.power_on;
        rack.reset(4, ResetType::PowerCycle, t1, ctx)
            .expect("cycle");
        rack.advance(t1 + t.power_cycle, ctx);
        assert_eq!(
            rack.take_power_notes(),
            vec![
                PowerNote::Command {
                    component: 4,
                    at: t1
                },
                PowerNote::Off {
                    component: 4,
                    at: t1
                },
                PowerNote::On {
                    component: 4,
                    at: t1 + t.power_cycle
                },
            ]
        );
        // An off is no power-on command.
        let t2 = t1 + t.power_cycle + t.power_on;
        rack.advance(t2, ctx);
        rack.reset(2, ResetType::ForceOff, t2, ctx).expect("off");
        rack.advance(t2 + t.force_off, ctx);
        assert_eq!(
            rack.take_power_notes(),
            vec![PowerNote::Off {
                component: 2,
                at: t2 + t.force_off
            }]
        );
        rack.take_changes();
        // A trip: every shelf and every tray host off, each announced.
        let t3 = t2 + t.force_off;
        rack.trip(t3, ctx);
        assert!(!rack.powered());
        assert!(
            rack.components
                .iter()
                .all(|c| c.power.state() == PowerState::Off && !c.power.in_transition())
        );
        assert!(!rack.components[3].bmc_up());
        assert!(rack.components[0].bmc_up(), "shelf BMCs keep standby power");
        let offs: Vec<usize> = rack
            .take_power_notes()
            .into_iter()
            .map(|n| match n {
                PowerNote::Off { component, at } if at == t3 => component,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(offs, vec![0, 1, 3, 4], "the switch tray was off already");
        let announced: Vec<usize> = rack
            .take_changes()
            .into_iter()
            .filter_map(|c| match c {
                Change::Power {
                    component,
                    state: PowerState::Off,
                } => Some(component),
                _ => None,
            })
            .collect();
        assert_eq!(announced, vec![0, 1, 3, 4]);
    }

    #[test]
    fn a_stall_fault_holds_wiping_until_removed() {
        let t = Timings::default();
        let faults = Faults::default();
        let ctx = Ctx {
            timings: &t,
            faults: &faults,
        };
        let t0 = Instant::now();
        let mut rack = Rack::new("r".into(), &config(InitialPower::On), t0);
        let stall = faults
            .add(FaultSpec {
                target: "r/compute-01".into(),
                kind: FaultKind::DecommissionStalls {},
            })
            .expect("fault");
        assert_eq!(rack.decommission(3, t0, ctx), DecommissionStart::Started);
        let late = t0 + Duration::from_secs(3600);
        rack.advance(late, ctx);
        assert_eq!(
            rack.components[3].lifecycle.state().to_string(),
            "Decommissioning/Wiping"
        );
        faults.remove(stall.id).expect("remove");
        rack.advance(late, ctx);
        assert_eq!(
            rack.components[3].lifecycle.state().to_string(),
            "Decommissioning/Releasing"
        );
        rack.advance(late + t.decommission_phase, ctx);
        assert_eq!(
            rack.components[3].lifecycle.state().to_string(),
            "Decommissioned"
        );
    }
}
