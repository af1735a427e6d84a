//! Power domains: named sets of racks (a row, a PDU, a busway) whose total
//! draw the simulator follows, with each domain's peak, its power-on
//! commands, its shelves off and, given a breaker limit, its trips.
//!
//! The model: a component draws nothing while off; at its power-on instant
//! (it enters `PoweringOn`: an `On`, or the "on" half of a restart or power
//! cycle) it draws its type's inrush, falling linearly to its steady draw
//! over its settle time ([`Draw::at`]). Between events every component's
//! draw only falls, so a domain's peak is reached at a power-on instant:
//! the [`Book`] evaluates the domain's total at each one, exactly, and keeps
//! no sampling loop. The racks report their power notes
//! ([`PowerNote`], `services/rack-sim/src/model/rack.rs`) as they advance;
//! an instant is evaluated only once every rack of the domain has been
//! advanced past it (`services/rack-sim/src/world.rs`, `settle_domains`), so
//! a power-on in another rack that came first is always counted.
//!
//! A breaker: when a domain's total at a power-on instant exceeds its
//! `breaker_kw`, a trip is recorded at that instant and every rack of the
//! domain loses power (applied by the world right after the evaluation).
//!
//! Pure bookkeeping: no I/O, no clock of its own.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::clock::Clock;
use crate::config::{Draw, Draws};
use crate::model::{ComponentKind, PowerNote, PowerState};
use crate::sync::lock;

/// Power-on commands kept per domain; older ones are dropped.
pub const MAX_POWER_ONS: usize = 100_000;
/// Trips kept per domain; older ones are dropped.
pub const MAX_TRIPS: usize = 1_000;
/// Power intervals kept per component: enough for the few that can start
/// between an instant and its evaluation (a few milliseconds).
const HISTORY: usize = 8;

/// One stretch of drawing power.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Interval {
    /// The power-on instant; `None`: on since the simulator started (or was
    /// reset), so settled.
    on: Option<Instant>,
    /// When it stopped drawing; `None`: still drawing.
    off: Option<Instant>,
}

/// One component's recent power intervals, oldest first.
#[derive(Debug, Clone, Default)]
struct History {
    intervals: VecDeque<Interval>,
}

impl History {
    fn new(state: PowerState) -> Self {
        let mut h = History::default();
        if state != PowerState::Off {
            h.intervals.push_back(Interval {
                on: None,
                off: None,
            });
        }
        h
    }

    fn on(&mut self, at: Instant) {
        self.off(at);
        if self.intervals.len() >= HISTORY {
            self.intervals.pop_front();
        }
        self.intervals.push_back(Interval {
            on: Some(at),
            off: None,
        });
    }

    fn off(&mut self, at: Instant) {
        if let Some(last) = self.intervals.back_mut()
            && last.off.is_none()
        {
            last.off = Some(at);
        }
    }

    /// The interval drawing at `t`, if any.
    fn drawing_at(&self, t: Instant) -> Option<&Interval> {
        self.intervals
            .iter()
            .rev()
            .find(|i| i.on.is_none_or(|on| on <= t) && i.off.is_none_or(|off| t < off))
    }

    /// Watts drawn at `t`.
    fn watts_at(&self, t: Instant, draw: &Draw) -> f64 {
        match self.drawing_at(t) {
            None => 0.0,
            Some(Interval { on: None, .. }) => draw.steady_w,
            Some(Interval { on: Some(on), .. }) => draw.at(t - *on),
        }
    }
}

/// An instant still to evaluate.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Pending {
    at: Instant,
    what: PendingKind,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum PendingKind {
    /// A power-on of this rack and component: the total and the breaker.
    PowerOn { rack: usize, component: usize },
    /// A shelf went off: the shelves-off count.
    ShelfOff,
}

/// A recorded trip.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Trip {
    at: Instant,
    draw_w: f64,
    rack: usize,
    component: usize,
}

/// A recorded power-on command.
#[derive(Debug, Clone, Copy, PartialEq)]
struct PowerOn {
    rack: usize,
    component: usize,
    at: Instant,
}

/// One domain: its racks, its breaker and what was recorded since it was
/// created (or the simulator reset).
#[derive(Debug, Clone)]
struct Domain {
    /// Rack indices, sorted, no duplicates.
    racks: Vec<usize>,
    breaker_w: Option<f64>,
    peak_w: f64,
    peak_at: Instant,
    trips: VecDeque<Trip>,
    power_ons: VecDeque<PowerOn>,
    shelves_off_peak: usize,
    pending: Vec<Pending>,
    /// A trip was found at this instant and is being applied: further
    /// power-ons are not evaluated until it is.
    tripping: Option<Instant>,
    /// Power-ons up to this instant came after a trip and before it was
    /// applied: not evaluated (the trip cut them).
    ignore_through: Option<Instant>,
}

impl Domain {
    fn contains(&self, rack: usize) -> bool {
        self.racks.binary_search(&rack).is_ok()
    }
}

/// Every component's power history and every domain.
#[derive(Debug)]
pub(crate) struct Book {
    /// Draw per type, settle times already scaled.
    draws: Draws,
    kinds: Vec<Vec<ComponentKind>>,
    history: Vec<Vec<History>>,
    domains: BTreeMap<String, Domain>,
}

/// Racks to lose power after an evaluation found a trip.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TripOrder {
    /// The domain.
    pub(crate) domain: String,
    /// Its racks.
    pub(crate) racks: Vec<usize>,
}

impl Book {
    /// A book of racks whose components have these kinds and power states
    /// (`racks[r][c]`); `draws` with settle times already scaled.
    pub(crate) fn new(draws: Draws, racks: &[Vec<(ComponentKind, PowerState)>]) -> Self {
        Book {
            draws,
            kinds: racks
                .iter()
                .map(|r| r.iter().map(|(k, _)| *k).collect())
                .collect(),
            history: racks
                .iter()
                .map(|r| r.iter().map(|(_, s)| History::new(*s)).collect())
                .collect(),
            domains: BTreeMap::new(),
        }
    }

    /// Starts over from these power states (an admin reset): every
    /// domain's records start again at `now`.
    pub(crate) fn reset(&mut self, racks: &[Vec<(ComponentKind, PowerState)>], now: Instant) {
        self.history = racks
            .iter()
            .map(|r| r.iter().map(|(_, s)| History::new(*s)).collect())
            .collect();
        let domains = std::mem::take(&mut self.domains);
        for (name, d) in domains {
            self.upsert(name, d.racks, d.breaker_w, now);
        }
    }

    /// Records a rack's power notes; `true` when an instant now waits for
    /// evaluation.
    pub(crate) fn record(&mut self, rack: usize, notes: &[PowerNote]) -> bool {
        let mut pending = false;
        for note in notes {
            let (component, at) = match *note {
                PowerNote::On { component, at }
                | PowerNote::Off { component, at }
                | PowerNote::Command { component, at } => (component, at),
            };
            let Some(history) = self
                .history
                .get_mut(rack)
                .and_then(|r| r.get_mut(component))
            else {
                continue;
            };
            let shelf = self.kinds[rack][component] == ComponentKind::PowerShelf;
            match note {
                PowerNote::On { .. } => history.on(at),
                PowerNote::Off { .. } => history.off(at),
                PowerNote::Command { .. } => {}
            }
            for d in self.domains.values_mut().filter(|d| d.contains(rack)) {
                match note {
                    PowerNote::On { .. } => {
                        d.pending.push(Pending {
                            at,
                            what: PendingKind::PowerOn { rack, component },
                        });
                        pending = true;
                    }
                    PowerNote::Off { .. } if shelf => {
                        d.pending.push(Pending {
                            at,
                            what: PendingKind::ShelfOff,
                        });
                        pending = true;
                    }
                    PowerNote::Off { .. } => {}
                    PowerNote::Command { .. } => {
                        if d.power_ons.len() >= MAX_POWER_ONS {
                            d.power_ons.pop_front();
                        }
                        d.power_ons.push_back(PowerOn {
                            rack,
                            component,
                            at,
                        });
                    }
                }
            }
        }
        pending
    }

    /// Whether some domain has an instant to evaluate.
    pub(crate) fn has_pending(&self) -> bool {
        self.domains.values().any(|d| !d.pending.is_empty())
    }

    /// The domains with instants to evaluate, and every rack they hold.
    pub(crate) fn pending_domains(&self) -> (Vec<String>, Vec<usize>) {
        let mut names = Vec::new();
        let mut racks = Vec::new();
        for (name, d) in self.domains.iter().filter(|(_, d)| !d.pending.is_empty()) {
            names.push(name.clone());
            racks.extend_from_slice(&d.racks);
        }
        racks.sort_unstable();
        racks.dedup();
        (names, racks)
    }

    /// Every rack of every domain.
    pub(crate) fn domain_racks(&self) -> Vec<usize> {
        let mut racks: Vec<usize> = self
            .domains
            .values()
            .flat_map(|d| d.racks.iter().copied())
            .collect();
        racks.sort_unstable();
        racks.dedup();
        racks
    }

    /// The total watts drawn by `racks` at `t`.
    fn watts_at(&self, racks: &[usize], t: Instant) -> f64 {
        racks
            .iter()
            .flat_map(|&r| self.history[r].iter().zip(&self.kinds[r]))
            .map(|(h, kind)| h.watts_at(t, &self.draws.of(*kind)))
            .sum()
    }

    /// The watts one component draws at `t`, as its BMC measures it.
    pub(crate) fn component_watts(&self, rack: usize, component: usize, t: Instant) -> f64 {
        match (
            self.history.get(rack).and_then(|h| h.get(component)),
            self.kinds.get(rack).and_then(|k| k.get(component)),
        ) {
            (Some(h), Some(kind)) => h.watts_at(t, &self.draws.of(*kind)),
            _ => 0.0,
        }
    }

    /// The watts all of one rack's components draw at `t`.
    pub(crate) fn rack_watts(&self, rack: usize, t: Instant) -> f64 {
        self.watts_at(&[rack], t)
    }

    /// How many of one rack's shelves draw (are on) at `t`.
    pub(crate) fn shelves_on(&self, rack: usize, t: Instant) -> usize {
        let shelves = self.kinds.get(rack).map_or(0, |k| {
            k.iter()
                .filter(|kind| **kind == ComponentKind::PowerShelf)
                .count()
        });
        shelves - self.shelves_off_at(&[rack], t)
    }

    /// Shelves of `racks` not drawing power at `t`.
    fn shelves_off_at(&self, racks: &[usize], t: Instant) -> usize {
        racks
            .iter()
            .flat_map(|&r| self.history[r].iter().zip(&self.kinds[r]))
            .filter(|(h, kind)| **kind == ComponentKind::PowerShelf && h.drawing_at(t).is_none())
            .count()
    }

    /// Evaluates the instants up to `until` of the domains named (each of
    /// whose racks has been advanced to `until` or later), in time order:
    /// the peak at each power-on instant, the shelves-off count at each
    /// shelf-off instant, and a trip where the total exceeds the breaker.
    /// Returns the trips to apply; later instants stay pending.
    pub(crate) fn evaluate(&mut self, names: &[String], until: Instant) -> Vec<TripOrder> {
        let mut orders = Vec::new();
        for name in names {
            let Some(d) = self.domains.get(name) else {
                continue;
            };
            let (mut due, later): (Vec<Pending>, Vec<Pending>) =
                d.pending.iter().partition(|p| p.at <= until);
            due.sort_by_key(|p| p.at);
            let racks = d.racks.clone();
            let (breaker_w, tripping, ignore_through) = (d.breaker_w, d.tripping, d.ignore_through);
            let mut peak = (d.peak_w, d.peak_at);
            let mut shelves_off_peak = d.shelves_off_peak;
            let mut trip = None;
            let mut i = 0;
            while i < due.len() {
                let t = due[i].at;
                let mut cause = None;
                let mut shelf_off = false;
                while i < due.len() && due[i].at == t {
                    match due[i].what {
                        PendingKind::PowerOn { rack, component } => {
                            cause.get_or_insert((rack, component));
                        }
                        PendingKind::ShelfOff => shelf_off = true,
                    }
                    i += 1;
                }
                if shelf_off {
                    shelves_off_peak = shelves_off_peak.max(self.shelves_off_at(&racks, t));
                }
                let cut = tripping.is_some()
                    || trip.is_some()
                    || ignore_through.is_some_and(|through| t <= through);
                let Some((rack, component)) = cause.filter(|_| !cut) else {
                    continue;
                };
                let total = self.watts_at(&racks, t);
                if total > peak.0 {
                    peak = (total, t);
                }
                if breaker_w.is_some_and(|limit| total > limit) {
                    trip = Some(Trip {
                        at: t,
                        draw_w: total,
                        rack,
                        component,
                    });
                }
            }
            let Some(d) = self.domains.get_mut(name) else {
                continue;
            };
            d.pending = later;
            (d.peak_w, d.peak_at) = peak;
            d.shelves_off_peak = shelves_off_peak;
            if let Some(trip) = trip {
                tracing::warn!(domain = %name, draw_kw = trip.draw_w / 1000.0, breaker_kw = breaker_w.unwrap_or_default() / 1000.0, "power domain over its breaker: trip");
                if d.trips.len() >= MAX_TRIPS {
                    d.trips.pop_front();
                }
                d.trips.push_back(trip);
                d.tripping = Some(trip.at);
                orders.push(TripOrder {
                    domain: name.clone(),
                    racks: d.racks.clone(),
                });
            }
        }
        orders
    }

    /// A trip of `domain` was applied at `at`: power-ons up to then are
    /// not evaluated (the trip cut them).
    pub(crate) fn trip_applied(&mut self, domain: &str, at: Instant) {
        if let Some(d) = self.domains.get_mut(domain) {
            d.tripping = None;
            d.ignore_through = Some(at);
        }
    }

    /// Creates or replaces a domain at `now` (its racks advanced to `now`
    /// or later): its records start afresh, its peak at the draw of `now`.
    pub(crate) fn upsert(
        &mut self,
        name: String,
        mut racks: Vec<usize>,
        breaker_w: Option<f64>,
        now: Instant,
    ) {
        racks.sort_unstable();
        racks.dedup();
        let draw = self.watts_at(&racks, now);
        let shelves_off = self.shelves_off_at(&racks, now);
        self.domains.insert(
            name,
            Domain {
                racks,
                breaker_w,
                peak_w: draw,
                peak_at: now,
                trips: VecDeque::new(),
                power_ons: VecDeque::new(),
                shelves_off_peak: shelves_off,
                pending: Vec::new(),
                tripping: None,
                ignore_through: None,
            },
        );
    }

    /// Removes a domain; `false` if there was none of that name.
    pub(crate) fn remove(&mut self, name: &str) -> bool {
        self.domains.remove(name).is_some()
    }

    /// Every domain's name.
    pub(crate) fn names(&self) -> Vec<String> {
        self.domains.keys().cloned().collect()
    }

    /// Every domain as of `now` (its racks advanced to `now` or later).
    pub(crate) fn report(
        &self,
        now: Instant,
        clock: &Clock,
        names: &dyn Fn(usize, Option<usize>) -> String,
    ) -> Vec<DomainReport> {
        let ms = |at: Instant| epoch_ms(clock, at);
        self.domains
            .iter()
            .map(|(name, d)| DomainReport {
                name: name.clone(),
                racks: d.racks.iter().map(|&r| names(r, None)).collect(),
                breaker_kw: d.breaker_w.map(|w| w / 1000.0),
                draw_kw: self.watts_at(&d.racks, now) / 1000.0,
                peak_kw: d.peak_w / 1000.0,
                peak_at_ms: ms(d.peak_at),
                trips: d
                    .trips
                    .iter()
                    .map(|t| TripRecord {
                        at_ms: ms(t.at),
                        draw_kw: t.draw_w / 1000.0,
                        rack: names(t.rack, None),
                        component: names(t.rack, Some(t.component)),
                    })
                    .collect(),
                power_ons: {
                    // Recorded rack by rack as each advances: in time order
                    // within a rack, sorted here across racks.
                    let mut ons: Vec<&PowerOn> = d.power_ons.iter().collect();
                    ons.sort_by_key(|p| p.at);
                    ons.into_iter()
                        .map(|p| PowerOnRecord {
                            rack: names(p.rack, None),
                            component: names(p.rack, Some(p.component)),
                            at_ms: ms(p.at),
                        })
                        .collect()
                },
                shelves_off_peak: d.shelves_off_peak,
                shelves_off: self.shelves_off_at(&d.racks, now),
            })
            .collect()
    }
}

/// Wall-clock milliseconds since the Unix epoch of `at`.
fn epoch_ms(clock: &Clock, at: Instant) -> i64 {
    i64::try_from(clock.wall(at).unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

/// The book behind its lock, with a hint that something waits for
/// evaluation (so the common path, nothing pending, takes no lock).
#[derive(Debug)]
pub(crate) struct Domains {
    book: Mutex<Book>,
    pending: AtomicBool,
}

impl Domains {
    /// Wraps a book.
    pub(crate) fn new(book: Book) -> Self {
        Domains {
            book: Mutex::new(book),
            pending: AtomicBool::new(false),
        }
    }

    /// Runs `f` on the book; keeps the pending hint up to date.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Book) -> R) -> R {
        let mut book = lock(&self.book);
        let result = f(&mut book);
        self.pending.store(book.has_pending(), Ordering::Release);
        result
    }

    /// Whether some instant may wait for evaluation.
    pub(crate) fn maybe_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }
}

/// Why a power domain cannot be set or removed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    /// A field of the request is unusable.
    #[error("{field}: {reason}")]
    Invalid {
        /// The field, e.g. `racks`.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The request names a rack the simulator does not serve.
    #[error("racks: no rack {0:?} in this simulator")]
    UnknownRack(String),
    /// No domain of that name.
    #[error("no power domain {0:?}")]
    UnknownDomain(String),
}

/// `GET /admin/v1/power`: every power domain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerReport {
    /// Domains by name.
    pub domains: Vec<DomainReport>,
}

/// One power domain as of the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DomainReport {
    /// Its name.
    pub name: String,
    /// Its racks, in rack order.
    pub racks: Vec<String>,
    /// Its breaker limit, if it has one.
    pub breaker_kw: Option<f64>,
    /// Its total draw now.
    pub draw_kw: f64,
    /// Its highest total since it was created or the simulator reset
    /// (reached at a power-on instant, or its draw at creation).
    pub peak_kw: f64,
    /// When the peak was reached, wall-clock milliseconds since the epoch.
    pub peak_at_ms: i64,
    /// Its breaker trips, oldest first.
    pub trips: Vec<TripRecord>,
    /// Every power-on or reset command accepted by one of its components,
    /// oldest first.
    pub power_ons: Vec<PowerOnRecord>,
    /// The most power shelves off at once since creation or reset.
    pub shelves_off_peak: usize,
    /// Power shelves off now.
    pub shelves_off: usize,
}

/// A breaker trip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TripRecord {
    /// The power-on instant that exceeded the breaker, wall-clock epoch ms.
    pub at_ms: i64,
    /// The domain's total at that instant.
    pub draw_kw: f64,
    /// The rack of the component whose power-on exceeded it.
    pub rack: String,
    /// That component.
    pub component: String,
}

/// An accepted power-on or reset command (`On`, `ForceOn`,
/// `GracefulRestart`, `ForceRestart`, `PowerCycle`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerOnRecord {
    /// Its rack.
    pub rack: String,
    /// Its component.
    pub component: String,
    /// When the BMC received it, wall-clock epoch ms.
    pub at_ms: i64,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::ComponentKind::{Compute, PowerShelf};
    use crate::model::PowerState::{Off, On};

    const MS: Duration = Duration::from_millis(1);

    fn on(component: usize, at: Instant) -> PowerNote {
        PowerNote::On { component, at }
    }

    fn off(component: usize, at: Instant) -> PowerNote {
        PowerNote::Off { component, at }
    }

    /// Two racks of one shelf and two compute trays each, all in `state`.
    fn book(state: PowerState) -> Book {
        let rack = vec![(PowerShelf, state), (Compute, state), (Compute, state)];
        Book::new(Draws::default(), &[rack.clone(), rack])
    }

    /// One clock for every test, so wall times compare exactly.
    fn clock() -> &'static Clock {
        static CLOCK: std::sync::OnceLock<Clock> = std::sync::OnceLock::new();
        CLOCK.get_or_init(|| Clock::new(1.0))
    }

    fn report(book: &Book, now: Instant) -> Vec<DomainReport> {
        let clock = clock();
        let names = |r: usize, c: Option<usize>| match c {
            None => format!("rack-{r}"),
            Some(c) => format!("c{c}"),
        };
        book.report(now, clock, &names)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn draw_jumps_to_inrush_and_falls_linearly_to_steady() {
        let d = Draw::COMPUTE;
        assert_eq!(d.at(Duration::ZERO), 9_000.0);
        assert!(close(d.at(Duration::from_millis(500)), 8_100.0));
        assert!(close(d.at(Duration::from_secs(1)), 7_200.0));
        assert_eq!(d.at(Duration::from_secs(2)), 5_400.0);
        assert_eq!(d.at(Duration::from_secs(60)), 5_400.0);
        let shelf = Draw::POWERSHELF;
        assert!(close(shelf.at(Duration::from_millis(250)), 350.0));
        let instant = Draw {
            settle: Duration::ZERO,
            ..Draw::NVSWITCH
        };
        assert_eq!(instant.at(Duration::ZERO), 900.0);
        // A history: off draws nothing, on since start is settled.
        let t0 = Instant::now();
        let mut h = History::new(On);
        assert_eq!(h.watts_at(t0, &d), 5_400.0);
        h.off(t0 + MS);
        assert_eq!(h.watts_at(t0 + MS, &d), 0.0);
        h.on(t0 + 2 * MS);
        assert_eq!(h.watts_at(t0 + MS, &d), 0.0, "the earlier gap is kept");
        assert_eq!(h.watts_at(t0, &d), 5_400.0, "so is the earlier interval");
        assert_eq!(h.watts_at(t0 + 2 * MS, &d), 9_000.0);
    }

    #[test]
    fn the_peak_is_the_total_at_each_power_on_instant() {
        let t0 = Instant::now();
        let mut b = book(Off);
        b.upsert("row".into(), vec![0, 1], None, t0);
        b.upsert("rack-1-only".into(), vec![1], None, t0);
        assert_eq!(report(&b, t0)[0].peak_kw, 0.0);
        assert_eq!(
            report(&b, t0)[1].shelves_off_peak,
            2,
            "both shelves off at creation"
        );

        // Rack 0: shelf on at t0, compute on at t0+500 ms.
        assert!(b.record(0, &[on(0, t0), on(1, t0 + 500 * MS)]));
        // Rack 1 reports later a power-on that came between them: counted,
        // since the domain is evaluated only up to where both racks are.
        assert!(b.record(1, &[on(0, t0 + 250 * MS)]));
        let names = b.names();
        assert!(b.evaluate(&names, t0 + 500 * MS).is_empty());
        assert!(!b.has_pending());
        let row = &report(&b, t0 + 500 * MS)[1];
        assert_eq!(row.name, "row");
        // At +500 ms: shelf 0 half settled (300 W), shelf 1 a quarter
        // (350 W), the tray at inrush (9,000 W).
        assert!(close(row.peak_kw, 9.65), "{}", row.peak_kw);
        assert_eq!(row.peak_at_ms, epoch_ms(clock(), t0 + 500 * MS));
        // A second tray at +1.5 s: shelves settled (200 W each), the first
        // tray at 1 s of its settle (7,200 W), the second at inrush.
        b.record(0, &[on(2, t0 + 1500 * MS)]);
        b.evaluate(&names, t0 + 2000 * MS);
        let row = &report(&b, t0 + 2000 * MS)[1];
        assert!(close(row.peak_kw, 0.4 + 7.2 + 9.0), "{}", row.peak_kw);
        // At +2 s: the first tray at 1.5 s of its settle, the second at 0.5 s.
        assert!(close(row.draw_kw, 0.4 + 6.3 + 8.1), "{}", row.draw_kw);
        // Off only lowers the total: the peak stays.
        b.record(0, &[off(1, t0 + 3000 * MS), off(2, t0 + 3000 * MS)]);
        b.evaluate(&names, t0 + 3000 * MS);
        let reports = report(&b, t0 + 3000 * MS);
        assert!(close(reports[1].peak_kw, 16.6));
        assert!(close(reports[1].draw_kw, 0.4));
        // The other domain saw only rack 1's shelf.
        assert!(close(reports[0].peak_kw, 0.4));
        assert_eq!(reports[0].shelves_off, 0);
    }

    #[test]
    fn instants_wait_until_evaluated_up_to_them() {
        let t0 = Instant::now();
        let mut b = book(Off);
        b.upsert("row".into(), vec![0, 1], None, t0);
        b.record(0, &[on(0, t0 + 10 * MS)]);
        let names = b.names();
        b.evaluate(&names, t0);
        assert!(
            b.has_pending(),
            "not yet evaluated: rack 1 may not be there"
        );
        assert_eq!(b.pending_domains(), (names.clone(), vec![0, 1]));
        b.evaluate(&names, t0 + 10 * MS);
        assert!(!b.has_pending());
        assert!(close(report(&b, t0 + 10 * MS)[0].peak_kw, 0.4));
    }

    #[test]
    fn a_total_over_the_breaker_trips_once_and_later_power_ons_count_again() {
        let t0 = Instant::now();
        let mut b = book(Off);
        b.upsert("pdu".into(), vec![0], Some(10_000.0), t0);
        b.upsert("site".into(), vec![0, 1], None, t0);
        let names = b.names();
        b.record(0, &[on(0, t0), on(1, t0 + 2000 * MS)]);
        assert!(
            b.evaluate(&names, t0 + 2000 * MS).is_empty(),
            "9.2 kW: under"
        );
        // The first tray has settled (5.4 kW); the second's inrush (9 kW)
        // and the shelf (0.2 kW) make 14.6 kW.
        b.record(0, &[on(2, t0 + 4000 * MS)]);
        let orders = b.evaluate(&names, t0 + 4000 * MS);
        assert_eq!(
            orders,
            vec![TripOrder {
                domain: "pdu".into(),
                racks: vec![0]
            }]
        );
        let pdu = &report(&b, t0 + 4000 * MS)[0];
        assert_eq!(pdu.trips.len(), 1);
        assert!(close(pdu.trips[0].draw_kw, 14.6), "{:?}", pdu.trips);
        assert_eq!(pdu.trips[0].component, "c2");
        assert!(
            close(pdu.peak_kw, 14.6),
            "the peak includes the tripping total"
        );
        // While the trip is applied, further power-ons are not evaluated.
        b.record(0, &[on(0, t0 + 4001 * MS)]);
        assert!(b.evaluate(&names, t0 + 4001 * MS).is_empty());
        // The trip: everything off; then power-ons count again.
        let cut = t0 + 4002 * MS;
        b.record(0, &[off(0, cut), off(1, cut), off(2, cut)]);
        b.trip_applied("pdu", cut);
        b.evaluate(&names, cut);
        let pdu = &report(&b, cut)[0];
        assert_eq!(pdu.draw_kw, 0.0);
        assert_eq!(pdu.shelves_off, 1);
        assert_eq!(pdu.shelves_off_peak, 1);
        b.record(0, &[on(0, t0 + 5000 * MS)]);
        assert!(b.evaluate(&names, t0 + 5000 * MS).is_empty());
        assert_eq!(report(&b, t0 + 5000 * MS)[0].trips.len(), 1);
        // The domain without a breaker never trips and evaluated the
        // shelf's new power-on too: 0.4 kW of shelf inrush, the first tray
        // settled, the second 1 ms into its settle.
        let site = &report(&b, t0 + 5000 * MS)[1];
        assert!(site.trips.is_empty());
        let want = 0.4 + 5.4 + Draw::COMPUTE.at(MS) / 1000.0;
        assert!(close(site.peak_kw, want), "{} {want}", site.peak_kw);
    }

    #[test]
    fn shelves_off_peak_and_power_on_commands_are_kept_per_domain() {
        let t0 = Instant::now();
        let rack = vec![(PowerShelf, On), (PowerShelf, On), (Compute, On)];
        let mut b = Book::new(Draws::default(), &[rack.clone(), rack]);
        b.upsert("a".into(), vec![0], None, t0);
        b.upsert("b".into(), vec![1], None, t0);
        let names = b.names();
        assert!(close(report(&b, t0)[0].draw_kw, 0.2 + 0.2 + 5.4));
        b.record(
            0,
            &[off(0, t0 + MS), off(1, t0 + 2 * MS), off(2, t0 + 2 * MS)],
        );
        b.record(0, &[on(0, t0 + 3 * MS)]);
        b.record(
            0,
            &[PowerNote::Command {
                component: 2,
                at: t0 + 4 * MS,
            }],
        );
        b.evaluate(&names, t0 + 4 * MS);
        let reports = report(&b, t0 + 4 * MS);
        assert_eq!(reports[0].shelves_off_peak, 2);
        assert_eq!(reports[0].shelves_off, 1);
        assert_eq!(reports[0].power_ons.len(), 1);
        assert_eq!(reports[0].power_ons[0].component, "c2");
        assert_eq!(
            reports[0].power_ons[0].at_ms,
            epoch_ms(clock(), t0 + 4 * MS)
        );
        assert_eq!(reports[1].shelves_off_peak, 0);
        assert!(reports[1].power_ons.is_empty());
        // A reset starts the records again from the given states.
        let all_off = vec![(PowerShelf, Off), (PowerShelf, Off), (Compute, Off)];
        b.reset(&[all_off.clone(), all_off], t0 + 5 * MS);
        let reports = report(&b, t0 + 5 * MS);
        assert_eq!(reports[0].power_ons.len(), 0);
        assert_eq!(reports[0].shelves_off_peak, 2);
        assert_eq!(reports[0].peak_kw, 0.0);
        assert!(b.remove("a"));
        assert!(!b.remove("a"));
    }
}
