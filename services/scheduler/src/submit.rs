//! Submissions: targets (racks, labels, components) resolved to racks, then
//! one task per rack, each planned and admitted or refused on its own with
//! the reason; from `task.submit` on `flow.api` or from a message on
//! `flow.tasks.submit`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use flow_decisions::lifecycle::{TaskPlan, TaskState, Window};
use flow_decisions::plan;
use flow_jetstream::{Source, consume, park};
use flow_protocol::api::{
    ApiError, ConflictStrategy, ErrorCode, MAX_RACKS_PER_SUBMIT, RackOutcome, Submission,
    TaskSubmit, TaskSubmitReply, encode_reply,
};
use flow_protocol::ids::RackRef;
use flow_protocol::jobs::{CONSUMER_SUBMIT, ComponentTarget, FirmwareImage, STREAM_TASKS};
use flow_protocol::task::timestamp;
use flow_protocol::{TaskId, subjects};
use flow_rules::{ComponentType, OperationCode, PowerOperation};
use flow_store::tasks::{NewTask, Origin};
use flow_telemetry::ErrorChain;
use tokio_util::sync::CancellationToken;

use crate::error::{api_error, store_error};
use crate::identity::IdentityMode;
use crate::service::TaskService;

/// How soon a task request from `flow.tasks.submit` that met a database
/// outage is delivered again.
const SUBMIT_RETRY: Duration = Duration::from_secs(1);

/// Whether a submission's outcome, or any rack's, was decided by a
/// dependency being down rather than by the request.
fn dependency_down(outcome: &Result<TaskSubmitReply, ApiError>) -> bool {
    let down = |e: &ApiError| e.code == ErrorCode::Unavailable;
    match outcome {
        Err(error) => down(error),
        Ok(reply) => reply
            .results
            .iter()
            .any(|r| matches!(&r.submission, Submission::Refused(e) if down(e))),
    }
}

/// The racks a submission targets, in the order named: explicit racks,
/// then racks by label, then the racks of individual components. A rack is
/// targeted whole, or only at the components named in it.
#[derive(Debug, Default)]
pub(crate) struct Targets {
    pub(crate) racks: Vec<(RackRef, Scope)>,
}

/// What a task covers of its rack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Every component (of the requested types).
    Whole,
    /// Only these components (by name).
    Only(BTreeSet<String>),
}

impl Targets {
    fn add(&mut self, rack: RackRef, scope: Scope) {
        match self.racks.iter_mut().find(|(r, _)| *r == rack) {
            Some((_, existing)) => match (existing, scope) {
                (Scope::Whole, _) => {}
                (existing @ Scope::Only(_), Scope::Whole) => *existing = Scope::Whole,
                (Scope::Only(names), Scope::Only(more)) => names.extend(more),
            },
            None => self.racks.push((rack, scope)),
        }
    }
}

/// What a submission decided for one rack before its transaction
/// ([`TaskService::prepare`]).
pub(crate) struct Prepared {
    /// The operation run (the forced variant when asked).
    pub(crate) operation: OperationCode,
    /// The rack.
    pub(crate) record: flow_protocol::api::RackRecord,
    /// The refusal for components locked by a hardware event.
    pub(crate) locked: Option<ApiError>,
    /// The rule, when one resolved.
    pub(crate) resolution: Option<flow_store::Resolution>,
    /// The plan, when the rule planned.
    pub(crate) plan: Option<flow_decisions::plan::Plan>,
    /// Flashed components' version changes.
    pub(crate) versions: Vec<flow_protocol::preview::VersionChange>,
    /// Every other reason to refuse, in the order the submission checks.
    pub(crate) problems: Vec<ApiError>,
    /// The task it would create (none when it could not be planned).
    pub(crate) task: Option<PreparedTask>,
}

/// The task a submission would create.
pub(crate) struct PreparedTask {
    pub(crate) new: NewTask,
    pub(crate) state: TaskState,
    pub(crate) queue_timeout: Option<Duration>,
}

impl TaskService {
    /// Submits an operation: one task per targeted rack, each refused or
    /// created on its own, with the reason. Targets that name nothing (a
    /// label no rack carries, a component that does not exist) refuse the
    /// whole request: nothing is created.
    pub async fn submit(&self, request: &TaskSubmit) -> Result<TaskSubmitReply, ApiError> {
        let targets = self.targets(request).await?;
        if let Some(audit) = self.store.audit_scope() {
            // Racks a label or component selected are named in the record.
            audit.note_racks(targets.racks.iter().map(|(rack, _)| rack.0.clone()));
        }
        let mut results = Vec::new();
        for (rack, scope) in &targets.racks {
            let submission = match self
                .submit_rack(request, rack, scope, Origin::Request)
                .await
            {
                Ok(s) => s,
                Err(error) => Submission::Refused(error),
            };
            self.metrics.submission(match &submission {
                Submission::Refused(_) => "rejected",
                Submission::Duplicate(_) => "duplicate",
                Submission::Queued { .. } => "queued",
                Submission::Created(_) => "accepted",
            });
            if let Some(id) = submission.task_id() {
                tracing::info!(
                    task_id = %id,
                    rack = %rack,
                    operation = %request.operation,
                    duplicate = matches!(submission, Submission::Duplicate(_)),
                    "task submitted"
                );
            }
            results.push(RackOutcome {
                rack: rack.0.clone(),
                submission,
            });
        }
        self.poke();
        Ok(TaskSubmitReply { results })
    }

    /// The racks a request targets, each whole or at the components named
    /// (at most [`MAX_RACKS_PER_SUBMIT`]).
    pub(crate) async fn targets(&self, request: &TaskSubmit) -> Result<Targets, ApiError> {
        self.targets_within(request, MAX_RACKS_PER_SUBMIT).await
    }

    /// [`TaskService::targets`], at most `max` racks (a run submits its
    /// targets one by one over hours, so it may hold many more than one
    /// submission).
    pub(crate) async fn targets_within(
        &self,
        request: &TaskSubmit,
        max: usize,
    ) -> Result<Targets, ApiError> {
        let mut targets = Targets::default();
        let by_more = !request.labels.is_empty() || !request.components.is_empty();
        for rack in &request.racks {
            // Labels and components name racks by name: a rack given by ID
            // too is the same rack, not a second target.
            let rack = match rack.as_id() {
                Some(_) if by_more => match self.store.get_rack(rack).await {
                    Ok(record) => RackRef(record.name),
                    Err(_) => rack.clone(),
                },
                _ => rack.clone(),
            };
            targets.add(rack, Scope::Whole);
        }
        if !request.labels.is_empty() {
            let racks = self
                .store
                .list_racks(&request.labels)
                .await
                .map_err(store_error)?
                .racks;
            if racks.is_empty() {
                return Err(ApiError::new(
                    ErrorCode::NotFound,
                    format!(
                        "labels: no rack carries {}",
                        request
                            .labels
                            .iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            for rack in racks {
                targets.add(RackRef(rack.name), Scope::Whole);
            }
        }
        if !request.components.is_empty() {
            let found = self
                .store
                .find_components(&request.components)
                .await
                .map_err(store_error)?;
            for (rack, component) in found {
                targets.add(RackRef(rack), Scope::Only(BTreeSet::from([component])));
            }
        }
        if targets.racks.len() > max {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                format!(
                    "the targets cover {} racks, at most {max} per request",
                    targets.racks.len()
                ),
            ));
        }
        Ok(targets)
    }

    /// Plans and admits (or refuses) the request's task for one rack;
    /// `origin` is what submitted it (a request, a schedule, a run).
    pub(crate) async fn submit_rack(
        &self,
        request: &TaskSubmit,
        rack: &RackRef,
        scope: &Scope,
        origin: Origin,
    ) -> Result<Submission, ApiError> {
        self.submit_rack_as(request, rack, scope, origin, None)
            .await
    }

    /// Why the request's task may not start on one rack: a component it
    /// targets is locked by a hardware event and the operation is one a
    /// lock forbids (`locked_out`). `None`: nothing stops it.
    pub(crate) async fn lock_refusal(
        &self,
        request: &TaskSubmit,
        rack: &RackRef,
        scope: &Scope,
    ) -> Result<Option<ApiError>, ApiError> {
        let operation = request.operation_to_run()?;
        if !locked_out(operation) {
            return Ok(None);
        }
        let record = self.store.get_rack(rack).await.map_err(store_error)?;
        let names: Vec<String> = targeted(request, &record, scope)
            .map(|c| c.name.clone())
            .collect();
        let locks = self
            .store
            .locks_on(&record.name, &names)
            .await
            .map_err(store_error)?;
        Ok(lock_error(operation, &locks))
    }

    /// [`TaskService::submit_rack`]; with `preempt`, the task of that
    /// hardware event's action goes first (`TaskService::create`).
    pub(crate) async fn submit_rack_as(
        &self,
        request: &TaskSubmit,
        rack: &RackRef,
        scope: &Scope,
        origin: Origin,
        preempt: Option<flow_protocol::EventId>,
    ) -> Result<Submission, ApiError> {
        let prepared = self.prepare(request, rack, scope, origin).await?;
        if let Some(refusal) = prepared.locked {
            tracing::warn!(rack = %prepared.record.name, operation = %prepared.operation, "submission refused: components locked by a hardware event");
            return Ok(Submission::Refused(refusal));
        }
        let Some(task) = prepared.task else {
            return Err(prepared
                .problems
                .into_iter()
                .next()
                .unwrap_or_else(|| ApiError::new(ErrorCode::Internal, "no task was planned")));
        };
        if let Some(first) = prepared.problems.into_iter().next() {
            return Err(first);
        }
        self.create(&task.new, task.state, task.queue_timeout, preempt)
            .await
            .map_err(api_error)
    }

    /// Everything a submission decides for one rack before its
    /// transaction, by the functions the preview shares
    /// (`services/scheduler/src/preview.rs`): the components it targets,
    /// the locks on them, the rule, the plan, the capability, image and
    /// version checks, and the task it would create — with every problem
    /// found, not only the first. An unknown rack or operation is an
    /// error.
    /// The firmware images a task installs: its own, or those of the
    /// published bundle it names (`shared/decisions/src/images.rs`,
    /// `from_bundle`). The inner error is the submission's problem.
    async fn task_images(
        &self,
        request: &TaskSubmit,
        rule: &flow_rules::RuleDefinition,
        planned: &flow_decisions::plan::Plan,
        rack_model: &str,
    ) -> Result<Result<BTreeMap<ComponentType, FirmwareImage>, ApiError>, ApiError> {
        let Some(bundle) = &request.bundle else {
            return Ok(Ok(request.firmware.clone()));
        };
        if !request.firmware.is_empty() {
            return Ok(Err(ApiError::new(
                ErrorCode::Invalid,
                format!(
                    "firmware: the task names bundle {bundle} and images of its own: give one or the other"
                ),
            )));
        }
        let which = flow_protocol::firmware::BundleRef {
            name: bundle.name.clone(),
            version: bundle.version.clone(),
        };
        let record = match self.store.bundle(&which).await {
            Ok(record) => record,
            Err(e) => {
                let e = store_error(e);
                return if e.code == ErrorCode::NotFound {
                    Ok(Err(e))
                } else {
                    Err(e)
                };
            }
        };
        let flashed = flow_decisions::images::flashed_types(rule, planned);
        Ok(
            flow_decisions::images::from_bundle(&record, rack_model, &flashed, &bundle.sub_targets)
                .map_err(|problems| {
                    ApiError::invalid(
                        format!("bundle {bundle} cannot be installed on this rack"),
                        problems,
                    )
                }),
        )
    }

    pub(crate) async fn prepare(
        &self,
        request: &TaskSubmit,
        rack: &RackRef,
        scope: &Scope,
        origin: Origin,
    ) -> Result<Prepared, ApiError> {
        let operation = request.operation_to_run()?;
        let record = self.store.get_rack(rack).await.map_err(store_error)?;
        // Outside its principal's scope: refused before anything else.
        let forbidden = self.scope_refusal(&record.name, origin).await?;
        let components: Vec<ComponentTarget> = targeted(request, &record, scope)
            .map(|c| ComponentTarget::of(&record.name, c))
            .collect();
        let mut prepared = Prepared {
            operation,
            record,
            locked: None,
            resolution: None,
            plan: None,
            versions: Vec::new(),
            problems: forbidden.into_iter().collect(),
            task: None,
        };
        let record = &prepared.record;
        if locked_out(operation) {
            let names: Vec<String> = components.iter().map(|c| c.name.clone()).collect();
            let locks = self
                .store
                .locks_on(&record.name, &names)
                .await
                .map_err(store_error)?;
            prepared.locked = lock_error(operation, &locks);
        }
        if components.is_empty() {
            prepared.problems.push(ApiError::new(
                ErrorCode::Invalid,
                match scope {
                    Scope::Whole => format!(
                        "rack {} has no components of the requested types",
                        record.name
                    ),
                    Scope::Only(names) => format!(
                        "rack {}: none of the components named ({}) is of the requested types",
                        record.name,
                        names.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                },
            ));
            return Ok(prepared);
        }
        let resolution = match self.store.resolve(rack, operation, request.rule_id).await {
            Ok(r) => r,
            Err(e) => {
                prepared.problems.push(store_error(e));
                return Ok(prepared);
            }
        };
        let planned = match plan(&resolution.definition, &components) {
            Ok(p) => p,
            Err(e) => {
                prepared.problems.push(ApiError::new(
                    ErrorCode::Invalid,
                    format!("rule {:?}: {e}", resolution.reply.name),
                ));
                prepared.resolution = Some(resolution);
                return Ok(prepared);
            }
        };
        let targeted: BTreeSet<ComponentType> =
            components.iter().map(|c| c.component_type).collect();
        if let Err(problems) = flow_hardware::catalog::check_rule(&resolution.definition, &targeted)
        {
            prepared.problems.push(ApiError::invalid(
                "the rule needs capabilities the managers lack",
                problems,
            ));
        }
        let firmware = match self
            .task_images(request, &resolution.definition, &planned, &record.model)
            .await?
        {
            Ok(images) => images,
            Err(problem) => {
                prepared.problems.push(problem);
                BTreeMap::new()
            }
        };
        if let Err(problems) =
            flow_decisions::images::check_images(&resolution.definition, &planned, &firmware)
        {
            prepared.problems.push(ApiError::invalid(
                "the task's firmware images do not match what its rule flashes",
                problems,
            ));
        }
        let installed = record
            .components
            .iter()
            .map(|c| (c.name.as_str(), c.firmware_version.as_str()))
            .collect();
        prepared.versions =
            flow_decisions::versions::changes(operation, &planned, &installed, &firmware);
        let firmware_snapshot =
            flow_decisions::restore::snapshot(&resolution.definition, &planned, &installed);
        if !request.allow_version_change {
            let problems =
                flow_decisions::versions::wrong_way_problems(operation, &prepared.versions);
            if !problems.is_empty() {
                prepared.problems.push(ApiError::invalid(
                    "the images would move components' firmware the wrong way",
                    problems,
                ));
            }
        }
        let task_plan = Arc::new(TaskPlan {
            operation,
            rule: resolution.definition.clone(),
            components: planned.components.clone(),
            firmware,
            readiness_wait_ms: request
                .readiness_wait()
                .map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX)),
            window: Window {
                not_before_ms: request.not_before.map(timestamp::to_ms),
                not_after_ms: request.not_after.map(timestamp::to_ms),
            },
            power_domains: record.power_domains.clone(),
            emergency: matches!(origin, Origin::Event(_)),
        });
        let state = TaskState::planned(TaskId::new(), record.id, task_plan, &planned);
        let new = NewTask {
            request_id: request.request_id.clone(),
            rack_name: record.name.clone(),
            description: request.description.clone(),
            rule: resolution.reply.clone(),
            origin,
            firmware_snapshot,
        };
        let queue_timeout = match request.conflict {
            ConflictStrategy::Reject => None,
            ConflictStrategy::Queue { timeout_seconds } => {
                Some(Duration::from_secs(timeout_seconds))
            }
        };
        prepared.task = Some(PreparedTask {
            new,
            state,
            queue_timeout,
        });
        prepared.resolution = Some(resolution);
        prepared.plan = Some(planned);
        Ok(prepared)
    }

    /// Consumes task requests published on `flow.tasks.submit` until `stop`.
    /// JetStream drops a repeated `Nats-Msg-Id` (the request id) within its
    /// duplicate window, and the store recognises a repeated request id after
    /// it. The per-rack outcome is published on
    /// `flow.events.submit.<request_id>`. In verified identity mode each is
    /// refused (`unauthenticated`, answered and acknowledged): a stream
    /// keeps no server-stamped identity, so tasks are submitted through
    /// `flow.api` (docs/audit.md, "Who").
    pub async fn run_submissions(self, stop: CancellationToken, identity: IdentityMode) {
        let metrics = self.metrics.clone();
        consume(
            &self.js.clone(),
            Source {
                stream: STREAM_TASKS,
                consumer: CONSUMER_SUBMIT,
                // One at a time: queued submissions keep their order.
                concurrency: 1,
            },
            stop,
            flow_protocol::decode::request,
            &|stream| metrics.parked(stream),
            |request: TaskSubmit, message| {
                let this = self.clone();
                async move {
                    if let Err(error) = request.check() {
                        // Decodes, but no task can come of it (and an empty
                        // or huge request id has no outcome subject).
                        if park(&this.js, STREAM_TASKS, &message, &error.message).await {
                            this.metrics.parked(STREAM_TASKS);
                        }
                        return;
                    }
                    if identity == IdentityMode::Verified {
                        tracing::warn!(
                            request_id = %request.request_id,
                            "stream submission refused: verified identity mode takes tasks through flow.api"
                        );
                        let refusal: Result<(), ApiError> = Err(ApiError::new(
                            ErrorCode::Unauthenticated,
                            "flow.tasks.submit: this scheduler verifies who submits (--identity verified) and a stream keeps no verified identity; submit through flow.api (task.submit, `flow task submit`)",
                        ));
                        let subject = subjects::submit_outcome(&request.request_id);
                        if let Err(error) = this.js.publish(subject, encode_reply(&refusal).into()).await {
                            tracing::warn!(error = %ErrorChain(&error), "submission outcome not published");
                        }
                        let _ = message.ack().await;
                        return;
                    }
                    // The outcome is a reply envelope, as on flow.api: the
                    // per-rack results, or why nothing was created. A rack
                    // refused because the database is down is not an
                    // answer: the request comes again (the racks it did
                    // create are found again by its request id).
                    let outcome = this.submit(&request).await;
                    if dependency_down(&outcome) {
                        tracing::warn!(
                            request_id = %request.request_id,
                            "task request not admitted (database unavailable); delivered again"
                        );
                        let _ = message
                            .ack_with(async_nats::jetstream::AckKind::Nak(Some(SUBMIT_RETRY)))
                            .await;
                        return;
                    }
                    let reply = encode_reply(&outcome);
                    let subject = subjects::submit_outcome(&request.request_id);
                    if let Err(error) = this.js.publish(subject, reply.into()).await {
                        tracing::warn!(error = %ErrorChain(&error), "submission outcome not published");
                    }
                    let _ = message.ack().await;
                }
            },
        )
        .await;
    }
}

/// The components of `record` a request targets: those in `scope`, of the
/// requested types.
fn targeted<'a>(
    request: &'a TaskSubmit,
    record: &'a flow_protocol::api::RackRecord,
    scope: &'a Scope,
) -> impl Iterator<Item = &'a flow_protocol::api::ComponentRecord> + 'a {
    record
        .components
        .iter()
        .filter(move |c| match scope {
            Scope::Whole => true,
            Scope::Only(names) => names.contains(&c.name),
        })
        .filter(move |c| {
            request.component_types.is_empty()
                || request.component_types.contains(&c.component_type)
        })
}

/// Whether a lock forbids `operation`: power-on and every reset (any power
/// operation but a power-off) and firmware updates. Power-offs and
/// decommissioning are allowed: they make a leaking tray safer.
pub(crate) fn locked_out(operation: OperationCode) -> bool {
    match operation {
        OperationCode::Power(p) => {
            !matches!(p, PowerOperation::PowerOff | PowerOperation::ForcePowerOff)
        }
        OperationCode::Firmware(_) => true,
        OperationCode::Decommission => false,
    }
}

/// The refusal for `operation` on components with these locks (none: no
/// refusal): names each locked component and its event, and how to clear
/// it.
pub(crate) fn lock_error(
    operation: OperationCode,
    locks: &[flow_protocol::event::ComponentLock],
) -> Option<ApiError> {
    let first = locks.first()?;
    let details: Vec<String> = locks
        .iter()
        .map(|l| {
            format!(
                "{}/{}: locked by event {} since {}",
                l.rack,
                l.component,
                l.event_id,
                timestamp::format(l.since)
            )
        })
        .collect();
    let mut error = ApiError::new(
        ErrorCode::Conflict,
        format!(
            "{}/{} is locked by hardware event {}: no {operation} may start on it until an operator clears the event: flow event clear {} --reason \"…\"{}",
            first.rack,
            first.component,
            first.event_id,
            first.event_id,
            match locks.len() {
                1 => String::new(),
                n => format!(" ({} more locked component(s))", n - 1),
            }
        ),
    );
    error.details = details;
    Some(error)
}

#[cfg(test)]
mod tests {
    use flow_protocol::EventId;
    use flow_protocol::event::ComponentLock;
    use flow_rules::FirmwareOperation;
    use time::OffsetDateTime;

    use super::*;

    #[test]
    fn a_lock_refuses_power_on_resets_and_firmware_but_not_power_offs() {
        let refused = [
            OperationCode::Power(PowerOperation::PowerOn),
            OperationCode::Power(PowerOperation::ForcePowerOn),
            OperationCode::Power(PowerOperation::Restart),
            OperationCode::Power(PowerOperation::ForceRestart),
            OperationCode::Power(PowerOperation::WarmReset),
            OperationCode::Power(PowerOperation::ColdReset),
            OperationCode::Firmware(FirmwareOperation::Upgrade),
            OperationCode::Firmware(FirmwareOperation::Downgrade),
            OperationCode::Firmware(FirmwareOperation::Rollback),
        ];
        for op in refused {
            assert!(locked_out(op), "{op}");
        }
        for op in [
            OperationCode::Power(PowerOperation::PowerOff),
            OperationCode::Power(PowerOperation::ForcePowerOff),
            OperationCode::Decommission,
        ] {
            assert!(!locked_out(op), "{op}");
        }
    }

    #[test]
    fn the_refusal_names_the_component_the_event_and_how_to_clear_it() {
        let op = OperationCode::Power(PowerOperation::PowerOn);
        assert_eq!(lock_error(op, &[]), None);
        let event = EventId(uuid::Uuid::nil());
        let lock = |c: &str| ComponentLock {
            rack: "rack-01".to_owned(),
            component: c.to_owned(),
            event_id: event,
            since: OffsetDateTime::UNIX_EPOCH,
        };
        let e = lock_error(op, &[lock("compute-03"), lock("compute-04")]).unwrap();
        assert_eq!(e.code, ErrorCode::Conflict);
        assert_eq!(
            e.message,
            format!(
                "rack-01/compute-03 is locked by hardware event {event}: no power_on may start on it \
                 until an operator clears the event: flow event clear {event} --reason \"…\" \
                 (1 more locked component(s))"
            )
        );
        assert_eq!(e.details.len(), 2);
    }
}
