//! Power as observed (`docs/operating-safety.md`, "What counts"): each
//! component's power as last read — when, by what, whether its BMC
//! answered — and its measured draw, recorded from the watchers' and the
//! workers' reads and from the commands Flow sent; and how each component
//! counts against its domains' budgets because of it.
//!
//! A component counts:
//! * **granted** — a power-on Flow granted and not yet settled: its steady
//!   draw (the grant's inrush is counted by admission apart);
//! * **off** — read off within the known-for window by a BMC that answered,
//!   and after the last moment a power-on Flow granted for it may have
//!   been sent: nothing;
//! * **unpowered** — a tray whose rack's power shelves are all known off:
//!   nothing;
//! * **on** — read on within the window: its steady draw, or its measured
//!   draw where that is fresh, higher and read after its last power-on
//!   settled (a reading taken during the inrush is the grant's to count,
//!   and says nothing of the draw once it has passed);
//! * **unknown** — anything else (never read, read too long ago, its BMC
//!   not answering, moving): its steady draw, as before Flow counted by
//!   state.

use std::collections::BTreeMap;
use std::time::Duration;

use flow_protocol::TaskId;
use flow_protocol::ids::RackRef;
use flow_protocol::power::{ComponentPower, Counted, PowerSent, PowerSentReply, RackPowerReply};
use flow_protocol::state::{ComponentState, ObservationSource, PowerState};
use flow_rules::ComponentType;
use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::{Store, StoreError};

/// How long an observation is known when nothing says otherwise: longer
/// than the watcher's power read period (30 s) so that a BMC read every
/// round stays known between reads.
pub const DEFAULT_KNOWN_FOR: Duration = Duration::from_secs(60);

/// The most observations recorded in one statement.
const BATCH: usize = 1_000;

/// The per-component count, as SQL over the components the filter keeps
/// (`$1` the known-for window in seconds; the filter's own parameters from
/// `$2`): one row per component with its rack, name, type, steady draw,
/// observation, live grant and class.
macro_rules! counted_sql {
    ($filter:literal) => {
        concat!(
            "WITH c AS ( \
           SELECT r.name AS rack, c.name AS component, c.component_type, c.bmc_url, \
             COALESCE(m.steady_w, d.steady_w, 0)::bigint AS steady_w, \
             COALESCE(m.settle_ms, d.settle_ms, 0)::bigint AS settle_ms, \
             p.power, p.reachable, p.source, p.observed_at, p.measured_w, p.measured_at, \
             p.commanded_until, \
             (p.observed_at IS NOT NULL AND p.reachable \
               AND p.observed_at >= clock_timestamp() - make_interval(secs => $1)) AS fresh, \
             (SELECT max(g.excess_w) FROM power_grants g WHERE g.rack = r.name \
               AND g.component = c.name AND g.expires_at > clock_timestamp()) AS grant_w \
           FROM racks r JOIN components c ON c.rack_id = r.id \
           LEFT JOIN power_models m ON m.component_type = c.component_type \
                AND m.rack_model = r.model AND r.model <> '' \
           LEFT JOIN power_models d ON d.component_type = c.component_type AND d.rack_model = '' \
           LEFT JOIN component_power p ON p.rack = r.name AND p.component = c.name \
           WHERE ",
            $filter,
            " \
         ), k AS ( \
           SELECT *, (fresh AND power = 'off' \
                       AND (commanded_until IS NULL OR observed_at > commanded_until)) AS known_off, \
                     (fresh AND power = 'on') AS known_on \
           FROM c \
         ), s AS ( \
           SELECT rack, bool_and(known_off) AS all_off FROM k \
           WHERE component_type = 'PowerShelf' GROUP BY rack \
         ) \
         SELECT k.rack, k.component, k.component_type, k.bmc_url, k.steady_w, k.power, \
           k.reachable, k.source, k.observed_at, k.measured_w, k.measured_at, k.grant_w, \
           CASE WHEN k.grant_w IS NOT NULL THEN 'granted' \
                WHEN k.known_off THEN 'off' \
                WHEN k.component_type IN ('Compute', 'NVSwitch') AND COALESCE(s.all_off, false) \
                  THEN 'unpowered' \
                WHEN k.known_on THEN 'on' \
                ELSE 'unknown' END AS counted, \
           CASE WHEN k.known_on AND k.measured_w IS NOT NULL \
                  AND k.measured_at >= clock_timestamp() - make_interval(secs => $1) \
                  AND (k.commanded_until IS NULL OR k.measured_at >= k.commanded_until \
                       + make_interval(secs => k.settle_ms / 1000.0)) \
                THEN greatest(k.steady_w, k.measured_w) ELSE k.steady_w END AS on_w \
         FROM k LEFT JOIN s ON s.rack = k.rack"
        )
    };
}

/// One component's row of [`counted_sql!`].
#[derive(sqlx::FromRow)]
pub(crate) struct CountedRow {
    pub(crate) rack: String,
    pub(crate) component: String,
    component_type: String,
    bmc_url: String,
    steady_w: i64,
    power: Option<String>,
    reachable: Option<bool>,
    source: Option<String>,
    observed_at: Option<OffsetDateTime>,
    measured_w: Option<i32>,
    #[allow(dead_code)]
    measured_at: Option<OffsetDateTime>,
    grant_w: Option<i64>,
    counted: String,
    on_w: i64,
}

impl CountedRow {
    pub(crate) fn counted(&self) -> Counted {
        match self.counted.as_str() {
            "granted" => Counted::Granted,
            "off" => Counted::Off,
            "unpowered" => Counted::Unpowered,
            "on" => Counted::On,
            _ => Counted::Unknown,
        }
    }

    /// What it counts for, W.
    pub(crate) fn counted_w(&self) -> u64 {
        let w = match self.counted() {
            Counted::Off | Counted::Unpowered => 0,
            Counted::On => self.on_w,
            Counted::Granted | Counted::Unknown => self.steady_w,
        };
        u64::try_from(w).unwrap_or(0)
    }
}

/// What a domain's components other than one count for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct DomainDraw {
    /// Known on (or granted), W: steady draw, or measured where higher.
    pub known_w: u64,
    /// Of `known_w`, what was measured above the components' steady draw.
    pub measured_excess_w: u64,
    /// Not known, at steady draw, W.
    pub unknown_w: u64,
    /// How many are not known.
    pub unknown: u32,
}

pub(crate) fn window_s(known_for: Duration) -> f64 {
    known_for.as_secs_f64()
}

/// What the components of `domain`'s racks, but `except` (rack,
/// component), count for now: summed by the database, so one admission
/// reads four numbers, not the row's every component.
pub(crate) async fn domain_draw(
    conn: &mut PgConnection,
    domain: &str,
    except: (&str, &str),
    known_for: Duration,
) -> Result<DomainDraw, StoreError> {
    let (known_w, measured_excess_w, unknown_w, unknown): (i64, i64, i64, i64) =
        sqlx::query_as(concat!(
            "SELECT \
               COALESCE(sum(CASE x.counted WHEN 'on' THEN x.on_w \
                 WHEN 'granted' THEN x.steady_w ELSE 0 END), 0)::bigint, \
               COALESCE(sum(CASE WHEN x.counted = 'on' THEN greatest(x.on_w - x.steady_w, 0) \
                 ELSE 0 END), 0)::bigint, \
               COALESCE(sum(CASE WHEN x.counted = 'unknown' THEN x.steady_w ELSE 0 END), 0)::bigint, \
               count(*) FILTER (WHERE x.counted = 'unknown') \
             FROM (",
            counted_sql!("r.power_domains @> ARRAY[$2]::text[]"),
            ") AS x WHERE NOT (x.rack = $3 AND x.component = $4)"
        ))
        .bind(window_s(known_for))
        .bind(domain)
        .bind(except.0)
        .bind(except.1)
        .fetch_one(&mut *conn)
        .await?;
    let w = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(DomainDraw {
        known_w: w(known_w),
        measured_excess_w: w(measured_excess_w),
        unknown_w: w(unknown_w),
        unknown: u32::try_from(unknown).unwrap_or(u32::MAX),
    })
}

/// A power state's name as stored.
fn power_name(p: PowerState) -> &'static str {
    p.as_str()
}

impl Store {
    /// Records observations: each replaces what is known of its component
    /// only when newer. Returns how many did.
    pub async fn record_power(&self, states: &[ComponentState]) -> Result<u64, StoreError> {
        // The newest per component (one statement may not touch a row twice).
        let mut newest: BTreeMap<(&str, &str), &ComponentState> = BTreeMap::new();
        for s in states {
            let key = (s.rack.as_str(), s.component.as_str());
            if newest
                .get(&key)
                .is_none_or(|o| o.observed_at < s.observed_at)
            {
                newest.insert(key, s);
            }
        }
        let all: Vec<&ComponentState> = newest.into_values().collect();
        let mut recorded = 0;
        for chunk in all.chunks(BATCH) {
            let racks: Vec<&str> = chunk.iter().map(|s| s.rack.as_str()).collect();
            let components: Vec<&str> = chunk.iter().map(|s| s.component.as_str()).collect();
            let powers: Vec<&str> = chunk.iter().map(|s| power_name(s.power)).collect();
            let reachable: Vec<bool> = chunk.iter().map(|s| s.reachable).collect();
            let sources: Vec<&str> = chunk.iter().map(|s| s.source.as_str()).collect();
            let at: Vec<OffsetDateTime> = chunk.iter().map(|s| s.observed_at).collect();
            let measured: Vec<Option<i32>> = chunk
                .iter()
                .map(|s| s.measured_w.and_then(|w| i32::try_from(w).ok()))
                .collect();
            recorded += sqlx::query(
                "INSERT INTO component_power \
                   (rack, component, power, reachable, source, observed_at, measured_w, measured_at) \
                 SELECT rack, component, power, reachable, source, observed_at, measured_w, \
                        CASE WHEN measured_w IS NULL THEN NULL ELSE observed_at END \
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::bool[], $5::text[], \
                             $6::timestamptz[], $7::int[]) \
                   AS o(rack, component, power, reachable, source, observed_at, measured_w) \
                 ON CONFLICT (rack, component) DO UPDATE SET \
                   power = EXCLUDED.power, reachable = EXCLUDED.reachable, \
                   source = EXCLUDED.source, observed_at = EXCLUDED.observed_at, \
                   measured_w = COALESCE(EXCLUDED.measured_w, component_power.measured_w), \
                   measured_at = COALESCE(EXCLUDED.measured_at, component_power.measured_at) \
                 WHERE EXCLUDED.observed_at > component_power.observed_at",
            )
            .bind(&racks)
            .bind(&components)
            .bind(&powers)
            .bind(&reachable)
            .bind(&sources)
            .bind(&at)
            .bind(&measured)
            .execute(self.pool())
            .await?
            .rows_affected();
        }
        Ok(recorded)
    }

    /// Records that the devices accepted a task's power-ons: each one's
    /// grants count its inrush until its settle time has passed from now
    /// (the report's arrival: never earlier than the send), and the
    /// component is known to be powering on, by command.
    pub async fn power_sent(&self, report: &PowerSent) -> Result<PowerSentReply, StoreError> {
        let components: Vec<&str> = report.sent.iter().map(|s| s.component.as_str()).collect();
        let mut tx = self.pool().begin().await?;
        let grants = sqlx::query(
            "UPDATE power_grants SET sent_at = clock_timestamp(), \
               expires_at = least(expires_at, \
                 clock_timestamp() + make_interval(secs => settle_ms / 1000.0)) \
             WHERE task_id = $1 AND rack = $2 AND component = ANY($3) AND sent_at IS NULL \
               AND starts_at <= clock_timestamp()",
        )
        .bind(report.task.as_uuid())
        .bind(&report.rack)
        .bind(&components)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query(
            "INSERT INTO component_power \
               (rack, component, power, reachable, source, observed_at, commanded_until) \
             SELECT $1, c, 'powering_on', true, 'command', clock_timestamp(), clock_timestamp() \
             FROM unnest($2::text[]) AS c \
             ON CONFLICT (rack, component) DO UPDATE SET \
               power = 'powering_on', reachable = true, source = 'command', \
               observed_at = greatest(component_power.observed_at, EXCLUDED.observed_at), \
               commanded_until = greatest(component_power.commanded_until, EXCLUDED.commanded_until)",
        )
        .bind(&report.rack)
        .bind(&components)
        .execute(&mut *tx)
        .await?;
        self.commit(tx).await?;
        Ok(PowerSentReply {
            grants: u32::try_from(grants).unwrap_or(u32::MAX),
        })
    }

    /// Each component of a rack (with a BMC): its power as known, how it
    /// counts, its desired power (the rack's open task) and any held
    /// command.
    pub async fn rack_power(
        &self,
        rack: &RackRef,
        known_for: Duration,
    ) -> Result<RackPowerReply, StoreError> {
        let record = self.get_rack(rack).await?;
        let mut conn = self.pool().acquire().await?;
        let rows: Vec<CountedRow> = sqlx::query_as(counted_sql!("r.name = $2"))
            .bind(window_s(known_for))
            .bind(&record.name)
            .fetch_all(&mut *conn)
            .await?;
        // The rack's open task, and the components it acts on.
        let open: Option<(uuid::Uuid, String, Vec<String>)> = sqlx::query_as(
            "SELECT t.id, t.operation_code, \
               COALESCE((SELECT array_agg(x->>'name') FROM jsonb_each(t.components) e, \
                 jsonb_array_elements(e.value) x), '{}') \
             FROM tasks t WHERE t.rack_name = $1 AND t.status = 'running' \
             ORDER BY t.created_at DESC LIMIT 1",
        )
        .bind(&record.name)
        .fetch_optional(&mut *conn)
        .await?;
        let held: Vec<(String, String)> = sqlx::query_as(concat!(
            "SELECT component, reason FROM power_waits WHERE rack = $1 AND ",
            crate::power::wait_current!(),
        ))
        .bind(&record.name)
        .fetch_all(&mut *conn)
        .await?;
        let held: BTreeMap<String, String> = held.into_iter().collect();
        // A power task's end: off for a power-off, on for any other.
        let desired_power = open.as_ref().and_then(|(_, operation, _)| {
            use flow_rules::PowerOperation as P;
            match operation.parse::<P>().ok()? {
                P::PowerOff | P::ForcePowerOff => Some(PowerState::Off),
                _ => Some(PowerState::On),
            }
        });
        let now = OffsetDateTime::now_utc();
        let mut components = Vec::new();
        for row in &rows {
            if row.bmc_url.is_empty() {
                continue;
            }
            let component_type: ComponentType =
                row.component_type
                    .parse()
                    .map_err(|e: flow_rules::UnknownComponentType| StoreError::Corrupt {
                        what: "component type".into(),
                        reason: e.to_string(),
                    })?;
            let acted_on = open
                .as_ref()
                .is_some_and(|(_, _, names)| names.is_empty() || names.contains(&row.component));
            components.push(ComponentPower {
                component: row.component.clone(),
                component_type,
                power: row
                    .power
                    .as_deref()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(PowerState::Unknown),
                reachable: row.reachable.unwrap_or(false),
                source: row
                    .source
                    .as_deref()
                    .and_then(|s| s.parse::<ObservationSource>().ok()),
                observed_at: row.observed_at,
                age_s: row
                    .observed_at
                    .map(|t| ((now - t).as_seconds_f64() * 10.0).round() / 10.0),
                measured_w: row.measured_w.and_then(|w| u32::try_from(w).ok()),
                steady_w: u32::try_from(row.steady_w).unwrap_or(0),
                counted: row.counted(),
                counted_w: u32::try_from(row.counted_w()).unwrap_or(u32::MAX),
                desired: if acted_on { desired_power } else { None },
                inrush_w: row.grant_w.and_then(|w| u32::try_from(w).ok()),
                held: held.get(&row.component).cloned(),
            });
        }
        components.sort_by(|a, b| a.component.cmp(&b.component));
        Ok(RackPowerReply {
            rack: record.name,
            domains: record.power_domains,
            known_for_s: known_for.as_secs(),
            task: open.map(|(id, _, _)| TaskId(id)),
            components,
        })
    }
}

/// How long one read of a domain's counted draw serves its admissions.
/// Reading it costs a pass over every component of the domain (1,750 in a
/// row of 50 NVL72 racks, ~30 ms); read per admission, under the domain's
/// lock, it capped a site's budgeted power-on at a few dozen commands a
/// second and the schedulers' answers came later than the workers waited.
/// Flow's own grants since the read are counted at admission (under the
/// lock, from the grants table); what a read or an event changed since is
/// counted at most this much later — within the watchers' read period and
/// the BMCs' own event latency.
pub const DRAW_SNAPSHOT_FOR: Duration = Duration::from_millis(500);

/// One component's part of a domain's draw at a snapshot.
#[derive(Debug, Clone, Copy)]
struct Part {
    counted: Counted,
    counted_w: u64,
    steady_w: u64,
    measured_excess_w: u64,
}

/// A domain's counted draw as read at one time: every component's part,
/// and the newest grant of the domain the read could see.
#[derive(Debug)]
pub(crate) struct DrawSnapshot {
    taken: std::time::Instant,
    /// Grants of the domain with an ID above this are newer than the read.
    /// A domain's grants are added under its row lock, so their IDs follow
    /// the order they were committed in.
    max_grant_id: i64,
    parts: std::collections::HashMap<(String, String), Part>,
    total: DomainDraw,
}

impl DrawSnapshot {
    async fn read(
        conn: &mut PgConnection,
        domain: &str,
        known_for: Duration,
    ) -> Result<DrawSnapshot, StoreError> {
        // First the newest grant, then the draw: a grant committed in
        // between is counted twice (in the draw and after it), never not.
        let max_grant_id: i64 =
            sqlx::query_scalar("SELECT COALESCE(max(id), 0) FROM power_grants WHERE domain = $1")
                .bind(domain)
                .fetch_one(&mut *conn)
                .await?;
        let rows: Vec<CountedRow> =
            sqlx::query_as(counted_sql!("r.power_domains @> ARRAY[$2]::text[]"))
                .bind(window_s(known_for))
                .bind(domain)
                .fetch_all(&mut *conn)
                .await?;
        let mut total = DomainDraw::default();
        let mut parts = std::collections::HashMap::with_capacity(rows.len());
        for row in rows {
            let part = row.part();
            total.add(part, 1);
            parts.insert((row.rack, row.component), part);
        }
        Ok(DrawSnapshot {
            taken: std::time::Instant::now(),
            max_grant_id,
            parts,
            total,
        })
    }

    /// The components Flow granted a power-on in the domain since the read
    /// (the grants table, read under the domain's lock).
    pub(crate) async fn granted_since(
        &self,
        conn: &mut PgConnection,
        domain: &str,
    ) -> Result<std::collections::HashSet<(String, String)>, StoreError> {
        let since: Vec<(String, String)> = sqlx::query_as(
            "SELECT DISTINCT rack, component FROM power_grants WHERE domain = $1 AND id > $2",
        )
        .bind(domain)
        .bind(self.max_grant_id)
        .fetch_all(&mut *conn)
        .await?;
        Ok(since.into_iter().collect())
    }

    /// What the domain's components but `except` count for now: the read,
    /// less `except`'s part, plus the steady draw of every component of
    /// `since` (granted a power-on after the read) that the read counted
    /// off.
    pub(crate) fn draw(
        &self,
        since: &std::collections::HashSet<(String, String)>,
        except: (&str, &str),
    ) -> DomainDraw {
        let mut draw = self.total;
        if let Some(part) = self.parts.get(&(except.0.to_owned(), except.1.to_owned())) {
            draw.add(*part, -1);
        }
        for key in since {
            if (key.0.as_str(), key.1.as_str()) == except {
                continue;
            }
            if let Some(part) = self.parts.get(key)
                && matches!(part.counted, Counted::Off | Counted::Unpowered)
            {
                draw.known_w += part.steady_w;
            }
        }
        draw
    }
}

impl CountedRow {
    fn part(&self) -> Part {
        let counted = self.counted();
        Part {
            counted,
            counted_w: self.counted_w(),
            steady_w: u64::try_from(self.steady_w).unwrap_or(0),
            measured_excess_w: if counted == Counted::On {
                u64::try_from((self.on_w - self.steady_w).max(0)).unwrap_or(0)
            } else {
                0
            },
        }
    }
}

impl DomainDraw {
    /// Adds (`sign` 1) or takes away (−1) one component's part.
    fn add(&mut self, part: Part, sign: i8) {
        let apply = |v: &mut u64, w: u64| {
            *v = if sign > 0 {
                v.saturating_add(w)
            } else {
                v.saturating_sub(w)
            }
        };
        if part.counted == Counted::Unknown {
            apply(&mut self.unknown_w, part.counted_w);
            self.unknown = if sign > 0 {
                self.unknown.saturating_add(1)
            } else {
                self.unknown.saturating_sub(1)
            };
        } else {
            apply(&mut self.known_w, part.counted_w);
            apply(&mut self.measured_excess_w, part.measured_excess_w);
        }
    }
}

/// The snapshots a store keeps, by domain: one read serves every admission
/// for [`DRAW_SNAPSHOT_FOR`]; admissions that find it old wait for one of
/// them to read it again.
#[derive(Debug, Clone, Default)]
pub(crate) struct Draws {
    by_domain: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Slot>>>,
}

/// One domain's snapshot, read again by one admission at a time.
type Slot = std::sync::Arc<tokio::sync::Mutex<Option<std::sync::Arc<DrawSnapshot>>>>;

impl Draws {
    /// Each of `domains`' snapshot, read again where older than
    /// [`DRAW_SNAPSHOT_FOR`] (outside any domain lock).
    pub(crate) async fn fresh(
        &self,
        pool: &sqlx::PgPool,
        domains: &[&str],
        known_for: Duration,
    ) -> Result<std::collections::HashMap<String, std::sync::Arc<DrawSnapshot>>, StoreError> {
        let mut out = std::collections::HashMap::new();
        for domain in domains {
            let slot = {
                let mut map = self.by_domain.lock().unwrap_or_else(|e| e.into_inner());
                std::sync::Arc::clone(map.entry((*domain).to_owned()).or_default())
            };
            let mut held = slot.lock().await;
            let snapshot = match held.as_ref() {
                Some(s) if s.taken.elapsed() < DRAW_SNAPSHOT_FOR => std::sync::Arc::clone(s),
                _ => {
                    let mut conn = pool.acquire().await?;
                    let s = std::sync::Arc::new(
                        DrawSnapshot::read(&mut conn, domain, known_for).await?,
                    );
                    *held = Some(std::sync::Arc::clone(&s));
                    s
                }
            };
            out.insert((*domain).to_owned(), snapshot);
        }
        Ok(out)
    }
}
