//! The hardware watcher (`flow-worker --watch`): turns what BMCs report
//! into Flow's hardware events.
//!
//! Watchers divide the racks among themselves as workers divide the job
//! partitions (`crate::members`, group [`Group::Watchers`]): a watcher
//! watches the BMCs of the racks whose partition
//! ([`Partition::of_rack`]) it owns, so in steady state each BMC has one
//! watcher, and when a watcher dies or stops its partitions move to the
//! others within `members::GONE_AFTER`, whose new watches read the
//! chassis at once (a condition raised in between is not missed).
//!
//! It lists the racks from `flow.api` (`rack.list`) every
//! [`WatchConfig::inventory_every`], reads those of its partitions
//! (`rack.get`; a rack it takes over at once) and keeps one watch per BMC
//! of its racks:
//!
//! * a BMC whose service root links an `EventService` with a
//!   `ServerSentEventUri` is followed on that SSE stream; each `Event`
//!   record becomes an event at once. When the stream opens (and after it
//!   drops) the chassis are read once, so a condition raised while nobody
//!   listened is not missed;
//! * any other BMC is polled: its chassis' `Status.Conditions` every
//!   [`WatchConfig::poll_every`]; so is a BMC with a stream once the
//!   watcher holds [`WatchConfig::max_streams`] open (each is a
//!   connection and a buffer).
//!
//! Every BMC's power is also read every [`WatchConfig::power_every`] (and
//! at once when its stream announces a power change: a DMTF
//! `ResourcePowered…` event or an OpenBMC `DCPowerOn`/`DCPowerOff` log
//! event), with its measured draw every [`WatchConfig::telemetry_every`]
//! where the BMC reports one (`EnvironmentMetrics.PowerWatts`). Every read
//! goes to the schedulers in batches on `flow.power.observed` (core NATS,
//! every [`OBSERVED_FLUSH`]), who count each component against its power
//! domains by what is known of it; a change of state is also published on
//! `FLOW_STATE` for the console.
//!
//! A condition's identity is its component, its `MessageId` and the time it
//! began (`Timestamp` / `EventTimestamp`, read to the millisecond): the SSE
//! record and every later poll of the same condition give the same key,
//! so it is one event however often and by however many watchers it is
//! seen (JetStream drops a repeated `Nats-Msg-Id` within its window, the
//! scheduler's store after it). Message IDs are matched on the part after
//! the registry's version: `LeakDetected…` is a leak,
//! `ReadingAboveUpperCriticalThreshold` a critical temperature; others are
//! ignored.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::HeaderMap;
use flow_hardware::ManagerRegistry;
use flow_protocol::api::{Endpoint, RackByRef, RackList, endpoint};
use flow_protocol::event::{EventType, HardwareEvent, Severity};
use flow_protocol::ids::RackRef;
use flow_protocol::jobs::ComponentTarget;
use flow_protocol::partition::{BUCKET_WORKERS, Partition};
use flow_protocol::state::{ObservationSource, PowerState};
use flow_redfish::Connections;
use flow_redfish::sse::SseFrames;
use flow_telemetry::ErrorChain;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;

use crate::members::{self, Group};
use crate::metrics::WatchMetrics;
use crate::observe::{self, Seen};

/// What the watcher needs to know.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// How often a BMC without an event stream is read.
    pub poll_every: Duration,
    /// How often the inventory is read again (new racks, removed ones).
    pub inventory_every: Duration,
    /// At most this many BMC reads at once across the watcher.
    pub max_reads: usize,
    /// At most this many event streams open at once; the watcher's other
    /// BMCs are polled.
    pub max_streams: usize,
    /// How often every BMC's power is read, stream or not: well inside the
    /// schedulers' known-for window (`flow-scheduler --power-known-for`,
    /// 60 s), so that a component stays known between reads.
    pub power_every: Duration,
    /// How often a BMC's measured draw is read (where it reports one).
    pub telemetry_every: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            poll_every: Duration::from_secs(60),
            inventory_every: Duration::from_secs(30),
            max_reads: 64,
            max_streams: 8192,
            power_every: Duration::from_secs(20),
            telemetry_every: Duration::from_secs(60),
        }
    }
}

/// How often the reads gathered are published on `flow.power.observed`:
/// part of how late the schedulers learn of a change the watcher saw.
pub const OBSERVED_FLUSH: Duration = Duration::from_millis(100);

/// Component-state publishes awaiting JetStream's ack at once per watcher:
/// at a site's cold start every tray BMC is unreachable together, and
/// tens of thousands of unbounded publishes time out and are sent again,
/// starving everything else on the server. Hardware events are not held
/// by it.
const STATE_PUBLISHES: usize = 64;
/// The pause before an inventory that could not be read is asked for
/// again (a watcher started before the scheduler).
const INVENTORY_RETRY: Duration = Duration::from_secs(2);
/// The pause before the membership bucket is asked for again.
const BUCKET_RETRY: Duration = Duration::from_secs(1);

/// How long a read of an event stream may go without a byte (the
/// simulator sends a comment every 10 s; a silent stream is dead).
const STREAM_IDLE: Duration = Duration::from_secs(45);
/// The first and the longest pause before a lost stream is opened again.
const RECONNECT_FIRST: Duration = Duration::from_secs(1);
const RECONNECT_MAX: Duration = Duration::from_secs(30);

/// Why the watcher cannot read something.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// A `flow.api` call failed.
    #[error("flow.api {endpoint}")]
    Api {
        /// The endpoint.
        endpoint: &'static str,
        /// Why.
        #[source]
        source: flow_client::ClientError,
    },
    /// A BMC request failed (or was refused).
    #[error("{component} (rack {rack}): {path}")]
    Bmc {
        /// The rack.
        rack: String,
        /// The component.
        component: String,
        /// The path read.
        path: String,
        /// Why.
        #[source]
        source: flow_hardware::HardwareError,
    },
    /// A publish was not acknowledged.
    #[error("publishing the event")]
    Publish(#[source] async_nats::Error),
}

/// One BMC to watch.
type Target = ComponentTarget;

struct Watcher {
    api: flow_client::Client,
    js: async_nats::jetstream::Context,
    /// Reads not yet published on `flow.power.observed`.
    observed: std::sync::Mutex<Vec<flow_protocol::state::ComponentState>>,
    bmcs: Connections,
    managers: Arc<ManagerRegistry>,
    reads: Semaphore,
    streams: Semaphore,
    states: Semaphore,
    config: WatchConfig,
    metrics: WatchMetrics,
}

/// The BMCs being watched, by rack and component name.
type Watches = HashMap<(String, String), (Target, CancellationToken)>;

/// Watches the BMCs of this watcher's share of the inventory until `stop`,
/// through `bmcs` (the worker's own connections: its per-BMC request cap
/// and its Redfish sessions count the watcher's reads and streams too);
/// power is read through `managers` (on the same connections).
pub async fn run(
    client: async_nats::Client,
    bmcs: Connections,
    managers: Arc<ManagerRegistry>,
    config: WatchConfig,
    metrics: WatchMetrics,
    stop: CancellationToken,
) {
    let js = async_nats::jetstream::new(client.clone());
    // The scheduler creates the bucket: a watcher started first waits.
    let mut warned = false;
    let bucket = loop {
        match flow_jetstream::open_bucket(&js, BUCKET_WORKERS, BUCKET_RETRY, &stop).await {
            Ok(Some(bucket)) => break bucket,
            Ok(None) => return,
            Err(error) => {
                if !warned {
                    tracing::warn!(error = %ErrorChain(&error), "cannot open the membership bucket yet; trying again");
                    warned = true;
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(BUCKET_RETRY) => {}
                }
            }
        }
    };
    let (owned_tx, mut owned) = watch::channel(BTreeSet::new());
    let me = uuid::Uuid::new_v4().simple().to_string();
    // Dropped with this future: a watcher that dies stops refreshing its
    // key, and the others take its racks.
    let membership = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(members::run(
        bucket,
        Group::Watchers,
        me,
        owned_tx,
        metrics.watchers_seen.clone(),
        stop.clone(),
    )));
    let watcher = Arc::new(Watcher {
        observed: std::sync::Mutex::new(Vec::new()),
        js,
        api: flow_client::Client::new(client.clone(), "the watcher's NATS connection")
            .with_actor("flow-worker --watch"),
        bmcs,
        managers,
        reads: Semaphore::new(config.max_reads.max(1)),
        streams: Semaphore::new(config.max_streams),
        states: Semaphore::new(STATE_PUBLISHES),
        config,
        metrics,
    });
    let _flusher = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(
        Arc::clone(&watcher).flush_observed(client.clone(), stop.clone()),
    ));
    let mut watches = Watches::new();
    // The racks listed (name, id), and the BMCs of those in this watcher's
    // partitions; only those are read with `rack.get`.
    let mut listed: Vec<(String, String)> = Vec::new();
    let mut racks: BTreeMap<String, Vec<Target>> = BTreeMap::new();
    let mut stale: BTreeSet<String> = BTreeSet::new();
    let mut read_at = tokio::time::Instant::now();
    loop {
        let now = tokio::time::Instant::now();
        if now >= read_at {
            let next = match watcher.list().await {
                Ok(all) => {
                    stale = all.iter().map(|(name, _)| name.clone()).collect();
                    listed = all;
                    watcher.config.inventory_every
                }
                Err(error) => {
                    tracing::warn!(error = %ErrorChain(&error), "cannot read the inventory; watching what was known");
                    watcher.config.inventory_every.min(INVENTORY_RETRY)
                }
            };
            read_at = now + next;
        }
        let mine = owned.borrow_and_update().clone();
        watcher
            .metrics
            .partitions
            .set(i64::try_from(mine.len()).unwrap_or(i64::MAX));
        let ours = |name: &str| mine.contains(&Partition::of_rack(name));
        let names: BTreeSet<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
        racks.retain(|name, _| names.contains(name.as_str()) && ours(name));
        for (name, id) in &listed {
            if !ours(name) || (racks.contains_key(name) && !stale.contains(name)) {
                continue;
            }
            match watcher.rack(id).await {
                Ok(targets) => {
                    racks.insert(name.clone(), targets);
                    stale.remove(name);
                }
                Err(error) => {
                    tracing::warn!(rack = %name, error = %ErrorChain(&error), "cannot read a rack; trying again");
                    read_at = read_at.min(tokio::time::Instant::now() + INVENTORY_RETRY);
                }
            }
        }
        let wanted = racks
            .values()
            .flatten()
            .map(|t| ((t.rack.clone(), t.name.clone()), t.clone()))
            .collect();
        Arc::clone(&watcher).reconcile(&mut watches, wanted, &stop);
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep_until(read_at) => {}
            changed = owned.changed() => if changed.is_err() { break },
        }
    }
    for (_, token) in watches.values() {
        token.cancel();
    }
    // Its key is deleted on the way out: the others take its racks at once.
    let _ = membership.await;
}

/// A gauge raised while a flag is set, lowered when it is cleared or
/// dropped: one BMC's share of `flow_watch_bmcs_failing` or
/// `flow_watch_streams`.
struct Raised {
    gauge: Gauge,
    set: AtomicBool,
}

impl Raised {
    fn new(gauge: Gauge) -> Self {
        Raised {
            gauge,
            set: AtomicBool::new(false),
        }
    }

    fn set(&self, on: bool) {
        if self.set.swap(on, Ordering::Relaxed) != on {
            if on {
                self.gauge.inc();
            } else {
                self.gauge.dec();
            }
        }
    }
}

impl Drop for Raised {
    fn drop(&mut self) {
        self.set(false);
    }
}

impl Watcher {
    /// Watches the BMCs in `wanted` and no others.
    fn reconcile(
        self: Arc<Self>,
        watches: &mut Watches,
        wanted: BTreeMap<(String, String), Target>,
        stop: &CancellationToken,
    ) {
        watches.retain(|key, (target, token)| {
            let keep = wanted.get(key) == Some(target);
            if !keep {
                token.cancel();
            }
            keep
        });
        for (key, target) in wanted {
            if watches.contains_key(&key) {
                continue;
            }
            let token = stop.child_token();
            tokio::spawn(Arc::clone(&self).watch(target.clone(), token.clone()));
            watches.insert(key, (target, token));
        }
        self.metrics
            .bmcs
            .set(i64::try_from(watches.len()).unwrap_or(i64::MAX));
        tracing::debug!(bmcs = watches.len(), "watching");
    }

    async fn call<E: Endpoint>(&self, request: &E::Request) -> Result<E::Reply, WatchError> {
        self.api
            .call::<E>(request)
            .await
            .map_err(|source| WatchError::Api {
                endpoint: E::NAME,
                source,
            })
    }

    /// Every rack: its name and ID.
    async fn list(&self) -> Result<Vec<(String, String)>, WatchError> {
        Ok(self
            .call::<endpoint::RackList>(&RackList::default())
            .await?
            .racks
            .into_iter()
            .map(|r| (r.name, r.id.to_string()))
            .collect())
    }

    /// The components of rack `id` that have a BMC.
    async fn rack(&self, id: &str) -> Result<Vec<Target>, WatchError> {
        let record = self
            .call::<endpoint::RackGet>(&RackByRef {
                rack: RackRef(id.to_owned()),
            })
            .await?;
        Ok(record
            .components
            .into_iter()
            .filter(|c| !c.bmc_url.is_empty())
            .map(|c| ComponentTarget::of(&record.name, &c))
            .collect())
    }

    fn bmc_error(target: &Target, path: &str, source: flow_hardware::HardwareError) -> WatchError {
        WatchError::Bmc {
            rack: target.rack.clone(),
            component: target.name.clone(),
            path: path.to_owned(),
            source,
        }
    }

    async fn get(&self, target: &Target, path: &str) -> Result<Value, WatchError> {
        let _permit = self.reads.acquire().await;
        self.bmcs
            .get_json(target, path, "read for hardware events")
            .await
            .map_err(|e| Self::bmc_error(target, path, e))
    }

    /// The SSE URI, if the BMC has an event service.
    async fn event_stream_uri(&self, target: &Target) -> Result<Option<String>, WatchError> {
        let root = {
            let _permit = self.reads.acquire().await;
            self.bmcs
                .root_json(target)
                .await
                .map_err(|e| Self::bmc_error(target, "/redfish/v1", e))?
        };
        let Some(service) = flow_redfish::sse::event_service_of(&root) else {
            return Ok(None);
        };
        let service = self.get(target, service).await?;
        Ok(flow_redfish::sse::stream_uri_of(&service))
    }

    /// Publishes the reads gathered every [`OBSERVED_FLUSH`] until `stop`.
    async fn flush_observed(self: Arc<Self>, client: async_nats::Client, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(OBSERVED_FLUSH) => {}
            }
            let states =
                std::mem::take(&mut *self.observed.lock().unwrap_or_else(|e| e.into_inner()));
            for chunk in states.chunks(1_000) {
                let batch = flow_protocol::state::Observed {
                    schema: flow_protocol::api::SCHEMA,
                    states: chunk.to_vec(),
                };
                let Ok(body) = serde_json::to_vec(&batch) else {
                    continue;
                };
                if let Err(error) = client
                    .publish(flow_protocol::state::OBSERVED_SUBJECT, body.into())
                    .await
                {
                    tracing::debug!(error = %ErrorChain(&error), "power reads not published");
                }
            }
        }
    }

    /// Reads every chassis' conditions and publishes them; remembers where
    /// the BMC reports its measured draw.
    async fn poll(&self, target: &Target, reads: &mut Reads) -> Result<usize, WatchError> {
        let chassis = self.get(target, "/redfish/v1/Chassis").await?;
        let members: Vec<String> = chassis
            .get("Members")
            .and_then(Value::as_array)
            .map(|m| {
                m.iter()
                    .filter_map(|x| x.get("@odata.id").and_then(Value::as_str))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let mut published = 0;
        for member in members {
            let body = self.get(target, &member).await?;
            if let Some(uri) = body
                .pointer("/EnvironmentMetrics/@odata.id")
                .and_then(Value::as_str)
                && reads.metrics.is_none()
            {
                reads.metrics = Some(uri.to_owned());
            }
            let conditions = body
                .pointer("/Status/Conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for condition in conditions {
                if let Some(event) =
                    read_record(target, &condition, "Timestamp", "Severity", &member)
                {
                    self.publish(&event).await?;
                    published += 1;
                }
            }
        }
        Ok(published)
    }

    async fn publish(&self, event: &HardwareEvent) -> Result<(), WatchError> {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", event.message_id().as_str());
        let body = serde_json::to_vec(event).map_err(|e| WatchError::Publish(e.into()))?;
        self.js
            .publish_with_headers(
                flow_protocol::event::subject(event.event_type),
                headers,
                body.into(),
            )
            .await
            .map_err(|e| WatchError::Publish(e.into()))?
            .await
            .map_err(|e| WatchError::Publish(e.into()))?;
        self.metrics.events_published.inc();
        tracing::info!(
            rack = %event.rack,
            component = %event.component,
            event_type = %event.event_type,
            key = %event.key,
            "hardware event published"
        );
        Ok(())
    }

    /// Watches one BMC until `stop`.
    async fn watch(self: Arc<Self>, target: Target, stop: CancellationToken) {
        let mut pause = RECONNECT_FIRST;
        let mut seen: Option<Seen> = None;
        let mut reads = Reads::default();
        let failing = Raised::new(self.metrics.bmcs_failing.clone());
        loop {
            let outcome = tokio::select! {
                () = stop.cancelled() => return,
                outcome = self.watch_once(&target, &mut seen, &mut reads) => outcome,
            };
            failing.set(outcome.is_err());
            match outcome {
                Ok(Watched::Polled) => {
                    pause = RECONNECT_FIRST;
                    // Power every `power_every`; the conditions again at
                    // `poll_every`.
                    let until = tokio::time::Instant::now() + self.config.poll_every;
                    loop {
                        let next =
                            (tokio::time::Instant::now() + self.config.power_every).min(until);
                        tokio::select! {
                            () = stop.cancelled() => return,
                            () = tokio::time::sleep_until(next) => {}
                        }
                        if next >= until {
                            break;
                        }
                        let read = self
                            .observe(&target, &mut seen, &mut reads, ObservationSource::Watcher)
                            .await;
                        failing.set(read.is_err());
                    }
                    continue;
                }
                Ok(Watched::StreamEnded) => {
                    tracing::debug!(rack = %target.rack, component = %target.name, "event stream ended");
                    pause = RECONNECT_FIRST;
                }
                Err(error) => {
                    tracing::debug!(rack = %target.rack, component = %target.name, error = %ErrorChain(&error), "cannot watch the BMC; trying again");
                    pause = (pause * 2).min(RECONNECT_MAX);
                    if let WatchError::Bmc { .. } = error {
                        let power = seen.as_ref().map_or(PowerState::Unknown, |s| s.0);
                        let now = (power, false, ErrorChain(&error).to_string());
                        self.gather(&target, now.clone(), ObservationSource::Watcher, None);
                        if let Err(e) = self.publish_state(&target, &mut seen, now).await {
                            tracing::warn!(rack = %target.rack, component = %target.name, error = %ErrorChain(&e), "cannot publish the component's state");
                        }
                    }
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One round: follow the stream until it ends, or poll once.
    async fn watch_once(
        &self,
        target: &Target,
        seen: &mut Option<Seen>,
        reads: &mut Reads,
    ) -> Result<Watched, WatchError> {
        let stream_slot = match self.event_stream_uri(target).await? {
            Some(uri) => self.streams.try_acquire().ok().map(|slot| (uri, slot)),
            None => None,
        };
        let Some((uri, _slot)) = stream_slot else {
            self.poll(target, reads).await?;
            self.observe(target, seen, reads, ObservationSource::Watcher)
                .await?;
            return Ok(Watched::Polled);
        };
        // Held open (one of the BMC's request permits) until it ends; the
        // stream is opened again (and the chassis read again) at least
        // every hour.
        let mut stream = self
            .bmcs
            .open_stream(target, &uri)
            .await
            .map_err(|e| Self::bmc_error(target, &uri, e))?;
        let open = Raised::new(self.metrics.streams.clone());
        open.set(true);
        // Opened: now read what happened while nobody listened.
        self.poll(target, reads).await?;
        self.observe(target, seen, reads, ObservationSource::Watcher)
            .await?;
        let mut frames = SseFrames::default();
        // A stream that announces no power change (a BMC that sends none,
        // or drops them) must not leave the power unread: read it on a
        // timer too.
        let mut read_at = tokio::time::Instant::now() + self.config.power_every;
        loop {
            let chunk = tokio::select! {
                chunk = tokio::time::timeout(STREAM_IDLE, stream.response.chunk()) => chunk,
                () = tokio::time::sleep_until(read_at) => {
                    self.observe(target, seen, reads, ObservationSource::Watcher).await?;
                    read_at = tokio::time::Instant::now() + self.config.power_every;
                    continue;
                }
            };
            let chunk = match chunk {
                Err(_) => return Ok(Watched::StreamEnded),
                Ok(Err(_)) | Ok(Ok(None)) => return Ok(Watched::StreamEnded),
                Ok(Ok(Some(chunk))) => chunk,
            };
            for data in frames.push(&chunk) {
                let Ok(record) = serde_json::from_str::<Value>(&data) else {
                    tracing::warn!(rack = %target.rack, component = %target.name, "an event stream frame is not JSON; ignored");
                    continue;
                };
                let events = record
                    .get("Events")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let mut power_changed = false;
                for e in events {
                    power_changed |= e
                        .get("MessageId")
                        .and_then(Value::as_str)
                        .is_some_and(observe::is_power_change);
                    let origin = e
                        .pointer("/OriginOfCondition/@odata.id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    if let Some(event) =
                        read_record(target, &e, "EventTimestamp", "MessageSeverity", &origin)
                    {
                        self.publish(&event).await?;
                    }
                }
                if power_changed {
                    self.observe(target, seen, reads, ObservationSource::Event)
                        .await?;
                    read_at = tokio::time::Instant::now() + self.config.power_every;
                }
            }
        }
    }

    /// Reads the component's power (and, when due, its measured draw),
    /// gathers the read for the schedulers, and publishes its state if it
    /// changed.
    async fn observe(
        &self,
        target: &Target,
        seen: &mut Option<Seen>,
        reads: &mut Reads,
        source: ObservationSource,
    ) -> Result<(), WatchError> {
        let manager = self.managers.get(target.component_type).ok();
        let power = {
            let _permit = self.reads.acquire().await;
            observe::read(manager.map(|m| m.as_ref()), target).await
        }
        .map_err(|e| Self::bmc_error(target, "power state", e))?;
        let measured = self.measure(target, reads).await;
        let now = (power, true, String::new());
        self.gather(target, now.clone(), source, measured);
        self.publish_state(target, seen, now).await
    }

    /// The BMC's measured draw, W, when it reports one and a read is due
    /// (a failed read is a missing figure, not a failed watch).
    async fn measure(&self, target: &Target, reads: &mut Reads) -> Option<u32> {
        let uri = reads.metrics.clone()?;
        let now = tokio::time::Instant::now();
        if reads
            .measured_at
            .is_some_and(|at| now < at + self.config.telemetry_every)
        {
            return None;
        }
        reads.measured_at = Some(now);
        let body = self.get(target, &uri).await.ok()?;
        observe::watts_of(&body)
    }

    /// Keeps a read for the next publish on `flow.power.observed`.
    fn gather(&self, target: &Target, now: Seen, source: ObservationSource, measured: Option<u32>) {
        let (power, reachable, error) = now;
        let state = flow_protocol::state::ComponentState {
            schema: flow_protocol::api::SCHEMA,
            rack: target.rack.clone(),
            component: target.name.clone(),
            power,
            reachable,
            error,
            observed_at: OffsetDateTime::now_utc(),
            source: if measured.is_some() {
                ObservationSource::Telemetry
            } else {
                source
            },
            measured_w: measured,
        };
        self.observed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(state);
    }

    /// Publishes `now` when it differs from what was last published.
    async fn publish_state(
        &self,
        target: &Target,
        seen: &mut Option<Seen>,
        now: Seen,
    ) -> Result<(), WatchError> {
        let Some(state) = observe::next(target, seen.as_ref(), now.clone()) else {
            return Ok(());
        };
        let body = serde_json::to_vec(&state).map_err(|e| WatchError::Publish(e.into()))?;
        let _turn = self.states.acquire().await;
        self.js
            .publish(state.subject(), body.into())
            .await
            .map_err(|e| WatchError::Publish(e.into()))?
            .await
            .map_err(|e| WatchError::Publish(e.into()))?;
        tracing::debug!(rack = %target.rack, component = %target.name, power = %state.power, reachable = state.reachable, "component state published");
        *seen = Some(now);
        Ok(())
    }
}

enum Watched {
    Polled,
    StreamEnded,
}

/// What one BMC's watch keeps between reads.
#[derive(Debug, Default)]
struct Reads {
    /// Where the BMC reports its measured draw (`EnvironmentMetrics`).
    metrics: Option<String>,
    /// When the draw was last read.
    measured_at: Option<tokio::time::Instant>,
}

/// What a message ID reports, by the part after the registry's version.
fn event_type(message_id: &str) -> Option<EventType> {
    let key = message_id.rsplit('.').next().unwrap_or(message_id);
    if key.starts_with("LeakDetected") {
        Some(EventType::LeakDetected)
    } else if key == "ReadingAboveUpperCriticalThreshold" {
        Some(EventType::TemperatureCritical)
    } else {
        None
    }
}

/// A condition or event record as a Flow event (None: not one Flow knows).
fn read_record(
    target: &Target,
    record: &Value,
    time_field: &str,
    severity_field: &str,
    origin: &str,
) -> Option<HardwareEvent> {
    let message_id = record.get("MessageId").and_then(Value::as_str)?;
    let event_type = event_type(message_id)?;
    let observed_at = record
        .get(time_field)
        .and_then(Value::as_str)
        .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok())?;
    let ms = flow_protocol::task::timestamp::to_ms(observed_at);
    let severity = match record.get(severity_field).and_then(Value::as_str) {
        Some("OK") => Severity::Ok,
        Some("Warning") => Severity::Warning,
        _ => Severity::Critical,
    };
    Some(HardwareEvent {
        source: "redfish".to_owned(),
        key: format!(
            "{}/{}/{}/{ms}",
            target.rack,
            target.name,
            message_id.rsplit('.').next().unwrap_or(message_id)
        ),
        event_type,
        severity,
        rack: target.rack.clone(),
        component: target.name.clone(),
        message: record
            .get("Message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        origin: origin.to_owned(),
        observed_at: flow_protocol::task::timestamp::from_ms(ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_are_matched_without_their_version() {
        assert_eq!(
            event_type("Environmental.1.0.LeakDetectedCritical"),
            Some(EventType::LeakDetected)
        );
        assert_eq!(
            event_type("SensorEvent.1.2.ReadingAboveUpperCriticalThreshold"),
            Some(EventType::TemperatureCritical)
        );
        assert_eq!(event_type("ResourceEvent.1.0.ResourceCreated"), None);
    }

    #[test]
    fn a_condition_and_its_event_give_one_key() {
        let target = Target {
            rack: "rack-01".into(),
            name: "compute-02".into(),
            component_type: flow_rules::ComponentType::Compute,
            bmc_url: String::new(),
            credential_ref: String::new(),
            resource_id: None,
        };
        let condition = serde_json::json!({"MessageId": "Environmental.1.0.LeakDetectedCritical",
            "Timestamp": "2026-12-01T10:00:00.123Z", "Severity": "Critical"});
        let event = serde_json::json!({"MessageId": "Environmental.1.0.LeakDetectedCritical",
            "EventTimestamp": "2026-12-01T10:00:00.123+00:00", "MessageSeverity": "Critical"});
        let a = read_record(&target, &condition, "Timestamp", "Severity", "").unwrap();
        let b = read_record(&target, &event, "EventTimestamp", "MessageSeverity", "").unwrap();
        assert_eq!(a.key, b.key);
        assert_eq!(
            a.key,
            "rack-01/compute-02/LeakDetectedCritical/1796119200123"
        );
    }
}
