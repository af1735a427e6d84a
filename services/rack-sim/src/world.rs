//! The simulator's shared state: every rack behind its own lock, the fault
//! store, the BMC directory (names, URLs, reachability switches) and the
//! wake-up signal of the background driver with a changed-mark per rack.
//!
//! Every access advances the rack to "now" first, so what is read is always
//! what the timeline says. Lock order: one rack, then the fault store.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::{Notify, broadcast, watch};
use tokio::time::Instant;

use crate::clock::Clock;
use crate::config::{SimConfig, Timings};
use crate::domains::{Book, DomainError, DomainReport, Domains, PowerReport};
use crate::faults::Faults;
use crate::model::{Component, ComponentKind, Condition, ConditionKind, Ctx, PowerState, Rack};
use crate::sync::lock;
use crate::vendor::{Ids, VendorProfile};

/// Where a component sits: rack index and component index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ComponentRef {
    /// Index of the rack.
    pub(crate) rack: usize,
    /// Index of the component in its rack.
    pub(crate) component: usize,
}

/// The BMC is down (no shelf power, booting, or an `unreachable` fault);
/// its listener is about to close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BmcDown;

/// One component at one instant, as a BMC reports it.
pub(crate) struct ComponentView<'a> {
    /// The component.
    pub(crate) component: &'a Component,
    /// Its power state as its BMC reports it (a `stuck_power` fault wins).
    pub(crate) power: PowerState,
    /// Its BMC's UUID.
    pub(crate) uuid: &'a str,
    /// How its BMC presents itself.
    pub(crate) vendor: VendorProfile,
    /// The resource ids its BMC serves.
    pub(crate) ids: Ids,
    /// The instant of the request.
    pub(crate) now: Instant,
    /// What it draws now, W (the draw model: `services/rack-sim/src/domains.rs`).
    pub(crate) watts: f64,
    /// What its whole rack draws now, W.
    pub(crate) rack_watts: f64,
    /// How many of its rack's power shelves are on now.
    pub(crate) shelves_on: u32,
    /// For timestamps.
    pub(crate) clock: &'a Clock,
}

/// A BMC's fixed identity and its listener switch.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// Component name.
    pub(crate) name: String,
    /// Component kind.
    pub(crate) kind: ComponentKind,
    /// 1-based index within its kind.
    pub(crate) slot: u32,
    /// Serial number.
    pub(crate) serial: String,
    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub(crate) url: String,
    /// Service root and system UUID.
    pub(crate) uuid: String,
    /// Its vendor profile (`--profile`).
    pub(crate) vendor: VendorProfile,
    /// What its event stream announces (`--events`).
    pub(crate) events: crate::vendor::EventProfile,
    /// Whether its listener should be open.
    pub(crate) reachable: watch::Sender<bool>,
    /// Whether its listener is open: set by the accept loop once the socket
    /// is bound, cleared once it is closed and every connection is dropped.
    pub(crate) listening: watch::Sender<bool>,
}

#[derive(Debug)]
struct RackEntry {
    name: String,
    endpoints: Vec<Endpoint>,
    by_name: HashMap<String, usize>,
}

/// Something a BMC announces on its event stream.
#[derive(Debug, Clone)]
pub(crate) struct RaisedEvent {
    /// Where.
    pub(crate) at: ComponentRef,
    /// What.
    pub(crate) what: Announced,
}

/// What an event announces.
#[derive(Debug, Clone)]
pub(crate) enum Announced {
    /// A condition was raised (its id is the event's).
    Condition(Condition),
    /// A change of the model (`crate::model::Change`), with the event's id
    /// and wall time.
    Change {
        /// The Redfish `EventId`.
        id: u64,
        /// When (wall time).
        when: time::OffsetDateTime,
        /// The change, its component index dropped (it is in `at`).
        change: crate::model::Change,
    },
}

impl RaisedEvent {
    /// The Redfish `EventId`.
    pub(crate) fn id(&self) -> u64 {
        match &self.what {
            Announced::Condition(c) => c.id,
            Announced::Change { id, .. } => *id,
        }
    }
}

/// Events kept for slow SSE readers before they miss some (they then find
/// the condition in the chassis' `Status.Conditions`).
const EVENT_BUFFER: usize = 1024;

/// Why a condition cannot be raised or cleared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConditionError {
    /// No such rack or component.
    #[error("no component {component:?} in rack {rack:?}")]
    Unknown {
        /// The rack named.
        rack: String,
        /// The component named.
        component: String,
    },
}

/// Everything the listeners, the driver and the admin API share.
#[derive(Debug)]
pub(crate) struct World {
    config: SimConfig,
    timings: Timings,
    /// Simulated time.
    pub(crate) clock: Clock,
    racks: Vec<Mutex<Rack>>,
    dirty: Vec<AtomicBool>,
    directory: Vec<RackEntry>,
    rack_index: HashMap<String, usize>,
    /// Installed faults.
    pub(crate) faults: Faults,
    /// Peak concurrent reset requests per rack and kind.
    pub(crate) resets: crate::gauge::ResetGauge,
    /// Redfish requests: total and peak in flight at one BMC.
    pub(crate) requests: crate::gauge::RequestGauge,
    /// Redfish sessions of every BMC.
    pub(crate) sessions: crate::sessions::Sessions,
    /// Open SSE streams of every BMC (its EventService's `Subscriptions`).
    pub(crate) destinations: crate::destinations::Destinations,
    wake: Notify,
    /// Conditions and changes as they happen (the SSE streams of BMCs with
    /// an EventService).
    pub(crate) events: broadcast::Sender<Arc<RaisedEvent>>,
    /// Bumped when an `events_down` fault is installed: every open stream
    /// looks whether it is targeted.
    stream_cuts: watch::Sender<u64>,
    next_condition: AtomicU64,
    /// Power draw per component and the power domains.
    pub(crate) domains: Domains,
    /// Files served as a firmware origin (`src/origin.rs`).
    pub(crate) files: crate::origin::Files,
    /// The BMCs' client for the image URIs of updates.
    pub(crate) fetcher: reqwest::Client,
}

/// Each component's kind and power state (for the book).
fn power_states(rack: &Rack) -> Vec<(ComponentKind, PowerState)> {
    rack.components
        .iter()
        .map(|c| (c.kind, c.power.state()))
        .collect()
}

impl World {
    /// Builds the world; `urls[r][c]` is the base URL of each BMC, in
    /// inventory order. Installs the configured faults.
    pub(crate) fn new(
        config: SimConfig,
        clock: Clock,
        urls: Vec<Vec<String>>,
    ) -> Result<Self, crate::faults::FaultError> {
        let now = Instant::now();
        let timings = clock.scale_timings(&config.timings);
        let mut racks = Vec::new();
        let mut directory = Vec::new();
        let mut serial = 0u64;
        for (r, rack_urls) in urls.into_iter().enumerate() {
            let name = format!("rack-{:02}", r + config.first_rack);
            let rack = Rack::new(name.clone(), &config, now);
            let endpoints: Vec<Endpoint> = rack
                .components
                .iter()
                .zip(rack_urls)
                .map(|(c, url)| {
                    serial += 1;
                    Endpoint {
                        name: c.name.clone(),
                        kind: c.kind,
                        slot: c.slot,
                        serial: c.serial.clone(),
                        url,
                        uuid: format!("f1000000-5140-4000-8000-{serial:012x}"),
                        vendor: crate::vendor::profile_of(&config.profiles, &name, &c.name),
                        events: crate::vendor::event_profile_of(&config.events, &name, &c.name),
                        reachable: watch::Sender::new(false),
                        listening: watch::Sender::new(false),
                    }
                })
                .collect();
            let by_name = endpoints
                .iter()
                .enumerate()
                .map(|(i, e)| (e.name.clone(), i))
                .collect();
            directory.push(RackEntry {
                name,
                endpoints,
                by_name,
            });
            racks.push(rack);
        }
        let mut draws = config.draw;
        for kind in ComponentKind::ALL {
            let slot = match kind {
                ComponentKind::Compute => &mut draws.compute,
                ComponentKind::NvSwitch => &mut draws.nvswitch,
                ComponentKind::PowerShelf => &mut draws.powershelf,
            };
            slot.settle = clock.scale(slot.settle);
        }
        let book = Book::new(draws, &racks.iter().map(power_states).collect::<Vec<_>>());
        let racks: Vec<Mutex<Rack>> = racks.into_iter().map(Mutex::new).collect();
        let rack_index = directory
            .iter()
            .enumerate()
            .map(|(i, r)| (r.name.clone(), i))
            .collect();
        let world = World {
            timings,
            clock,
            dirty: racks.iter().map(|_| AtomicBool::new(true)).collect(),
            racks,
            directory,
            rack_index,
            faults: Faults::default(),
            resets: crate::gauge::ResetGauge::default(),
            requests: crate::gauge::RequestGauge::default(),
            sessions: crate::sessions::Sessions::default(),
            destinations: crate::destinations::Destinations::default(),
            wake: Notify::new(),
            events: broadcast::Sender::new(EVENT_BUFFER),
            stream_cuts: watch::Sender::new(0),
            next_condition: AtomicU64::new(1),
            domains: Domains::new(book),
            files: crate::origin::Files::default(),
            fetcher: crate::origin::client(),
            config,
        };
        for spec in world.config.faults.clone() {
            world.faults.add(spec)?;
        }
        for r in 0..world.racks.len() {
            world.sweep_rack(r, false);
        }
        Ok(world)
    }

    /// The configuration it was started with.
    pub(crate) fn config(&self) -> &SimConfig {
        &self.config
    }

    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            timings: &self.timings,
            faults: &self.faults,
        }
    }

    /// The fixed identity of the BMC at `at`.
    pub(crate) fn endpoint(&self, at: ComponentRef) -> &Endpoint {
        &self.directory[at.rack].endpoints[at.component]
    }

    /// Number of racks.
    pub(crate) fn rack_count(&self) -> usize {
        self.directory.len()
    }

    /// Every component, rack by rack, in inventory order.
    pub(crate) fn all(&self) -> impl Iterator<Item = ComponentRef> + '_ {
        self.directory.iter().enumerate().flat_map(|(rack, entry)| {
            (0..entry.endpoints.len()).map(move |component| ComponentRef { rack, component })
        })
    }

    /// The components of rack `rack`, in inventory order.
    pub(crate) fn rack_components(&self, rack: usize) -> impl Iterator<Item = ComponentRef> + '_ {
        (0..self.directory[rack].endpoints.len())
            .map(move |component| ComponentRef { rack, component })
    }

    /// Rack name of a component.
    pub(crate) fn rack_name(&self, at: ComponentRef) -> &str {
        &self.directory[at.rack].name
    }

    /// Name of rack `rack`.
    pub(crate) fn rack_name_at(&self, rack: usize) -> &str {
        &self.directory[rack].name
    }

    /// Component name.
    pub(crate) fn component_name(&self, at: ComponentRef) -> &str {
        &self.endpoint(at).name
    }

    /// Component kind.
    pub(crate) fn kind(&self, at: ComponentRef) -> ComponentKind {
        self.endpoint(at).kind
    }

    /// The vendor profile of a component's BMC.
    pub(crate) fn vendor(&self, at: ComponentRef) -> VendorProfile {
        self.endpoint(at).vendor
    }

    /// What a component's BMC announces on its event stream now: its
    /// profile, or nothing while a `drop_events` fault targets it.
    pub(crate) fn announces(&self, at: ComponentRef) -> Option<crate::vendor::EventProfile> {
        let e = self.endpoint(at);
        if self.faults.drops_events(self.rack_name(at), &e.name) {
            return None;
        }
        Some(e.events)
    }

    /// The resource ids a component's BMC serves.
    pub(crate) fn ids(&self, at: ComponentRef) -> Ids {
        let e = self.endpoint(at);
        Ids::of(e.kind.profile(), e.vendor, &e.uuid)
    }

    /// BMC base URL.
    pub(crate) fn url(&self, at: ComponentRef) -> &str {
        &self.endpoint(at).url
    }

    /// Finds a component by names.
    pub(crate) fn locate(&self, rack: &str, component: &str) -> Option<ComponentRef> {
        let r = *self.rack_index.get(rack)?;
        let c = *self.directory[r].by_name.get(component)?;
        Some(ComponentRef {
            rack: r,
            component: c,
        })
    }

    /// A switch telling whether the BMC's listener should be open.
    pub(crate) fn reachability(&self, at: ComponentRef) -> watch::Receiver<bool> {
        self.endpoint(at).reachable.subscribe()
    }

    /// Whether the BMC answers: powered and booted, and no `unreachable`
    /// fault (call with the rack advanced).
    fn reachable(&self, at: ComponentRef, component: &Component) -> bool {
        component.bmc_up() && !self.faults.unreachable(self.rack_name(at), &component.name)
    }

    /// A view of `component` (which is the one at `at`) at `now`.
    pub(crate) fn view<'a>(
        &'a self,
        at: ComponentRef,
        component: &'a Component,
        now: Instant,
    ) -> ComponentView<'a> {
        let power = self
            .faults
            .stuck_power(self.rack_name(at), &component.name)
            .unwrap_or_else(|| component.power.state());
        let (watts, rack_watts, shelves_on) = self.domains.with(|book| {
            (
                book.component_watts(at.rack, at.component, now),
                book.rack_watts(at.rack, now),
                u32::try_from(book.shelves_on(at.rack, now)).unwrap_or(u32::MAX),
            )
        });
        ComponentView {
            component,
            power,
            watts,
            rack_watts,
            shelves_on,
            uuid: &self.endpoint(at).uuid,
            vendor: self.endpoint(at).vendor,
            ids: self.ids(at),
            now,
            clock: &self.clock,
        }
    }

    /// Makes every open event stream look at the faults again.
    pub(crate) fn cut_streams(&self) {
        self.stream_cuts.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Changes with every [`World::cut_streams`].
    pub(crate) fn stream_cuts(&self) -> watch::Receiver<u64> {
        self.stream_cuts.subscribe()
    }

    /// Whether an `events_down` fault targets the BMC at `at`.
    pub(crate) fn events_down(&self, at: ComponentRef) -> bool {
        let rack = self.rack_name(at);
        let component = &self.endpoint(at).name;
        self.faults.events_down(rack, component)
    }

    /// Advances rack `r` (locked as `rack`) to `now`, announces what
    /// changed on the event streams (no subscriber is not an error) and
    /// hands its power notes to the power domains.
    fn advance(&self, r: usize, rack: &mut Rack, now: Instant) {
        rack.advance(now, self.ctx());
        self.flush(r, rack, now);
    }

    /// Announces rack `r`'s changes and records its power notes (under
    /// its lock: the domains never see a rack's notes out of order).
    fn flush(&self, r: usize, rack: &mut Rack, now: Instant) {
        let notes = rack.take_power_notes();
        if !notes.is_empty() {
            self.domains.with(|book| book.record(r, &notes));
        }
        let changes = rack.take_changes();
        if changes.is_empty() {
            return;
        }
        let when = self.clock.wall(now);
        for change in changes {
            let component = match change {
                crate::model::Change::Power { component, .. }
                | crate::model::Change::TaskEnded { component, .. } => component,
            };
            let _ = self.events.send(Arc::new(RaisedEvent {
                at: ComponentRef { rack: r, component },
                what: Announced::Change {
                    id: self.next_condition.fetch_add(1, Ordering::Relaxed),
                    when,
                    change,
                },
            }));
        }
    }

    /// Reads one component through its BMC.
    ///
    /// # Errors
    ///
    /// [`BmcDown`] if the BMC is not serving at this instant.
    pub(crate) fn read<R>(
        &self,
        at: ComponentRef,
        f: impl FnOnce(&ComponentView<'_>) -> R,
    ) -> Result<R, BmcDown> {
        let result = {
            let mut rack = lock(&self.racks[at.rack]);
            // Taken under the lock, so a rack's instants never go back.
            let now = Instant::now();
            self.advance(at.rack, &mut rack, now);
            let component = &rack.components[at.component];
            if self.reachable(at, component) {
                Ok(f(&self.view(at, component, now)))
            } else {
                Err(BmcDown)
            }
        };
        self.settle_domains();
        result
    }

    /// Changes a rack through one component's BMC; wakes the driver.
    ///
    /// # Errors
    ///
    /// [`BmcDown`] if the BMC is not serving at this instant.
    pub(crate) fn change<R>(
        &self,
        at: ComponentRef,
        f: impl FnOnce(&mut Rack, usize, Instant, Ctx<'_>) -> R,
    ) -> Result<R, BmcDown> {
        let result = {
            let mut rack = lock(&self.racks[at.rack]);
            let now = Instant::now();
            self.advance(at.rack, &mut rack, now);
            if !self.reachable(at, &rack.components[at.component]) {
                return Err(BmcDown);
            }
            let result = f(&mut rack, at.component, now, self.ctx());
            self.flush(at.rack, &mut rack, now);
            result
        };
        self.mark_dirty(at.rack);
        self.settle_domains();
        Ok(result)
    }

    /// Reads or changes a rack regardless of BMC reachability (lifecycle
    /// and admin APIs); wakes the driver.
    pub(crate) fn with_rack<R>(
        &self,
        rack: usize,
        f: impl FnOnce(&mut Rack, Instant, Ctx<'_>) -> R,
    ) -> R {
        let result = self.locked(rack, f);
        self.settle_domains();
        result
    }

    /// [`World::with_rack`] without evaluating the power domains after.
    fn locked<R>(&self, rack: usize, f: impl FnOnce(&mut Rack, Instant, Ctx<'_>) -> R) -> R {
        let result = {
            let mut guard = lock(&self.racks[rack]);
            let now = Instant::now();
            self.advance(rack, &mut guard, now);
            let result = f(&mut guard, now, self.ctx());
            self.flush(rack, &mut guard, now);
            result
        };
        self.mark_dirty(rack);
        result
    }

    /// Evaluates the power domains' waiting instants (cheap when none
    /// waits): see [`World::evaluate_domains`].
    fn settle_domains(&self) {
        if self.domains.maybe_pending() {
            self.evaluate_domains(false);
        }
    }

    /// Advances every rack of the domains with waiting instants (`all`:
    /// of every domain) to now, so every power note up to `start` is in the
    /// book, then evaluates the instants up to `start` and applies the
    /// trips found (every rack of a tripped domain loses power), until an
    /// evaluation finds no trip. Returns `start` of the last round: every
    /// domain is evaluated up to it.
    fn evaluate_domains(&self, all: bool) -> Instant {
        loop {
            let start = Instant::now();
            let (names, racks) = self.domains.with(|book| {
                if all {
                    (book.names(), book.domain_racks())
                } else {
                    book.pending_domains()
                }
            });
            for &r in &racks {
                let mut guard = lock(&self.racks[r]);
                let now = Instant::now();
                self.advance(r, &mut guard, now);
            }
            let orders = self.domains.with(|book| book.evaluate(&names, start));
            if orders.is_empty() {
                return start;
            }
            for order in orders {
                for &r in &order.racks {
                    self.locked(r, |rack, now, ctx| rack.trip(now, ctx));
                }
                let applied = Instant::now();
                tracing::warn!(domain = %order.domain, racks = order.racks.len(), "breaker trip applied: the domain's racks lost power");
                self.domains
                    .with(|book| book.trip_applied(&order.domain, applied));
            }
            // Another round evaluates the shelves the trips turned off.
        }
    }

    /// Creates or replaces the power domain `name` over `racks` (names),
    /// with an optional breaker limit in kW; its records start now.
    ///
    /// # Errors
    ///
    /// [`DomainError`] naming the bad field or the unknown rack.
    pub(crate) fn set_domain(
        &self,
        name: &str,
        racks: &[String],
        breaker_kw: Option<f64>,
    ) -> Result<DomainReport, DomainError> {
        if name.is_empty() || name.len() > 128 || name.chars().any(char::is_control) {
            return Err(DomainError::Invalid {
                field: "name",
                reason: format!("{name:?} must be 1 to 128 printable characters"),
            });
        }
        if racks.is_empty() {
            return Err(DomainError::Invalid {
                field: "racks",
                reason: "must name at least one rack".to_owned(),
            });
        }
        if let Some(kw) = breaker_kw
            && !(kw.is_finite() && kw > 0.0)
        {
            return Err(DomainError::Invalid {
                field: "breaker_kw",
                reason: format!("must be a positive number of kW or null, got {kw}"),
            });
        }
        let mut indices = Vec::with_capacity(racks.len());
        for rack in racks {
            let r = *self
                .rack_index
                .get(rack)
                .ok_or_else(|| DomainError::UnknownRack(rack.clone()))?;
            if indices.contains(&r) {
                return Err(DomainError::Invalid {
                    field: "racks",
                    reason: format!("names {rack:?} twice"),
                });
            }
            indices.push(r);
        }
        // Evaluate what waits under the old definition first.
        self.evaluate_domains(true);
        let now = Instant::now();
        for &r in &indices {
            let mut guard = lock(&self.racks[r]);
            let at = Instant::now();
            self.advance(r, &mut guard, at);
        }
        self.domains.with(|book| {
            book.upsert(
                name.to_owned(),
                indices,
                breaker_kw.map(|kw| kw * 1000.0),
                now,
            )
        });
        tracing::info!(
            domain = name,
            racks = racks.len(),
            breaker_kw,
            "power domain set"
        );
        self.power_report()
            .domains
            .into_iter()
            .find(|d| d.name == name)
            .ok_or_else(|| DomainError::UnknownDomain(name.to_owned()))
    }

    /// Removes the power domain `name`.
    ///
    /// # Errors
    ///
    /// [`DomainError::UnknownDomain`] if there is none of that name.
    pub(crate) fn remove_domain(&self, name: &str) -> Result<(), DomainError> {
        if self.domains.with(|book| book.remove(name)) {
            tracing::info!(domain = name, "power domain removed");
            Ok(())
        } else {
            Err(DomainError::UnknownDomain(name.to_owned()))
        }
    }

    /// Every power domain as of now, every instant up to now evaluated.
    pub(crate) fn power_report(&self) -> PowerReport {
        let at = self.evaluate_domains(true);
        let names = |r: usize, c: Option<usize>| match c {
            None => self.rack_name_at(r).to_owned(),
            Some(c) => self.directory[r].endpoints[c].name.clone(),
        };
        PowerReport {
            domains: self
                .domains
                .with(|book| book.report(at, &self.clock, &names)),
        }
    }

    /// Waits until every BMC listener is as its switch says (open or
    /// closed, its connections dropped), for at most `within`; `false` if
    /// some listener had not caught up by then. The admin API answers a
    /// fault change only after this, so a client that installs
    /// `unreachable` and then calls the BMC finds it gone, not mid-close.
    pub(crate) async fn listeners_settled(&self, within: std::time::Duration) -> bool {
        let deadline = Instant::now() + within;
        for endpoint in self.directory.iter().flat_map(|r| &r.endpoints) {
            let want = *endpoint.reachable.borrow();
            let mut listening = endpoint.listening.subscribe();
            let caught_up = listening.wait_for(|open| *open == want);
            if tokio::time::timeout_at(deadline, caught_up).await.is_err() {
                tracing::warn!(bmc = %endpoint.name, want_open = want, "BMC listener did not follow its switch in time");
                return false;
            }
        }
        true
    }

    /// Whether the BMC at `at` serves now (admin view).
    pub(crate) fn reachable_now(&self, at: ComponentRef, rack: &Rack) -> bool {
        self.reachable(at, &rack.components[at.component])
    }

    /// Advances every rack to now and flips listener switches at once
    /// (after a fault change made through the library).
    pub(crate) fn refresh(&self) {
        for r in 0..self.racks.len() {
            self.sweep_rack(r, true);
        }
        self.poke();
    }

    /// Advances rack `r` to now, flips its listener switches, and returns
    /// when its next step is due.
    pub(crate) fn sweep_rack(&self, r: usize, log: bool) -> Option<Instant> {
        let next = self.sweep_locked(r, log);
        self.settle_domains();
        next
    }

    fn sweep_locked(&self, r: usize, log: bool) -> Option<Instant> {
        let mut rack = lock(&self.racks[r]);
        let now = Instant::now();
        self.advance(r, &mut rack, now);
        for (c, component) in rack.components.iter().enumerate() {
            let at = ComponentRef {
                rack: r,
                component: c,
            };
            let up = self.reachable(at, component);
            let changed = self.endpoint(at).reachable.send_if_modified(|open| {
                let changed = *open != up;
                *open = up;
                changed
            });
            if changed && log {
                tracing::info!(rack = %rack.name, component = %component.name, reachable = up, "BMC reachability changed");
            }
        }
        rack.next_event()
    }

    /// Whether rack `r` changed since the last call (and clears the mark).
    pub(crate) fn take_dirty(&self, r: usize) -> bool {
        self.dirty[r].swap(false, Ordering::AcqRel)
    }

    fn mark_dirty(&self, r: usize) {
        self.dirty[r].store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Marks every rack changed and wakes the driver (after a fault change).
    pub(crate) fn poke(&self) {
        for flag in &self.dirty {
            flag.store(true, Ordering::Release);
        }
        self.wake.notify_one();
    }

    /// Resolves when someone poked or changed a rack.
    pub(crate) async fn poked(&self) {
        self.wake.notified().await;
    }

    fn locate_condition(
        &self,
        rack: &str,
        component: &str,
    ) -> Result<ComponentRef, ConditionError> {
        self.locate(rack, component)
            .ok_or_else(|| ConditionError::Unknown {
                rack: rack.to_owned(),
                component: component.to_owned(),
            })
    }

    /// Puts a component in a condition (a second one of a kind it is in
    /// already changes nothing) and publishes it to its BMC's event stream.
    pub(crate) fn raise(
        &self,
        rack: &str,
        component: &str,
        kind: ConditionKind,
    ) -> Result<Condition, ConditionError> {
        let at = self.locate_condition(rack, component)?;
        let (condition, new) = self.with_rack(at.rack, |r, now, _| {
            let c = &mut r.components[at.component];
            if let Some(existing) = c.conditions.iter().find(|x| x.kind == kind) {
                return (existing.clone(), false);
            }
            let wall = self.clock.wall(now);
            // Whole milliseconds: the timestamp is part of the event's
            // identity, so it must read back the same from every resource.
            let since = wall
                .replace_nanosecond(wall.millisecond() as u32 * 1_000_000)
                .unwrap_or(wall);
            let condition = Condition {
                id: self.next_condition.fetch_add(1, Ordering::Relaxed),
                kind,
                since,
            };
            c.conditions.push(condition.clone());
            (condition, true)
        });
        if new {
            tracing::info!(rack, component, kind = ?kind, id = condition.id, "condition raised");
            // No subscriber is not an error: nobody is listening yet.
            let _ = self.events.send(Arc::new(RaisedEvent {
                at,
                what: Announced::Condition(condition.clone()),
            }));
        }
        Ok(condition)
    }

    /// Clears a component's conditions; returns how many there were.
    pub(crate) fn clear_conditions(
        &self,
        rack: &str,
        component: &str,
    ) -> Result<usize, ConditionError> {
        let at = self.locate_condition(rack, component)?;
        let cleared = self.with_rack(at.rack, |r, _, _| {
            std::mem::take(&mut r.components[at.component].conditions).len()
        });
        tracing::info!(rack, component, cleared, "conditions cleared");
        Ok(cleared)
    }

    /// Restores every rack and the configured faults.
    pub(crate) fn reset(&self) {
        let now = Instant::now();
        self.faults.clear();
        self.resets.clear_peaks();
        self.requests.clear_peak();
        for spec in self.config.faults.clone() {
            if let Err(error) = self.faults.add(spec) {
                tracing::warn!(error = %flow_telemetry::ErrorChain(&error), "configured fault no longer installs");
            }
        }
        let mut fresh = Vec::with_capacity(self.racks.len());
        for (r, cell) in self.racks.iter().enumerate() {
            let rack = Rack::new(self.rack_name_at(r).to_owned(), &self.config, now);
            fresh.push(power_states(&rack));
            *lock(cell) = rack;
        }
        self.domains.with(|book| book.reset(&fresh, now));
        tracing::info!("simulator reset to its initial state");
        self.refresh();
    }
}
