//! Schedules: the `schedule.*` endpoints and the dispatcher that fires due
//! schedules. When a schedule fires next and which window its tasks get is
//! `flow_decisions::calendar`'s; claiming, recording and the revision checks
//! are the store's (`flow_store::schedules`); a firing submits its task
//! request through the same path as `task.submit` ([`crate::submit`]),
//! each rack's task keyed `schedule/<id>/<due ms>` so a firing finished
//! twice creates nothing twice.
//!
//! Missed firings: a schedule due while no scheduler ran fires once when
//! one comes back (recorded as late, with the time it was due), and its
//! next time is the first after that; the firings in between are not
//! replayed.

use std::collections::BTreeMap;
use std::time::Duration;

use flow_decisions::calendar::{Opening, ScheduleCalendar};
use flow_protocol::api::{
    ApiError, ConflictStrategy, ErrorCode, RackOutcome, Submission, TaskSubmit,
};
use flow_protocol::schedule::{
    FiringOutcome, FiringRecord, FiringTrigger, Overlap, ScheduleCreate, ScheduleRecord,
    ScheduleUpdate, Skipped,
};
use flow_protocol::task::timestamp;
use flow_protocol::{ScheduleId, TaskId};
use flow_store::schedules::{Firing, FiringPlan};
use flow_store::tasks::Origin;
use flow_telemetry::ErrorChain;
use tokio_util::sync::CancellationToken;

use crate::background::{Driver, Next, Period};
use crate::error::{invalid_request, store_error};
use crate::service::TaskService;

/// How often the dispatcher looks for due schedules (a trigger, create or
/// resume wakes it at once).
pub const SCHEDULE_POLL: Duration = Duration::from_secs(1);

/// Due schedules claimed per look.
const CLAIM_BATCH: i64 = 10;

/// A firing claimed this long ago and not finished is finished by any
/// scheduler (its own scheduler died or lost the database mid-firing).
pub const FIRING_LEASE: Duration = Duration::from_secs(60);

/// The longest schedule name.
pub const MAX_NAME_LEN: usize = 128;

/// A schedule's task request key for one rack's task of one firing.
fn request_id(schedule: ScheduleId, due_ms: i64) -> String {
    format!("schedule/{schedule}/{due_ms}")
}

fn invalid(problems: Vec<String>) -> ApiError {
    invalid_request("schedule", problems)
}

pub(crate) fn check_name(name: &str) -> Result<(), ApiError> {
    let bad = |m: &str| Err(ApiError::new(ErrorCode::BadRequest, format!("name: {m}")));
    if name.trim().is_empty() {
        return bad("must not be empty");
    }
    if name.trim() != name {
        return bad("must not start or end with whitespace");
    }
    if name.chars().count() > MAX_NAME_LEN {
        return bad(&format!("must be at most {MAX_NAME_LEN} characters"));
    }
    if name.chars().any(char::is_control) {
        return bad("must not contain control characters");
    }
    Ok(())
}

/// Firings a schedule preview shows.
const FIRINGS_SHOWN: usize = 5;

fn calendar(record: &ScheduleRecord) -> Result<ScheduleCalendar, Vec<String>> {
    ScheduleCalendar::new(&record.spec, &record.timezone, &record.windows)
}

fn time_of(ms: i64) -> time::OffsetDateTime {
    timestamp::from_ms(u64::try_from(ms).unwrap_or(0))
}

impl TaskService {
    /// `schedule.create`: checks the calendar, the windows and the task
    /// request (its targets must name something now), then stores it with
    /// its first firing time.
    pub async fn create_schedule(&self, r: ScheduleCreate) -> Result<ScheduleRecord, ApiError> {
        let (record, _) = self.build_schedule(r).await?;
        let stored = self
            .store
            .insert_schedule(&record)
            .await
            .map_err(store_error)?;
        tracing::info!(schedule_id = %stored.id, name = %stored.name, spec = %stored.spec.describe(), "schedule created");
        self.poke_schedules();
        Ok(stored)
    }

    /// `schedule.plan`: the schedule `schedule.create` would store, its
    /// next five firings in its zone with the window each one's tasks
    /// get (decided as a firing decides them,
    /// [`ScheduleCalendar::firing`]), and what its task request would do
    /// on each rack now — creating nothing.
    pub async fn plan_schedule(
        &self,
        r: ScheduleCreate,
    ) -> Result<flow_protocol::preview::SchedulePlanReply, ApiError> {
        let (record, cal) = self.build_schedule(r).await?;
        let mut firings = Vec::new();
        let mut due = record
            .next_run_at
            .map(|t| i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX));
        while let Some(at) = due {
            if firings.len() == FIRINGS_SHOWN {
                break;
            }
            let firing = cal
                .firing(at, at)
                .map_err(|e| ApiError::new(ErrorCode::Invalid, format!("windows: {e}")))?;
            firings.push(flow_protocol::preview::FiringPlan {
                at: time_of(at),
                local: cal.local(at),
                window: firing.window.map(|w| flow_protocol::preview::WindowPlan {
                    opens: time_of(w.start_ms),
                    closes: time_of(w.end_ms),
                    open_at_firing: w.contains(at),
                }),
            });
            due = firing.next_ms;
        }
        let mut task = record.task.clone();
        task.request_id = format!("schedule-plan/{}", record.id);
        let racks = self.plan_task(&task).await?.results;
        Ok(flow_protocol::preview::SchedulePlanReply {
            name: record.name,
            timezone: record.timezone,
            firings,
            racks,
        })
    }

    /// The schedule `schedule.create` stores and its calendar: every
    /// check of the request, its first firing, its targets resolved.
    async fn build_schedule(
        &self,
        r: ScheduleCreate,
    ) -> Result<(ScheduleRecord, ScheduleCalendar), ApiError> {
        check_name(&r.name)?;
        let mut problems = Vec::new();
        let timezone = if r.timezone.is_empty() {
            "UTC".to_owned()
        } else {
            r.timezone.clone()
        };
        let mut task = r.task.clone();
        if !task.request_id.is_empty() {
            problems.push(
                "task.request_id: set by each firing (schedule/<id>/<due time>), leave it out"
                    .to_owned(),
            );
        }
        if task.not_before.is_some() || task.not_after.is_some() {
            problems.push(
                "task.not_before, task.not_after: a schedule's tasks get their window from its \
                 maintenance windows (windows)"
                    .to_owned(),
            );
        }
        task.request_id = "schedule".to_owned();
        if let Err(e) = task.check() {
            problems.push(format!("task.{}", e.message));
        }
        task.request_id.clear();
        let now = self.store.now_ms().await.map_err(store_error)?;
        let mut record = ScheduleRecord {
            id: ScheduleId::new(),
            name: r.name,
            spec: r.spec,
            timezone,
            overlap: r.overlap,
            windows: r.windows,
            task,
            enabled: true,
            next_run_at: None,
            last_fired_at: None,
            revision: 1,
            created_at: time_of(now),
            updated_at: time_of(now),
        };
        let cal = match calendar(&record) {
            Ok(cal) => {
                match cal.first(now) {
                    Ok(Some(first)) => record.next_run_at = Some(time_of(first)),
                    Ok(None) => problems.push("spec: it never fires".to_owned()),
                    Err(e) => problems.push(format!("spec: {e}")),
                }
                Some(cal)
            }
            Err(more) => {
                problems.extend(more);
                None
            }
        };
        let Some(cal) = cal.filter(|_| problems.is_empty()) else {
            return Err(invalid(problems));
        };
        // Targets that name nothing now are refused now, not at 2 a.m.
        self.targets(&record.task).await?;
        Ok((record, cal))
    }

    /// `schedule.update`: the changes given, at the revision read.
    pub async fn update_schedule(&self, r: ScheduleUpdate) -> Result<ScheduleRecord, ApiError> {
        let mut record = self
            .store
            .schedule(&r.schedule)
            .await
            .map_err(store_error)?;
        if record.revision != r.revision {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!(
                    "schedule {:?} is at revision {}, not {}: it changed since it was read; get \
                     it again and repeat the change",
                    record.name, record.revision, r.revision
                ),
            ));
        }
        if let Some(name) = r.name {
            check_name(&name)?;
            record.name = name;
        }
        let recalculate = r.spec.is_some() || r.timezone.is_some();
        if let Some(spec) = r.spec {
            record.spec = spec;
        }
        if let Some(tz) = r.timezone {
            record.timezone = if tz.is_empty() { "UTC".to_owned() } else { tz };
        }
        if let Some(overlap) = r.overlap {
            record.overlap = overlap;
        }
        if let Some(windows) = r.windows {
            record.windows = windows;
        }
        let cal = calendar(&record).map_err(invalid)?;
        if recalculate && record.enabled {
            let now = self.store.now_ms().await.map_err(store_error)?;
            record.next_run_at = cal
                .first(now)
                .map_err(|e| invalid(vec![format!("spec: {e}")]))?
                .map(time_of);
        }
        let saved = self
            .store
            .save_schedule(&record, r.revision)
            .await
            .map_err(store_error)?;
        self.poke_schedules();
        Ok(saved)
    }

    /// `schedule.pause`: it stops firing (a no-op when paused). A one-time
    /// schedule that has fired cannot be paused.
    pub async fn pause_schedule(&self, reference: &str) -> Result<ScheduleRecord, ApiError> {
        let mut record = self.store.schedule(reference).await.map_err(store_error)?;
        if !record.enabled {
            return Ok(record);
        }
        if record.next_run_at.is_none() {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!(
                    "schedule {:?} has fired and will not fire again",
                    record.name
                ),
            ));
        }
        record.enabled = false;
        record.next_run_at = None;
        let revision = record.revision;
        self.store
            .save_schedule(&record, revision)
            .await
            .map_err(store_error)
    }

    /// `schedule.resume`: it fires again, its next time counted from now (a
    /// one-time schedule keeps its time; one already past fires at once).
    pub async fn resume_schedule(&self, reference: &str) -> Result<ScheduleRecord, ApiError> {
        let mut record = self.store.schedule(reference).await.map_err(store_error)?;
        if matches!(
            record.spec,
            flow_protocol::schedule::ScheduleSpec::Once { .. }
        ) && record.last_fired_at.is_some()
        {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("schedule {:?} is one-time and has fired", record.name),
            ));
        }
        if record.enabled {
            return Ok(record);
        }
        let cal = calendar(&record).map_err(invalid)?;
        let now = self.store.now_ms().await.map_err(store_error)?;
        record.enabled = true;
        record.next_run_at = cal
            .first(now)
            .map_err(|e| invalid(vec![format!("spec: {e}")]))?
            .map(time_of);
        let revision = record.revision;
        let saved = self
            .store
            .save_schedule(&record, revision)
            .await
            .map_err(store_error)?;
        self.poke_schedules();
        Ok(saved)
    }

    /// `schedule.trigger`: fires now, whether paused or not and whatever
    /// its overlap policy (the conflict table still applies); its next time
    /// is unchanged.
    pub async fn trigger_schedule(&self, reference: &str) -> Result<FiringRecord, ApiError> {
        let record = self.store.schedule(reference).await.map_err(store_error)?;
        let cal = calendar(&record).map_err(invalid)?;
        let mut window_error = None;
        let firing = self
            .store
            .manual_firing(&record, |now| match cal.window(now) {
                Ok(w) => w.map(|o| (o.start_ms, o.end_ms)),
                Err(e) => {
                    window_error = Some(e);
                    None
                }
            })
            .await
            .map_err(store_error)?;
        let outcome = match window_error {
            Some(e) => FiringOutcome {
                error: Some(ApiError::new(ErrorCode::Invalid, e.to_string())),
                ..FiringOutcome::default()
            },
            None => self.fire(&firing).await,
        };
        self.finish(&firing, &outcome).await;
        let now = self.store.now_ms().await.unwrap_or(firing.due_ms);
        Ok(FiringRecord {
            due_at: firing.due,
            fired_at: time_of(now),
            late: false,
            trigger: firing.trigger,
            done: true,
            results: outcome.results,
            skipped: outcome.skipped,
            error: outcome.error,
            window_start: firing.window.map(|w| time_of(w.0)),
            window_end: firing.window.map(|w| time_of(w.1)),
        })
    }

    /// Wakes the schedule dispatcher.
    pub fn poke_schedules(&self) {
        self.schedule_poke.notify_one();
    }

    /// Fires due schedules until `stop`: every [`SCHEDULE_POLL`] (or when
    /// poked), finishes firings another scheduler left unfinished, then
    /// claims due schedules and fires them.
    pub async fn run_schedules(self, stop: CancellationToken) {
        let driver = Driver {
            name: "schedules",
            period: Period::Rest(SCHEDULE_POLL),
            poke: Some(&self.schedule_poke),
        };
        driver
            .drive(&stop, |_| async {
                self.dispatch_once().await.map(|()| Next::Wait)
            })
            .await;
    }

    async fn dispatch_once(&self) -> Result<(), flow_store::StoreError> {
        let lease = i64::try_from(FIRING_LEASE.as_millis()).unwrap_or(i64::MAX);
        for firing in self.store.claim_unfinished(lease, CLAIM_BATCH).await? {
            tracing::warn!(schedule_id = %firing.schedule.id, due_ms = firing.due_ms, "finishing a firing another scheduler left unfinished");
            let outcome = self.fire(&firing).await;
            self.finish(&firing, &outcome).await;
        }
        loop {
            let mut errors: BTreeMap<ScheduleId, ApiError> = BTreeMap::new();
            let firings = self
                .store
                .claim_due(CLAIM_BATCH, |schedule, due, now| {
                    decide(schedule, due, now, &mut errors)
                })
                .await?;
            let claimed = firings.len();
            for firing in firings {
                let outcome = match errors.remove(&firing.schedule.id) {
                    Some(error) => FiringOutcome {
                        error: Some(error),
                        ..FiringOutcome::default()
                    },
                    None => self.fire(&firing).await,
                };
                self.finish(&firing, &outcome).await;
            }
            if claimed < usize::try_from(CLAIM_BATCH).unwrap_or(usize::MAX) {
                return Ok(());
            }
        }
    }

    async fn finish(&self, firing: &Firing, outcome: &FiringOutcome) {
        let created = outcome
            .results
            .iter()
            .filter(|r| {
                matches!(
                    r.submission,
                    Submission::Created(_) | Submission::Queued { .. }
                )
            })
            .count();
        tracing::info!(
            schedule_id = %firing.schedule.id,
            name = %firing.schedule.name,
            due = %timestamp::format(time_of(firing.due_ms)),
            trigger = firing.trigger.as_str(),
            tasks = created,
            skipped = outcome.skipped.len(),
            refused = outcome.results.len() - created,
            error = outcome.error.as_ref().map(|e| e.message.as_str()).unwrap_or(""),
            "schedule fired"
        );
        if let Err(error) = self
            .store
            .finish_firing(firing.schedule.id, firing.due, outcome)
            .await
        {
            // Left unfinished: another look after the lease finishes it
            // (the resubmission creates nothing twice).
            tracing::warn!(schedule_id = %firing.schedule.id, error = %ErrorChain(&error), "firing outcome not recorded");
        }
    }

    /// Submits a firing's tasks: the template with the firing's request
    /// key, description and window; racks still busy with this schedule's
    /// task are skipped under the `skip` policy (not for a manual trigger).
    async fn fire(&self, firing: &Firing) -> FiringOutcome {
        let schedule = &firing.schedule;
        let mut outcome = FiringOutcome::default();
        let now = match self.store.now_ms().await {
            Ok(now) => now,
            Err(error) => {
                outcome.error = Some(store_error(error));
                return outcome;
            }
        };
        let request = firing_request(firing, now);
        let targets = match self.targets(&request).await {
            Ok(t) => t,
            Err(error) => {
                outcome.error = Some(error);
                return outcome;
            }
        };
        let busy: BTreeMap<String, TaskId> =
            if schedule.overlap == Overlap::Skip && firing.trigger == FiringTrigger::Scheduled {
                match self.store.schedule_open_tasks(schedule.id).await {
                    Ok(open) => open.into_iter().collect(),
                    Err(error) => {
                        outcome.error = Some(store_error(error));
                        return outcome;
                    }
                }
            } else {
                BTreeMap::new()
            };
        for (rack, scope) in &targets.racks {
            // Busy racks are known by name; a rack given by ID is looked up
            // only when some rack is busy (submit_rack reads it anyway).
            let name = match rack.as_id() {
                Some(_) if !busy.is_empty() => match self.store.get_rack(rack).await {
                    Ok(r) => r.name,
                    Err(_) => rack.0.clone(),
                },
                _ => rack.0.clone(),
            };
            if let Some(task) = busy.get(&name) {
                outcome.skipped.push(Skipped {
                    rack: name,
                    task_id: *task,
                });
                continue;
            }
            let submission = self
                .submit_rack(&request, rack, scope, Origin::Schedule(schedule.id))
                .await
                .unwrap_or_else(Submission::Refused);
            outcome.results.push(RackOutcome {
                rack: rack.0.clone(),
                submission,
            });
        }
        self.poke();
        outcome
    }
}

/// The task request a firing submits at `now_ms`.
fn firing_request(firing: &Firing, now_ms: i64) -> TaskSubmit {
    let schedule = &firing.schedule;
    let mut request = schedule.task.clone();
    request.request_id = request_id(schedule.id, firing.due_ms);
    let label = format!(
        "{} — {}",
        schedule.name,
        timestamp::format(time_of(firing.due_ms))
    );
    request.description = if request.description.is_empty() {
        label
    } else {
        format!("{} ({label})", request.description)
    };
    if schedule.overlap == Overlap::Queue && request.conflict == ConflictStrategy::Reject {
        request.conflict = ConflictStrategy::Queue {
            timeout_seconds: 3600,
        };
    }
    if let Some((start, end)) = firing.window {
        request.not_before = (start > now_ms).then(|| time_of(start));
        request.not_after = Some(time_of(end));
    }
    request
}

/// The store's plan for a due schedule: its next time and this firing's
/// window. A schedule whose calendar no longer reads, or whose windows
/// never open again, stops (its next time none) and the firing records why.
fn decide(
    schedule: &ScheduleRecord,
    due_ms: i64,
    now_ms: i64,
    errors: &mut BTreeMap<ScheduleId, ApiError>,
) -> FiringPlan {
    let result = calendar(schedule)
        .map_err(|problems| problems.join("; "))
        .and_then(|cal| cal.firing(due_ms, now_ms).map_err(|e| e.to_string()));
    match result {
        Ok(f) => FiringPlan {
            next_ms: f.next_ms,
            window: f
                .window
                .map(|Opening { start_ms, end_ms }| (start_ms, end_ms)),
        },
        Err(message) => {
            tracing::error!(schedule_id = %schedule.id, error = %message, "schedule cannot fire; stopped");
            errors.insert(
                schedule.id,
                ApiError::new(
                    ErrorCode::Invalid,
                    format!("the schedule stopped: {message}"),
                ),
            );
            FiringPlan::default()
        }
    }
}
