//! Submissions: one task per rack, each planned and admitted or refused on
//! its own with the reason; from `task.submit` on `flow.api` or from a
//! message on `flow.tasks.submit`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use flow_engine::lifecycle::{TaskPlan, TaskState};
use flow_engine::plan;
use flow_jetstream::{Source, consume, park};
use flow_protocol::api::{
    ApiError, ConflictStrategy, ErrorCode, RackOutcome, Submission, TaskSubmit, TaskSubmitReply,
};
use flow_protocol::ids::RackRef;
use flow_protocol::jobs::{CONSUMER_SUBMIT, ComponentTarget, STREAM_TASKS};
use flow_protocol::{TaskId, subjects};
use flow_rules::ComponentType;
use flow_store::tasks::NewTask;
use flow_telemetry::ErrorChain;
use tokio_util::sync::CancellationToken;

use crate::error::{api_error, store_error};
use crate::service::TaskService;

impl TaskService {
    /// Submits an operation: one task per rack, each refused or created on
    /// its own, with the reason.
    pub async fn submit(&self, request: &TaskSubmit) -> TaskSubmitReply {
        let mut results = Vec::new();
        for rack in &request.racks {
            let submission = match self.submit_rack(request, rack).await {
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
        TaskSubmitReply { results }
    }

    async fn submit_rack(
        &self,
        request: &TaskSubmit,
        rack: &RackRef,
    ) -> Result<Submission, ApiError> {
        let record = self.store.get_rack(rack).await.map_err(store_error)?;
        let components: Vec<ComponentTarget> = record
            .components
            .iter()
            .filter(|c| {
                request.component_types.is_empty()
                    || request.component_types.contains(&c.component_type)
            })
            .map(|c| ComponentTarget::of(&record.name, c))
            .collect();
        if components.is_empty() {
            return Err(ApiError::new(
                ErrorCode::Invalid,
                format!(
                    "rack {} has no components of the requested types",
                    record.name
                ),
            ));
        }
        let resolution = self
            .store
            .resolve(rack, request.operation, request.rule_id)
            .await
            .map_err(store_error)?;
        let planned = plan(&resolution.definition, &components).map_err(|e| {
            ApiError::new(
                ErrorCode::Invalid,
                format!("rule {:?}: {e}", resolution.reply.name),
            )
        })?;
        let targeted: BTreeSet<ComponentType> =
            components.iter().map(|c| c.component_type).collect();
        flow_hardware::catalog::check_rule(&resolution.definition, &targeted).map_err(
            |problems| ApiError::invalid("the rule needs capabilities the managers lack", problems),
        )?;
        flow_engine::images::check_images(&resolution.definition, &planned, &request.firmware)
            .map_err(|problems| {
                ApiError::invalid(
                    "the task's firmware images do not match what its rule flashes",
                    problems,
                )
            })?;
        let task_plan = Arc::new(TaskPlan {
            operation: request.operation,
            rule: resolution.definition,
            components: planned.components.clone(),
            firmware: request.firmware.clone(),
        });
        let state = TaskState::planned(TaskId::new(), record.id, task_plan, &planned);
        let new = NewTask {
            request_id: request.request_id.clone(),
            rack_name: record.name.clone(),
            rule: resolution.reply,
        };
        let queue_timeout = match request.conflict {
            ConflictStrategy::Reject => None,
            ConflictStrategy::Queue { timeout_seconds } => {
                Some(Duration::from_secs(timeout_seconds))
            }
        };
        self.create(&new, state, queue_timeout)
            .await
            .map_err(api_error)
    }

    /// Consumes task requests published on `flow.tasks.submit` until `stop`.
    /// JetStream drops a repeated `Nats-Msg-Id` (the request id) within its
    /// duplicate window, and the store recognises a repeated request id after
    /// it. The per-rack outcome is published on
    /// `flow.events.submit.<request_id>`.
    pub async fn run_submissions(self, stop: CancellationToken) {
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
                    let reply = this.submit(&request).await;
                    let subject = subjects::submit_outcome(&request.request_id);
                    match serde_json::to_vec(&reply) {
                        Ok(body) => {
                            if let Err(error) = this.js.publish(subject, body.into()).await {
                                tracing::warn!(error = %ErrorChain(&error), "submission outcome not published");
                            }
                        }
                        Err(error) => {
                            tracing::warn!(error = %ErrorChain(&error), "submission outcome not encodable")
                        }
                    }
                    let _ = message.ack().await;
                }
            },
        )
        .await;
    }
}
