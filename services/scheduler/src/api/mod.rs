//! The `flow.api` service: one micro-service endpoint per operation, each
//! decoding a JSON request, calling the store, and replying with the
//! `{"schema": 1, "result" | "error"}` envelope. Malformed requests get a
//! `bad_request` reply naming the problem; nothing crashes the service.
//! Each endpoint's handler is in the module of its area (`rules.rs`,
//! `racks.rs`, `tasks.rs`, `schedules.rs`, `runs.rs`, `events.rs`,
//! `power.rs`, `audit.rs`, `access.rs` beside this file), found by name in the dispatch
//! table ([`table`]).

mod access;
mod audit;
mod events;
mod firmware;
mod history;
mod power;
mod racks;
mod rules;
mod runs;
mod schedules;
pub mod table;
mod tasks;

use std::sync::Arc;

use async_nats::service::{Service, ServiceExt};
use bytes::Bytes;
use flow_protocol::api::{ApiError, ErrorCode, encode_reply, endpoint};
use flow_protocol::audit::{ACTOR_HEADER, Actor, EndpointKind};
use flow_protocol::subjects::{API_PREFIX, SERVICE_NAME, SERVICE_VERSION};
use flow_store::Store;
use futures::StreamExt;

use self::table::Cx;
use crate::audit::AuditedRequest;
use crate::identity::{IdentityMode, Refusal};
use crate::service::TaskService;

/// Requests handled at once per scheduler (each holds at most one database
/// connection; sized below the pool's default of 10 plus headroom for
/// queued requests).
pub const MAX_CONCURRENT_REQUESTS: usize = 32;

/// Workers' power admission requests handled at once per scheduler, apart
/// from the rest: an ask mostly waits for its batch
/// (`shared/store/src/admission.rs`), holding no connection meanwhile, and
/// a batch can only take the asks being handled. Capped by the generic
/// limit above, a site's tray stage queued asks in the subscription for
/// longer than the workers wait (measured: 56,558 asks for ~4,500 trays,
/// 245 ms each in batches of at most 32, none sent).
pub const MAX_CONCURRENT_ADMISSIONS: usize = 1024;

/// A running API service. Dropping it does not stop it; call
/// [`ApiService::stop`].
pub struct ApiService {
    service: Service,
    /// The request loops: every endpoint but admissions, and admissions.
    loops: [tokio::task::JoinHandle<()>; 2],
}

impl ApiService {
    /// Starts the service on `client`, answering from `store`; task
    /// endpoints go to `tasks`; callers known as `identity` says.
    pub async fn start(
        client: async_nats::Client,
        store: Store,
        tasks: TaskService,
        identity: IdentityMode,
        intermediaries: Vec<String>,
    ) -> Result<ApiService, async_nats::Error> {
        let service = client
            .service_builder()
            .description("Flow: operation rules, racks and tasks")
            .start(SERVICE_NAME, SERVICE_VERSION)
            .await?;
        let group = service.group(API_PREFIX);
        let mut endpoints = Vec::new();
        let mut admissions = Vec::new();
        for &name in endpoint::ALL {
            let ep = group
                .endpoint_builder()
                .name(name.replace('.', "_"))
                .add(name)
                .await?;
            let stream = ep.map(move |req| (name, req)).boxed();
            if name == <endpoint::PowerAdmit as flow_protocol::api::Endpoint>::NAME {
                admissions.push(stream);
            } else {
                endpoints.push(stream);
            }
        }
        let store = Arc::new(store);
        let tasks = Arc::new(tasks);
        let intermediaries: Arc<[String]> = intermediaries.into();
        // Admissions apart, with their own limit (MAX_CONCURRENT_ADMISSIONS).
        let loops = [
            (endpoints, MAX_CONCURRENT_REQUESTS),
            (admissions, MAX_CONCURRENT_ADMISSIONS),
        ]
        .map(|(streams, limit)| {
            let (store, tasks, intermediaries, client) = (
                Arc::clone(&store),
                Arc::clone(&tasks),
                Arc::clone(&intermediaries),
                client.clone(),
            );
            tokio::spawn(async move {
                futures::stream::select_all(streams)
                    .for_each_concurrent(limit, |(name, request)| {
                        let store = Arc::clone(&store);
                        let tasks = Arc::clone(&tasks);
                        let intermediaries = Arc::clone(&intermediaries);
                        let max_payload = client.max_payload();
                        async move {
                            let headers = request.message.headers.as_ref();
                            let actor = identify(identity, &intermediaries, name, headers);
                            let reply = handle(
                                &store,
                                &tasks,
                                identity,
                                name,
                                actor,
                                &request.message.payload,
                            )
                            .await;
                            let reply = fit_reply(name, reply, max_payload);
                            if let Err(error) = request.respond(Ok(Bytes::from(reply))).await {
                                tracing::warn!(endpoint = name, error = %flow_telemetry::ErrorChain(&error), "reply not sent");
                            }
                        }
                    })
                    .await;
            })
        });
        Ok(ApiService { service, loops })
    }

    /// Aborts the request loop without stopping the service (a crash).
    pub fn abort(self) {
        for l in &self.loops {
            l.abort();
        }
    }

    /// Stops answering and waits for requests in flight.
    pub async fn stop(self) -> Result<(), async_nats::Error> {
        self.service.stop().await?;
        for l in self.loops {
            let _ = l.await;
        }
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

/// Who a request to `name` comes from, by its headers as `identity` says
/// (`crate::identity::resolve`).
fn identify(
    identity: IdentityMode,
    intermediaries: &[String],
    name: &str,
    headers: Option<&async_nats::HeaderMap>,
) -> Result<Actor, Refusal> {
    let pairs = headers.into_iter().flat_map(|h| {
        h.iter().flat_map(|(key, values)| {
            values
                .iter()
                .map(move |value| (key.as_ref(), value.as_str()))
        })
    });
    let claim = headers
        .and_then(|h| h.get(ACTOR_HEADER))
        .map(|v| v.as_str());
    let kind = endpoint::kind(name).unwrap_or(EndpointKind::Read);
    crate::identity::resolve(identity, intermediaries, name, kind, pairs, claim).inspect_err(
        |refusal| {
            tracing::warn!(
                endpoint = name,
                actor = %refusal.actor.name,
                code = refusal.error.code.as_str(),
                message = %refusal.error.message,
                "request refused: who sent it"
            );
        },
    )
}

/// Answers one request from `actor` (or refuses it, unidentified, or as
/// the access policy says: [`crate::access::authorize`]). A request to a
/// `change` endpoint of the catalog leaves exactly one audit record:
/// written with its change, or alone when it ends without one
/// ([`crate::audit`]) — a refusal too.
#[tracing::instrument(skip_all, fields(endpoint = name, actor = tracing::field::Empty))]
pub async fn handle(
    store: &Store,
    tasks: &TaskService,
    identity: IdentityMode,
    name: &str,
    actor: Result<Actor, Refusal>,
    body: &[u8],
) -> Vec<u8> {
    let (refusal, actor) = match actor {
        Ok(actor) => {
            let refused = crate::access::authorize(store, identity, name, &actor, body)
                .await
                .err();
            (refused, actor)
        }
        Err(Refusal { error, actor }) => (Some(error), *actor),
    };
    // Its submissions are checked against the caller's scope too (racks a
    // label or component selects).
    let caller = (identity == IdentityMode::Verified && crate::access::is_checked(&actor))
        .then(|| actor.name.clone());
    let tasks = &tasks.with_caller(caller);
    tracing::Span::current().record("actor", actor.name.as_str());
    let answer = async |store: &Store, tasks: &TaskService| match &refusal {
        Some(error) => encode_reply::<()>(&Err(error.clone())),
        None => answer(store, tasks, name, body).await,
    };
    match AuditedRequest::begin(store, tasks, name, actor, body) {
        None => answer(store, tasks).await,
        Some(audited) => {
            let reply = answer(&audited.store, &audited.tasks).await;
            audited.end(&reply).await;
            reply
        }
    }
}

/// Answers one request with `store` and `tasks`: the endpoint's handler
/// from the table ([`table::find`]), or a `bad_request` for a name that is
/// no endpoint.
async fn answer(store: &Store, tasks: &TaskService, name: &str, body: &[u8]) -> Vec<u8> {
    match table::find(name) {
        Some(serve) => serve(Cx { store, tasks }, body).await,
        None => encode_reply::<()>(&Err(ApiError::new(
            ErrorCode::BadRequest,
            format!("unknown endpoint {name:?}"),
        ))),
    }
}
