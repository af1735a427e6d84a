//! The `flow.api` service: one micro-service endpoint per operation, each
//! decoding a JSON request, calling the store, and replying with the
//! `{"schema": 1, "result" | "error"}` envelope. Malformed requests get a
//! `bad_request` reply naming the problem; nothing crashes the service.

use std::sync::Arc;

use async_nats::service::{Service, ServiceExt};
use bytes::Bytes;
use flow_protocol::api::{
    ApiError, ErrorCode, RackByRef, RackCreate, RackList, RuleAssociate, RuleBatchCreate, RuleById,
    RuleCreate, RuleDelete, RuleDisassociate, RuleList, RuleResolve, RuleUpdate, TaskById,
    TaskCancelReply, TaskList, TaskSubmit, decode_request, encode_reply, endpoint,
};
use flow_protocol::subjects::{API_PREFIX, SERVICE_NAME, SERVICE_VERSION};
use flow_rules::RuleBatch;
use flow_store::{Store, StoreError};
use futures::StreamExt;

use crate::exec::Executor;
use serde::Serialize;
use serde::de::DeserializeOwned;

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
    /// endpoints go to `executor`.
    pub async fn start(
        client: async_nats::Client,
        store: Store,
        executor: Executor,
    ) -> Result<ApiService, async_nats::Error> {
        let service = client
            .service_builder()
            .description("Flow: operation rules, racks and tasks")
            .start(SERVICE_NAME, SERVICE_VERSION)
            .await?;
        let group = service.group(API_PREFIX);
        let mut endpoints = Vec::new();
        for name in endpoint::ALL {
            let ep = group
                .endpoint_builder()
                .name(name.replace('.', "_"))
                .add(name)
                .await?;
            endpoints.push(ep.map(move |req| (name, req)).boxed());
        }
        let store = Arc::new(store);
        let executor = Arc::new(executor);
        let task = tokio::spawn(async move {
            futures::stream::select_all(endpoints)
                .for_each_concurrent(MAX_CONCURRENT_REQUESTS, |(name, request)| {
                    let store = Arc::clone(&store);
                    let executor = Arc::clone(&executor);
                    let max_payload = client.max_payload();
                    async move {
                        let reply = handle(&store, &executor, name, &request.message.payload).await;
                        let reply = fit_reply(name, reply, max_payload);
                        if let Err(error) = request.respond(Ok(Bytes::from(reply))).await {
                            tracing::warn!(endpoint = name, %error, "reply not sent");
                        }
                    }
                })
                .await;
        });
        Ok(ApiService { service, task })
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

/// A store error as the API reports it (also for each rack of a submission).
pub(crate) fn store_error(error: StoreError) -> ApiError {
    match error {
        StoreError::NotFound(m) => ApiError::new(ErrorCode::NotFound, m),
        StoreError::Conflict(m) => ApiError::new(ErrorCode::Conflict, m),
        StoreError::Invalid { message, details } => ApiError::invalid(message, details),
        refused if refused.is_refused_value() => {
            let chain = error_chain(&refused);
            tracing::warn!(error = %chain, "the database refused a value");
            ApiError::new(
                ErrorCode::Invalid,
                format!("the database refused a value of the request: {chain}"),
            )
        }
        other => {
            let chain = error_chain(&other);
            tracing::error!(error = %chain, "store failure");
            let code = match other {
                StoreError::Database(_) => ErrorCode::Unavailable,
                _ => ErrorCode::Internal,
            };
            ApiError::new(code, chain)
        }
    }
}

/// An error and its sources, `a: b: c`.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
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

async fn run<Req, Rep, F, Fut>(body: &[u8], f: F) -> Vec<u8>
where
    Req: DeserializeOwned,
    Rep: Serialize,
    F: FnOnce(Req) -> Fut,
    Fut: Future<Output = Result<Rep, ApiError>>,
{
    let reply = match decode_request::<Req>(body) {
        Ok(req) => f(req).await,
        Err(e) => Err(e),
    };
    encode_reply(&reply)
}

/// Answers one request.
#[tracing::instrument(skip_all, fields(endpoint = name))]
pub async fn handle(store: &Store, executor: &Executor, name: &str, body: &[u8]) -> Vec<u8> {
    match name {
        endpoint::RULE_CREATE => {
            run(body, |r: RuleCreate| async move {
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
        endpoint::RULE_BATCH_CREATE => {
            run(body, |r: RuleBatchCreate| async move {
                let batch = RuleBatch::from_value(&r.batch).map_err(|e| rule_invalid(&e))?;
                store
                    .batch_create(&batch, r.overwrite)
                    .await
                    .map_err(store_error)
            })
            .await
        }
        endpoint::RULE_GET => {
            run(body, |r: RuleById| async move {
                store.get_rule(r.id).await.map_err(store_error)
            })
            .await
        }
        endpoint::RULE_LIST => {
            run(body, |r: RuleList| async move {
                store.list_rules(&r).await.map_err(store_error)
            })
            .await
        }
        endpoint::RULE_UPDATE => {
            run(body, |r: RuleUpdate| async move {
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
        endpoint::RULE_DELETE => {
            run(body, |r: RuleDelete| async move {
                store.delete_rule(r.id, r.force).await.map_err(store_error)
            })
            .await
        }
        endpoint::RULE_SET_DEFAULT => {
            run(body, |r: RuleById| async move {
                store.set_default(r.id).await.map_err(store_error)
            })
            .await
        }
        endpoint::RULE_ASSOCIATE => {
            run(body, |r: RuleAssociate| async move {
                store
                    .associate(&r.rack, r.rule_id)
                    .await
                    .map_err(store_error)
            })
            .await
        }
        endpoint::RULE_DISASSOCIATE => {
            run(body, |r: RuleDisassociate| async move {
                store
                    .disassociate(&r.rack, r.operation)
                    .await
                    .map_err(store_error)
            })
            .await
        }
        endpoint::RULE_RESOLVE => {
            run(body, |r: RuleResolve| async move {
                store
                    .resolve(&r.rack, r.operation, r.rule_id)
                    .await
                    .map(|res| res.reply)
                    .map_err(store_error)
            })
            .await
        }
        endpoint::RULE_HISTORY => {
            run(body, |r: RuleById| async move {
                store.rule_history(r.id).await.map_err(store_error)
            })
            .await
        }
        endpoint::RACK_CREATE => {
            run(body, |r: RackCreate| async move {
                store.create_rack(&r.rack).await.map_err(store_error)
            })
            .await
        }
        endpoint::RACK_GET => {
            run(body, |r: RackByRef| async move {
                store.get_rack(&r.rack).await.map_err(store_error)
            })
            .await
        }
        endpoint::RACK_LIST => {
            run(body, |_: RackList| async move {
                store.list_racks().await.map_err(store_error)
            })
            .await
        }
        endpoint::RACK_DELETE => {
            run(body, |r: RackByRef| async move {
                store.delete_rack(&r.rack).await.map_err(store_error)
            })
            .await
        }
        endpoint::TASK_SUBMIT => {
            run(body, |r: TaskSubmit| async move {
                r.check()?;
                Ok(executor.submit(&r).await)
            })
            .await
        }
        endpoint::TASK_GET => {
            run(body, |r: TaskById| async move {
                store.task_json(r.id).await.map_err(store_error)
            })
            .await
        }
        endpoint::TASK_LIST => {
            run(body, |r: TaskList| async move {
                store
                    .list_tasks(i64::from(r.limit.unwrap_or(50).min(1000)))
                    .await
                    .map_err(store_error)
            })
            .await
        }
        endpoint::TASK_CANCEL => {
            run(body, |r: TaskById| async move {
                let cancelling = store.cancel_task(r.id).await.map_err(store_error)?;
                if cancelling {
                    // The mark is committed on the outbox: publish it now.
                    executor.poke();
                }
                Ok(TaskCancelReply { cancelling })
            })
            .await
        }
        endpoint::TASK_COUNTS => {
            run(body, |_: RackList| async move {
                store.task_counts().await.map_err(store_error)
            })
            .await
        }
        other => encode_reply::<()>(&Err(ApiError::new(
            ErrorCode::BadRequest,
            format!("unknown endpoint {other:?}"),
        ))),
    }
}
