//! The `flow.api` service: one micro-service endpoint per operation, each
//! decoding a JSON request, calling the store, and replying with the
//! `{"schema": 1, "result" | "error"}` envelope. Malformed requests get a
//! `bad_request` reply naming the problem; nothing crashes the service.

use std::sync::Arc;

use async_nats::service::{Service, ServiceExt};
use bytes::Bytes;
use flow_protocol::api::{ApiError, Endpoint, ErrorCode, decode_request, encode_reply, endpoint};
use flow_protocol::audit::{ACTOR_HEADER, Actor};
use flow_protocol::subjects::{API_PREFIX, SERVICE_NAME, SERVICE_VERSION};
use flow_rules::RuleBatch;
use flow_store::Store;
use futures::StreamExt;

use crate::audit::AuditedRequest;
use crate::error::{api_error, store_error};
use crate::service::TaskService;

/// Requests handled at once per scheduler (each holds at most one database
/// connection; sized below the pool's default of 10 plus headroom for
/// queued requests).
pub const MAX_CONCURRENT_REQUESTS: usize = 32;

/// A running API service. Dropping it does not stop it; call
/// [`ApiService::stop`].
pub struct ApiService {
    service: Service,
    task: tokio::task::JoinHandle<()>,
}

impl ApiService {
    /// Starts the service on `client`, answering from `store`; task
    /// endpoints go to `tasks`.
    pub async fn start(
        client: async_nats::Client,
        store: Store,
        tasks: TaskService,
    ) -> Result<ApiService, async_nats::Error> {
        let service = client
            .service_builder()
            .description("Flow: operation rules, racks and tasks")
            .start(SERVICE_NAME, SERVICE_VERSION)
            .await?;
        let group = service.group(API_PREFIX);
        let mut endpoints = Vec::new();
        for &name in endpoint::ALL {
            let ep = group
                .endpoint_builder()
                .name(name.replace('.', "_"))
                .add(name)
                .await?;
            endpoints.push(ep.map(move |req| (name, req)).boxed());
        }
        let store = Arc::new(store);
        let tasks = Arc::new(tasks);
        let task = tokio::spawn(async move {
            futures::stream::select_all(endpoints)
                .for_each_concurrent(MAX_CONCURRENT_REQUESTS, |(name, request)| {
                    let store = Arc::clone(&store);
                    let tasks = Arc::clone(&tasks);
                    let max_payload = client.max_payload();
                    async move {
                        let actor = Actor::from_header(
                            request
                                .message
                                .headers
                                .as_ref()
                                .and_then(|h| h.get(ACTOR_HEADER))
                                .map(|v| v.as_str()),
                        );
                        let reply =
                            handle(&store, &tasks, name, actor, &request.message.payload).await;
                        let reply = fit_reply(name, reply, max_payload);
                        if let Err(error) = request.respond(Ok(Bytes::from(reply))).await {
                            tracing::warn!(endpoint = name, error = %flow_telemetry::ErrorChain(&error), "reply not sent");
                        }
                    }
                })
                .await;
        });
        Ok(ApiService { service, task })
    }

    /// Aborts the request loop without stopping the service (a crash).
    pub fn abort(self) {
        self.task.abort();
    }

    /// Stops answering and waits for requests in flight.
    pub async fn stop(self) -> Result<(), async_nats::Error> {
        self.service.stop().await?;
        let _ = self.task.await;
        Ok(())
    }
}

/// A reply larger than the server's `max_payload` could never be sent and
/// the caller would wait in vain: it becomes an error that says so.
fn fit_reply(name: &str, reply: Vec<u8>, max_payload: usize) -> Vec<u8> {
    if reply.len() <= max_payload {
        return reply;
    }
    tracing::warn!(
        endpoint = name,
        bytes = reply.len(),
        max_payload,
        "reply too large for NATS"
    );
    encode_reply::<()>(&Err(ApiError::new(
        ErrorCode::Invalid,
        format!(
            "the reply ({} bytes) exceeds the server's max_payload ({max_payload} bytes); ask for less (limit, offset)",
            reply.len()
        ),
    )))
}

fn rule_invalid(errors: &flow_rules::ValidationErrors) -> ApiError {
    ApiError::invalid(
        format!(
            "the rule is invalid ({} {})",
            errors.len(),
            if errors.len() == 1 { "error" } else { "errors" }
        ),
        errors.iter().map(|e| e.to_string()).collect(),
    )
}

/// Decodes the request of endpoint `E`, answers it with `f`, and encodes
/// the reply: the request and reply types are `E`'s, so a handler cannot
/// answer a subject with another endpoint's types.
async fn serve<E, F, Fut>(body: &[u8], f: F) -> Vec<u8>
where
    E: Endpoint,
    F: FnOnce(E::Request) -> Fut,
    Fut: Future<Output = Result<E::Reply, ApiError>>,
{
    let reply = match decode_request::<E::Request>(body) {
        Ok(req) => f(req).await,
        Err(e) => Err(e),
    };
    encode_reply(&reply)
}

/// Answers one request from `actor`. A request to a `change` endpoint of
/// the catalog leaves exactly one audit record: written with its change,
/// or alone when it ends without one ([`crate::audit`]).
#[tracing::instrument(skip_all, fields(endpoint = name, actor = %actor.name))]
pub async fn handle(
    store: &Store,
    tasks: &TaskService,
    name: &str,
    actor: Actor,
    body: &[u8],
) -> Vec<u8> {
    match AuditedRequest::begin(store, tasks, name, actor, body) {
        None => answer(store, tasks, name, body).await,
        Some(audited) => {
            let reply = answer(&audited.store, &audited.tasks, name, body).await;
            audited.end(&reply).await;
            reply
        }
    }
}

/// Answers one request with `store` and `tasks`.
async fn answer(store: &Store, tasks: &TaskService, name: &str, body: &[u8]) -> Vec<u8> {
    use flow_protocol::api::endpoint as ep;
    match name {
        ep::RuleCreate::NAME => {
            serve::<ep::RuleCreate, _, _>(body, |r| async move {
                let spec = flow_rules::spec_from_parts(
                    &r.name,
                    &r.description,
                    &r.operation_type,
                    &r.operation,
                    &r.definition,
                )
                .map_err(|e| rule_invalid(&e))?;
                store
                    .create_rule(&spec, r.is_default)
                    .await
                    .map_err(store_error)
            })
            .await
        }
        ep::RuleBatchCreate::NAME => {
            serve::<ep::RuleBatchCreate, _, _>(body, |r| async move {
                let batch = RuleBatch::from_value(&r.batch).map_err(|e| rule_invalid(&e))?;
                store
                    .batch_create(&batch, r.overwrite)
                    .await
                    .map_err(store_error)
            })
            .await
        }
        ep::RuleGet::NAME => {
            serve::<ep::RuleGet, _, _>(body, |r| async move {
                store.get_rule(r.id).await.map_err(store_error)
            })
            .await
        }
        ep::RuleList::NAME => {
            serve::<ep::RuleList, _, _>(body, |r| async move {
                store.list_rules(&r).await.map_err(store_error)
            })
            .await
        }
        ep::RuleUpdate::NAME => {
            serve::<ep::RuleUpdate, _, _>(body, |r| async move {
                store
                    .update_rule(
                        r.id,
                        r.name.as_deref(),
                        r.description.as_deref(),
                        r.definition.as_ref(),
                    )
                    .await
                    .map_err(store_error)
            })
            .await
        }
        ep::RuleDelete::NAME => {
            serve::<ep::RuleDelete, _, _>(body, |r| async move {
                store.delete_rule(r.id, r.force).await.map_err(store_error)
            })
            .await
        }
        ep::RuleSetDefault::NAME => {
            serve::<ep::RuleSetDefault, _, _>(body, |r| async move {
                store.set_default(r.id).await.map_err(store_error)
            })
            .await
        }
        ep::RuleAssociate::NAME => {
            serve::<ep::RuleAssociate, _, _>(body, |r| async move {
                store
                    .associate(&r.rack, r.rule_id)
                    .await
                    .map_err(store_error)
            })
            .await
        }
        ep::RuleDisassociate::NAME => {
            serve::<ep::RuleDisassociate, _, _>(body, |r| async move {
                store
                    .disassociate(&r.rack, r.operation)
                    .await
                    .map_err(store_error)
            })
            .await
        }
        ep::RuleResolve::NAME => {
            serve::<ep::RuleResolve, _, _>(body, |r| async move {
                store
                    .resolve(&r.rack, r.operation, r.rule_id)
                    .await
                    .map(|res| res.reply)
                    .map_err(store_error)
            })
            .await
        }
        ep::RuleHistory::NAME => {
            serve::<ep::RuleHistory, _, _>(body, |r| async move {
                store.rule_history(r.id).await.map_err(store_error)
            })
            .await
        }
        ep::RackCreate::NAME => {
            serve::<ep::RackCreate, _, _>(body, |r| async move {
                store.create_rack(&r.rack).await.map_err(store_error)
            })
            .await
        }
        ep::RackGet::NAME => {
            serve::<ep::RackGet, _, _>(body, |r| async move {
                store.get_rack(&r.rack).await.map_err(store_error)
            })
            .await
        }
        ep::RackList::NAME => {
            serve::<ep::RackList, _, _>(body, |r| async move {
                store.list_racks(&r.labels).await.map_err(store_error)
            })
            .await
        }
        ep::ComponentStatusSet::NAME => {
            serve::<ep::ComponentStatusSet, _, _>(body, |r| async move {
                if r.components.is_empty() {
                    return Err(ApiError::new(
                        ErrorCode::BadRequest,
                        "components: name at least one component".to_owned(),
                    ));
                }
                store
                    .set_component_status(&r.components, r.status)
                    .await
                    .map_err(store_error)
            })
            .await
        }
        ep::RackLabel::NAME => {
            serve::<ep::RackLabel, _, _>(body, |r| async move {
                store.label_rack(&r).await.map_err(store_error)
            })
            .await
        }
        ep::RackDelete::NAME => {
            serve::<ep::RackDelete, _, _>(body, |r| async move {
                store.delete_rack(&r.rack).await.map_err(store_error)
            })
            .await
        }
        ep::TaskSubmit::NAME => {
            serve::<ep::TaskSubmit, _, _>(body, |r| async move {
                r.check()?;
                tasks.submit(&r).await
            })
            .await
        }
        ep::TaskPlan::NAME => {
            serve::<ep::TaskPlan, _, _>(body, |mut r| async move {
                // A preview needs no request ID; one given finds a task it
                // already created (a duplicate).
                if r.request_id.trim().is_empty() {
                    r.request_id = format!("plan/{}", uuid::Uuid::new_v4());
                }
                r.check()?;
                tasks.plan_task(&r).await
            })
            .await
        }
        ep::TaskGet::NAME => {
            serve::<ep::TaskGet, _, _>(body, |r| async move {
                let mut record = store.task_record(r.id).await.map_err(store_error)?;
                if record.status.is_open() {
                    record.power_waits = store.power_waits(r.id).await.map_err(store_error)?;
                }
                Ok(record)
            })
            .await
        }
        ep::TaskList::NAME => {
            serve::<ep::TaskList, _, _>(body, |r| async move {
                store
                    .list_tasks(i64::from(r.limit.unwrap_or(50).min(1000)))
                    .await
                    .map_err(store_error)
            })
            .await
        }
        ep::TaskCancel::NAME => {
            serve::<ep::TaskCancel, _, _>(body, |r| async move {
                let reply = tasks.cancel(r.id).await.map_err(api_error)?;
                // Its cancel mark or its end is on the outbox: publish now.
                tasks.poke();
                Ok(reply)
            })
            .await
        }
        ep::TaskCounts::NAME => {
            serve::<ep::TaskCounts, _, _>(body, |_| async move {
                store.task_counts().await.map_err(store_error)
            })
            .await
        }
        ep::ScheduleCreate::NAME => {
            serve::<ep::ScheduleCreate, _, _>(
                body,
                |r| async move { tasks.create_schedule(r).await },
            )
            .await
        }
        ep::SchedulePlan::NAME => {
            serve::<ep::SchedulePlan, _, _>(body, |r| async move { tasks.plan_schedule(r).await })
                .await
        }
        ep::ScheduleGet::NAME => {
            serve::<ep::ScheduleGet, _, _>(body, |r| async move {
                store.schedule(&r.schedule).await.map_err(store_error)
            })
            .await
        }
        ep::ScheduleList::NAME => {
            serve::<ep::ScheduleList, _, _>(body, |r| async move {
                Ok(flow_protocol::schedule::ScheduleListReply {
                    schedules: store.schedules(r.enabled_only).await.map_err(store_error)?,
                })
            })
            .await
        }
        ep::ScheduleUpdate::NAME => {
            serve::<ep::ScheduleUpdate, _, _>(
                body,
                |r| async move { tasks.update_schedule(r).await },
            )
            .await
        }
        ep::SchedulePause::NAME => {
            serve::<ep::SchedulePause, _, _>(body, |r| async move {
                tasks.pause_schedule(&r.schedule).await
            })
            .await
        }
        ep::ScheduleResume::NAME => {
            serve::<ep::ScheduleResume, _, _>(body, |r| async move {
                tasks.resume_schedule(&r.schedule).await
            })
            .await
        }
        ep::ScheduleTrigger::NAME => {
            serve::<ep::ScheduleTrigger, _, _>(body, |r| async move {
                tasks.trigger_schedule(&r.schedule).await
            })
            .await
        }
        ep::ScheduleDelete::NAME => {
            serve::<ep::ScheduleDelete, _, _>(body, |r| async move {
                let schedule = store.schedule(&r.schedule).await.map_err(store_error)?;
                store
                    .delete_schedule(schedule.id)
                    .await
                    .map_err(store_error)?;
                Ok(flow_protocol::schedule::ScheduleDeleteReply { id: schedule.id })
            })
            .await
        }
        ep::ScheduleHistory::NAME => {
            serve::<ep::ScheduleHistory, _, _>(body, |r| async move {
                let schedule = store.schedule(&r.schedule).await.map_err(store_error)?;
                Ok(flow_protocol::schedule::ScheduleHistoryReply {
                    firings: store
                        .firings(schedule.id, r.limit.unwrap_or(20).min(1000))
                        .await
                        .map_err(store_error)?,
                })
            })
            .await
        }
        ep::EventRuleCreate::NAME => {
            serve::<ep::EventRuleCreate, _, _>(
                body,
                |r| async move { tasks.create_event_rule(r).await },
            )
            .await
        }
        ep::EventRuleGet::NAME => {
            serve::<ep::EventRuleGet, _, _>(
                body,
                |r| async move { tasks.event_rule(&r.rule).await },
            )
            .await
        }
        ep::EventRuleList::NAME => {
            serve::<ep::EventRuleList, _, _>(body, |_| async move {
                Ok(flow_protocol::event::EventRuleListReply {
                    rules: tasks.event_rules().await?,
                })
            })
            .await
        }
        ep::EventRuleUpdate::NAME => {
            serve::<ep::EventRuleUpdate, _, _>(
                body,
                |r| async move { tasks.update_event_rule(r).await },
            )
            .await
        }
        ep::EventRuleEnable::NAME => {
            serve::<ep::EventRuleEnable, _, _>(body, |r| async move {
                tasks.enable_event_rule(&r.rule, r.enabled).await
            })
            .await
        }
        ep::EventRuleDelete::NAME => {
            serve::<ep::EventRuleDelete, _, _>(body, |r| async move {
                tasks.delete_event_rule(&r.rule).await
            })
            .await
        }
        ep::EventRuleBind::NAME => {
            serve::<ep::EventRuleBind, _, _>(
                body,
                |r| async move { tasks.bind_event_rule(r).await },
            )
            .await
        }
        ep::EventRuleUnbind::NAME => {
            serve::<ep::EventRuleUnbind, _, _>(body, |r| async move {
                Ok(flow_protocol::event::UnbindReply {
                    removed: tasks.unbind_event_rule(r.event_type, &r.scope).await?,
                })
            })
            .await
        }
        ep::EventRuleBindings::NAME => {
            serve::<ep::EventRuleBindings, _, _>(body, |_| async move {
                Ok(flow_protocol::event::BindingListReply {
                    bindings: store.list_bindings().await.map_err(store_error)?,
                })
            })
            .await
        }
        ep::EventPublish::NAME => {
            serve::<ep::EventPublish, _, _>(body, |r| async move { tasks.ingest_event(&r).await })
                .await
        }
        ep::EventGet::NAME => {
            serve::<ep::EventGet, _, _>(body, |r| async move { tasks.event(r.id).await }).await
        }
        ep::EventClear::NAME => {
            serve::<ep::EventClear, _, _>(body, |r| async move { tasks.clear_event(&r).await })
                .await
        }
        ep::EventList::NAME => {
            serve::<ep::EventList, _, _>(body, |r| async move {
                Ok(flow_protocol::event::EventListReply {
                    events: store
                        .list_events(r.rack.as_deref(), r.limit.unwrap_or(50).min(1000))
                        .await
                        .map_err(store_error)?,
                })
            })
            .await
        }
        ep::PowerDomainSet::NAME => {
            serve::<ep::PowerDomainSet, _, _>(body, |r| async move {
                store.set_power_domain(&r).await.map_err(store_error)
            })
            .await
        }
        ep::PowerDomainGet::NAME => {
            serve::<ep::PowerDomainGet, _, _>(body, |r| async move {
                store.power_domain(&r.name).await.map_err(store_error)
            })
            .await
        }
        ep::PowerDomainList::NAME => {
            serve::<ep::PowerDomainList, _, _>(body, |_| async move {
                store.list_power_domains().await.map_err(store_error)
            })
            .await
        }
        ep::PowerDomainDelete::NAME => {
            serve::<ep::PowerDomainDelete, _, _>(body, |r| async move {
                store
                    .delete_power_domain(&r.name)
                    .await
                    .map_err(store_error)
            })
            .await
        }
        ep::PowerModelSet::NAME => {
            serve::<ep::PowerModelSet, _, _>(body, |r| async move {
                store.set_power_model(&r).await.map_err(store_error)
            })
            .await
        }
        ep::PowerModelList::NAME => {
            serve::<ep::PowerModelList, _, _>(body, |_| async move {
                store.list_power_models().await.map_err(store_error)
            })
            .await
        }
        ep::RackPowerDomains::NAME => {
            serve::<ep::RackPowerDomains, _, _>(body, |r| async move {
                store.set_rack_power_domains(&r).await.map_err(store_error)
            })
            .await
        }
        ep::PowerAdmit::NAME => {
            serve::<ep::PowerAdmit, _, _>(body, |r| async move {
                store.admit_power(&r).await.map_err(store_error)
            })
            .await
        }
        ep::RunCreate::NAME => {
            serve::<ep::RunCreate, _, _>(body, |r| async move { tasks.create_run(r).await }).await
        }
        ep::RunPlan::NAME => {
            serve::<ep::RunPlan, _, _>(body, |r| async move { tasks.plan_run(r).await }).await
        }
        ep::RunGet::NAME => {
            serve::<ep::RunGet, _, _>(body, |r| async move {
                store.run_record(&r.run).await.map_err(store_error)
            })
            .await
        }
        ep::RunList::NAME => {
            serve::<ep::RunList, _, _>(body, |r| async move {
                Ok(flow_protocol::run::RunListReply {
                    runs: store
                        .runs(r.limit.unwrap_or(50).min(1000))
                        .await
                        .map_err(store_error)?,
                })
            })
            .await
        }
        ep::RunTargets::NAME => {
            serve::<ep::RunTargets, _, _>(body, |r| async move {
                let phase = r
                    .phase
                    .map(|p| usize::try_from(p.saturating_sub(1)).unwrap_or(usize::MAX));
                Ok(flow_protocol::run::RunTargetsReply {
                    targets: store
                        .run_targets(&r.run, phase)
                        .await
                        .map_err(store_error)?,
                })
            })
            .await
        }
        ep::RunPause::NAME => {
            serve::<ep::RunPause, _, _>(body, |r| async move { tasks.pause_run(&r.run).await })
                .await
        }
        ep::RunResume::NAME => {
            serve::<ep::RunResume, _, _>(body, |r| async move { tasks.resume_run(&r.run).await })
                .await
        }
        ep::RunAdvance::NAME => {
            serve::<ep::RunAdvance, _, _>(body, |r| async move { tasks.advance_run(&r).await })
                .await
        }
        ep::RunCancel::NAME => {
            serve::<ep::RunCancel, _, _>(body, |r| async move { tasks.cancel_run(&r.run).await })
                .await
        }
        ep::AuditList::NAME => {
            serve::<ep::AuditList, _, _>(body, |r| async move {
                r.check()?;
                Ok(flow_protocol::audit::AuditListReply {
                    records: store.audit_records(&r).await.map_err(store_error)?,
                })
            })
            .await
        }
        other => encode_reply::<()>(&Err(ApiError::new(
            ErrorCode::BadRequest,
            format!("unknown endpoint {other:?}"),
        ))),
    }
}
