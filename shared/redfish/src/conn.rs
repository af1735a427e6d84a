//! Connections to BMCs: one HTTP client per manager, and per BMC a permit
//! pool (at most N requests at once), the cached nv-redfish service root
//! (read through a repair for roots without `Links`) and the power
//! resource discovered once. Raw JSON requests go through the same client
//! and credentials, and wait out a `503` that names its `Retry-After`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nv_redfish::ServiceRoot;
use nv_redfish::bmc_http::reqwest::Client as NvClient;
use nv_redfish::bmc_http::{BmcCredentials, CacheSettings, HttpBmc};
use nv_redfish::quirks::{IdPattern, Match, RulesBmc, UserRule};
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use url::Url;

use flow_hardware::{ComponentTarget, HardwareError};

use crate::BmcCredential;

/// The nv-redfish transport Flow uses: HTTP, with Flow's repairs of what
/// real firmware leaves out ([`repairs`]).
pub type Bmc = RulesBmc<HttpBmc<NvClient>>;

/// Longest `Retry-After` a request waits out (holding its permits) before
/// the `503` is the caller's; longer ones are retried by the step's policy.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);
/// How many times one request waits out a `503` with `Retry-After`.
const RETRY_AFTER_TRIES: usize = 2;

/// The repairs Flow asks of nv-redfish for documents it reads through it
/// (its quirks support), each for a property Flow does not use that real
/// firmware gets wrong (`docs/hardware.md`, "What Flow tolerates"):
///
/// * a service root without `Links` (required by the schema; missing on
///   some firmware) is read as one with the default session link. The root
///   is matched by its type and, for services that name types the pre-1.0
///   way (`#ServiceRoot.1.0.0.ServiceRoot`), by its `@odata.id`;
/// * a firmware inventory member whose `ReleaseDate` is not an RFC 3339
///   date-time with an offset (`2017-08-22T12:00:00`, `00:00:00Z`) is read
///   without it: one bad date would otherwise fail the whole inventory.
fn repairs() -> Vec<UserRule> {
    vec![
        UserRule::new(
            "service root without Links",
            Match::Type("ServiceRoot".to_owned()),
            add_links,
        ),
        UserRule::new(
            "service root without Links (by path)",
            Match::Id(IdPattern::new("/redfish/v1")),
            add_links,
        ),
        UserRule::new(
            "service root without Links (by path, trailing slash)",
            Match::Id(IdPattern::new("/redfish/v1/")),
            add_links,
        ),
        UserRule::new(
            "firmware ReleaseDate that is no RFC 3339 date-time",
            Match::Type("SoftwareInventory".to_owned()),
            drop_bad_release_date,
        ),
        UserRule::new(
            "firmware ReleaseDate that is no RFC 3339 date-time (by path)",
            Match::Id(IdPattern::new(
                "/redfish/v1/UpdateService/FirmwareInventory/*",
            )),
            drop_bad_release_date,
        ),
    ]
}

/// A service root without `Links` gets the default session link.
fn add_links(mut root: Value) -> Value {
    if let Some(fields) = root.as_object_mut()
        && !fields.contains_key("Links")
    {
        fields.insert(
            "Links".to_owned(),
            serde_json::json!({ "Sessions": { "@odata.id": SESSIONS_PATH } }),
        );
    }
    root
}

/// A `ReleaseDate` that is not an RFC 3339 date-time is dropped.
fn drop_bad_release_date(mut member: Value) -> Value {
    if let Some(fields) = member.as_object_mut()
        && fields.get("ReleaseDate").is_some_and(|d| !is_rfc3339(d))
    {
        fields.remove("ReleaseDate");
    }
    member
}

/// Whether a JSON value is an RFC 3339 date-time with an offset (what the
/// schema's `Edm.DateTimeOffset` asks for).
fn is_rfc3339(v: &Value) -> bool {
    v.as_str().is_some_and(|s| {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).is_ok()
    })
}

/// Redirects are followed only within the BMC's own origin (scheme, host
/// and port), at most [`MAX_REDIRECTS`] in a row: a service that serves its
/// root only at `/redfish/v1/` answers `/redfish/v1` with a `308`
/// (DSP0266 names both URIs), and credentials never leave the origin.
pub(crate) fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let first = attempt.previous().first().cloned();
        if attempt.previous().len() > MAX_REDIRECTS {
            attempt.stop()
        } else if first.is_some_and(|from| same_origin(&from, attempt.url())) {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// How many redirects in a row a request follows.
const MAX_REDIRECTS: usize = 3;

/// Whether two URLs share scheme, host and port.
fn same_origin(a: &Url, b: &Url) -> bool {
    a.origin() == b.origin()
}

/// Logouts sent at once when a process stops: a worker at site scale holds
/// a session on thousands of BMCs, and one at a time would hold its
/// shutdown for minutes.
const LOGOUTS_AT_ONCE: usize = 64;
/// How long a process's logouts may take in all when it stops.
const LOGOUT_WITHIN: Duration = Duration::from_secs(10);

/// Where a BMC takes logins when its root does not say otherwise.
pub const SESSIONS_PATH: &str = "/redfish/v1/SessionService/Sessions";

/// How long the root a login read stands in for a read of it: long enough
/// for the discovery that follows the first login, short enough that a
/// later rediscovery reads the root as it is then.
const ROOT_KEPT: Duration = Duration::from_secs(60);

/// Where the root says logins go (`Links/Sessions`), else [`SESSIONS_PATH`].
pub(crate) fn sessions_link(root: &Value) -> String {
    root["Links"]["Sessions"]["@odata.id"]
        .as_str()
        .filter(|p| p.starts_with('/'))
        .map_or_else(|| SESSIONS_PATH.to_owned(), str::to_owned)
}

/// The resource an action's target belongs to: the path before
/// `/Actions/`.
fn resource_of(action_target: &str) -> &str {
    action_target
        .split_once("/Actions/")
        .map_or(action_target, |(resource, _)| resource)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One BMC's shared state.
pub struct BmcHandle {
    base: Url,
    permits: Arc<Semaphore>,
    root: tokio::sync::Mutex<Option<ServiceRoot<Bmc>>>,
    /// The power resource, once discovered.
    pub power: Mutex<Option<Arc<crate::discover::PowerTarget>>>,
    /// The Redfish session, once logged in; its lock also makes one login
    /// at a time per BMC.
    token: tokio::sync::Mutex<Option<SessionToken>>,
    /// The BMC has no SessionService: HTTP Basic from now on.
    basic_only: std::sync::atomic::AtomicBool,
    /// Where it takes logins, once its root has been read.
    sessions_path: Mutex<Option<String>>,
    /// The service root as read (without credentials, as DSP0266 serves
    /// it) to find [`Self::sessions_path`], kept for the next reader so that
    /// a login costs no extra request.
    root_json: Mutex<Option<(std::time::Instant, Value)>>,
    /// Its event stream, while followed (`shared/redfish/src/events.rs`).
    pub events: crate::events::Events,
}

/// A Redfish session: its token and, for the logout, its URI.
#[derive(Clone)]
struct SessionToken {
    token: flow_config::Secret,
    location: Option<String>,
}

/// How one request authenticates.
#[derive(Clone)]
enum Auth {
    Basic,
    Token(flow_config::Secret),
}

/// One exchange as [`Session::send`] reads it.
struct Exchange {
    reply: Reply,
    retry_after: Option<Duration>,
    token: Option<String>,
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

/// The cap on requests in flight at once across every BMC, shared by every
/// manager built from one [`crate::RedfishSettings`] (clones share it).
#[derive(Debug, Clone)]
pub struct RequestCap {
    permits: Arc<Semaphore>,
    limit: usize,
}

impl RequestCap {
    /// A cap of `limit` requests (at least one).
    pub fn new(limit: usize) -> Self {
        let limit = limit.max(1);
        RequestCap {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
        }
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.limit - self.permits.available_permits()
    }
}

/// BMC handles by base URL (clones share them).
#[derive(Clone)]
pub struct BmcPool {
    http: reqwest::Client,
    max_per_bmc: usize,
    total: RequestCap,
    handles: Arc<Mutex<HashMap<String, Arc<BmcHandle>>>>,
}

/// A BMC in use: the permit is held while the value lives.
pub struct Session<'a> {
    /// The component.
    pub target: &'a ComponentTarget,
    /// Its handle.
    pub handle: Arc<BmcHandle>,
    base: Url,
    credential: BmcCredential,
    http: reqwest::Client,
    _permit: OwnedSemaphorePermit,
    /// One of the whole cap (none for an event stream, which holds only
    /// its BMC's permit).
    _total: Option<OwnedSemaphorePermit>,
}

impl BmcPool {
    /// A pool over `http` allowing `max_per_bmc` concurrent calls per BMC
    /// and, across all BMCs, as many as `total` allows.
    pub fn new(http: reqwest::Client, max_per_bmc: usize, total: RequestCap) -> Self {
        BmcPool {
            http,
            max_per_bmc: max_per_bmc.max(1),
            total,
            handles: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The target's BMC handle, `None` when its URL is not one.
    pub fn handle_of(&self, target: &ComponentTarget) -> Option<Arc<BmcHandle>> {
        let base = Url::parse(&target.bmc_url).ok()?;
        Some(self.handle(&target.bmc_url, &base))
    }

    fn handle(&self, url: &str, base: &Url) -> Arc<BmcHandle> {
        let mut handles = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(handles.entry(url.to_owned()).or_insert_with(|| {
            Arc::new(BmcHandle {
                base: base.clone(),
                permits: Arc::new(Semaphore::new(self.max_per_bmc)),
                root: tokio::sync::Mutex::new(None),
                power: Mutex::new(None),
                token: tokio::sync::Mutex::new(None),
                basic_only: std::sync::atomic::AtomicBool::new(false),
                sessions_path: Mutex::new(None),
                root_json: Mutex::new(None),
                events: crate::events::Events::default(),
            })
        }))
    }

    /// Logs out of every Redfish session the pool holds (at shutdown), each
    /// within its BMC's request cap, [`LOGOUTS_AT_ONCE`] at a time and for
    /// at most [`LOGOUT_WITHIN`] in all (a session left open expires on its
    /// BMC); how many logouts the BMCs accepted.
    pub async fn logout_all(&self) -> usize {
        use futures::StreamExt;
        let handles: Vec<Arc<BmcHandle>> = self
            .handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        let done = std::sync::atomic::AtomicUsize::new(0);
        let all = futures::stream::iter(handles).for_each_concurrent(LOGOUTS_AT_ONCE, |handle| {
            let done = &done;
            async move {
                if self.logout(&handle).await {
                    done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
        if tokio::time::timeout(LOGOUT_WITHIN, all).await.is_err() {
            tracing::info!(
                within_s = LOGOUT_WITHIN.as_secs(),
                "not every Redfish session logged out in time; the rest expire on their BMCs"
            );
        }
        done.into_inner()
    }

    /// Logs out of one BMC's session, if it has one; whether it was
    /// accepted.
    async fn logout(&self, handle: &BmcHandle) -> bool {
        let Ok(_permit) = Arc::clone(&handle.permits).acquire_owned().await else {
            return false;
        };
        let Some(session) = handle.token.lock().await.take() else {
            return false;
        };
        let Some(location) = &session.location else {
            return false;
        };
        let mut url = handle.base.clone();
        url.set_path(location);
        let sent = self
            .http
            .delete(url)
            .header("X-Auth-Token", session.token.expose())
            // Not kept for reuse: nothing follows a logout, and thousands
            // of pooled connections opened at shutdown cost the worker as
            // much memory as its whole run (`services/bench/results/JOURNAL.md`,
            // "Worker memory and where the CPU goes at site scale").
            .header(reqwest::header::CONNECTION, "close")
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => true,
            Ok(r) => {
                tracing::debug!(bmc = %handle.base, status = r.status().as_u16(), "logout refused");
                false
            }
            Err(e) => {
                tracing::debug!(bmc = %handle.base, error = %e, "logout failed");
                false
            }
        }
    }

    /// Waits for a permit on the target's BMC, then for one of the whole
    /// cap (in that order: a call waiting for a busy BMC holds nothing the
    /// other BMCs need).
    pub async fn session<'a>(
        &self,
        target: &'a ComponentTarget,
        credential: BmcCredential,
    ) -> Result<Session<'a>, HardwareError> {
        self.session_with(target, credential, true).await
    }

    /// A session for an event stream: it holds one of its BMC's permits
    /// while it lives (the per-BMC cap counts the stream), none of the
    /// whole cap (a stream is open for minutes, not a call).
    pub async fn stream_session<'a>(
        &self,
        target: &'a ComponentTarget,
        credential: BmcCredential,
    ) -> Result<Session<'a>, HardwareError> {
        self.session_with(target, credential, false).await
    }

    async fn session_with<'a>(
        &self,
        target: &'a ComponentTarget,
        credential: BmcCredential,
        counted: bool,
    ) -> Result<Session<'a>, HardwareError> {
        let base = Url::parse(&target.bmc_url).map_err(|e| {
            HardwareError::Config(format!(
                "{}: BMC URL {:?} is not a URL: {e}",
                target.name, target.bmc_url
            ))
        })?;
        let handle = self.handle(&target.bmc_url, &base);
        let permit = Arc::clone(&handle.permits)
            .acquire_owned()
            .await
            .map_err(|_| HardwareError::Config("BMC permit pool closed".to_owned()))?;
        let total = if counted {
            Some(
                Arc::clone(&self.total.permits)
                    .acquire_owned()
                    .await
                    .map_err(|_| HardwareError::Config("request cap closed".to_owned()))?,
            )
        } else {
            None
        };
        Ok(Session {
            target,
            handle,
            base,
            credential,
            http: self.http.clone(),
            _permit: permit,
            _total: total,
        })
    }
}

/// The BMC connections of one process: its per-BMC request caps, its
/// whole cap, its sessions and its credentials. Every manager of a
/// registry shares one ([`crate::registry_with`]), and so does anything else
/// that talks to the same BMCs (the hardware watcher), so that the per-BMC
/// cap counts every request, stream and login the process makes there.
#[derive(Clone)]
pub struct Connections {
    pub(crate) pool: BmcPool,
    credentials: Arc<crate::CredentialStore>,
}

/// An open event stream: its body, and the BMC permit it holds while it
/// lives.
pub struct EventStream<'a> {
    /// The `text/event-stream` response; read its body with `chunk()`.
    pub response: reqwest::Response,
    _session: Session<'a>,
}

impl Connections {
    /// Connections as `settings` describe them, with `credentials`.
    pub fn new(
        settings: &crate::RedfishSettings,
        credentials: Arc<crate::CredentialStore>,
    ) -> Result<Self, HardwareError> {
        Ok(Connections {
            pool: BmcPool::new(
                settings.http_client()?,
                settings.max_concurrent_per_bmc,
                settings.max_requests.clone(),
            ),
            credentials,
        })
    }

    /// The target's credential.
    pub(crate) fn credential(
        &self,
        target: &ComponentTarget,
    ) -> Result<BmcCredential, HardwareError> {
        self.credentials
            .get(&target.credential_ref)
            .cloned()
            .ok_or_else(|| HardwareError::MissingCredential {
                component: target.name.clone(),
                reference: target.credential_ref.clone(),
            })
    }

    /// A request's turn at the target's BMC (its permit and one of the
    /// whole cap).
    pub(crate) async fn session<'a>(
        &self,
        target: &'a ComponentTarget,
    ) -> Result<Session<'a>, HardwareError> {
        self.pool.session(target, self.credential(target)?).await
    }

    /// GETs `path` at the target's BMC as JSON, within its caps, logged in
    /// as the credential says.
    pub async fn get_json(
        &self,
        target: &ComponentTarget,
        path: &str,
        action: &str,
    ) -> Result<Value, HardwareError> {
        self.session(target).await?.get_json(path, action).await
    }

    /// The target's service root as JSON.
    pub async fn root_json(&self, target: &ComponentTarget) -> Result<Value, HardwareError> {
        self.session(target).await?.root_json().await
    }

    /// Opens the event stream at `path`; it holds one of the BMC's permits
    /// (none of the whole cap) until dropped.
    pub async fn open_stream<'a>(
        &self,
        target: &'a ComponentTarget,
        path: &str,
    ) -> Result<EventStream<'a>, HardwareError> {
        let session = self
            .pool
            .stream_session(target, self.credential(target)?)
            .await?;
        let response = session.open_stream(path).await?;
        Ok(EventStream {
            response,
            _session: session,
        })
    }

    /// Logs out of every session (at shutdown); how many the BMCs accepted.
    pub async fn logout_all(&self) -> usize {
        self.pool.logout_all().await
    }
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
            .map_err(|e| crate::manager::nv_error(self.target, "read the service root", &e))?;
        *self.handle.root.lock().await = Some(root.clone());
        Ok(root)
    }

    fn url(&self, path: &str) -> Url {
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
    async fn send(
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
    async fn once(
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

    async fn exchange(
        &self,
        request: reqwest::RequestBuilder,
        url: &Url,
    ) -> Result<Exchange, HardwareError> {
        let response = request
            .send()
            .await
            .map_err(|e| crate::manager::transport_error(self.target, url, &e))?;
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
    async fn auth(&self) -> Result<Auth, HardwareError> {
        use std::sync::atomic::Ordering;
        if self.credential.auth == crate::AuthMode::Basic
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
    async fn login_path(&self) -> Result<String, HardwareError> {
        if let Some(path) = lock(&self.handle.sessions_path).clone() {
            return Ok(path);
        }
        let url = self.url(crate::discover::ROOT);
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

    /// The service root as JSON: the copy a login read in the last
    /// [`ROOT_KEPT`], once, else read now (so a rediscovery sees a changed
    /// root).
    pub async fn root_json(&self) -> Result<Value, HardwareError> {
        // Log in first (when due): the login may read the root.
        self.auth().await?;
        if let Some((at, root)) = lock(&self.handle.root_json).take()
            && at.elapsed() < ROOT_KEPT
        {
            return Ok(root);
        }
        self.get_json(crate::discover::ROOT, "read the service root")
            .await
    }

    /// Drops the BMC's session if it is still `token` (another call may
    /// have logged in again already).
    async fn forget_session(&self, token: &flow_config::Secret) {
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

    fn refused(&self, action: &str, reply: &Reply) -> HardwareError {
        HardwareError::Http {
            component: self.target.name.clone(),
            action: action.to_owned(),
            status: reply.status,
            message: crate::error_message(&reply.body),
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
                .map_err(|e| crate::manager::transport_error(self.target, &url, &e))?;
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
            detail: format!("not JSON ({e}): {}", crate::snippet(&reply.body)),
        })
    }

    /// The resource's ETag: its `ETag` header, else its `@odata.etag`.
    async fn etag_of(&self, resource: &str) -> Result<Option<String>, HardwareError> {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use flow_config::Secret;
    use flow_rules::ComponentType;

    use super::*;

    fn target(url: &str) -> ComponentTarget {
        ComponentTarget {
            rack: "r".into(),
            name: "c".into(),
            component_type: ComponentType::Compute,
            bmc_url: url.into(),
            credential_ref: "x".into(),
            resource_id: None,
        }
    }

    fn cred() -> BmcCredential {
        BmcCredential {
            user: "u".into(),
            password: Secret::new("p"),
            auth: crate::AuthMode::Basic,
        }
    }

    #[test]
    fn repairs_drop_a_release_date_without_an_offset_and_add_missing_links() {
        let member = serde_json::json!({"Id": "BMC", "Version": "1.0", "ReleaseDate": "2017-08-22T12:00:00"});
        let fixed = drop_bad_release_date(member);
        assert!(fixed.get("ReleaseDate").is_none(), "{fixed}");
        assert_eq!(fixed["Version"], "1.0");
        let zero = serde_json::json!({"ReleaseDate": "00:00:00Z"});
        assert!(drop_bad_release_date(zero).get("ReleaseDate").is_none());
        let good = serde_json::json!({"Id": "BMC", "ReleaseDate": "2017-08-22T12:00:00Z"});
        assert_eq!(drop_bad_release_date(good.clone()), good);
        let root = add_links(serde_json::json!({"@odata.id": "/redfish/v1"}));
        assert_eq!(root["Links"]["Sessions"]["@odata.id"], SESSIONS_PATH);
        let linked = serde_json::json!({"Links": {"Sessions": {"@odata.id": "/s"}}});
        assert_eq!(add_links(linked.clone()), linked);
        assert_eq!(repairs().len(), 5);
    }

    #[test]
    fn an_actions_resource_is_the_path_before_actions() {
        assert_eq!(
            resource_of("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"),
            "/redfish/v1/Systems/1"
        );
        assert_eq!(resource_of("/odd/target"), "/odd/target");
    }

    #[test]
    fn redirects_stay_within_the_origin() {
        let u = |s: &str| Url::parse(s).unwrap();
        assert!(same_origin(
            &u("http://127.0.0.1:80/redfish/v1"),
            &u("http://127.0.0.1/redfish/v1/")
        ));
        assert!(!same_origin(
            &u("http://127.0.0.1:8000/a"),
            &u("http://127.0.0.1:8001/a")
        ));
        assert!(!same_origin(&u("https://bmc/a"), &u("http://bmc/a")));
        assert!(!same_origin(&u("https://bmc/a"), &u("https://elsewhere/a")));
    }

    #[test]
    fn logins_go_where_the_root_links_them_else_to_the_default_path() {
        let root = serde_json::json!({"Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions2"}}});
        assert_eq!(sessions_link(&root), "/redfish/v1/SessionService/Sessions2");
        // No Links (some firmware), or a link that is not a path: the default.
        assert_eq!(sessions_link(&serde_json::json!({})), SESSIONS_PATH);
        let odd = serde_json::json!({"Links": {"Sessions": {"@odata.id": "Sessions"}}});
        assert_eq!(sessions_link(&odd), SESSIONS_PATH);
    }

    #[tokio::test]
    async fn at_most_n_sessions_per_bmc_and_bmcs_are_independent() {
        let pool = BmcPool::new(reqwest::Client::new(), 2, RequestCap::new(100));
        let a = target("http://127.0.0.1:1");
        let b = target("http://127.0.0.1:2");
        let s1 = pool.session(&a, cred()).await.unwrap();
        let _s2 = pool.session(&a, cred()).await.unwrap();
        // A third session on the same BMC waits…
        let third = tokio::time::timeout(Duration::from_millis(50), pool.session(&a, cred())).await;
        assert!(third.is_err(), "a third concurrent session was granted");
        // …while another BMC is not affected.
        let _other = pool.session(&b, cred()).await.unwrap();
        // Releasing one lets the next in.
        drop(s1);
        let granted = tokio::time::timeout(Duration::from_secs(5), pool.session(&a, cred())).await;
        assert!(granted.is_ok());
    }

    #[tokio::test]
    async fn the_whole_cap_holds_across_bmcs_and_a_busy_bmc_holds_none_of_it() {
        let cap = RequestCap::new(2);
        let pool = BmcPool::new(reqwest::Client::new(), 1, cap.clone());
        let (a, b, c) = (
            target("http://127.0.0.1:1"),
            target("http://127.0.0.1:2"),
            target("http://127.0.0.1:3"),
        );
        let sa = pool.session(&a, cred()).await.unwrap();
        // A second call to the busy BMC waits for it, not for the cap…
        let waiting_a = tokio::time::timeout(Duration::from_millis(50), pool.session(&a, cred()));
        assert!(waiting_a.await.is_err());
        // …so another BMC still gets the cap's second permit.
        let sb = pool.session(&b, cred()).await.unwrap();
        assert_eq!(cap.in_flight(), 2);
        // The cap is full: a third BMC waits.
        let third = tokio::time::timeout(Duration::from_millis(50), pool.session(&c, cred())).await;
        assert!(third.is_err(), "a call beyond the cap was granted");
        drop(sa);
        let granted = tokio::time::timeout(Duration::from_secs(5), pool.session(&c, cred())).await;
        assert!(granted.is_ok());
        drop(sb);
    }

    #[tokio::test]
    async fn a_malformed_bmc_url_is_a_config_error() {
        let pool = BmcPool::new(reqwest::Client::new(), 1, RequestCap::new(1));
        let bad = target("not a url");
        let e = pool.session(&bad, cred()).await.err().expect("error");
        assert!(e.to_string().contains("is not a URL"), "{e}");
    }
}
