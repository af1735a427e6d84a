//! One request's turn at a BMC: authentication (a Redfish session, else
//! HTTP Basic), the exchange (waiting out a `503` with `Retry-After`), the
//! service root, raw JSON reads, actions with their `ETag`, event streams.

use std::sync::Arc;
use std::time::Duration;

use nv_redfish::ServiceRoot;
use nv_redfish::bmc_http::reqwest::Client as NvClient;
use nv_redfish::bmc_http::{BmcCredentials, CacheSettings, HttpBmc};
use nv_redfish::quirks::RulesBmc;
use serde_json::Value;
use url::Url;

use flow_hardware::HardwareError;

use super::SESSIONS_PATH;
use super::lock;
use super::pool::Session;
use super::quirks::Bmc;
use super::quirks::repairs;

/// Longest `Retry-After` a request waits out (holding its permits) before
/// the `503` is the caller's; longer ones are retried by the step's policy.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);
/// How many times one request waits out a `503` with `Retry-After`.
pub(super) const RETRY_AFTER_TRIES: usize = 2;

/// How long the root a login read stands in for a read of it: long enough
/// for the discovery that follows the first login, short enough that a
/// later rediscovery reads the root as it is then.
pub(super) const ROOT_KEPT: Duration = Duration::from_secs(60);

/// Where the root says logins go (`Links/Sessions`), else [`SESSIONS_PATH`].
pub(crate) fn sessions_link(root: &Value) -> String {
    root["Links"]["Sessions"]["@odata.id"]
        .as_str()
        .filter(|p| p.starts_with('/'))
        .map_or_else(|| SESSIONS_PATH.to_owned(), str::to_owned)
}

/// The resource an action's target belongs to: the path before
/// `/Actions/`.
pub(super) fn resource_of(action_target: &str) -> &str {
    action_target
        .split_once("/Actions/")
        .map_or(action_target, |(resource, _)| resource)
}

/// A Redfish session: its token and, for the logout, its URI.
#[derive(Clone)]
pub(super) struct SessionToken {
    pub(super) token: flow_config::Secret,
    pub(super) location: Option<String>,
}

/// How one request authenticates.
#[derive(Clone)]
pub(super) enum Auth {
    Basic,
    Token(flow_config::Secret),
}

/// One exchange as [`Session::send`] reads it.
pub(super) struct Exchange {
    pub(super) reply: Reply,
    pub(super) retry_after: Option<Duration>,
    pub(super) token: Option<String>,
}

/// What a raw request got: its status, its `Location` and its body.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// The `Location` header (a task monitor after a `202`).
    pub location: Option<String>,
    /// The `ETag` header.
    pub etag: Option<String>,
    /// The body, as text.
    pub body: String,
}

impl Session<'_> {
    /// The nv-redfish service root, read once per BMC and kept.
    pub async fn root(&self) -> Result<ServiceRoot<Bmc>, HardwareError> {
        if let Some(root) = self.handle.root.lock().await.as_ref() {
            return Ok(root.clone());
        }
        // Not under the root's lock: a login clears it.
        let auth = self.auth().await?;
        let client = NvClient::with_client(self.http.clone());
        let credentials = match auth {
            Auth::Token(token) => BmcCredentials::token(token.expose().to_owned()),
            Auth::Basic => BmcCredentials::new(
                self.credential.user.clone(),
                self.credential.password.expose().to_owned(),
            ),
        };
        let bmc = RulesBmc::new(
            HttpBmc::new(
                client,
                self.base.clone(),
                credentials,
                CacheSettings::default(),
            ),
            repairs(),
        );
        let root = ServiceRoot::new(Arc::new(bmc))
            .await
            .map_err(|e| super::errors::nv_error(self.target, "read the service root", &e))?;
        *self.handle.root.lock().await = Some(root.clone());
        Ok(root)
    }

    pub(super) fn url(&self, path: &str) -> Url {
        let mut url = self.base.clone();
        match path.split_once('?') {
            Some((p, q)) => {
                url.set_path(p);
                url.set_query(Some(q));
            }
            None => url.set_path(path),
        }
        url
    }

    /// Sends one raw request, waiting out up to [`RETRY_AFTER_TRIES`]
    /// `503`s whose `Retry-After` is at most [`MAX_RETRY_AFTER`]. Any
    /// status is the caller's; a transport failure is an error.
    pub(super) async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<&str>,
    ) -> Result<Reply, HardwareError> {
        let url = self.url(path);
        let mut waits = 0;
        let mut relogged = false;
        loop {
            let auth = self.auth().await?;
            let reply = self
                .once(method.clone(), &url, body, &auth, if_match)
                .await?;
            if reply.reply.status == 401
                && let Auth::Token(token) = &auth
                && !relogged
            {
                // The BMC dropped the session (timeout, reboot): log in again, once.
                relogged = true;
                tracing::info!(path, "session refused (401); logging in again");
                self.forget_session(token).await;
                continue;
            }
            let wait = reply.retry_after.filter(|w| {
                reply.reply.status == 503 && *w <= MAX_RETRY_AFTER && waits < RETRY_AFTER_TRIES
            });
            match wait {
                Some(wait) => {
                    waits += 1;
                    tracing::debug!(
                        path,
                        wait_s = wait.as_secs(),
                        "503 with Retry-After; waiting"
                    );
                    tokio::time::sleep(wait).await;
                }
                None => return Ok(reply.reply),
            }
        }
    }

    /// One HTTP exchange.
    pub(super) async fn once(
        &self,
        method: reqwest::Method,
        url: &Url,
        body: Option<&Value>,
        auth: &Auth,
        if_match: Option<&str>,
    ) -> Result<Exchange, HardwareError> {
        let mut request = self.http.request(method, url.clone());
        if let Some(etag) = if_match {
            request = request.header(reqwest::header::IF_MATCH, etag);
        }
        request = match auth {
            Auth::Basic => request.basic_auth(
                &self.credential.user,
                Some(self.credential.password.expose()),
            ),
            Auth::Token(token) => request.header("X-Auth-Token", token.expose()),
        };
        if let Some(body) = body {
            request = request.json(body);
        }
        self.exchange(request, url).await
    }

    pub(super) async fn exchange(
        &self,
        request: reqwest::RequestBuilder,
        url: &Url,
    ) -> Result<Exchange, HardwareError> {
        let response = request
            .send()
            .await
            .map_err(|e| super::errors::transport_error(self.target, url, &e))?;
        let status = response.status().as_u16();
        let header = |name: reqwest::header::HeaderName| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let retry_after = header(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let location = header(reqwest::header::LOCATION);
        let etag = header(reqwest::header::ETAG);
        let token = header(reqwest::header::HeaderName::from_static("x-auth-token"));
        let body = response.text().await.unwrap_or_default();
        Ok(Exchange {
            reply: Reply {
                status,
                location,
                etag,
                body,
            },
            retry_after,
            token,
        })
    }

    /// How the next request authenticates: Basic when the credential says
    /// so or the BMC has no SessionService; otherwise the BMC's session,
    /// logging in first when there is none (within this call's permit, so
    /// the per-BMC cap counts the login).
    pub(super) async fn auth(&self) -> Result<Auth, HardwareError> {
        use std::sync::atomic::Ordering;
        if self.credential.auth == crate::credentials::AuthMode::Basic
            || self.handle.basic_only.load(Ordering::Relaxed)
        {
            return Ok(Auth::Basic);
        }
        let mut held = self.handle.token.lock().await;
        if let Some(session) = held.as_ref() {
            return Ok(Auth::Token(session.token.clone()));
        }
        let url = self.url(&self.login_path().await?);
        let login = serde_json::json!({
            "UserName": self.credential.user,
            "Password": self.credential.password.expose(),
        });
        let answer = self
            .exchange(self.http.post(url.clone()).json(&login), &url)
            .await?;
        match (answer.reply.status, answer.token) {
            (200..=299, Some(token)) => {
                tracing::debug!(bmc = %self.base, "logged in (Redfish session)");
                let token = flow_config::Secret::new(token);
                *held = Some(SessionToken {
                    token: token.clone(),
                    location: answer.reply.location,
                });
                // An nv-redfish root built with other credentials is stale.
                *self.handle.root.lock().await = None;
                Ok(Auth::Token(token))
            }
            (404 | 405 | 501, _) => {
                tracing::info!(bmc = %self.base, status = answer.reply.status, "no SessionService; HTTP Basic from now on");
                self.handle.basic_only.store(true, Ordering::Relaxed);
                Ok(Auth::Basic)
            }
            (200..=299, None) => Err(HardwareError::Protocol {
                component: self.target.name.clone(),
                action: "log in (Redfish session)".to_owned(),
                detail: format!("HTTP {} without an X-Auth-Token", answer.reply.status),
            }),
            _ => Err(self.refused("log in (Redfish session)", &answer.reply)),
        }
    }

    /// Where the BMC takes logins: its root's `Links/Sessions`, read once
    /// without credentials (the root is public under DSP0266), or
    /// [`SESSIONS_PATH`] when the root has no such link or will not be read
    /// without credentials. The root read is kept for [`Self::root_json`].
    pub(super) async fn login_path(&self) -> Result<String, HardwareError> {
        if let Some(path) = lock(&self.handle.sessions_path).clone() {
            return Ok(path);
        }
        let url = self.url(super::ROOT);
        let read = self.exchange(self.http.get(url.clone()), &url).await?;
        if read.reply.status >= 500 || matches!(read.reply.status, 408 | 429) {
            // Busy or failing, not an answer about the root: this attempt
            // fails (a transient error for the caller's retries) and nothing
            // is kept.
            return Err(self.refused("read the service root", &read.reply));
        }
        let root = (200..300)
            .contains(&read.reply.status)
            .then(|| serde_json::from_str::<Value>(&read.reply.body).ok())
            .flatten();
        let path = match root {
            Some(root) => {
                let path = sessions_link(&root);
                *lock(&self.handle.root_json) = Some((std::time::Instant::now(), root));
                path
            }
            None => {
                tracing::debug!(bmc = %self.base, status = read.reply.status, "service root not readable without credentials; logging in at the default path");
                SESSIONS_PATH.to_owned()
            }
        };
        *lock(&self.handle.sessions_path) = Some(path.clone());
        Ok(path)
    }

    /// The service root as JSON: the copy read in the last [`ROOT_KEPT`]
    /// (by the login, by discovery or for the event stream: each reads the
    /// links of one root), else read now and kept. A rediscovery forgets it
    /// first ([`Self::forget_root`]), so it sees the root as it is.
    pub async fn root_json(&self) -> Result<Value, HardwareError> {
        // Log in first (when due): the login may read the root.
        self.auth().await?;
        if let Some((at, root)) = lock(&self.handle.root_json).as_ref()
            && at.elapsed() < ROOT_KEPT
        {
            return Ok(root.clone());
        }
        let root = self.get_json(super::ROOT, "read the service root").await?;
        *lock(&self.handle.root_json) = Some((std::time::Instant::now(), root.clone()));
        Ok(root)
    }

    /// Forgets the BMC's root as read: the next [`Self::root_json`] reads
    /// it again (a rediscovery after a `404`).
    pub fn forget_root(&self) {
        *lock(&self.handle.root_json) = None;
    }

    /// Drops the BMC's session if it is still `token` (another call may
    /// have logged in again already).
    pub(super) async fn forget_session(&self, token: &flow_config::Secret) {
        let mut held = self.handle.token.lock().await;
        if held
            .as_ref()
            .is_some_and(|s| s.token.expose() == token.expose())
        {
            *held = None;
        }
    }

    /// How this BMC's requests authenticate now: `session` or `basic`.
    pub async fn auth_in_use(&self) -> &'static str {
        match self.auth().await {
            Ok(Auth::Token(_)) => "session",
            _ => "basic",
        }
    }

    /// After a `401` through nv-redfish: whether the call used a session,
    /// which is then dropped (and the root built on it) so that the next
    /// call logs in again.
    pub async fn session_refused(&self) -> bool {
        let held = self.handle.token.lock().await.clone();
        match held {
            Some(session) => {
                self.forget_session(&session.token).await;
                *self.handle.root.lock().await = None;
                true
            }
            None => false,
        }
    }

    pub(super) fn refused(&self, action: &str, reply: &Reply) -> HardwareError {
        HardwareError::Http {
            component: self.target.name.clone(),
            action: action.to_owned(),
            status: reply.status,
            message: super::errors::error_message(&reply.body),
        }
    }

    /// Opens a `text/event-stream` at `path` (logging in again once on a
    /// `401`); the response's body is the stream. It may stay open for an
    /// hour (then it is opened again), whatever the request timeout.
    pub async fn open_stream(&self, path: &str) -> Result<reqwest::Response, HardwareError> {
        let url = self.url(path);
        let mut relogged = false;
        loop {
            let auth = self.auth().await?;
            let mut request = self
                .http
                .get(url.clone())
                .header(reqwest::header::ACCEPT, "text/event-stream")
                .timeout(Duration::from_secs(3600));
            request = match &auth {
                Auth::Basic => request.basic_auth(
                    &self.credential.user,
                    Some(self.credential.password.expose()),
                ),
                Auth::Token(token) => request.header("X-Auth-Token", token.expose()),
            };
            let response = request
                .send()
                .await
                .map_err(|e| super::errors::transport_error(self.target, &url, &e))?;
            let status = response.status().as_u16();
            if status == 401
                && let Auth::Token(token) = &auth
                && !relogged
            {
                relogged = true;
                self.forget_session(token).await;
                continue;
            }
            if !(200..300).contains(&status) {
                let body = response.text().await.unwrap_or_default();
                return Err(self.refused(
                    "open the event stream",
                    &Reply {
                        status,
                        location: None,
                        etag: None,
                        body,
                    },
                ));
            }
            return Ok(response);
        }
    }

    /// The status a GET of `path` gets with HTTP Basic, whatever this
    /// credential's mode: `401` from a BMC that takes only sessions. A
    /// read, so asking changes nothing (`flow bmc … probe`).
    pub async fn basic_status(&self, path: &str) -> Result<u16, HardwareError> {
        let url = self.url(path);
        let exchange = self
            .once(reqwest::Method::GET, &url, None, &Auth::Basic, None)
            .await?;
        Ok(exchange.reply.status)
    }

    /// GETs a resource as raw JSON.
    pub async fn get_json(&self, path: &str, action: &str) -> Result<Value, HardwareError> {
        let reply = self.send(reqwest::Method::GET, path, None, None).await?;
        if !(200..300).contains(&reply.status) {
            return Err(self.refused(action, &reply));
        }
        serde_json::from_str(&reply.body).map_err(|e| HardwareError::Protocol {
            component: self.target.name.clone(),
            action: action.to_owned(),
            detail: format!("not JSON ({e}): {}", super::errors::snippet(&reply.body)),
        })
    }

    /// The resource's ETag: its `ETag` header, else its `@odata.etag`.
    pub(super) async fn etag_of(&self, resource: &str) -> Result<Option<String>, HardwareError> {
        let reply = self
            .send(reqwest::Method::GET, resource, None, None)
            .await?;
        if !(200..300).contains(&reply.status) {
            return Err(self.refused("read the resource's ETag", &reply));
        }
        Ok(reply.etag.or_else(|| {
            serde_json::from_str::<Value>(&reply.body)
                .ok()?
                .get("@odata.etag")?
                .as_str()
                .map(str::to_owned)
        }))
    }

    /// POSTs `body` to an action's target: any 2xx is success (`200` with
    /// a message, `202` with a task monitor, `204` without a body). A `412`
    /// or `428` (the BMC wants `If-Match`) is sent once more with the
    /// resource's ETag.
    pub async fn post_action(
        &self,
        target: &str,
        body: &Value,
        action: &str,
    ) -> Result<Reply, HardwareError> {
        let mut reply = self
            .send(reqwest::Method::POST, target, Some(body), None)
            .await?;
        if matches!(reply.status, 412 | 428)
            && let Some(etag) = self.etag_of(resource_of(target)).await?
        {
            // The BMC asks for the resource's ETag (DSP0266 lets a service
            // demand If-Match on a modifying request): once more with it.
            tracing::debug!(
                target,
                status = reply.status,
                "action wants If-Match; sending the ETag"
            );
            reply = self
                .send(reqwest::Method::POST, target, Some(body), Some(&etag))
                .await?;
        }
        if !(200..300).contains(&reply.status) {
            return Err(self.refused(action, &reply));
        }
        Ok(reply)
    }
}
