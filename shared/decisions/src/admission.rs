//! Power admission, decided: when may one power command go? Pure over
//! the state of the command's domains as the store read it under their row
//! locks (`shared/store/src/power.rs` records the grant it decides; the
//! worker asks through `shared/executor/src/gate.rs`).
//!
//! What a domain counts against its budget (`docs/operating-safety.md`,
//! "What counts"): every other component of its racks by what is known of
//! its power — known off (read off recently by a source that can say so,
//! or unpowered: its rack's shelves all known off) counts nothing, known on
//! its steady draw (or its measured draw where fresher and higher), and
//! one whose power is not known its steady draw — plus the command's own
//! component at its steady draw, plus the excess (inrush − steady) of every
//! grant over the interval it holds: from its start until it was reported
//! sent and its settle time has passed (one never reported expires). A
//! command that does not fit only because of components whose power is not
//! known, or of draw measured above steady (a reading to be refreshed, a
//! tray working hard), waits for them to be read; one that does not fit
//! the steady draw known on is refused.
//!
//! A power-on is not told "not now, ask again": it is given the earliest
//! start at which it fits in every domain it is in — now (granted) or
//! later (reserved: the worker sleeps until then and sends without asking
//! again). A reservation is a grant with a future start, so later
//! commands are scheduled around it: each command asks once, whatever the
//! queue, and the first to ask is never overtaken by one that would push
//! it back (a later command only fills room the earlier ones left). A
//! command that could never fit (the budget below the steady draw plus its
//! excess) is refused. Spacing keeps `min_spacing_ms` between any two
//! starts in a domain: slots are `min_spacing_ms` + [`SPACING_SLACK_MS`]
//! apart, and a command in a spaced domain — granted now or reserved —
//! must be sent within that slack of its slot or ask again
//! ([`send_within_ms`]), so a late sender never lands closer than the
//! spacing to the next one. The shelves-off cap holds a power shelf's power-off
//! while as many shelves as the cap are off (emergencies pass it); it has
//! no expiry to schedule by, so that command asks again.

/// A share of a domain: a granted or reserved power-on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Its excess over steady draw, W.
    pub excess_w: u64,
    /// When it may be sent (epoch ms).
    pub starts_ms: u64,
    /// When its inrush is no longer counted (epoch ms).
    pub expires_ms: u64,
}

/// One domain as it stands, read under its lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainState {
    /// Its name.
    pub name: String,
    /// Budget, W.
    pub budget_w: Option<u64>,
    /// Cap on shelves off at once.
    pub max_shelves_off: Option<u32>,
    /// Spacing between power-ons, ms.
    pub min_spacing_ms: Option<u64>,
    /// What its racks' other components are known to draw, W: known on at
    /// steady (or measured) draw; known off or unpowered at none.
    pub known_w: u64,
    /// Of `known_w`, what was measured above those components' steady
    /// draw (a tray working hard, or a reading not yet refreshed), W: it
    /// makes a command wait, never refuses one.
    pub measured_excess_w: u64,
    /// The steady draw of its racks' other components whose power is not
    /// known (never read, read too long ago, unreachable, moving), W.
    pub unknown_w: u64,
    /// How many components those are.
    pub unknown: u32,
    /// Its grants not yet expired, and those started within the spacing
    /// before now.
    pub grants: Vec<Grant>,
    /// Shelves Flow turned off, not counting the one asked about.
    pub shelves_off: u32,
}

/// The command asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// A power-on or a reset.
    Inrush {
        /// Its excess over steady draw while it settles, W.
        excess_w: u64,
        /// Its component's steady draw once on, W.
        steady_w: u64,
        /// How long a grant holds that excess until it is reported sent:
        /// the send window plus the settle time.
        hold_ms: u64,
    },
    /// A power shelf's power-off.
    ShelfOff {
        /// Not held by the cap.
        emergency: bool,
    },
}

/// The answer over every domain of the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Go now.
    Admit,
    /// Go at `at_ms`: the store records the grant from then.
    Reserve {
        /// When.
        at_ms: u64,
        /// Why not now, for the operator.
        reason: String,
        /// The domain the reason names (the first without room now).
        domain: String,
    },
    /// Ask again at `until_ms` (the shelves-off cap; components whose power
    /// is not known).
    Wait {
        /// When.
        until_ms: u64,
        /// Why, for the operator.
        reason: String,
        /// The domain the reason names (the first without room now).
        domain: String,
    },
    /// Never, as the domain stands.
    Refuse {
        /// Why.
        reason: String,
    },
}

/// How late after its slot a power-on in a spaced domain may still be sent;
/// slots are spaced this much beyond `min_spacing_ms` so that a send up to
/// this late keeps the spacing. A sender later than this asks again.
pub const SPACING_SLACK_MS: u64 = 50;

/// How late after its slot a command over `domains` may still be sent:
/// [`SPACING_SLACK_MS`] when one of them spaces its power-ons, else `None`
/// (the store's send window, which a grant's budget hold covers).
pub fn send_within_ms(domains: &[DomainState]) -> Option<u64> {
    domains
        .iter()
        .any(|d| d.min_spacing_ms.is_some())
        .then_some(SPACING_SLACK_MS)
}

/// The least gap admission keeps between two slots of `domain`.
fn slot_gap(domain: &DomainState) -> Option<u64> {
    domain
        .min_spacing_ms
        .map(|spacing| spacing.saturating_add(SPACING_SLACK_MS))
}

/// How often a command held by the shelves-off cap asks again (a shelf
/// comes back on when another task powers it on: no expiry to wait for).
pub const SHELVES_RETRY_MS: u64 = 1_000;

/// How often a command that does not fit only because of components whose
/// power is not known asks again (until they are read).
pub const UNKNOWN_RETRY_MS: u64 = 1_000;

/// Decides `command` over its `domains` at `now_ms`.
pub fn decide(domains: &[DomainState], command: Command, now_ms: u64) -> Decision {
    match command {
        Command::Inrush {
            excess_w,
            steady_w,
            hold_ms,
        } => inrush(domains, excess_w, steady_w, hold_ms, now_ms),
        Command::ShelfOff { emergency } => {
            for d in domains {
                if let Some(cap) = d.max_shelves_off
                    && !emergency
                    && d.shelves_off >= cap
                {
                    return Decision::Wait {
                        until_ms: now_ms + SHELVES_RETRY_MS,
                        reason: format!(
                            "waiting for the shelves-off cap in {}: {} of {} power shelves off",
                            d.name, d.shelves_off, cap
                        ),
                        domain: d.name.clone(),
                    };
                }
            }
            Decision::Admit
        }
    }
}

fn inrush(
    domains: &[DomainState],
    excess_w: u64,
    steady_w: u64,
    hold_ms: u64,
    now_ms: u64,
) -> Decision {
    for d in domains {
        let Some(budget) = d.budget_w else {
            continue;
        };
        let floor = d.known_w.saturating_sub(d.measured_excess_w);
        if floor + steady_w + excess_w > budget {
            return Decision::Refuse {
                reason: format!(
                    "power budget of {} is {} kW: the draw known on there ({} kW) and this power-on ({} kW steady, {} kW inrush) would pass it; it fits only once something there is off, or with a larger budget",
                    d.name,
                    kw(budget),
                    kw(floor),
                    kw(steady_w),
                    kw(steady_w + excess_w)
                ),
            };
        }
    }
    for d in domains {
        if let Some(budget) = d.budget_w
            && d.known_w + d.unknown_w + steady_w + excess_w > budget
        {
            let mut why = Vec::new();
            if d.unknown_w > 0 {
                why.push(format!(
                    "{} kW of it {} components whose power is not known",
                    kw(d.unknown_w),
                    d.unknown
                ));
            }
            if d.measured_excess_w > 0 {
                why.push(format!(
                    "{} kW of it measured above steady draw",
                    kw(d.measured_excess_w)
                ));
            }
            return Decision::Wait {
                until_ms: now_ms + UNKNOWN_RETRY_MS,
                reason: format!(
                    "waiting for power budget in {}: {} of {} kW counted, {}",
                    d.name,
                    kw(d.known_w + d.unknown_w),
                    kw(budget),
                    why.join(", ")
                ),
                domain: d.name.clone(),
            };
        }
    }
    let plans: Vec<DomainPlan<'_>> = domains
        .iter()
        .map(|d| DomainPlan::new(d, steady_w))
        .collect();
    // Each domain's room is a union of intervals: move to the latest of
    // the domains' earliest fits until all agree (each step moves later,
    // over a finite set of candidate times).
    let mut at = now_ms;
    loop {
        let next = plans
            .iter()
            .map(|p| p.earliest(at, excess_w, hold_ms))
            .max()
            .unwrap_or(at);
        if next == at {
            break;
        }
        at = next;
    }
    if at == now_ms {
        return Decision::Admit;
    }
    let (domain, reason) = plans
        .iter()
        .find_map(|p| {
            p.why_not(now_ms, excess_w, hold_ms)
                .map(|r| (p.domain.name.clone(), r))
        })
        .unwrap_or_else(|| {
            let first = domains.first().map_or("", |d| d.name.as_str());
            (first.to_owned(), "waiting for power admission".to_owned())
        });
    Decision::Reserve {
        at_ms: at,
        reason,
        domain,
    }
}

/// One domain's grants, arranged to answer "does it fit at t?" quickly.
struct DomainPlan<'a> {
    domain: &'a DomainState,
    /// What is counted whatever the grants: the domain's other components
    /// and the command's own at steady draw, W.
    base_w: u64,
    /// Where the counted excess changes, ascending, and the excess from
    /// each such time to the next.
    times: Vec<u64>,
    loads: Vec<u64>,
    /// Every grant's start, ascending.
    starts: Vec<u64>,
}

impl<'a> DomainPlan<'a> {
    fn new(domain: &'a DomainState, steady_w: u64) -> Self {
        let valid = domain.grants.iter().filter(|g| g.expires_ms > g.starts_ms);
        let mut events: Vec<(u64, i128)> = valid
            .clone()
            .flat_map(|g| {
                [
                    (g.starts_ms, i128::from(g.excess_w)),
                    (g.expires_ms, -i128::from(g.excess_w)),
                ]
            })
            .collect();
        events.sort_unstable();
        let mut times = Vec::new();
        let mut loads = Vec::new();
        let mut load: i128 = 0;
        for (t, delta) in events {
            load += delta;
            let now = u64::try_from(load.max(0)).unwrap_or(u64::MAX);
            if times.last() == Some(&t) {
                if let Some(l) = loads.last_mut() {
                    *l = now;
                }
            } else {
                times.push(t);
                loads.push(now);
            }
        }
        let mut starts: Vec<u64> = valid.map(|g| g.starts_ms).collect();
        starts.sort_unstable();
        DomainPlan {
            domain,
            base_w: domain.known_w + domain.unknown_w + steady_w,
            times,
            loads,
            starts,
        }
    }

    /// The largest excess counted at any instant of `[from, to)`.
    fn peak(&self, from: u64, to: u64) -> u64 {
        let i = self.times.partition_point(|&t| t <= from);
        let mut peak = if i == 0 { 0 } else { self.loads[i - 1] };
        for (t, load) in self.times[i..].iter().zip(&self.loads[i..]) {
            if *t >= to {
                break;
            }
            peak = peak.max(*load);
        }
        peak
    }

    fn fits_budget(&self, at: u64, excess_w: u64, hold_ms: u64) -> bool {
        self.domain.budget_w.is_none_or(|budget| {
            self.base_w + self.peak(at, at.saturating_add(hold_ms)) + excess_w <= budget
        })
    }

    fn fits_spacing(&self, at: u64) -> bool {
        slot_gap(self.domain).is_none_or(|spacing| {
            let i = self
                .starts
                .partition_point(|&s| s.saturating_add(spacing) <= at);
            self.starts
                .get(i)
                .is_none_or(|&s| s >= at.saturating_add(spacing))
        })
    }

    /// The earliest time at or after `from` this command fits here.
    fn earliest(&self, from: u64, excess_w: u64, hold_ms: u64) -> u64 {
        if self.domain.budget_w.is_none() && self.domain.min_spacing_ms.is_none() {
            return from;
        }
        let spacing = slot_gap(self.domain).unwrap_or(0);
        // Room opens when a grant expires or a start's spacing passes.
        let mut candidates: Vec<u64> = std::iter::once(from)
            .chain(self.times.iter().copied())
            .chain(self.starts.iter().map(|s| s.saturating_add(spacing)))
            .filter(|&t| t >= from)
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        candidates
            .into_iter()
            .find(|&t| self.fits_spacing(t) && self.fits_budget(t, excess_w, hold_ms))
            // After every grant and spacing: a command that passed the
            // refusal check always fits there.
            .unwrap_or(from)
    }

    /// Why the command does not fit here now, if it does not.
    fn why_not(&self, now_ms: u64, excess_w: u64, hold_ms: u64) -> Option<String> {
        let d = self.domain;
        if let Some(budget) = d.budget_w
            && !self.fits_budget(now_ms, excess_w, hold_ms)
        {
            let in_use = self.base_w + self.peak(now_ms, now_ms + 1);
            return Some(format!(
                "waiting for power budget in {}: {} of {} kW",
                d.name,
                kw(in_use),
                kw(budget)
            ));
        }
        if !self.fits_spacing(now_ms) {
            return Some(format!(
                "waiting for power-on spacing in {}: {} ms between power-ons",
                d.name,
                d.min_spacing_ms.unwrap_or(0)
            ));
        }
        None
    }
}

/// Watts as kW with thousands separators and one decimal where needed:
/// `1180000` → `1,180`, `3600` → `3.6`.
pub fn kw(watts: u64) -> String {
    let whole = watts / 1000;
    let tenth = (watts % 1000) / 100;
    let mut digits = whole.to_string();
    let mut grouped = String::new();
    while digits.len() > 3 {
        let tail = digits.split_off(digits.len() - 3);
        grouped = format!(",{tail}{grouped}");
    }
    let grouped = format!("{digits}{grouped}");
    if tenth == 0 {
        grouped
    } else {
        format!("{grouped}.{tenth}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: u64 = 3_000;

    fn domain() -> DomainState {
        DomainState {
            name: "row=B".into(),
            budget_w: Some(1_200_000),
            max_shelves_off: Some(2),
            min_spacing_ms: None,
            known_w: 1_100_000,
            measured_excess_w: 0,
            unknown_w: 0,
            unknown: 0,
            grants: vec![],
            shelves_off: 0,
        }
    }

    /// An inrush of a component whose steady draw is already in
    /// `known_w` (the tests written before components were counted by
    /// state): nothing more once it settles.
    fn on(excess_w: u64) -> Command {
        Command::Inrush {
            excess_w,
            steady_w: 0,
            hold_ms: HOLD,
        }
    }

    /// A compute tray's power-on: 5.4 kW steady, 9.0 kW at inrush.
    fn tray() -> Command {
        Command::Inrush {
            excess_w: 3_600,
            steady_w: 5_400,
            hold_ms: HOLD,
        }
    }

    fn grant(excess_w: u64, starts_ms: u64, expires_ms: u64) -> Grant {
        Grant {
            excess_w,
            starts_ms,
            expires_ms,
        }
    }

    #[test]
    fn a_fitting_inrush_is_admitted() {
        assert_eq!(decide(&[domain()], on(100_000), 0), Decision::Admit);
    }

    #[test]
    fn an_inrush_over_budget_is_reserved_from_the_expiry_that_makes_room() {
        let mut d = domain();
        d.grants = vec![
            grant(40_000, 0, 500),
            grant(40_000, 0, 300),
            grant(40_000, 0, 50),
        ];
        // The one expiring at 50 is gone at 100: in use 1,100 + 80 = 1,180 kW.
        match decide(&[d], on(60_000), 100) {
            Decision::Reserve {
                at_ms,
                reason,
                domain,
            } => {
                // Freeing the grant expiring at 300 leaves 1,140 + 60 = 1,200.
                assert_eq!(at_ms, 300);
                assert_eq!(domain, "row=B");
                assert_eq!(
                    reason,
                    "waiting for power budget in row=B: 1,180 of 1,200 kW"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_reservation_counts_so_the_next_command_goes_after_it() {
        let mut d = domain();
        // 60 kW of room: one 50 kW inrush runs now, one is reserved next.
        d.budget_w = Some(1_160_000);
        d.grants = vec![grant(50_000, 0, HOLD), grant(50_000, HOLD, 2 * HOLD)];
        // Another 50 kW fits neither now nor beside the reservation.
        assert_eq!(
            decide(std::slice::from_ref(&d), on(50_000), 100),
            Decision::Reserve {
                at_ms: 2 * HOLD,
                reason: "waiting for power budget in row=B: 1,150 of 1,160 kW".into(),
                domain: "row=B".into(),
            }
        );
        // A small one fits beside both.
        assert_eq!(decide(&[d], on(10_000), 100), Decision::Admit);
    }

    #[test]
    fn a_queue_of_commands_asking_once_each_never_passes_the_budget() {
        // 40 trays of 3.6 kW asking at once into 10 kW of room: each gets
        // its own start, two at a time, none sharing an instant with a
        // third.
        let mut d = domain();
        d.budget_w = Some(d.known_w + 10_000);
        let mut starts = Vec::new();
        for _ in 0..40 {
            let at_ms = match decide(std::slice::from_ref(&d), on(3_600), 0) {
                Decision::Admit => 0,
                Decision::Reserve { at_ms, .. } => at_ms,
                other => panic!("{other:?}"),
            };
            d.grants.push(grant(3_600, at_ms, at_ms + HOLD));
            starts.push(at_ms);
        }
        for t in starts.iter().copied() {
            let load: u64 = d
                .grants
                .iter()
                .filter(|g| g.starts_ms <= t && t < g.expires_ms)
                .map(|g| g.excess_w)
                .sum();
            assert!(load <= 10_000, "{load} W at {t}");
        }
        assert_eq!(starts.iter().filter(|&&t| t == 0).count(), 2);
        assert_eq!(*starts.iter().max().unwrap(), 19 * HOLD);
    }

    #[test]
    fn a_command_fits_every_domain_it_is_in() {
        let mut row = domain();
        row.grants = vec![grant(100_000, 0, 1_000)];
        let mut site = domain();
        site.name = "site".into();
        site.grants = vec![grant(100_000, 1_000, 4_000)];
        // The row has room at 1,000 (site does not); site at 4,000 (and
        // the row does too).
        match decide(&[row, site], on(100_000), 0) {
            Decision::Reserve { at_ms, domain, .. } => {
                assert_eq!(at_ms, 4_000);
                // The first domain without room now names the wait.
                assert_eq!(domain, "row=B");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_inrush_that_can_never_fit_is_refused_naming_the_domain() {
        match decide(&[domain()], on(150_000), 0) {
            Decision::Refuse { reason } => {
                assert!(reason.contains("row=B"), "{reason}");
                assert!(reason.contains("1,100 kW"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn spacing_keeps_every_two_slots_apart_by_the_spacing_and_its_slack() {
        let mut d = domain();
        d.budget_w = None;
        d.min_spacing_ms = Some(2_000);
        d.grants = vec![grant(1, 1_000, 1_001)];
        let gap = 2_000 + SPACING_SLACK_MS;
        assert_eq!(
            decide(std::slice::from_ref(&d), on(1), 2_500),
            Decision::Reserve {
                at_ms: 1_000 + gap,
                reason: "waiting for power-on spacing in row=B: 2000 ms between power-ons".into(),
                domain: "row=B".into(),
            }
        );
        assert_eq!(
            decide(std::slice::from_ref(&d), on(1), 1_000 + gap),
            Decision::Admit
        );
        // A reservation at 5,000 leaves no gap at 3,500 before it: after it.
        d.grants.push(grant(1, 5_000, 5_001));
        assert_eq!(
            decide(std::slice::from_ref(&d), on(1), 3_500),
            Decision::Reserve {
                at_ms: 5_000 + gap,
                reason: "waiting for power-on spacing in row=B: 2000 ms between power-ons".into(),
                domain: "row=B".into(),
            }
        );
    }

    #[test]
    fn a_spaced_domain_sends_within_the_slack_and_others_within_the_window() {
        let mut spaced = domain();
        spaced.min_spacing_ms = Some(300);
        let budgeted = domain();
        assert_eq!(send_within_ms(std::slice::from_ref(&budgeted)), None);
        assert_eq!(send_within_ms(&[budgeted, spaced]), Some(SPACING_SLACK_MS));
        // A slot sent at most the slack late still keeps the spacing to
        // the next slot.
        let mut d = domain();
        d.budget_w = None;
        d.min_spacing_ms = Some(300);
        d.grants = vec![grant(1, 0, 1)];
        let Decision::Reserve { at_ms, .. } = decide(&[d], on(1), 0) else {
            panic!("the second command waits for its slot");
        };
        assert!(at_ms - SPACING_SLACK_MS >= 300, "{at_ms}");
    }

    #[test]
    fn the_shelves_off_cap_holds_all_but_emergencies() {
        let mut d = domain();
        d.shelves_off = 2;
        assert!(matches!(
            decide(
                std::slice::from_ref(&d),
                Command::ShelfOff { emergency: false },
                0
            ),
            Decision::Wait {
                until_ms: SHELVES_RETRY_MS,
                ..
            }
        ));
        assert_eq!(
            decide(
                std::slice::from_ref(&d),
                Command::ShelfOff { emergency: true },
                0
            ),
            Decision::Admit
        );
        d.shelves_off = 1;
        assert_eq!(
            decide(&[d], Command::ShelfOff { emergency: false }, 0),
            Decision::Admit
        );
    }

    #[test]
    fn a_cold_row_admits_every_inrush_its_budget_holds_at_once() {
        // Fifty racks of 18 trays, every component known off: a budget of
        // 4,806 kW (45 racks' trays on, and room) takes the first trays'
        // inrush together, not one at a time.
        let mut d = domain();
        d.known_w = 0;
        d.budget_w = Some(4_806_000);
        let mut at_once = 0;
        loop {
            match decide(std::slice::from_ref(&d), tray(), 0) {
                Decision::Admit => {
                    // Counted on from now: its steady draw and its inrush.
                    d.known_w += 5_400;
                    d.grants.push(grant(3_600, 0, HOLD));
                    at_once += 1;
                }
                Decision::Reserve { .. } => break,
                other => panic!("{other:?}"),
            }
        }
        // 4,806 kW / 9 kW a tray at inrush.
        assert_eq!(at_once, 534);
    }

    #[test]
    fn the_command_s_own_steady_draw_counts_as_well_as_its_inrush() {
        let mut d = domain();
        d.known_w = 1_000;
        d.budget_w = Some(1_000 + 8_999);
        assert!(matches!(
            decide(std::slice::from_ref(&d), tray(), 0),
            Decision::Refuse { .. }
        ));
        d.budget_w = Some(1_000 + 9_000);
        assert_eq!(decide(&[d], tray(), 0), Decision::Admit);
    }

    #[test]
    fn a_budget_below_the_all_on_draw_admits_until_the_known_draw_is_reached_then_refuses_naming_it()
     {
        // A row budgeted for 45 of its 50 racks' trays (18 × 5.4 kW each)
        // and one tray's inrush; 45 racks' trays on and known on.
        let rack_w = 18 * 5_400;
        let mut d = domain();
        d.budget_w = Some(45 * rack_w + 3_600);
        d.known_w = 45 * rack_w - 5_400;
        // The last tray of the 45th rack fits.
        assert_eq!(decide(std::slice::from_ref(&d), tray(), 0), Decision::Admit);
        d.known_w += 5_400;
        // A tray of a 46th rack never can as the row stands: refused, naming
        // the budget and the draw known on.
        let Decision::Refuse { reason } = decide(&[d], tray(), 0) else {
            panic!("the 46th rack's tray was not refused");
        };
        assert_eq!(
            reason,
            "power budget of row=B is 4,377.6 kW: the draw known on there (4,374 kW) and this power-on (5.4 kW steady, 9 kW inrush) would pass it; it fits only once something there is off, or with a larger budget"
        );
    }

    #[test]
    fn components_whose_power_is_not_known_hold_a_command_that_fits_without_them() {
        let mut d = domain();
        d.known_w = 0;
        d.unknown_w = 1_196_000;
        d.unknown = 220;
        match decide(std::slice::from_ref(&d), tray(), 0) {
            Decision::Wait {
                until_ms,
                reason,
                domain,
            } => {
                assert_eq!(until_ms, UNKNOWN_RETRY_MS);
                assert_eq!(domain, "row=B");
                assert_eq!(
                    reason,
                    "waiting for power budget in row=B: 1,196 of 1,200 kW counted, 1,196 kW of it 220 components whose power is not known"
                );
            }
            other => panic!("{other:?}"),
        }
        // Read off, they leave room.
        d.unknown_w = 0;
        d.unknown = 0;
        assert_eq!(decide(&[d], tray(), 0), Decision::Admit);
    }

    #[test]
    fn draw_measured_above_steady_holds_a_command_and_never_refuses_it() {
        // The row's trays known on at 1,194.6 kW steady, one of them read
        // 2 kW above it: the tray fits the steady draw (and is not refused)
        // but not the measured one, so it waits for a fresher reading.
        let mut d = domain();
        d.budget_w = Some(1_200_000 + 3_600);
        d.known_w = 1_194_600 + 2_000;
        d.measured_excess_w = 2_000;
        match decide(std::slice::from_ref(&d), tray(), 0) {
            Decision::Wait { reason, .. } => assert_eq!(
                reason,
                "waiting for power budget in row=B: 1,196.6 of 1,203.6 kW counted, 2 kW of it measured above steady draw"
            ),
            other => panic!("{other:?}"),
        }
        // Read again at steady draw: it goes.
        d.known_w -= 2_000;
        d.measured_excess_w = 0;
        assert_eq!(decide(std::slice::from_ref(&d), tray(), 0), Decision::Admit);
        // Past the steady draw, it is refused naming the steady figure.
        d.known_w = 1_200_000 + 2_000;
        d.measured_excess_w = 2_000;
        let Decision::Refuse { reason } = decide(&[d], tray(), 0) else {
            panic!("not refused");
        };
        assert!(
            reason.contains("the draw known on there (1,200 kW)"),
            "{reason}"
        );
    }

    #[test]
    fn kilowatts_are_grouped() {
        assert_eq!(kw(1_180_000), "1,180");
        assert_eq!(kw(3_600), "3.6");
        assert_eq!(kw(0), "0");
        assert_eq!(kw(12_345_678), "12,345.6");
    }
}
