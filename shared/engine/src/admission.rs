//! Power admission, decided: may one power command go now in one domain?
//! Pure over the domain's state as the store read it under its row lock
//! (`shared/store/src/power.rs` applies the effects of a grant).
//!
//! What a domain counts against its budget: every component of its racks
//! at its steady draw (whatever is on now: Flow does not know the power
//! of what it did not switch, so it holds the worst case), plus the excess
//! of every granted inrush (inrush − steady) until that grant expires. A
//! power-on whose excess would pass the budget waits for the earliest
//! expiry that makes room; with nothing in flight it can never fit and is
//! refused. Spacing keeps `min_spacing_ms` between admitted power-ons; the
//! shelves-off cap holds a power shelf's power-off while as many shelves as
//! the cap are off (emergencies pass it).

use futures::future::BoxFuture;

use flow_protocol::power::{Admission, draws_inrush};
use flow_rules::{ComponentType, PowerOperation};

use crate::StepJob;

/// A power command a step is about to send, for its gate.
#[derive(Debug, Clone, Copy)]
pub struct GateRequest<'a> {
    /// The component's rack.
    pub rack: &'a str,
    /// The component.
    pub component: &'a str,
    /// Its type.
    pub component_type: ComponentType,
    /// The command.
    pub operation: PowerOperation,
}

/// Where a worker asks before a power command (a power-on, a reset, a
/// power shelf's power-off) of a step whose rack is in a power domain.
pub trait PowerGate: Send + Sync {
    /// Granted, wait, or refused; an error holds the command too.
    fn admit<'a>(
        &'a self,
        job: &'a StepJob,
        request: GateRequest<'a>,
    ) -> BoxFuture<'a, Result<Admission, String>>;
}

/// A gate that grants everything: for racks in no domain, and tests of
/// the executor alone.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ungated;

impl PowerGate for Ungated {
    fn admit<'a>(
        &'a self,
        _job: &'a StepJob,
        _request: GateRequest<'a>,
    ) -> BoxFuture<'a, Result<Admission, String>> {
        Box::pin(async { Ok(Admission::Granted) })
    }
}

/// Whether `op` on a component of `component_type` asks admission: every
/// inrush, and a power shelf's power-off (the shelves-off cap).
pub fn gated(component_type: ComponentType, op: PowerOperation) -> bool {
    draws_inrush(op) || component_type == ComponentType::PowerShelf
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
    /// When the last power-on was admitted (epoch ms).
    pub last_on_ms: Option<u64>,
    /// Every component of its racks at steady draw, W.
    pub steady_w: u64,
    /// Live grants: (excess W, expires epoch ms).
    pub grants: Vec<(u64, u64)>,
    /// Shelves Flow turned off, not counting the one asked about.
    pub shelves_off: u32,
}

/// The command asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// A power-on or a reset: `excess_w` = inrush − steady.
    Inrush {
        /// The excess over steady draw while it settles, W.
        excess_w: u64,
    },
    /// A power shelf's power-off.
    ShelfOff {
        /// Not held by the cap.
        emergency: bool,
    },
}

/// The domain's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Go.
    Admit,
    /// Ask again at `until_ms`.
    Wait {
        /// When.
        until_ms: u64,
        /// Why, for the operator.
        reason: String,
    },
    /// Never, as the domain stands.
    Refuse {
        /// Why.
        reason: String,
    },
}

/// How often a command held by the shelves-off cap asks again (a shelf
/// comes back on when another task powers it on: no expiry to wait for).
pub const SHELVES_RETRY_MS: u64 = 1_000;

/// Decides `command` in `domain` at `now_ms`.
pub fn decide(domain: &DomainState, command: Command, now_ms: u64) -> Decision {
    match command {
        Command::Inrush { excess_w } => {
            if let Some(budget) = domain.budget_w {
                let live: Vec<(u64, u64)> = {
                    let mut g: Vec<_> = domain
                        .grants
                        .iter()
                        .copied()
                        .filter(|(_, expires)| *expires > now_ms)
                        .collect();
                    g.sort_by_key(|(_, expires)| *expires);
                    g
                };
                let in_use = domain.steady_w + live.iter().map(|(w, _)| w).sum::<u64>();
                if in_use + excess_w > budget {
                    if domain.steady_w + excess_w > budget {
                        return Decision::Refuse {
                            reason: format!(
                                "power budget of {} is {} kW, below its steady draw of {} kW plus this inrush of {} kW: raise the budget or move racks out",
                                domain.name,
                                kw(budget),
                                kw(domain.steady_w),
                                kw(excess_w)
                            ),
                        };
                    }
                    // The earliest expiry after which it fits.
                    let mut freed_to = in_use;
                    let mut until = now_ms;
                    for (w, expires) in &live {
                        freed_to -= w;
                        until = *expires;
                        if freed_to + excess_w <= budget {
                            break;
                        }
                    }
                    return Decision::Wait {
                        until_ms: until,
                        reason: format!(
                            "waiting for power budget in {}: {} of {} kW",
                            domain.name,
                            kw(in_use),
                            kw(budget)
                        ),
                    };
                }
            }
            if let (Some(spacing), Some(last)) = (domain.min_spacing_ms, domain.last_on_ms) {
                let next = last.saturating_add(spacing);
                if now_ms < next {
                    return Decision::Wait {
                        until_ms: next,
                        reason: format!(
                            "waiting for power-on spacing in {}: {} ms between power-ons",
                            domain.name, spacing
                        ),
                    };
                }
            }
            Decision::Admit
        }
        Command::ShelfOff { emergency } => match domain.max_shelves_off {
            Some(cap) if !emergency && domain.shelves_off >= cap => Decision::Wait {
                until_ms: now_ms + SHELVES_RETRY_MS,
                reason: format!(
                    "waiting for the shelves-off cap in {}: {} of {} power shelves off",
                    domain.name, domain.shelves_off, cap
                ),
            },
            _ => Decision::Admit,
        },
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

    fn domain() -> DomainState {
        DomainState {
            name: "row=B".into(),
            budget_w: Some(1_200_000),
            max_shelves_off: Some(2),
            min_spacing_ms: None,
            last_on_ms: None,
            steady_w: 1_100_000,
            grants: vec![],
            shelves_off: 0,
        }
    }

    #[test]
    fn a_fitting_inrush_is_admitted() {
        let d = domain();
        assert_eq!(
            decide(&d, Command::Inrush { excess_w: 100_000 }, 0),
            Decision::Admit
        );
    }

    #[test]
    fn an_inrush_over_budget_waits_for_the_expiry_that_makes_room() {
        let mut d = domain();
        d.grants = vec![(40_000, 500), (40_000, 300), (40_000, 50)];
        // 50 expired at 100: in use 1,100 + 80 = 1,180 kW.
        match decide(&d, Command::Inrush { excess_w: 60_000 }, 100) {
            Decision::Wait { until_ms, reason } => {
                // Freeing the grant expiring at 300 leaves 1,140 + 60 = 1,200.
                assert_eq!(until_ms, 300);
                assert_eq!(
                    reason,
                    "waiting for power budget in row=B: 1,180 of 1,200 kW"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_inrush_that_can_never_fit_is_refused_naming_the_domain() {
        let d = domain();
        match decide(&d, Command::Inrush { excess_w: 150_000 }, 0) {
            Decision::Refuse { reason } => {
                assert!(reason.contains("row=B"), "{reason}");
                assert!(reason.contains("1,100 kW"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn spacing_holds_a_power_on_until_the_gap_passed() {
        let mut d = domain();
        d.budget_w = None;
        d.min_spacing_ms = Some(2_000);
        d.last_on_ms = Some(1_000);
        assert!(matches!(
            decide(&d, Command::Inrush { excess_w: 1 }, 2_500),
            Decision::Wait {
                until_ms: 3_000,
                ..
            }
        ));
        assert_eq!(
            decide(&d, Command::Inrush { excess_w: 1 }, 3_000),
            Decision::Admit
        );
    }

    #[test]
    fn the_shelves_off_cap_holds_all_but_emergencies() {
        let mut d = domain();
        d.shelves_off = 2;
        assert!(matches!(
            decide(&d, Command::ShelfOff { emergency: false }, 0),
            Decision::Wait {
                until_ms: SHELVES_RETRY_MS,
                ..
            }
        ));
        assert_eq!(
            decide(&d, Command::ShelfOff { emergency: true }, 0),
            Decision::Admit
        );
        d.shelves_off = 1;
        assert_eq!(
            decide(&d, Command::ShelfOff { emergency: false }, 0),
            Decision::Admit
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
