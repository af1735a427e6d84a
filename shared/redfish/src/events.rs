//! Following a BMC's Redfish events (EventService SSE) so that a waiting
//! verification polls as soon as something changes.
//!
//! [`crate::RedfishManager`]'s `change_signal` is the entry: the first ask
//! for a BMC starts one follower task per BMC, which finds the stream (the
//! root's `EventService` link, its `ServerSentEventUri`, `ServiceEnabled`),
//! opens it and announces every event record on the BMC's
//! [`ChangeFeed`]. Any event counts, whatever its `MessageId` (vendors
//! name power and task events differently): the poll that follows reads
//! the state, so an unrelated event costs one read, a missed one nothing
//! but the interval.
//!
//! * A feed exists from the moment the follower starts to open the stream
//!   until the stream ends (or cannot be opened); signals are handed out
//!   while it exists, so the first wait at a BMC is already served. When
//!   the stream opens the feed announces once: a change while it was
//!   opening is polled for then, not missed.
//! * A stream that drops (or does not open, or a BMC without one) ends the
//!   feed, which wakes every signal (those components poll at once) and
//!   takes the signals away: until a feed exists again the caller polls on
//!   its interval. The follower opens it again (1 s, doubling to 30 s,
//!   while wanted).
//! * The stream holds one of its BMC's request permits while it is open
//!   (the per-BMC cap counts it) and none of the worker's cap.
//! * It closes when nobody asked for a signal for [`LINGER`] and none is
//!   alive; a BMC without a stream is asked again after [`NO_SERVICE_RECHECK`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flow_hardware::{ChangeFeed, ChangeSignal, ComponentTarget, HardwareError};
use serde_json::Value;

use crate::conn::BmcPool;
use crate::credentials::BmcCredential;
use crate::sse::SseFrames;

/// How long a stream stays open after the last ask for a signal.
pub const LINGER: Duration = Duration::from_secs(30);
/// How long a BMC found without an event stream is taken at its word.
pub const NO_SERVICE_RECHECK: Duration = Duration::from_secs(600);
/// How often an open stream checks whether it is still wanted.
const WANT_CHECK: Duration = Duration::from_secs(5);
const RECONNECT_FIRST: Duration = Duration::from_secs(1);
const RECONNECT_MAX: Duration = Duration::from_secs(30);

/// One BMC's event stream state (kept on its handle:
/// [`crate::conn::BmcHandle::state`]).
#[derive(Default)]
pub struct Events {
    /// The feed, while the stream is opening or open.
    feed: Mutex<Option<Arc<ChangeFeed>>>,
    /// A follower task runs.
    running: AtomicBool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The last ask for a signal.
    wanted_at: Option<Instant>,
    /// The BMC had no stream when last asked: do not ask before this.
    no_service_until: Option<Instant>,
    /// The stream's URI, once found.
    uri: Option<String>,
}

impl Events {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn current(&self) -> Option<Arc<ChangeFeed>> {
        self.feed.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, feed: Option<Arc<ChangeFeed>>) {
        *self.feed.lock().unwrap_or_else(|e| e.into_inner()) = feed;
    }

    fn wanted(&self) -> bool {
        let recently = self
            .state()
            .wanted_at
            .is_some_and(|at| at.elapsed() < LINGER);
        recently || self.current().is_some_and(|f| f.listeners() > 0)
    }
}

/// A signal for the target's BMC while its feed exists (the stream is
/// opening or open); otherwise `None`, after starting a follower when none
/// runs and the BMC is not known to lack a stream (its feed then exists
/// for the next ask). Needs a Tokio runtime (none: `None`).
pub(crate) fn signal(
    pool: &BmcPool,
    target: &ComponentTarget,
    credential: BmcCredential,
) -> Option<ChangeSignal> {
    let handle = pool.handle_of(target)?;
    let events = handle.state::<Events>();
    {
        let mut state = events.state();
        if state.no_service_until.is_some_and(|t| Instant::now() < t) {
            return None;
        }
        state.wanted_at = Some(Instant::now());
    }
    if let Some(feed) = events.current() {
        return Some(feed.signal());
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    if !events.running.swap(true, Ordering::SeqCst) {
        // The feed of the stream about to open: this ask is served too.
        let feed = Arc::new(ChangeFeed::default());
        let signal = feed.signal();
        events.set(Some(feed));
        let pool = pool.clone();
        let target = target.clone();
        let events = Arc::clone(&events);
        runtime.spawn(async move {
            follow(&pool, &target, credential, &events).await;
            events.set(None);
            events.running.store(false, Ordering::SeqCst);
        });
        return Some(signal);
    }
    None
}

enum Followed {
    /// The stream ran and ended (or was no longer wanted).
    Ended,
    /// The BMC has no event stream.
    NoService,
}

/// Follows the BMC's stream while it is wanted.
async fn follow(
    pool: &BmcPool,
    target: &ComponentTarget,
    credential: BmcCredential,
    events: &Events,
) {
    let mut pause = RECONNECT_FIRST;
    while events.wanted() {
        match follow_once(pool, target, credential.clone(), events).await {
            Ok(Followed::NoService) => {
                tracing::debug!(component = %target.name, "no event stream at the BMC; polling only");
                events.state().no_service_until = Some(Instant::now() + NO_SERVICE_RECHECK);
                return;
            }
            Ok(Followed::Ended) => pause = RECONNECT_FIRST,
            Err(error) => {
                tracing::debug!(component = %target.name, error = %error, "event stream not open; polling meanwhile");
                pause = (pause * 2).min(RECONNECT_MAX);
            }
        }
        if !events.wanted() {
            break;
        }
        tokio::time::sleep(pause).await;
    }
    tracing::debug!(component = %target.name, "event stream no longer wanted");
}

/// The SSE URI from the root's `EventService`, `None` without one (or
/// disabled).
async fn stream_uri(session: &crate::conn::Session<'_>) -> Result<Option<String>, HardwareError> {
    let root = session.root_json().await?;
    let Some(service) = crate::sse::event_service_of(&root) else {
        return Ok(None);
    };
    let service = session.get_json(service, "read the event service").await?;
    Ok(crate::sse::stream_uri_of(&service))
}

async fn follow_once(
    pool: &BmcPool,
    target: &ComponentTarget,
    credential: BmcCredential,
    events: &Events,
) -> Result<Followed, HardwareError> {
    let feed = match events.current() {
        Some(feed) => feed,
        None => {
            let feed = Arc::new(ChangeFeed::default());
            events.set(Some(Arc::clone(&feed)));
            feed
        }
    };
    let opened = open_and_read(pool, target, credential, events, &feed).await;
    // Dropping the last reference ends the feed: every signal wakes.
    events.set(None);
    drop(feed);
    opened
}

/// Opens the stream and announces its events on `feed` until it ends.
async fn open_and_read(
    pool: &BmcPool,
    target: &ComponentTarget,
    credential: BmcCredential,
    events: &Events,
    feed: &ChangeFeed,
) -> Result<Followed, HardwareError> {
    let session = pool.stream_session(target, credential).await?;
    let known = events.state().uri.clone();
    let uri = match known {
        Some(uri) => uri,
        None => match stream_uri(&session).await? {
            Some(uri) => {
                events.state().uri = Some(uri.clone());
                uri
            }
            None => return Ok(Followed::NoService),
        },
    };
    let mut response = match session.open_stream(&uri).await {
        Ok(r) => r,
        Err(e) => {
            // Found again next time: the URI may have moved.
            events.state().uri = None;
            return Err(e);
        }
    };
    tracing::debug!(component = %target.name, uri, "event stream open");
    // A change while the stream was opening is polled for now.
    feed.announce();
    let mut frames = SseFrames::default();
    loop {
        tokio::select! {
            chunk = response.chunk() => match chunk {
                Ok(Some(chunk)) => {
                    for data in frames.push(&chunk) {
                        if serde_json::from_str::<Value>(&data).is_ok() {
                            feed.announce();
                        } else {
                            tracing::debug!(component = %target.name, "an event stream frame is not JSON; ignored");
                        }
                    }
                }
                Ok(None) | Err(_) => break,
            },
            () = tokio::time::sleep(WANT_CHECK) => {
                if !events.wanted() {
                    break;
                }
            }
        }
    }
    tracing::debug!(component = %target.name, "event stream closed");
    Ok(Followed::Ended)
}
