//! The BMC pool: one handle per BMC (its permits, its cached root, its
//! session), the whole cap across BMCs, and a request's turn at a BMC
//! ([`Session`]); logging out of every session when the process stops.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nv_redfish::ServiceRoot;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use url::Url;

use flow_hardware::{ComponentTarget, HardwareError};

use super::quirks::Bmc;
use super::session::SessionToken;
use crate::credentials::BmcCredential;

/// Logouts sent at once when a process stops: a worker at site scale holds
/// a session on thousands of BMCs, and one at a time would hold its
/// shutdown for minutes.
pub(super) const LOGOUTS_AT_ONCE: usize = 64;
/// How long a process's logouts may take in all when it stops.
pub(super) const LOGOUT_WITHIN: Duration = Duration::from_secs(10);

/// One BMC's shared state.
pub struct BmcHandle {
    pub(super) base: Url,
    pub(super) permits: Arc<Semaphore>,
    pub(super) root: tokio::sync::Mutex<Option<ServiceRoot<Bmc>>>,
    /// The Redfish session, once logged in; its lock also makes one login
    /// at a time per BMC.
    pub(super) token: tokio::sync::Mutex<Option<SessionToken>>,
    /// The BMC has no SessionService: HTTP Basic from now on.
    pub(super) basic_only: std::sync::atomic::AtomicBool,
    /// Where it takes logins, once its root has been read.
    pub(super) sessions_path: Mutex<Option<String>>,
    /// The service root as read (without credentials, as DSP0266 serves
    /// it) to find [`Self::sessions_path`], kept for the next reader so that
    /// a login costs no extra request.
    pub(super) root_json: Mutex<Option<(std::time::Instant, Value)>>,
    /// What the layers above keep per BMC, one value per type (the power
    /// resource discovery found, the event stream's state): see
    /// [`BmcHandle::state`].
    states: Mutex<Vec<Arc<dyn std::any::Any + Send + Sync>>>,
}

impl BmcHandle {
    /// The BMC's value of type `T`, made with `T::default()` on first use:
    /// how a layer above keeps per-BMC state on the handle without this
    /// one knowing its type (it lives as long as the handle).
    pub fn state<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = states
            .iter()
            .find_map(|s| Arc::clone(s).downcast::<T>().ok())
        {
            return found;
        }
        let made = Arc::new(T::default());
        states.push(Arc::clone(&made) as Arc<dyn std::any::Any + Send + Sync>);
        made
    }
}

/// The cap on requests in flight at once across every BMC, shared by every
/// manager built from one [`super::settings::RedfishSettings`] (clones share it).
#[derive(Debug, Clone)]
pub struct RequestCap {
    pub(super) permits: Arc<Semaphore>,
    pub(super) limit: usize,
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
    pub(super) http: reqwest::Client,
    pub(super) max_per_bmc: usize,
    pub(super) total: RequestCap,
    pub(super) handles: Arc<Mutex<HashMap<String, Arc<BmcHandle>>>>,
}

/// A BMC in use: the permit is held while the value lives.
pub struct Session<'a> {
    /// The component.
    pub target: &'a ComponentTarget,
    /// Its handle.
    pub handle: Arc<BmcHandle>,
    pub(super) base: Url,
    pub(super) credential: BmcCredential,
    pub(super) http: reqwest::Client,
    pub(super) _permit: OwnedSemaphorePermit,
    /// One of the whole cap (none for an event stream, which holds only
    /// its BMC's permit).
    pub(super) _total: Option<OwnedSemaphorePermit>,
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

    pub(super) fn handle(&self, url: &str, base: &Url) -> Arc<BmcHandle> {
        let mut handles = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(handles.entry(url.to_owned()).or_insert_with(|| {
            Arc::new(BmcHandle {
                base: base.clone(),
                permits: Arc::new(Semaphore::new(self.max_per_bmc)),
                root: tokio::sync::Mutex::new(None),
                token: tokio::sync::Mutex::new(None),
                basic_only: std::sync::atomic::AtomicBool::new(false),
                sessions_path: Mutex::new(None),
                root_json: Mutex::new(None),
                states: Mutex::new(Vec::new()),
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
    pub(super) async fn logout(&self, handle: &BmcHandle) -> bool {
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

    pub(super) async fn session_with<'a>(
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
