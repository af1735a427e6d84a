//! Power-on admission in batches (`docs/operating-safety.md`, "How an
//! admission goes").
//!
//! Every power-on of a domain is decided under the domain's row lock, so a
//! domain admits one transaction at a time. Decided one command per
//! transaction (about ten round trips each), a site powering on a row's
//! 900 trays at once queued its asks behind the lock for longer than the
//! workers waited (`services/worker/src/admit.rs`): each timed-out ask came
//! back, and the row stalled. Here the asks for the same domains that
//! arrive while a batch is being decided wait for it to end, and the next
//! batch takes them all: one lock, one read of the domains, every command
//! decided in turn by [`flow_decisions::admission::decide`] against the
//! grants of those before it, and one statement per table to record them.
//! The order is the order of arrival, so the first to ask is still never
//! overtaken.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use flow_decisions::admission::{self, Decision, DomainState, Grant, SPACING_SLACK_MS};
use flow_protocol::power::{Admission, PowerAdmit};
use flow_rules::ComponentType;
use sqlx::PgConnection;
use tokio::sync::oneshot;

use crate::power::{ASK_GRACE_MS, Asked, DomainRow, SEND_WINDOW, live_grants, unsigned};
use crate::{Store, StoreError};

/// The most power-ons decided in one transaction.
const MAX_BATCH: usize = 256;

/// One ask waiting for its batch.
struct Pending {
    request: PowerAdmit,
    asked: Asked,
    answer: oneshot::Sender<Result<Admission, Arc<StoreError>>>,
}

/// The asks for one set of domains: those queued, and whose turn it is to
/// decide them.
#[derive(Default)]
struct Queue {
    waiting: Mutex<Vec<Pending>>,
    turn: tokio::sync::Mutex<()>,
}

/// Each set of domains' queue, shared by a store's clones.
#[derive(Clone, Default)]
pub(crate) struct Batches {
    by_domains: Arc<Mutex<HashMap<Vec<String>, Arc<Queue>>>>,
}

impl std::fmt::Debug for Batches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batches").finish_non_exhaustive()
    }
}

impl Batches {
    fn queue(&self, names: &[String]) -> Arc<Queue> {
        let mut map = self.by_domains.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(map.entry(names.to_vec()).or_default())
    }
}

/// A grant to record: its command and its share.
struct NewGrant<'a> {
    request: &'a PowerAdmit,
    excess_w: i64,
    starts_ms: u64,
    hold_ms: u64,
    settle_ms: i64,
}

/// A wait to record for `task show`.
struct NewWait<'a> {
    request: &'a PowerAdmit,
    domain: String,
    until_ms: u64,
    reason: String,
}

/// The components granted a power-on since a domain's draw snapshot.
type Granted = HashSet<(String, String)>;

/// A command's key: one answer per key in a batch.
type Key = (uuid::Uuid, String, String);

fn key(request: &PowerAdmit) -> Key {
    (
        request.task.as_uuid(),
        request.rack.clone(),
        request.component.clone(),
    )
}

impl Store {
    /// Admits a power-on or a reset: queued with the asks for the same
    /// domains and decided in the next batch, by whichever of them takes
    /// the turn first.
    pub(crate) async fn admit_inrush(
        &self,
        request: &PowerAdmit,
        asked: Asked,
    ) -> Result<Admission, StoreError> {
        let queue = self.batches.queue(&asked.names);
        // Queues this ask; the receiver of its answer.
        let enqueue = || {
            let (tx, rx) = oneshot::channel();
            push(
                &queue,
                Pending {
                    request: request.clone(),
                    asked: asked.clone(),
                    answer: tx,
                },
            );
            rx
        };
        let mut rx = enqueue();
        loop {
            let turn = tokio::select! {
                biased;
                answer = &mut rx => match answer {
                    Ok(answer) => return answer.map_err(StoreError::Batch),
                    // Its batch was dropped undecided (the asker deciding it
                    // went away): ask again.
                    Err(_) => {
                        rx = enqueue();
                        continue;
                    }
                },
                turn = queue.turn.lock() => turn,
            };
            match rx.try_recv() {
                Ok(answer) => return answer.map_err(StoreError::Batch),
                Err(oneshot::error::TryRecvError::Closed) => rx = enqueue(),
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            let batch: Vec<Pending> = {
                let mut waiting = queue.waiting.lock().unwrap_or_else(|e| e.into_inner());
                let n = waiting.len().min(MAX_BATCH);
                waiting.drain(..n).collect()
            };
            if batch.is_empty() {
                // Ours was taken by a batch still being decided: wait for it.
                drop(turn);
                continue;
            }
            let asks: Vec<(&PowerAdmit, &Asked)> =
                batch.iter().map(|p| (&p.request, &p.asked)).collect();
            let decided = self.decide_batch(&asked.names, &asks).await;
            drop(asks);
            match decided {
                Ok(answers) => {
                    for (pending, answer) in batch.into_iter().zip(answers) {
                        let _ = pending.answer.send(Ok(answer));
                    }
                }
                Err(error) => {
                    tracing::warn!(error = ?error, "a power admission batch failed");
                    let error = Arc::new(error);
                    for pending in batch {
                        let _ = pending.answer.send(Err(Arc::clone(&error)));
                    }
                }
            }
            drop(turn);
        }
    }

    /// Decides `asks` (all over the domains `names`, in order of arrival)
    /// in one transaction: an answer per ask, in order.
    #[tracing::instrument(skip_all, fields(domains = ?names, asks = asks.len()))]
    async fn decide_batch(
        &self,
        names: &[String],
        asks: &[(&PowerAdmit, &Asked)],
    ) -> Result<Vec<Admission>, StoreError> {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        // Each budgeted domain's draw as read at most a moment ago, read
        // again outside the locks when older (`crate::observed::Draws`).
        let budgeted: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM power_domains WHERE name = ANY($1) AND budget_w IS NOT NULL",
        )
        .bind(&names)
        .fetch_all(self.pool())
        .await?;
        let budgeted: Vec<&str> = budgeted.iter().map(String::as_str).collect();
        let draws = self
            .draws
            .fresh(self.pool(), &budgeted, self.power_known_for())
            .await?;
        let mut tx = self.pool().begin().await?;
        release_lapsed(&mut tx, asks).await?;
        let rows: Vec<DomainRow> = sqlx::query_as(
            "SELECT name, budget_w, max_shelves_off, min_spacing_ms FROM power_domains \
             WHERE name = ANY($1) ORDER BY name FOR UPDATE",
        )
        .bind(&names)
        .fetch_all(&mut *tx)
        .await?;
        if rows.is_empty() {
            tx.commit().await?;
            return Ok(vec![Admission::Granted; asks.len()]);
        }
        // Read after the locks: the time every grant is judged against.
        let now: u64 = unsigned(
            sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
                .fetch_one(&mut *tx)
                .await?,
        );
        let mut domains = Vec::with_capacity(rows.len());
        for row in &rows {
            let (name, budget_w, _, spacing) = row;
            let counted = budget_w.is_some() || spacing.is_some();
            let gap = spacing.map_or(0, |ms| ms + SPACING_SLACK_MS as i64);
            let grants = if counted {
                live_grants(&mut tx, name, gap).await?
            } else {
                Vec::new()
            };
            let draw = match draws.get(name.as_str()) {
                Some(snapshot) => Some((
                    Arc::clone(snapshot),
                    snapshot.granted_since(&mut tx, name).await?,
                )),
                None => None,
            };
            domains.push(Domain {
                state: crate::power::domain_state(row, grants),
                counted,
                draw,
            });
        }
        // A spaced domain's command must go within the slack of its slot,
        // else ask again; others within the send window.
        let states: Vec<DomainState> = domains.iter().map(|d| d.state.clone()).collect();
        let send_within = admission::send_within_ms(&states)
            .unwrap_or_else(|| u64::try_from(SEND_WINDOW.as_millis()).unwrap_or(u64::MAX));
        let held = held_slots(&mut tx, asks, send_within).await?;
        let mut answers: Vec<Admission> = Vec::with_capacity(asks.len());
        let mut answered: HashMap<Key, usize> = HashMap::new();
        let mut grants: Vec<NewGrant<'_>> = Vec::new();
        let mut waits: Vec<NewWait<'_>> = Vec::new();
        let mut cleared: Vec<&PowerAdmit> = Vec::new();
        for &(request, asked) in asks {
            let k = key(request);
            // Asked twice in one batch (an ask and its retry): one answer.
            if let Some(&i) = answered.get(&k) {
                answers.push(answers[i].clone());
                continue;
            }
            answered.insert(k.clone(), answers.len());
            // Asked again while holding a slot not yet sent: the same slot.
            if let Some(&starts) = held.get(&k) {
                tracing::debug!(
                    rack = %request.rack, component = %request.component, starts_ms = starts,
                    "asked again: the grant it holds, answered again"
                );
                answers.push(Admission::Reserved {
                    at_ms: starts,
                    send_by_ms: starts + send_within,
                    reason: "the power-on slot this command already holds".to_owned(),
                });
                continue;
            }
            let except = (request.rack.as_str(), request.component.as_str());
            for d in &mut domains {
                if let Some((snapshot, since)) = &d.draw {
                    let draw = snapshot.draw(since, except);
                    d.state.known_w = draw.known_w;
                    d.state.measured_excess_w = draw.measured_excess_w;
                    d.state.unknown_w = draw.unknown_w;
                    d.state.unknown = draw.unknown;
                }
            }
            let states: Vec<DomainState> = domains.iter().map(|d| d.state.clone()).collect();
            let answer = match admission::decide(&states, asked.command, now) {
                Decision::Refuse { reason } => {
                    cleared.push(request);
                    Admission::Refused { reason }
                }
                Decision::Wait {
                    until_ms,
                    reason,
                    domain,
                } => {
                    waits.push(NewWait {
                        request,
                        domain,
                        until_ms: until_ms + ASK_GRACE_MS,
                        reason: reason.clone(),
                    });
                    Admission::Wait { until_ms, reason }
                }
                decision @ (Decision::Admit | Decision::Reserve { .. }) => {
                    let (at_ms, reason) = match decision {
                        Decision::Reserve {
                            at_ms,
                            reason,
                            domain,
                        } => {
                            waits.push(NewWait {
                                request,
                                domain,
                                until_ms: at_ms,
                                reason: reason.clone(),
                            });
                            (at_ms, reason)
                        }
                        _ => {
                            cleared.push(request);
                            (
                                now,
                                format!(
                                    "power-on slot now: sent within {send_within} ms or asked again"
                                ),
                            )
                        }
                    };
                    // Those decided after it count it: its share from its
                    // start, its component as granted.
                    for d in &mut domains {
                        if d.counted {
                            d.state.grants.push(Grant {
                                excess_w: unsigned(asked.excess_w.max(0)),
                                starts_ms: at_ms,
                                expires_ms: at_ms + asked.hold_ms,
                            });
                        }
                        if let Some((_, since)) = &mut d.draw {
                            since.insert((request.rack.clone(), request.component.clone()));
                        }
                    }
                    grants.push(NewGrant {
                        request,
                        excess_w: asked.excess_w,
                        starts_ms: at_ms,
                        hold_ms: asked.hold_ms,
                        settle_ms: asked.settle_ms,
                    });
                    Admission::Reserved {
                        at_ms,
                        send_by_ms: at_ms + send_within,
                        reason,
                    }
                }
            };
            answers.push(answer);
        }
        let counted: Vec<&str> = domains
            .iter()
            .filter(|d| d.counted)
            .map(|d| d.state.name.as_str())
            .collect();
        record_grants(&mut tx, &counted, &grants).await?;
        record_waits(&mut tx, &waits, &cleared).await?;
        forget_old_grants(&mut tx, &names).await?;
        tx.commit().await?;
        tracing::debug!(
            granted = grants.len(),
            waiting = waits.len(),
            "power admission batch decided"
        );
        Ok(answers)
    }
}

/// One domain of a batch: its state as the next command sees it, whether
/// its grants are counted, and its draw snapshot with the components
/// granted since.
struct Domain {
    state: DomainState,
    counted: bool,
    draw: Option<(Arc<crate::observed::DrawSnapshot>, Granted)>,
}

fn push(queue: &Queue, pending: Pending) {
    queue
        .waiting
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(pending);
}

/// Releases the reservations the workers came back after (asks with
/// `replaces_ms`): sent nothing under them, they would otherwise be counted
/// beside the grant the ask may get, pushing every later one back.
async fn release_lapsed(
    conn: &mut PgConnection,
    asks: &[(&PowerAdmit, &Asked)],
) -> Result<(), StoreError> {
    let lapsed: Vec<&PowerAdmit> = asks
        .iter()
        .map(|(r, _)| *r)
        .filter(|r| r.replaces_ms.is_some())
        .collect();
    if lapsed.is_empty() {
        return Ok(());
    }
    let tasks: Vec<uuid::Uuid> = lapsed.iter().map(|r| r.task.as_uuid()).collect();
    let racks: Vec<&str> = lapsed.iter().map(|r| r.rack.as_str()).collect();
    let components: Vec<&str> = lapsed.iter().map(|r| r.component.as_str()).collect();
    let starts: Vec<f64> = lapsed
        .iter()
        .map(|r| r.replaces_ms.unwrap_or(0) as f64)
        .collect();
    let released = sqlx::query(
        "DELETE FROM power_grants g USING unnest($1::uuid[], $2::text[], $3::text[], $4::float8[]) \
           AS l(task_id, rack, component, start_ms) \
         WHERE g.task_id = l.task_id AND g.rack = l.rack AND g.component = l.component \
           AND g.sent_at IS NULL \
           AND g.starts_at BETWEEN to_timestamp((l.start_ms - 1) / 1000) \
                               AND to_timestamp((l.start_ms + 1) / 1000)",
    )
    .bind(&tasks)
    .bind(&racks)
    .bind(&components)
    .bind(&starts)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    tracing::debug!(released, "lapsed power reservations released");
    Ok(())
}

/// The earliest start of each ask's grant not yet sent whose send-by has
/// not passed: asked again (its answer lost to a timeout, its job
/// redelivered), a command is told the same rather than granted twice.
/// Read under the domains' locks, so an ask and its retry decided by two
/// schedulers cannot both miss the other's grant.
async fn held_slots(
    conn: &mut PgConnection,
    asks: &[(&PowerAdmit, &Asked)],
    window_ms: u64,
) -> Result<HashMap<Key, u64>, StoreError> {
    let tasks: Vec<uuid::Uuid> = asks.iter().map(|(r, _)| r.task.as_uuid()).collect();
    let racks: Vec<&str> = asks.iter().map(|(r, _)| r.rack.as_str()).collect();
    let components: Vec<&str> = asks.iter().map(|(r, _)| r.component.as_str()).collect();
    let rows: Vec<(uuid::Uuid, String, String, i64)> = sqlx::query_as(
        "SELECT g.task_id, g.rack, g.component, \
                (extract(epoch FROM min(g.starts_at)) * 1000)::bigint \
         FROM power_grants g \
         JOIN (SELECT DISTINCT * FROM unnest($1::uuid[], $2::text[], $3::text[])) \
           AS a(task_id, rack, component) \
           ON g.task_id = a.task_id AND g.rack = a.rack AND g.component = a.component \
         WHERE g.sent_at IS NULL \
           AND g.starts_at + make_interval(secs => $4::float8 / 1000) >= clock_timestamp() \
         GROUP BY g.task_id, g.rack, g.component",
    )
    .bind(&tasks)
    .bind(&racks)
    .bind(&components)
    .bind(window_ms as f64)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(t, r, c, starts)| ((t, r, c), unsigned(starts)))
        .collect())
}

/// Records the batch's grants: each one's inrush share in every counted
/// domain from its start until reported sent (at most its hold), the last
/// moment its command may be sent on its component, and a shelf no longer
/// counted off.
async fn record_grants(
    conn: &mut PgConnection,
    counted: &[&str],
    grants: &[NewGrant<'_>],
) -> Result<(), StoreError> {
    if grants.is_empty() {
        return Ok(());
    }
    if !counted.is_empty() {
        let mut domain = Vec::new();
        let mut rack = Vec::new();
        let mut component = Vec::new();
        let mut task = Vec::new();
        let mut excess = Vec::new();
        let mut starts = Vec::new();
        let mut expires = Vec::new();
        let mut settle = Vec::new();
        for g in grants {
            for d in counted {
                domain.push(*d);
                rack.push(g.request.rack.as_str());
                component.push(g.request.component.as_str());
                task.push(g.request.task.as_uuid());
                excess.push(g.excess_w.max(0));
                starts.push(g.starts_ms as f64);
                expires.push((g.starts_ms + g.hold_ms) as f64);
                settle.push(i32::try_from(g.settle_ms).unwrap_or(i32::MAX));
            }
        }
        sqlx::query(
            "INSERT INTO power_grants \
               (domain, rack, component, task_id, excess_w, starts_at, expires_at, settle_ms) \
             SELECT d, r, c, t, x, to_timestamp(s / 1000), to_timestamp(e / 1000), m \
             FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[], $5::bigint[], \
                         $6::float8[], $7::float8[], $8::int[]) AS g(d, r, c, t, x, s, e, m)",
        )
        .bind(&domain)
        .bind(&rack)
        .bind(&component)
        .bind(&task)
        .bind(&excess)
        .bind(&starts)
        .bind(&expires)
        .bind(&settle)
        .execute(&mut *conn)
        .await?;
    }
    // Until its send could no longer come, a read of the component says
    // nothing of this power-on (one row per component: the latest).
    let window_ms = SEND_WINDOW.as_millis() as u64;
    let mut until: HashMap<(&str, &str), u64> = HashMap::new();
    for g in grants {
        let at = until
            .entry((g.request.rack.as_str(), g.request.component.as_str()))
            .or_default();
        *at = (*at).max(g.starts_ms + window_ms);
    }
    let (racks, components, ends): (Vec<&str>, Vec<&str>, Vec<f64>) = until
        .into_iter()
        .map(|((r, c), at)| (r, c, at as f64))
        .fold(
            (Vec::new(), Vec::new(), Vec::new()),
            |mut acc, (r, c, e)| {
                acc.0.push(r);
                acc.1.push(c);
                acc.2.push(e);
                acc
            },
        );
    sqlx::query(
        "INSERT INTO component_power (rack, component, power, reachable, source, observed_at, \
           commanded_until) \
         SELECT r, c, 'unknown', false, 'command', to_timestamp(0), to_timestamp(e / 1000) \
         FROM unnest($1::text[], $2::text[], $3::float8[]) AS u(r, c, e) \
         ON CONFLICT (rack, component) DO UPDATE SET commanded_until = \
           greatest(component_power.commanded_until, EXCLUDED.commanded_until)",
    )
    .bind(&racks)
    .bind(&components)
    .bind(&ends)
    .execute(&mut *conn)
    .await?;
    let shelves: Vec<(&str, &str)> = grants
        .iter()
        .filter(|g| g.request.component_type == ComponentType::PowerShelf)
        .map(|g| (g.request.rack.as_str(), g.request.component.as_str()))
        .collect();
    if !shelves.is_empty() {
        let (racks, components): (Vec<&str>, Vec<&str>) = shelves.into_iter().unzip();
        sqlx::query(
            "DELETE FROM power_shelves_off o USING unnest($1::text[], $2::text[]) AS s(r, c) \
             WHERE o.rack = s.r AND o.component = s.c",
        )
        .bind(&racks)
        .bind(&components)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Records why commands wait (until when) for `task show`, and clears the
/// wait of those granted now or refused.
async fn record_waits(
    conn: &mut PgConnection,
    waits: &[NewWait<'_>],
    cleared: &[&PowerAdmit],
) -> Result<(), StoreError> {
    if !waits.is_empty() {
        // One row per command: the last decided.
        let mut last: HashMap<Key, &NewWait<'_>> = HashMap::new();
        for w in waits {
            last.insert(key(w.request), w);
        }
        let mut task = Vec::new();
        let mut rack = Vec::new();
        let mut component = Vec::new();
        let mut domain = Vec::new();
        let mut reason = Vec::new();
        let mut until = Vec::new();
        for w in last.values() {
            task.push(w.request.task.as_uuid());
            rack.push(w.request.rack.as_str());
            component.push(w.request.component.as_str());
            domain.push(w.domain.as_str());
            reason.push(w.reason.as_str());
            until.push(w.until_ms as f64);
        }
        sqlx::query(
            "INSERT INTO power_waits (task_id, rack, component, domain, reason, until_at) \
             SELECT t, r, c, d, w, to_timestamp(u / 1000) \
             FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], \
                         $6::float8[]) AS x(t, r, c, d, w, u) \
             ON CONFLICT (task_id, rack, component) DO UPDATE SET domain = EXCLUDED.domain, \
               reason = EXCLUDED.reason, seen_at = now(), until_at = EXCLUDED.until_at",
        )
        .bind(&task)
        .bind(&rack)
        .bind(&component)
        .bind(&domain)
        .bind(&reason)
        .bind(&until)
        .execute(&mut *conn)
        .await?;
    }
    if !cleared.is_empty() {
        let tasks: Vec<uuid::Uuid> = cleared.iter().map(|r| r.task.as_uuid()).collect();
        let racks: Vec<&str> = cleared.iter().map(|r| r.rack.as_str()).collect();
        let components: Vec<&str> = cleared.iter().map(|r| r.component.as_str()).collect();
        sqlx::query(
            "DELETE FROM power_waits w USING unnest($1::uuid[], $2::text[], $3::text[]) \
               AS x(t, r, c) \
             WHERE w.task_id = x.t AND w.rack = x.r AND w.component = x.c",
        )
        .bind(&tasks)
        .bind(&racks)
        .bind(&components)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Grants past their expiry and their domain's spacing are history: keep
/// the table small.
async fn forget_old_grants(conn: &mut PgConnection, names: &[&str]) -> Result<(), StoreError> {
    sqlx::query(
        "DELETE FROM power_grants g USING power_domains d \
         WHERE g.domain = d.name AND d.name = ANY($1) \
           AND g.expires_at < clock_timestamp() - interval '1 minute' \
           AND g.starts_at < clock_timestamp() \
               - make_interval(secs => COALESCE(d.min_spacing_ms, 0) / 1000.0)",
    )
    .bind(names)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
