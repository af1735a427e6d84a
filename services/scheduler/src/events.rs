//! Hardware events and event rules: the `event_rule.*` and `event.*`
//! endpoints, the consumer of hardware events published by watchers
//! (`flow.hardware.>`), and the dispatcher that runs the actions of the
//! rule each event chose.
//!
//! An event is stored once per identity (`source`, `key`); the rule is
//! chosen when it arrives (rack binding → site binding → built-in,
//! disabled rules passed over: `flow_decisions::events::select`), and its
//! actions' executions, with their targets fixed, are stored in the same
//! transaction. The dispatcher claims due executions (`FOR UPDATE SKIP
//! LOCKED`, a 30 s lease: several schedulers run each attempt once), runs
//! them — a `submit_task` through the same path as `task.submit`, its task
//! keyed `event/<execution>` so a repeated attempt creates nothing twice —
//! and records the outcome; a failed attempt is tried again after 10 s,
//! 20 s, 40 s, and fails after the fourth.
//!
//! Leak containment (`docs/leak-containment.md`): the rule is planned with
//! the count of the rack's leaking trays, inside the store's transaction
//! that stores the event (one event of a rack at a time), and the
//! components it locks are stored with it; a `submit_task` action with
//! `preempt` cancels the open tasks its task conflicts with and starts at
//! once (`TaskService::create`); `event.clear` removes an event's locks
//! with a reason.

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream;
use flow_decisions::events::{self as rules, Candidate, RackComponent};
use flow_jetstream::{Source, consume, park};
use flow_protocol::api::{ApiError, ErrorCode, Submission};
use flow_protocol::event::{
    ActionKind, BindingRecord, BindingScope, CONSUMER_HARDWARE, EventClear, EventPublishReply,
    EventRuleBind, EventRuleCreate, EventRuleRecord, EventRuleSpec, EventRuleUpdate, EventType,
    HardwareEvent, MAX_CLEAR_REASON_LEN, MAX_IDENTITY_LEN, STREAM_HARDWARE, Severity,
};
use flow_protocol::ids::RackRef;
use flow_protocol::{EventId, TaskId};
use flow_store::events::{AttemptOutcome, ClaimedExecution, NewExecution};
use flow_store::tasks::Origin;
use flow_telemetry::ErrorChain;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::background::{Driver, Next, Period};
use crate::error::{invalid_request, store_error};
use crate::metrics::{OutcomeLabels, StatusLabels};
use crate::service::TaskService;
use crate::submit::Scope;

/// How often the dispatcher looks for due executions (a new event wakes it
/// at once).
pub const EXECUTION_POLL: Duration = Duration::from_secs(1);
/// How long a scheduler holds an execution for one attempt; after it,
/// another scheduler takes it over (the attempt is not counted).
pub const EXECUTION_LEASE: Duration = Duration::from_secs(30);
/// The first wait between attempts (then doubled: 10 s, 20 s, 40 s).
pub const RETRY_BASE: Duration = Duration::from_secs(10);
/// Executions claimed per look.
const CLAIM_BATCH: i64 = 16;
/// How long an event the store could not take waits before redelivery.
const EVENT_RETRY: Duration = Duration::from_secs(1);

/// The request ID of an execution's task.
fn request_id(execution: flow_protocol::ExecutionId) -> String {
    format!("event/{execution}")
}

fn builtin_record(event_type: EventType) -> EventRuleRecord {
    EventRuleRecord {
        id: None,
        read_only: true,
        enabled: true,
        revision: 1,
        spec: rules::builtin(event_type),
        created_at: OffsetDateTime::UNIX_EPOCH,
        updated_at: OffsetDateTime::UNIX_EPOCH,
    }
}

fn read_only() -> ApiError {
    ApiError::new(
        ErrorCode::Conflict,
        "a built-in rule cannot be changed, bound or deleted; bind a rule of your own instead",
    )
}

/// Why an event cannot be taken (parked when it came from a watcher).
fn check_event(e: &HardwareEvent) -> Result<(), ApiError> {
    let mut problems = Vec::new();
    for (field, value) in [("source", &e.source), ("key", &e.key)] {
        if value.trim().is_empty() {
            problems.push(format!("{field}: must not be empty"));
        } else if value.len() > MAX_IDENTITY_LEN {
            problems.push(format!("{field}: at most {MAX_IDENTITY_LEN} bytes"));
        } else if value.chars().any(char::is_control) {
            problems.push(format!("{field}: must not contain control characters"));
        }
    }
    for (field, value) in [("rack", &e.rack), ("component", &e.component)] {
        if value.trim().is_empty() {
            problems.push(format!("{field}: must not be empty"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(invalid_request("event", problems))
    }
}

impl TaskService {
    /// A rule by reference: a stored one by ID or name, or a built-in
    /// (`builtin:<event type>`).
    pub async fn event_rule(&self, reference: &str) -> Result<EventRuleRecord, ApiError> {
        if let Some(event_type) = reference.strip_prefix(rules::BUILTIN_PREFIX) {
            let event_type: EventType =
                event_type
                    .parse()
                    .map_err(|e: flow_protocol::status::UnknownStatus| {
                        ApiError::new(ErrorCode::NotFound, e.to_string())
                    })?;
            return Ok(builtin_record(event_type));
        }
        self.store
            .get_event_rule(reference)
            .await
            .map_err(store_error)
    }

    /// `event_rule.list`: stored rules by name, then the built-ins.
    pub async fn event_rules(&self) -> Result<Vec<EventRuleRecord>, ApiError> {
        let mut rules = self.store.list_event_rules().await.map_err(store_error)?;
        rules.extend(EventType::ALL.iter().map(|t| builtin_record(*t)));
        Ok(rules)
    }

    /// `event_rule.create`.
    pub async fn create_event_rule(&self, r: EventRuleCreate) -> Result<EventRuleRecord, ApiError> {
        check_spec(&r.spec)?;
        self.store
            .insert_event_rule(&r.spec, r.enabled)
            .await
            .map_err(store_error)
    }

    /// `event_rule.update`: at the revision read.
    pub async fn update_event_rule(&self, r: EventRuleUpdate) -> Result<EventRuleRecord, ApiError> {
        let rule = self.event_rule(&r.rule).await?;
        let id = rule.id.ok_or_else(read_only)?;
        check_spec(&r.spec)?;
        self.store
            .update_event_rule(id, r.revision, &r.spec)
            .await
            .map_err(store_error)
    }

    /// `event_rule.enable`.
    pub async fn enable_event_rule(
        &self,
        reference: &str,
        enabled: bool,
    ) -> Result<EventRuleRecord, ApiError> {
        let id = self.event_rule(reference).await?.id.ok_or_else(read_only)?;
        self.store
            .set_event_rule_enabled(id, enabled)
            .await
            .map_err(store_error)
    }

    /// `event_rule.delete`.
    pub async fn delete_event_rule(
        &self,
        reference: &str,
    ) -> Result<flow_protocol::event::EventRuleDeleteReply, ApiError> {
        let id = self.event_rule(reference).await?.id.ok_or_else(read_only)?;
        let bindings_removed = self
            .store
            .delete_event_rule(id)
            .await
            .map_err(store_error)?;
        Ok(flow_protocol::event::EventRuleDeleteReply {
            id,
            bindings_removed,
        })
    }

    /// `event_rule.bind`.
    pub async fn bind_event_rule(&self, r: EventRuleBind) -> Result<BindingRecord, ApiError> {
        let rule = self.event_rule(&r.rule).await?;
        let rule_id = rule.id.ok_or_else(read_only)?;
        let (rack, scope) = match &r.scope {
            BindingScope::Site => (None, BindingScope::Site),
            BindingScope::Rack(reference) => {
                let record = self
                    .store
                    .get_rack(&RackRef(reference.clone()))
                    .await
                    .map_err(store_error)?;
                (Some(record.id), BindingScope::Rack(record.name))
            }
        };
        self.store
            .bind_event_rule(&rule, rack)
            .await
            .map_err(store_error)?;
        tracing::info!(rule = %rule.spec.name, event_type = %rule.spec.event_type, scope = %scope, "event rule bound");
        Ok(BindingRecord {
            event_type: rule.spec.event_type,
            scope,
            rule_id,
            rule_name: rule.spec.name,
            enabled: rule.enabled,
        })
    }

    /// `event_rule.unbind`.
    pub async fn unbind_event_rule(
        &self,
        event_type: EventType,
        scope: &BindingScope,
    ) -> Result<bool, ApiError> {
        let rack = match scope {
            BindingScope::Site => None,
            BindingScope::Rack(reference) => Some(
                self.store
                    .get_rack(&RackRef(reference.clone()))
                    .await
                    .map_err(store_error)?
                    .id,
            ),
        };
        self.store
            .unbind_event_rule(event_type, rack)
            .await
            .map_err(store_error)
    }

    /// Takes in one observation: stores the event once with the chosen
    /// rule's executions (a repeat changes nothing) and wakes the
    /// dispatcher.
    pub async fn ingest_event(&self, event: &HardwareEvent) -> Result<EventPublishReply, ApiError> {
        check_event(event)?;
        let rack = self
            .store
            .get_rack(&RackRef(event.rack.clone()))
            .await
            .map_err(store_error)?;
        let components: Vec<RackComponent> = rack
            .components
            .iter()
            .map(|c| RackComponent {
                name: c.name.clone(),
                component_type: c.component_type,
                slot: c.slot,
            })
            .collect();
        let (at_rack, at_site) = self
            .store
            .bound_rules(event.event_type, rack.id)
            .await
            .map_err(store_error)?;
        let candidate = |r: Option<EventRuleRecord>| {
            r.map(|rule| Candidate {
                enabled: rule.enabled,
                rule,
            })
        };
        let rule = rules::select(candidate(at_rack), candidate(at_site))
            .map_or_else(|| rules::builtin(event.event_type), |r| r.spec);
        // An event about a component its rack lacks is refused before
        // anything is stored (the count does not change that).
        rules::plan(&rule, event, &components, 0)
            .map_err(|e| ApiError::new(ErrorCode::NotFound, e.to_string()))?;
        // Planned inside the store's transaction, with the rack's leaking
        // components as they are with this event in.
        let mut refused = None;
        let mut locked = 0;
        let (id, created) = self
            .store
            .insert_event_planned(event, &rule.name, |leaking| {
                let count = rules::leaking_trays(leaking, &components);
                match rules::plan(&rule, event, &components, count) {
                    Ok(planned) => {
                        let locks = rules::locks(event, &planned);
                        locked = locks.len();
                        let executions = planned
                            .into_iter()
                            .map(|p| NewExecution {
                                targets: p
                                    .targets
                                    .iter()
                                    .map(|name| format!("{}/{name}", rack.name))
                                    .collect(),
                                action: p.action,
                                status: p.status,
                                reason: p.reason,
                            })
                            .collect();
                        (executions, locks)
                    }
                    Err(e) => {
                        refused = Some(e);
                        (Vec::new(), Vec::new())
                    }
                }
            })
            .await
            .map_err(store_error)?;
        let executions = rule.actions.len();
        if let Some(e) = refused {
            // Checked before the store was asked: not reached.
            tracing::error!(event_id = %id, error = %e, "event stored without executions");
        }
        if created {
            self.metrics
                .hardware_events
                .get_or_create(&StatusLabels {
                    status: event.event_type.as_str().to_owned(),
                })
                .inc();
            tracing::warn!(
                event_id = %id,
                rack = %event.rack,
                component = %event.component,
                event_type = %event.event_type,
                rule = %rule.name,
                actions = executions,
                locked,
                "hardware event"
            );
            self.event_poke.notify_one();
        } else {
            tracing::debug!(event_id = %id, key = %event.key, "hardware event seen again");
        }
        Ok(EventPublishReply { id, created })
    }

    /// Consumes hardware events published by watchers until `stop`. An
    /// event that cannot be taken (unknown rack or component, an empty
    /// identity) is parked with why; one the database could not take is
    /// delivered again.
    pub async fn run_hardware_events(self, stop: CancellationToken) {
        let metrics = self.metrics.clone();
        consume(
            &self.js.clone(),
            Source {
                stream: STREAM_HARDWARE,
                consumer: CONSUMER_HARDWARE,
                concurrency: 4,
            },
            stop,
            flow_protocol::decode::request,
            &|stream| metrics.parked(stream),
            |event: HardwareEvent, message| {
                let this = self.clone();
                async move {
                    match this.ingest_event(&event).await {
                        Ok(_) => {
                            let _ = message.ack().await;
                        }
                        Err(error) if error.code == ErrorCode::Unavailable => {
                            tracing::warn!(error = %error.message, "hardware event not stored; delivered again");
                            let _ = message
                                .ack_with(jetstream::AckKind::Nak(Some(EVENT_RETRY)))
                                .await;
                        }
                        Err(error) => {
                            let why = match error.details.is_empty() {
                                true => error.message,
                                false => format!("{}: {}", error.message, error.details.join("; ")),
                            };
                            if park(&this.js, STREAM_HARDWARE, &message, &why).await {
                                this.metrics.parked(STREAM_HARDWARE);
                            }
                        }
                    }
                }
            },
        )
        .await;
    }

    /// Runs due executions until `stop`: every [`EXECUTION_POLL`], or when
    /// an event arrives.
    pub async fn run_event_executions(self, stop: CancellationToken) {
        let driver = Driver {
            name: "event executions",
            period: Period::Rest(EXECUTION_POLL),
            poke: Some(&self.event_poke),
        };
        driver.drive(&stop, |_| self.run_due_executions()).await;
    }

    /// Claims due executions (up to [`CLAIM_BATCH`]) and attempts each;
    /// another pass at once when the batch was full.
    async fn run_due_executions(&self) -> Result<Next, flow_store::StoreError> {
        let claimed = self
            .store
            .claim_executions(CLAIM_BATCH, EXECUTION_LEASE)
            .await?;
        let more = claimed.len() as i64 == CLAIM_BATCH;
        for held in claimed {
            self.attempt(&held).await;
        }
        Ok(if more { Next::Again } else { Next::Wait })
    }

    /// One attempt of one execution, and its outcome recorded.
    async fn attempt(&self, held: &ClaimedExecution) {
        let (result, tasks) = self.execute(held).await;
        let outcome = match result {
            Ok(()) => AttemptOutcome::Completed,
            Err(error) => match rules::retry_delay(held.attempt, RETRY_BASE) {
                Some(after) => AttemptOutcome::Retry { after, error },
                None => AttemptOutcome::Failed { error },
            },
        };
        let label = match &outcome {
            AttemptOutcome::Completed => "completed",
            AttemptOutcome::Retry { .. } => "retry",
            AttemptOutcome::Failed { .. } => "failed",
        };
        self.metrics
            .event_executions
            .get_or_create(&OutcomeLabels { outcome: label })
            .inc();
        match &outcome {
            AttemptOutcome::Completed => {
                tracing::info!(execution = %held.id, event_id = %held.event_id, action = %held.action.name, attempt = held.attempt, tasks = tasks.len(), "event action done");
            }
            AttemptOutcome::Retry { after, error } => {
                tracing::warn!(execution = %held.id, event_id = %held.event_id, action = %held.action.name, attempt = held.attempt, retry_in = ?after, %error, "event action failed; trying again");
            }
            AttemptOutcome::Failed { error } => {
                tracing::error!(execution = %held.id, event_id = %held.event_id, action = %held.action.name, attempt = held.attempt, %error, "event action failed for good");
            }
        }
        match self.store.finish_execution(held, &outcome, &tasks).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(execution = %held.id, "another scheduler took the execution over; its outcome stands");
            }
            Err(error) => {
                // The lease runs out and another attempt (with the same
                // task request ID) repeats nothing.
                tracing::warn!(execution = %held.id, error = %ErrorChain(&error), "cannot record the outcome of an event action");
            }
        }
    }

    async fn execute(&self, held: &ClaimedExecution) -> (Result<(), String>, Vec<TaskId>) {
        let event = &held.event;
        match &held.action.kind {
            ActionKind::Noop => (Ok(()), Vec::new()),
            ActionKind::Alert { severity, message } => {
                self.metrics
                    .event_alerts
                    .get_or_create(&StatusLabels {
                        status: severity.as_str().to_owned(),
                    })
                    .inc();
                match severity {
                    Severity::Ok => {
                        tracing::info!(alert = %message, rack = %event.rack, component = %event.component, event_type = %event.event_type, detail = %event.message, "event alert")
                    }
                    Severity::Warning => {
                        tracing::warn!(alert = %message, rack = %event.rack, component = %event.component, event_type = %event.event_type, detail = %event.message, "event alert")
                    }
                    Severity::Critical => {
                        tracing::error!(alert = %message, rack = %event.rack, component = %event.component, event_type = %event.event_type, detail = %event.message, "event alert")
                    }
                }
                (Ok(()), Vec::new())
            }
            ActionKind::SubmitTask { task, preempt, .. } => {
                let mut request = (**task).clone();
                request.request_id = request_id(held.id);
                if request.description.is_empty() {
                    request.description =
                        format!("{} on {}/{}", event.event_type, event.rack, event.component);
                }
                let names: BTreeSet<String> = held
                    .targets
                    .iter()
                    .filter_map(|t| t.split_once('/').map(|(_, name)| name.to_owned()))
                    .collect();
                let submitted = self
                    .submit_rack_as(
                        &request,
                        &RackRef(event.rack.clone()),
                        &Scope::Only(names),
                        Origin::Event(held.event_id),
                        preempt.then_some(held.event_id),
                    )
                    .await;
                self.poke();
                match submitted {
                    Ok(Submission::Refused(e)) | Err(e) => (Err(e.message), Vec::new()),
                    Ok(s) => {
                        let tasks = s.task_id().into_iter().collect();
                        (Ok(()), tasks)
                    }
                }
            }
        }
    }

    /// `event.get`.
    pub async fn event(&self, id: EventId) -> Result<flow_protocol::event::EventRecord, ApiError> {
        self.store.get_event(id).await.map_err(store_error)
    }

    /// `event.clear`: removes the event's locks, recording who cleared it
    /// and why (a reason is required).
    pub async fn clear_event(
        &self,
        r: &EventClear,
    ) -> Result<flow_protocol::event::EventRecord, ApiError> {
        let mut problems = Vec::new();
        if r.reason.trim().is_empty() {
            problems.push(
                "reason: required: say why the event is safe to clear (e.g. \"tray dried and inspected\")"
                    .to_owned(),
            );
        } else if r.reason.len() > MAX_CLEAR_REASON_LEN {
            problems.push(format!("reason: at most {MAX_CLEAR_REASON_LEN} bytes"));
        } else if r.reason.chars().any(|c| c.is_control() && c != '\n') {
            problems.push("reason: must not contain control characters".to_owned());
        }
        if r.by.len() > MAX_IDENTITY_LEN || r.by.chars().any(char::is_control) {
            problems.push(format!(
                "by: at most {MAX_IDENTITY_LEN} bytes, no control characters"
            ));
        }
        if !problems.is_empty() {
            return Err(ApiError::invalid(
                format!("event.clear refused: {}", problems.join("; ")),
                problems,
            ));
        }
        let before = self.store.get_event(r.id).await.map_err(store_error)?;
        self.store
            .clear_event(r.id, r.reason.trim(), &r.by)
            .await
            .map_err(store_error)?;
        tracing::warn!(
            event_id = %r.id,
            rack = %before.event.rack,
            component = %before.event.component,
            unlocked = before.locks.len(),
            by = %r.by,
            reason = %r.reason.trim(),
            "hardware event cleared; its locks removed"
        );
        self.event(r.id).await
    }
}

fn check_spec(spec: &EventRuleSpec) -> Result<(), ApiError> {
    let mut problems = rules::validate(spec);
    for action in &spec.actions {
        if let ActionKind::SubmitTask { task, .. } = &action.kind {
            if let Err(e) = task.operation_to_run() {
                problems.push(format!("actions {:?}: {}", action.name, e.message));
            }
            // An override the rule will make needs its reason, as a
            // request's does (docs/audit.md).
            for (set, field) in [
                (task.override_readiness, "override_readiness"),
                (task.allow_version_change, "allow_version_change"),
            ] {
                if set
                    && let Err(e) =
                        flow_protocol::audit::check_reason(task.reason.as_deref(), field)
                {
                    problems.push(format!("actions {:?}: task.{}", action.name, e.message));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(invalid_request("event rule", problems))
    }
}
