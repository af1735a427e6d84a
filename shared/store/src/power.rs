//! Power domains, draw models and admission (`docs/operating-safety.md`).
//!
//! Admission runs in one transaction holding the row locks of the domains
//! the command is in (taken in name order, so two schedulers asking for
//! overlapping domains cannot deadlock): the decision is
//! [`flow_decisions::admission::decide`] over what it read; a grant's effects
//! (an inrush share until it expires, the domain's last power-on time, a
//! shelf counted off or on) are written before the lock is released. Every
//! scheduler answers `power.admit` against the same rows, so a budget holds
//! across schedulers, workers, tasks, runs and schedules.

use std::time::Duration;

use flow_decisions::admission::{self, Command, Decision, DomainState, Grant, SPACING_SLACK_MS};
use flow_protocol::TaskId;
use flow_protocol::api::RackRecord;
use flow_protocol::power::{
    Admission, DomainName, PowerAdmit, PowerDomainDeleteReply, PowerDomainListReply,
    PowerDomainRecord, PowerDomainSet, PowerModelListReply, PowerModelSet, PowerWait,
    RackPowerDomains, draws_inrush,
};
use flow_rules::ComponentType;
use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::racks::{find_rack, rack_record};
use crate::{Store, StoreError};

/// How long after its grant a command may still be sent: until it is
/// reported sent its inrush is counted for this plus its settle time (a
/// grant never reported expires then); once reported, for its settle time
/// from the report. In a domain that spaces its power-ons the slack is
/// narrower (`SPACING_SLACK_MS`, `shared/decisions/src/admission.rs`):
/// every command there, granted now or reserved, is answered as a
/// reservation sendable only that long.
pub const SEND_WINDOW: Duration = Duration::from_secs(1);

/// The SQL condition: whether a `power_waits` row is a wait now: until its
/// reserved time, or a little past the next ask of a capped shelf; a row
/// from before reservations, while asked about within 30 s.
macro_rules! wait_current {
    () => {
        "COALESCE(until_at, seen_at + interval '30 seconds') > now()"
    };
}
pub(crate) use wait_current;

/// How long after its next ask a command held by the shelves-off cap still
/// counts as waiting (it asks again every `SHELVES_RETRY_MS`).
pub(crate) const ASK_GRACE_MS: u64 = 2_000;

/// The largest budget accepted, kW (a gigawatt).
const MAX_BUDGET_KW: f64 = 1_000_000.0;

fn invalid(field: &str, problem: String) -> StoreError {
    StoreError::Invalid {
        message: format!("{field}: {problem}"),
        details: vec![format!("{field}: {problem}")],
    }
}

fn watts(kw: f64) -> i64 {
    // Bounded by MAX_BUDGET_KW before conversion.
    #[allow(clippy::cast_possible_truncation)]
    let w = (kw * 1000.0).round() as i64;
    w
}

fn kilowatts(w: i64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let kw = w as f64 / 1000.0;
    kw
}

pub(crate) fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A domain's limits: name, budget W, shelves-off cap, spacing ms.
pub(crate) type DomainRow = (String, Option<i64>, Option<i32>, Option<i64>);

/// A domain's settings from its row, with `grants` and nothing yet counted.
pub(crate) fn domain_state(row: &DomainRow, grants: Vec<Grant>) -> DomainState {
    let (name, budget_w, max_off, spacing) = row;
    DomainState {
        name: name.clone(),
        budget_w: budget_w.map(unsigned),
        max_shelves_off: max_off.and_then(|n| u32::try_from(n).ok()),
        min_spacing_ms: spacing.map(unsigned),
        known_w: 0,
        measured_excess_w: 0,
        unknown_w: 0,
        unknown: 0,
        grants,
        shelves_off: 0,
    }
}

/// A domain's limits as shown: budget W, shelves-off cap, spacing ms, last
/// change.
type LimitsRow = (Option<i64>, Option<i32>, Option<i64>, OffsetDateTime);

impl Store {
    /// Creates a domain or replaces its limits.
    pub async fn set_power_domain(
        &self,
        request: &PowerDomainSet,
    ) -> Result<PowerDomainRecord, StoreError> {
        if let Some(kw) = request.budget_kw
            && !(kw.is_finite() && kw > 0.0 && kw <= MAX_BUDGET_KW)
        {
            return Err(invalid(
                "budget_kw",
                format!("{kw} is not a budget: give kW above 0 and at most {MAX_BUDGET_KW}"),
            ));
        }
        if let Some(ms) = request.min_spacing_ms
            && ms > 3_600_000
        {
            return Err(invalid(
                "min_spacing_ms",
                format!("{ms} ms is over an hour between power-ons"),
            ));
        }
        let max_off = request
            .max_shelves_off
            .map(|n| {
                i32::try_from(n)
                    .map_err(|_| invalid("max_shelves_off", format!("{n} is too large")))
            })
            .transpose()?;
        let mut tx = self.pool().begin().await?;
        sqlx::query(
            "INSERT INTO power_domains (name, budget_w, max_shelves_off, min_spacing_ms) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO UPDATE SET budget_w = $2, \
             max_shelves_off = $3, min_spacing_ms = $4, updated_at = now()",
        )
        .bind(request.name.as_str())
        .bind(request.budget_kw.map(watts))
        .bind(max_off)
        .bind(
            request
                .min_spacing_ms
                .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX)),
        )
        .execute(&mut *tx)
        .await?;
        let record = domain_record(&mut tx, &request.name, self.power_known_for()).await?;
        self.commit(tx).await?;
        tracing::info!(domain = %request.name, budget_kw = ?request.budget_kw, max_shelves_off = ?request.max_shelves_off, min_spacing_ms = ?request.min_spacing_ms, "power domain set");
        Ok(record)
    }

    /// A domain as it stands.
    pub async fn power_domain(&self, name: &DomainName) -> Result<PowerDomainRecord, StoreError> {
        let mut conn = self.pool().acquire().await?;
        domain_record(&mut conn, name, self.power_known_for()).await
    }

    /// Every domain, by name.
    pub async fn list_power_domains(&self) -> Result<PowerDomainListReply, StoreError> {
        let mut conn = self.pool().acquire().await?;
        let names: Vec<String> = sqlx::query_scalar("SELECT name FROM power_domains ORDER BY name")
            .fetch_all(&mut *conn)
            .await?;
        let mut domains = Vec::with_capacity(names.len());
        for name in names {
            let name = DomainName::try_from(name).map_err(|e| StoreError::Corrupt {
                what: "power domain name".into(),
                reason: e,
            })?;
            domains.push(domain_record(&mut conn, &name, self.power_known_for()).await?);
        }
        Ok(PowerDomainListReply { domains })
    }

    /// Deletes a domain with its grants and shelf counts; racks keep naming
    /// it (without limits) until changed.
    pub async fn delete_power_domain(
        &self,
        name: &DomainName,
    ) -> Result<PowerDomainDeleteReply, StoreError> {
        let mut tx = self.pool().begin().await?;
        let n = sqlx::query("DELETE FROM power_domains WHERE name = $1")
            .bind(name.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        self.commit(tx).await?;
        Ok(PowerDomainDeleteReply { deleted: n > 0 })
    }

    /// Sets the draw of a component type for a rack model (`""`: all).
    pub async fn set_power_model(
        &self,
        model: &PowerModelSet,
    ) -> Result<PowerModelSet, StoreError> {
        if model.steady_w > model.inrush_w {
            return Err(invalid(
                "steady_w",
                format!(
                    "{} W is above the inrush of {} W",
                    model.steady_w, model.inrush_w
                ),
            ));
        }
        let int = |field: &str, v: u32| {
            i32::try_from(v).map_err(|_| invalid(field, format!("{v} is too large")))
        };
        let mut tx = self.pool().begin().await?;
        sqlx::query(
            "INSERT INTO power_models (component_type, rack_model, inrush_w, steady_w, settle_ms) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (component_type, rack_model) DO UPDATE \
             SET inrush_w = $3, steady_w = $4, settle_ms = $5, updated_at = now()",
        )
        .bind(model.component_type.as_str())
        .bind(&model.rack_model)
        .bind(int("inrush_w", model.inrush_w)?)
        .bind(int("steady_w", model.steady_w)?)
        .bind(int("settle_ms", model.settle_ms)?)
        .execute(&mut *tx)
        .await?;
        self.commit(tx).await?;
        Ok(model.clone())
    }

    /// Every draw model, by type then rack model.
    pub async fn list_power_models(&self) -> Result<PowerModelListReply, StoreError> {
        let rows: Vec<(String, String, i32, i32, i32)> = sqlx::query_as(
            "SELECT component_type, rack_model, inrush_w, steady_w, settle_ms FROM power_models \
             ORDER BY component_type, rack_model",
        )
        .fetch_all(self.pool())
        .await?;
        let models = rows
            .into_iter()
            .map(|(t, rack_model, inrush, steady, settle)| {
                let component_type =
                    t.parse::<ComponentType>()
                        .map_err(|e| StoreError::Corrupt {
                            what: "power model".into(),
                            reason: e.to_string(),
                        })?;
                let u = |v: i32| u32::try_from(v).unwrap_or(0);
                Ok(PowerModelSet {
                    component_type,
                    rack_model,
                    inrush_w: u(inrush),
                    steady_w: u(steady),
                    settle_ms: u(settle),
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(PowerModelListReply { models })
    }

    /// Replaces the domains a rack belongs to (tasks submitted later read
    /// them).
    pub async fn set_rack_power_domains(
        &self,
        request: &RackPowerDomains,
    ) -> Result<RackRecord, StoreError> {
        let mut names: Vec<&str> = request.domains.iter().map(DomainName::as_str).collect();
        names.sort_unstable();
        names.dedup();
        let mut tx = self.pool().begin().await?;
        let (id, _) = find_rack(&mut tx, &request.rack).await?;
        sqlx::query("UPDATE racks SET power_domains = $2, updated_at = now() WHERE id = $1")
            .bind(id.as_uuid())
            .bind(&names)
            .execute(&mut *tx)
            .await?;
        let record = rack_record(&mut tx, id).await?;
        self.commit(tx).await?;
        Ok(record)
    }

    /// The commands of a task waiting for a power domain now.
    pub async fn power_waits(&self, task: TaskId) -> Result<Vec<PowerWait>, StoreError> {
        let rows: Vec<(String, String, OffsetDateTime)> = sqlx::query_as(concat!(
            "SELECT component, reason, since FROM power_waits WHERE task_id = $1 AND ",
            wait_current!(),
            " ORDER BY component"
        ))
        .bind(task.as_uuid())
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(component, reason, since)| PowerWait {
                component,
                reason,
                since,
            })
            .collect())
    }

    /// What a command asks of admission: `None` when it asks nothing (no
    /// domain, or a tray's power-off).
    async fn asked(&self, request: &PowerAdmit) -> Result<Option<Asked>, StoreError> {
        let mut names: Vec<String> = request
            .domains
            .iter()
            .map(|d| d.as_str().to_owned())
            .collect();
        names.sort_unstable();
        names.dedup();
        let shelf = request.component_type == ComponentType::PowerShelf;
        let inrush = draws_inrush(request.operation);
        if names.is_empty() || !(inrush || shelf) {
            return Ok(None);
        }
        let (inrush_w, steady_w, settle_ms) = {
            let mut conn = self.pool().acquire().await?;
            model(&mut conn, request.component_type, &request.rack).await?
        };
        let window_ms = u64::try_from(SEND_WINDOW.as_millis()).unwrap_or(u64::MAX);
        let hold_ms = unsigned(settle_ms) + window_ms;
        let command = if inrush {
            Command::Inrush {
                excess_w: unsigned(inrush_w - steady_w),
                steady_w: unsigned(steady_w),
                hold_ms,
            }
        } else {
            Command::ShelfOff {
                emergency: request.emergency,
            }
        };
        Ok(Some(Asked {
            names,
            inrush,
            command,
            excess_w: inrush_w - steady_w,
            hold_ms,
            settle_ms,
        }))
    }

    /// What admission would answer now for `request`, read and decided as
    /// [`Store::admit_power`] does, locking and writing nothing (a plan
    /// preview): `None` when the command asks no domain.
    pub async fn preview_power(
        &self,
        request: &PowerAdmit,
    ) -> Result<Option<Decision>, StoreError> {
        let Some(asked) = self.asked(request).await? else {
            return Ok(None);
        };
        let mut conn = self.pool().acquire().await?;
        let Some(read) = read_domains(
            &mut conn,
            &asked.names(),
            request,
            asked.inrush,
            false,
            self.power_known_for(),
        )
        .await?
        else {
            return Ok(None);
        };
        Ok(Some(admission::decide(
            &read.states,
            asked.command,
            unsigned(read.now_ms),
        )))
    }

    /// Decides when a power command may go — now, at a reserved time, or
    /// never — and records the grant (its share from its start) or the
    /// wait's reason (`shared/decisions/src/admission.rs`).
    #[tracing::instrument(skip_all, fields(task_id = %request.task, rack = %request.rack, component = %request.component))]
    pub async fn admit_power(&self, request: &PowerAdmit) -> Result<Admission, StoreError> {
        let Some(asked) = self.asked(request).await? else {
            return Ok(Admission::Granted);
        };
        // What the worker read just before asking is known before deciding.
        if let Some(seen) = request.observed {
            self.record_power(&[flow_protocol::state::ComponentState {
                schema: flow_protocol::api::SCHEMA,
                rack: request.rack.clone(),
                component: request.component.clone(),
                power: seen.power,
                reachable: true,
                error: String::new(),
                observed_at: flow_protocol::task::timestamp::from_ms(seen.at_ms),
                source: flow_protocol::state::ObservationSource::Read,
                measured_w: None,
            }])
            .await?;
        }
        if asked.inrush {
            return self.admit_inrush(request, asked).await;
        }
        self.admit_shelf_off(request, &asked).await
    }

    /// Decides a power shelf's power-off against the shelves-off caps of its
    /// domains, and counts the shelf off when it may go.
    async fn admit_shelf_off(
        &self,
        request: &PowerAdmit,
        asked: &Asked,
    ) -> Result<Admission, StoreError> {
        let mut tx = self.pool().begin().await?;
        let Some(Read {
            rows,
            states,
            now_ms,
        }) = read_domains(
            &mut tx,
            &asked.names(),
            request,
            false,
            true,
            self.power_known_for(),
        )
        .await?
        else {
            tx.commit().await?;
            return Ok(Admission::Granted);
        };
        let decision = match admission::decide(&states, asked.command, unsigned(now_ms)) {
            Decision::Refuse { reason } => Admission::Refused { reason },
            Decision::Wait {
                until_ms,
                reason,
                domain,
            } => {
                record_wait(&mut tx, request, &domain, until_ms + ASK_GRACE_MS, &reason).await?;
                Admission::Wait { until_ms, reason }
            }
            Decision::Admit | Decision::Reserve { .. } => {
                count_shelf_off(&mut tx, request, &rows).await?;
                Admission::Granted
            }
        };
        if !matches!(decision, Admission::Wait { .. }) {
            sqlx::query(
                "DELETE FROM power_waits WHERE task_id = $1 AND rack = $2 AND component = $3",
            )
            .bind(request.task.as_uuid())
            .bind(&request.rack)
            .bind(&request.component)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        match &decision {
            Admission::Wait { reason, .. } => tracing::debug!(%reason, "power shelf off waits"),
            Admission::Refused { reason } => tracing::warn!(%reason, "power shelf off refused"),
            _ => tracing::debug!("power shelf off admitted"),
        }
        Ok(decision)
    }
}

/// What a command asks of admission.
#[derive(Debug, Clone)]
pub(crate) struct Asked {
    /// Its domains, by name, sorted.
    pub(crate) names: Vec<String>,
    /// A power-on or reset (else a shelf's power-off).
    inrush: bool,
    /// The command decided.
    pub(crate) command: Command,
    /// Inrush − steady, W.
    pub(crate) excess_w: i64,
    /// How long a grant holds it until reported sent, ms.
    pub(crate) hold_ms: u64,
    /// How long its inrush lasts once sent, ms.
    pub(crate) settle_ms: i64,
}

impl Asked {
    fn names(&self) -> Vec<&str> {
        self.names.iter().map(String::as_str).collect()
    }
}

/// What admission reads of a command's domains.
struct Read {
    rows: Vec<DomainRow>,
    states: Vec<DomainState>,
    now_ms: i64,
}

/// Reads the state of the domains `names` (row-locked in name order when
/// `lock`) for `request`: steady draw and grants for an inrush, shelves
/// off for a shelf's power-off. `None` when none of them exists.
async fn read_domains(
    conn: &mut PgConnection,
    names: &[&str],
    request: &PowerAdmit,
    inrush: bool,
    lock: bool,
    known_for: Duration,
) -> Result<Option<Read>, StoreError> {
    let sql = if lock {
        "SELECT name, budget_w, max_shelves_off, min_spacing_ms FROM power_domains \
         WHERE name = ANY($1) ORDER BY name FOR UPDATE"
    } else {
        "SELECT name, budget_w, max_shelves_off, min_spacing_ms FROM power_domains \
         WHERE name = ANY($1) ORDER BY name"
    };
    let rows: Vec<DomainRow> = sqlx::query_as(sql)
        .bind(names)
        .fetch_all(&mut *conn)
        .await?;
    if rows.is_empty() {
        return Ok(None);
    }
    // Read after the locks: the time every grant is judged against.
    let now_ms: i64 =
        sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
            .fetch_one(&mut *conn)
            .await?;
    let mut states = Vec::with_capacity(rows.len());
    for row in &rows {
        let (name, budget_w, max_off, spacing) = row;
        let mut state = domain_state(row, Vec::new());
        if inrush && (budget_w.is_some() || spacing.is_some()) {
            if budget_w.is_some() {
                let except = (request.rack.as_str(), request.component.as_str());
                let draw =
                    crate::observed::domain_draw(&mut *conn, name, except, known_for).await?;
                state.known_w = draw.known_w;
                state.measured_excess_w = draw.measured_excess_w;
                state.unknown_w = draw.unknown_w;
                state.unknown = draw.unknown;
            }
            let gap = spacing.map_or(0, |ms| ms + SPACING_SLACK_MS as i64);
            state.grants = live_grants(&mut *conn, name, gap).await?;
        }
        if !inrush && max_off.is_some() {
            let off: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM power_shelves_off WHERE domain = $1 \
                 AND NOT (rack = $2 AND component = $3)",
            )
            .bind(name)
            .bind(&request.rack)
            .bind(&request.component)
            .fetch_one(&mut *conn)
            .await?;
            state.shelves_off = u32::try_from(off).unwrap_or(u32::MAX);
        }
        states.push(state);
    }
    Ok(Some(Read {
        rows,
        states,
        now_ms,
    }))
}

/// A domain's grants that count for a command asked now: those not yet
/// expired, and those started within the domain's spacing.
pub(crate) async fn live_grants(
    conn: &mut PgConnection,
    domain: &str,
    spacing_ms: i64,
) -> Result<Vec<Grant>, StoreError> {
    let rows: Vec<(i64, i64, i64)> = sqlx::query_as(
        "SELECT excess_w, (extract(epoch FROM starts_at) * 1000)::bigint, \
         (extract(epoch FROM expires_at) * 1000)::bigint FROM power_grants \
         WHERE domain = $1 AND (expires_at > clock_timestamp() \
           OR starts_at > clock_timestamp() - make_interval(secs => $2))",
    )
    .bind(domain)
    .bind(spacing_ms as f64 / 1000.0)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(w, starts, expires)| Grant {
            excess_w: unsigned(w),
            starts_ms: unsigned(starts),
            expires_ms: unsigned(expires),
        })
        .collect())
}

/// Records why a command waits in `domain`, and until when, for `task
/// show`.
async fn record_wait(
    conn: &mut PgConnection,
    request: &PowerAdmit,
    domain: &str,
    until_ms: u64,
    reason: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO power_waits (task_id, rack, component, domain, reason, until_at) \
         VALUES ($1, $2, $3, $4, $5, to_timestamp($6::float8 / 1000)) \
         ON CONFLICT (task_id, rack, component) \
         DO UPDATE SET domain = $4, reason = $5, seen_at = now(), until_at = to_timestamp($6::float8 / 1000)",
    )
    .bind(request.task.as_uuid())
    .bind(&request.rack)
    .bind(&request.component)
    .bind(domain)
    .bind(reason)
    .bind(until_ms as f64)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Counts a power shelf off in each of its domains (until a power-on of it
/// is granted, `crate::admission`).
async fn count_shelf_off(
    conn: &mut PgConnection,
    request: &PowerAdmit,
    rows: &[DomainRow],
) -> Result<(), StoreError> {
    let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    sqlx::query(
        "INSERT INTO power_shelves_off (domain, rack, component, task_id) \
         SELECT d, $2, $3, $4 FROM unnest($1::text[]) AS d ON CONFLICT DO NOTHING",
    )
    .bind(&names)
    .bind(&request.rack)
    .bind(&request.component)
    .bind(request.task.as_uuid())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The draw of a component type in a rack: (inrush W, steady W, settle
/// ms), the rack model's own model first; none known draws nothing.
async fn model(
    conn: &mut PgConnection,
    component_type: ComponentType,
    rack: &str,
) -> Result<(i64, i64, i64), StoreError> {
    let row: Option<(i32, i32, i32)> = sqlx::query_as(
        "SELECT inrush_w, steady_w, settle_ms FROM power_models WHERE component_type = $1 \
         AND rack_model IN (COALESCE((SELECT model FROM racks WHERE name = $2), ''), '') \
         ORDER BY rack_model DESC LIMIT 1",
    )
    .bind(component_type.as_str())
    .bind(rack)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map_or((0, 0, 0), |(i, s, t)| {
        (i64::from(i), i64::from(s), i64::from(t))
    }))
}

/// Every component of the domain's racks at its steady draw, W.
async fn domain_steady_w(conn: &mut PgConnection, domain: &str) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT COALESCE(sum(COALESCE(m.steady_w, d.steady_w, 0)), 0)::bigint \
         FROM racks r JOIN components c ON c.rack_id = r.id \
         LEFT JOIN power_models m ON m.component_type = c.component_type \
              AND m.rack_model = r.model AND r.model <> '' \
         LEFT JOIN power_models d ON d.component_type = c.component_type AND d.rack_model = '' \
         WHERE r.power_domains @> ARRAY[$1]::text[]",
    )
    .bind(domain)
    .fetch_one(&mut *conn)
    .await?)
}

async fn domain_record(
    conn: &mut PgConnection,
    name: &DomainName,
    known_for: Duration,
) -> Result<PowerDomainRecord, StoreError> {
    let row: Option<LimitsRow> = sqlx::query_as(
        "SELECT budget_w, max_shelves_off, min_spacing_ms, updated_at FROM power_domains \
         WHERE name = $1",
    )
    .bind(name.as_str())
    .fetch_optional(&mut *conn)
    .await?;
    let Some((budget_w, max_off, spacing, updated_at)) = row else {
        return Err(StoreError::NotFound(format!(
            "power domain {name:?} not found",
            name = name.as_str()
        )));
    };
    let racks: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM racks WHERE power_domains @> ARRAY[$1]::text[] ORDER BY name",
    )
    .bind(name.as_str())
    .fetch_all(&mut *conn)
    .await?;
    let steady = domain_steady_w(conn, name.as_str()).await?;
    let draw = crate::observed::domain_draw(conn, name.as_str(), ("", ""), known_for).await?;
    let (inrush, off, waiting): (i64, i64, i64) = sqlx::query_as(concat!(
        "SELECT \
           (SELECT COALESCE(sum(excess_w), 0)::bigint FROM power_grants \
             WHERE domain = $1 AND starts_at <= clock_timestamp() \
               AND expires_at > clock_timestamp()), \
           (SELECT count(*) FROM power_shelves_off WHERE domain = $1), \
           (SELECT count(*) FROM power_waits WHERE domain = $1 AND ",
        wait_current!(),
        ")"
    ))
    .bind(name.as_str())
    .fetch_one(&mut *conn)
    .await?;
    Ok(PowerDomainRecord {
        name: name.clone(),
        budget_kw: budget_w.map(kilowatts),
        max_shelves_off: max_off.and_then(|n| u32::try_from(n).ok()),
        min_spacing_ms: spacing.map(unsigned),
        racks,
        steady_kw: kilowatts(steady),
        counted_kw: kilowatts(i64::try_from(draw.known_w + draw.unknown_w).unwrap_or(i64::MAX)),
        unknown: draw.unknown,
        inrush_kw: kilowatts(inrush),
        shelves_off: u32::try_from(off).unwrap_or(u32::MAX),
        waiting: u32::try_from(waiting).unwrap_or(u32::MAX),
        updated_at,
    })
}
