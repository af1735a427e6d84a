//! The `flow.api` client the `flow` CLI, `flow-console`, the hardware
//! watcher, `flow-bench` and the integration tests' stack
//! (`tests/stack/src/lib.rs`) share: one NATS request per call, with a
//! bounded wait and errors that say which service was asked. Typed calls
//! go through [`Endpoint`]; [`Client::request_raw`] sends bytes no typed
//! request would encode (the hostile-input tests) on the same path.

use std::time::Duration;

use flow_config::Settings;
use flow_jetstream::{InitialConnect, connect_nats};
use flow_protocol::api::{ApiError, Endpoint, decode_reply};
use flow_protocol::audit::{ACTOR_HEADER, ON_BEHALF_HEADER};
use flow_protocol::subjects::api_subject;
use serde::Serialize;

/// How long a command waits for the service to answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The settings are wrong.
    #[error(transparent)]
    Config(#[from] flow_config::ConfigError),
    /// NATS is unreachable.
    #[error("cannot connect to NATS at {url}: {source}")]
    Connect {
        /// The URL tried.
        url: String,
        /// Why.
        source: async_nats::ConnectError,
    },
    /// Nobody serves the endpoint.
    #[error(
        "no flow.api service answers on {subject} at {url}: is flow-scheduler running (and this \
         endpoint known to its version)?"
    )]
    NoService {
        /// The subject asked.
        subject: String,
        /// The NATS URL.
        url: String,
    },
    /// The request failed in transit.
    #[error("request to {subject} failed: {source}")]
    Request {
        /// The subject asked.
        subject: String,
        /// Why.
        source: async_nats::RequestError,
    },
    /// The service refused the request.
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// A connected client.
pub struct Client {
    nats: async_nats::Client,
    url: String,
    /// Who the requests claim to come from: sent as the `Flow-Actor`
    /// header (a claim the audit log records, not an authenticated
    /// identity; docs/audit.md).
    actor: Option<String>,
}

impl Client {
    /// Connects with the settings (file, `FLOW_*`, `--server`).
    pub async fn connect(settings: &Settings) -> Result<Client, ClientError> {
        settings.validate_nats()?;
        let connect = connect_nats(&settings.nats, "flow-cli", InitialConnect::FailFast);
        let nats = match tokio::time::timeout(REQUEST_TIMEOUT, connect).await {
            Ok(Ok(c)) => c,
            Ok(Err(source)) => {
                return Err(ClientError::Connect {
                    url: settings.nats.url.clone(),
                    source,
                });
            }
            Err(_) => {
                return Err(ClientError::Connect {
                    url: settings.nats.url.clone(),
                    source: async_nats::ConnectError::new(async_nats::ConnectErrorKind::TimedOut),
                });
            }
        };
        Ok(Client {
            nats,
            url: settings.nats.url.clone(),
            actor: None,
        })
    }

    /// A client on a connection made elsewhere (a service that connects
    /// with [`InitialConnect::Retry`] and its own name); `url` is named in
    /// errors.
    pub fn new(nats: async_nats::Client, url: impl Into<String>) -> Client {
        Client {
            nats,
            url: url.into(),
            actor: None,
        }
    }

    /// This client, naming `actor` in every request's `Flow-Actor` header
    /// (the audit log's "who"; blank names nobody).
    pub fn with_actor(mut self, actor: impl Into<String>) -> Client {
        let actor = actor.into();
        self.actor = (!actor.trim().is_empty()).then_some(actor);
        self
    }

    /// The actor the requests name, if any.
    pub fn actor(&self) -> Option<&str> {
        self.actor.as_deref()
    }

    /// The underlying NATS connection (for JetStream figures).
    pub fn nats(&self) -> &async_nats::Client {
        &self.nats
    }

    /// Calls endpoint `E` with its request.
    pub async fn call<E: Endpoint>(&self, request: &E::Request) -> Result<E::Reply, ClientError> {
        self.send::<E, _>(request, self.actor.as_deref()).await
    }

    /// Calls endpoint `E` on behalf of `user`, a user of this client's own
    /// (the console's): named in `Flow-On-Behalf-Of`, which a verified
    /// scheduler honours from a trusted intermediary only (the request then
    /// acts as `<this client's account>/<user>`, docs/audit.md "Through the
    /// console"), and claimed as `claim` in `Flow-Actor` (what a
    /// development-mode audit record keeps).
    pub async fn call_on_behalf<E: Endpoint>(
        &self,
        user: &str,
        claim: &str,
        request: &E::Request,
    ) -> Result<E::Reply, ClientError> {
        let body = serde_json::to_vec(request)
            .map_err(|e| ApiError::new(flow_protocol::api::ErrorCode::BadRequest, e.to_string()))?;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(ACTOR_HEADER, claim);
        headers.insert(ON_BEHALF_HEADER, user);
        let reply = self
            .request_with(E::NAME, body, REQUEST_TIMEOUT, Some(headers))
            .await?;
        Ok(decode_reply(&reply)?)
    }

    /// Calls endpoint `E` with a body the service reads as `E::Request`,
    /// unread here: a document the operator wrote (a rack file) is checked
    /// by the service, which reports every problem in it at once.
    pub async fn call_document<E: Endpoint>(
        &self,
        body: &serde_json::Value,
    ) -> Result<E::Reply, ClientError> {
        self.send::<E, _>(body, self.actor.as_deref()).await
    }

    async fn send<E: Endpoint, B: Serialize>(
        &self,
        request: &B,
        actor: Option<&str>,
    ) -> Result<E::Reply, ClientError> {
        let body = serde_json::to_vec(request)
            .map_err(|e| ApiError::new(flow_protocol::api::ErrorCode::BadRequest, e.to_string()))?;
        let reply = self
            .request_raw(E::NAME, body, REQUEST_TIMEOUT, actor)
            .await?;
        Ok(decode_reply(&reply)?)
    }

    /// Sends `body` as it is to `endpoint`, waiting at most `wait`, on
    /// behalf of `actor` (else this client's), and returns the reply's
    /// bytes unread: the envelope is the caller's to decode.
    pub async fn request_raw(
        &self,
        endpoint: &str,
        body: Vec<u8>,
        wait: Duration,
        actor: Option<&str>,
    ) -> Result<bytes::Bytes, ClientError> {
        let headers = actor.or(self.actor.as_deref()).map(|actor| {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(ACTOR_HEADER, actor);
            headers
        });
        self.request_with(endpoint, body, wait, headers).await
    }

    async fn request_with(
        &self,
        endpoint: &str,
        body: Vec<u8>,
        wait: Duration,
        headers: Option<async_nats::HeaderMap>,
    ) -> Result<bytes::Bytes, ClientError> {
        let subject = api_subject(endpoint);
        let mut request = async_nats::Request::new()
            .payload(body.into())
            .timeout(Some(wait));
        if let Some(headers) = headers {
            request = request.headers(headers);
        }
        match self.nats.send_request(subject.clone(), request).await {
            Ok(msg) => Ok(msg.payload),
            Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                Err(ClientError::NoService {
                    subject,
                    url: self.url.clone(),
                })
            }
            Err(source) => Err(ClientError::Request { subject, source }),
        }
    }
}
