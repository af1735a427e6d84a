//! Task execution on the scheduler side: JetStream set-up, submissions,
//! the outbox publisher, result application and the deadline sweeper. All
//! state is in Postgres; every loop is safe to run in several schedulers.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use flow_engine::plan;
use flow_jetstream::park;
use flow_protocol::api::{ApiError, ErrorCode, RackOutcome, TaskSubmit, TaskSubmitReply};
use flow_protocol::decode::DecodeError;
use flow_protocol::ids::RackRef;
use flow_protocol::jobs::{
    BUCKET_JOB_STATE, CONSUMER_SCHEDULER, CONSUMER_SUBMIT, ComponentTarget, PARKED_MAX_AGE,
    ResultMessage, STREAM_EVENTS, STREAM_JOBS, STREAM_PARKED, STREAM_RESULTS, STREAM_TASKS,
    SUBJECT_SUBMIT,
};
use flow_rules::{ComponentType, RuleDefinition};
use flow_store::tasks::{NewStep, NewTask, Submitted};
use flow_store::{Store, StoreError};
use futures::StreamExt;
use tokio::sync::Notify;
use tracing::Instrument;

use crate::metrics::SchedulerMetrics;

/// How often the outbox and the deadlines are swept even when nothing pokes
/// them (covers a scheduler that died between commit and publish).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// Step results applied at once by one scheduler. The benchmark showed one
/// at a time as the bottleneck at 50 racks: each result is a transaction
/// and a commit, and workers were idle waiting for the next stage.
pub const RESULTS_IN_FLIGHT: usize = 16;

/// How long a worker may hold a job without a progress ack before
/// JetStream redelivers it (workers send progress while working).
pub const JOB_ACK_WAIT: Duration = Duration::from_secs(30);

/// A durable pull consumer that never gives up on a message (naks with a
/// delay count as deliveries; deadlines, not delivery counts, end work).
fn durable(name: &str, ack_wait: Duration) -> consumer::pull::Config {
    consumer::pull::Config {
        durable_name: Some(name.to_owned()),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait,
        max_deliver: -1,
        ..Default::default()
    }
}

/// Creates the streams, consumers and bucket (idempotent). `job_ack_wait`
/// is how long a job may go without an ack or progress before another
/// worker gets it ([`JOB_ACK_WAIT`] in production).
pub async fn ensure_jetstream(
    js: &jetstream::Context,
    job_ack_wait: Duration,
) -> Result<(), async_nats::Error> {
    let work_queue = |name: &str, subjects: Vec<String>| stream::Config {
        name: name.to_owned(),
        subjects,
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    };
    let tasks = js
        .get_or_create_stream(work_queue(STREAM_TASKS, vec![SUBJECT_SUBMIT.to_owned()]))
        .await?;
    tasks
        .get_or_create_consumer(
            CONSUMER_SUBMIT,
            durable(CONSUMER_SUBMIT, Duration::from_secs(30)),
        )
        .await?;
    let jobs = js
        .get_or_create_stream(work_queue(STREAM_JOBS, vec!["flow.jobs.>".to_owned()]))
        .await?;
    let results = js
        .get_or_create_stream(work_queue(
            STREAM_RESULTS,
            vec!["flow.results.>".to_owned()],
        ))
        .await?;
    js.get_or_create_stream(stream::Config {
        name: STREAM_EVENTS.to_owned(),
        subjects: vec!["flow.events.>".to_owned()],
        max_age: Duration::from_secs(7 * 24 * 3600),
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await?;
    js.get_or_create_stream(stream::Config {
        name: STREAM_PARKED.to_owned(),
        subjects: vec!["flow.parked.>".to_owned()],
        max_age: PARKED_MAX_AGE,
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await?;
    jobs.get_or_create_consumer(
        flow_protocol::jobs::CONSUMER_WORKERS,
        consumer::pull::Config {
            // Jobs held by workers at once, across all workers.
            max_ack_pending: 1024,
            ..durable(flow_protocol::jobs::CONSUMER_WORKERS, job_ack_wait)
        },
    )
    .await?;
    results
        .get_or_create_consumer(
            CONSUMER_SCHEDULER,
            durable(CONSUMER_SCHEDULER, Duration::from_secs(30)),
        )
        .await?;
    js.create_key_value(jetstream::kv::Config {
        bucket: BUCKET_JOB_STATE.to_owned(),
        history: 1,
        max_age: Duration::from_secs(7 * 24 * 3600),
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await?;
    Ok(())
}

/// The scheduler's execution side.
#[derive(Clone)]
pub struct Executor {
    store: Store,
    js: jetstream::Context,
    poke: Arc<Notify>,
    metrics: SchedulerMetrics,
}

fn store_api_error(e: StoreError) -> ApiError {
    crate::api::store_error(e)
}

impl Executor {
    /// An executor over `store` and `js`.
    pub fn new(store: Store, js: jetstream::Context) -> Self {
        Self::with_metrics(store, js, SchedulerMetrics::unregistered())
    }

    /// An executor that counts in `metrics`.
    pub fn with_metrics(store: Store, js: jetstream::Context, metrics: SchedulerMetrics) -> Self {
        Executor {
            store,
            js,
            poke: Arc::new(Notify::new()),
            metrics,
        }
    }

    /// Submits an operation: one task per rack, each refused or created on
    /// its own, with the reason.
    pub async fn submit(&self, request: &TaskSubmit) -> TaskSubmitReply {
        let mut results = Vec::new();
        for rack in &request.racks {
            let outcome = match self.submit_rack(request, rack).await {
                Ok(submitted) => {
                    let (id, duplicate, queued) = match submitted {
                        Submitted::Created(id) => (id, false, false),
                        Submitted::Duplicate(id) => (id, true, false),
                        Submitted::Queued(id) => (id, false, true),
                    };
                    RackOutcome {
                        rack: rack.0.clone(),
                        task_id: Some(id),
                        duplicate,
                        queued,
                        error: None,
                    }
                }
                Err(error) => RackOutcome {
                    rack: rack.0.clone(),
                    task_id: None,
                    duplicate: false,
                    queued: false,
                    error: Some(error),
                },
            };
            self.metrics
                .submission(match (&outcome.error, outcome.duplicate, outcome.queued) {
                    (Some(_), _, _) => "rejected",
                    (None, true, _) => "duplicate",
                    (None, false, true) => "queued",
                    (None, false, false) => "accepted",
                });
            if let Some(id) = outcome.task_id {
                tracing::info!(task_id = %id, rack = %rack, operation = %request.operation, duplicate = outcome.duplicate, "task submitted");
            }
            results.push(outcome);
        }
        self.poke.notify_one();
        TaskSubmitReply { results }
    }

    async fn submit_rack(
        &self,
        request: &TaskSubmit,
        rack: &RackRef,
    ) -> Result<Submitted, ApiError> {
        let record = self.store.get_rack(rack).await.map_err(store_api_error)?;
        let components: Vec<ComponentTarget> = record
            .components
            .iter()
            .filter(|c| {
                request.component_types.is_empty()
                    || request.component_types.contains(&c.component_type)
            })
            .map(|c| ComponentTarget {
                rack: record.name.clone(),
                name: c.name.clone(),
                component_type: c.component_type,
                bmc_url: c.bmc_url.clone(),
                credential_ref: c.credential_ref.clone(),
                resource_id: None,
            })
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
            .map_err(store_api_error)?;
        let plan = plan(&resolution.definition, &components).map_err(|e| {
            ApiError::new(
                ErrorCode::Invalid,
                format!("rule {:?}: {e}", resolution.reply.name),
            )
        })?;
        check_capabilities(&resolution.definition, &components)?;
        let steps = plan
            .stages
            .iter()
            .flat_map(|stage| {
                stage.steps.iter().map(move |s| NewStep {
                    step_index: u32::try_from(s.step_index).unwrap_or(u32::MAX),
                    stage: stage.stage.get(),
                    component_type: s.component_type,
                    components: u32::try_from(s.components.len()).unwrap_or(u32::MAX),
                    budget_ms: u64::try_from(s.budget.as_millis()).unwrap_or(u64::MAX),
                })
            })
            .collect();
        let task = NewTask {
            request_id: request.request_id.clone(),
            rack_id: record.id,
            rack_name: record.name.clone(),
            operation: request.operation,
            rule: resolution.reply,
            components,
            firmware: request.firmware.clone(),
            steps,
            queue_timeout: match request.conflict {
                flow_protocol::api::ConflictStrategy::Reject => None,
                flow_protocol::api::ConflictStrategy::Queue { timeout_seconds } => {
                    Some(Duration::from_secs(timeout_seconds))
                }
            },
        };
        self.store.create_task(&task).await.map_err(store_api_error)
    }

    /// Wakes the outbox publisher (new rows were committed, e.g. a cancel
    /// mark).
    pub fn poke(&self) {
        self.poke.notify_one();
    }

    /// Applies one result in a `result` span naming its task, rack, stage,
    /// step and component type, counts it, and acknowledges it (or hands it
    /// back when the database failed).
    async fn apply_one(&self, result: ResultMessage, message: jetstream::Message) {
        let span = tracing::info_span!(
            "result",
            task = %result.id.task,
            rack = tracing::field::Empty,
            stage = tracing::field::Empty,
            step = result.id.step_index,
            component = tracing::field::Empty,
            generation = result.id.generation,
        );
        async {
            let applied = match self.store.apply_result(&result).await {
                Ok(applied) => applied,
                Err(error) if error.is_refused_value() => {
                    // The same result would fail the same way forever.
                    let reason = format!(
                        "the database refused a value of the result: {}",
                        crate::api::error_chain(&error)
                    );
                    if park(&self.js, STREAM_RESULTS, &message, &reason).await {
                        self.metrics.parked(STREAM_RESULTS);
                    }
                    return;
                }
                Err(error) => {
                    self.metrics.result_error();
                    tracing::warn!(error = %error, "result not applied; redelivery will retry");
                    let _ = message
                        .ack_with(jetstream::AckKind::Nak(Some(Duration::from_secs(1))))
                        .await;
                    return;
                }
            };
            // The outbox publisher goes first: the next stage's jobs are
            // committed; the figures below are not on the critical path.
            self.poke.notify_one();
            // Read after the commit, for the log fields and the durations.
            let timing = match self
                .store
                .step_timing(result.id.task, result.id.step_index)
                .await
            {
                Ok(timing) => timing,
                Err(error) => {
                    tracing::warn!(error = %error, "step timing not read");
                    None
                }
            };
            if let Some(t) = &timing {
                let span = tracing::Span::current();
                span.record("rack", t.rack.as_str());
                span.record("stage", t.stage);
                span.record("component", t.component_type.as_str());
            }
            self.metrics.result(&applied, timing.as_ref());
            tracing::info!(applied = ?applied, "result applied");
            let _ = message.ack().await;
        }
        .instrument(span)
        .await
    }

    /// Publishes the outbox: every message committed with the state that
    /// justifies it, with a `Nats-Msg-Id` so a repeat is dropped.
    async fn publish_outbox(&self) -> Result<usize, async_nats::Error> {
        let mut total = 0;
        loop {
            let batch = self.store.outbox_pending(100).await?;
            if batch.is_empty() {
                return Ok(total);
            }
            // Send the whole batch, then collect the acks: one round of
            // server syncs for the batch instead of one per message. Order
            // is kept (one connection); a failure leaves the rest pending,
            // and their Nats-Msg-Id drops any repeat on the next sweep.
            let mut sent = Vec::with_capacity(batch.len());
            for (id, subject, msg_id, payload) in batch {
                let body = serde_json::to_vec(&payload)?;
                let ack = self
                    .js
                    .send_publish(
                        subject,
                        jetstream::message::PublishMessage::build()
                            .payload(body.into())
                            .message_id(msg_id),
                    )
                    .await?;
                sent.push((id, ack));
            }
            let mut done = Vec::with_capacity(sent.len());
            let mut failed = None;
            for (id, ack) in sent {
                match ack.await {
                    Ok(_) => done.push(id),
                    Err(error) => {
                        failed.get_or_insert(error);
                    }
                }
            }
            total += done.len();
            self.metrics
                .outbox_published
                .inc_by(u64::try_from(done.len()).unwrap_or(u64::MAX));
            self.store.outbox_published(&done).await?;
            if let Some(error) = failed {
                return Err(error.into());
            }
        }
    }

    /// Runs the outbox publisher and the deadline sweeper until `stop`.
    pub async fn run_sweeps(self, stop: Arc<Notify>) {
        let mut tick = tokio::time::interval(SWEEP_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // A poke (new outbox rows) publishes at once; the sweeps of
            // queues and deadlines run on the tick only, not once per result.
            let swept = tokio::select! {
                // Cancel-safe: all only wait.
                _ = stop.notified() => return,
                _ = self.poke.notified() => false,
                _ = tick.tick() => true,
            };
            if let Err(error) = self.publish_outbox().await {
                tracing::warn!(error = %error, "outbox publish failed; will retry");
            }
            if !swept {
                continue;
            }
            if let Err(error) = self.store.sweep_queues().await {
                tracing::warn!(error = %error, "queue sweep failed");
            }
            match self.store.fail_overdue_steps().await {
                Ok(failed) => {
                    self.metrics
                        .deadline_failures
                        .inc_by(u64::try_from(failed.len()).unwrap_or(u64::MAX));
                    for task in &failed {
                        tracing::warn!(task_id = %task, "step past its deadline: task failed");
                    }
                    if !failed.is_empty() {
                        // Their cancel marks are on the outbox.
                        self.poke.notify_one();
                    }
                }
                Err(error) => tracing::warn!(error = %error, "deadline sweep failed"),
            }
        }
    }

    /// Consumes step results until `stop`: each is applied in one
    /// transaction, then acknowledged; up to [`RESULTS_IN_FLIGHT`] at once
    /// (results of one task serialise on its row lock).
    pub async fn run_results(self, stop: Arc<Notify>) -> Result<(), async_nats::Error> {
        consume(
            &self.js,
            &self.metrics,
            Source {
                stream: STREAM_RESULTS,
                consumer: CONSUMER_SCHEDULER,
                concurrency: RESULTS_IN_FLIGHT,
            },
            stop,
            flow_protocol::decode::message,
            |result: ResultMessage, message| {
                let this = self.clone();
                async move { this.apply_one(result, message).await }
            },
        )
        .await
    }

    /// Consumes task requests published on `flow.tasks.submit` until `stop`.
    /// JetStream drops a repeated `Nats-Msg-Id` (the request id) within its
    /// duplicate window, and the store recognises a repeated request id after
    /// it. The per-rack outcome is published on
    /// `flow.events.submit.<request_id>`.
    pub async fn run_submissions(self, stop: Arc<Notify>) -> Result<(), async_nats::Error> {
        consume(
            &self.js,
            &self.metrics,
            Source {
                stream: STREAM_TASKS,
                consumer: CONSUMER_SUBMIT,
                // One at a time: queued submissions keep their order.
                concurrency: 1,
            },
            stop,
            flow_protocol::decode::request,
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
                    let subject = format!("flow.events.submit.{}", sanitize(&request.request_id));
                    match serde_json::to_vec(&reply) {
                        Ok(body) => {
                            if let Err(error) = this.js.publish(subject, body.into()).await {
                                tracing::warn!(error = %error, "submission outcome not published");
                            }
                        }
                        Err(error) => {
                            tracing::warn!(error = %error, "submission outcome not encodable")
                        }
                    }
                    let _ = message.ack().await;
                }
            },
        )
        .await
    }
}

/// Where [`consume`] pulls from and how many messages it handles at once.
#[derive(Clone, Copy)]
struct Source {
    stream: &'static str,
    consumer: &'static str,
    concurrency: usize,
}

/// First pause before [`consume`] pulls again after its consumer failed
/// (doubling up to [`CONSUME_RETRY_MAX`]).
const CONSUME_RETRY_MIN: Duration = Duration::from_millis(250);
/// Longest pause between attempts to pull again.
const CONSUME_RETRY_MAX: Duration = Duration::from_secs(5);

/// Pulls messages of type `T` from a durable consumer until `stop`, reading
/// each with `decode`; `handle` acknowledges. A message that does not decode
/// (or speaks another schema) is parked on FLOW_PARKED with the reason:
/// never retried forever, never lost, never a crash. If the consumer cannot
/// be found or its message stream ends (NATS restarting), it is looked up
/// and pulled again after a pause: a scheduler whose result consumer stopped
/// would leave every running task stuck.
async fn consume<T, D, F, Fut>(
    js: &jetstream::Context,
    metrics: &SchedulerMetrics,
    source: Source,
    stop: Arc<Notify>,
    decode: D,
    mut handle: F,
) -> Result<(), async_nats::Error>
where
    D: Fn(&[u8]) -> Result<T, DecodeError>,
    F: FnMut(T, jetstream::Message) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut pause = CONSUME_RETRY_MIN;
    loop {
        match consume_once(js, metrics, source, &stop, &decode, &mut handle).await {
            Ok(Pulled::Stopped) => return Ok(()),
            Ok(Pulled::Ended { handled }) => {
                if handled {
                    pause = CONSUME_RETRY_MIN;
                }
                tracing::warn!(
                    stream = source.stream,
                    consumer = source.consumer,
                    "message stream ended; pulling again"
                );
            }
            Err(error) => tracing::warn!(
                stream = source.stream,
                consumer = source.consumer,
                error = %error,
                "cannot pull; trying again"
            ),
        }
        tokio::select! {
            _ = stop.notified() => return Ok(()),
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(CONSUME_RETRY_MAX);
    }
}

/// How one [`consume_once`] ended.
enum Pulled {
    /// `stop` was signalled.
    Stopped,
    /// The message stream ended; `handled`: whether it yielded anything.
    Ended { handled: bool },
}

/// One pull stream on the consumer, up to `source.concurrency` messages
/// handled at once (each handler is its own transaction; the database
/// orders what must be ordered). Waits for the handlers it started.
async fn consume_once<T, D, F, Fut>(
    js: &jetstream::Context,
    metrics: &SchedulerMetrics,
    source: Source,
    stop: &Notify,
    decode: &D,
    handle: &mut F,
) -> Result<Pulled, async_nats::Error>
where
    D: Fn(&[u8]) -> Result<T, DecodeError>,
    F: FnMut(T, jetstream::Message) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Source {
        stream,
        consumer: consumer_name,
        concurrency,
    } = source;
    let consumer: consumer::PullConsumer = js
        .get_stream(stream)
        .await?
        .get_consumer(consumer_name)
        .await?;
    let mut messages = consumer.messages().await?;
    let mut in_flight = futures::stream::FuturesUnordered::new();
    let mut handled = false;
    let outcome = loop {
        if in_flight.len() >= concurrency.max(1) {
            in_flight.next().await;
            continue;
        }
        let message = tokio::select! {
            _ = stop.notified() => break Pulled::Stopped,
            Some(()) = in_flight.next(), if !in_flight.is_empty() => continue,
            // Cancel-safe: a message not yet yielded stays with the consumer.
            m = messages.next() => m,
        };
        let Some(message) = message else {
            break Pulled::Ended { handled };
        };
        let message = match message {
            Ok(m) => m,
            Err(error) => {
                tracing::warn!(stream, error = %error, "stream error");
                continue;
            }
        };
        handled = true;
        match decode(&message.payload) {
            Ok(value) => in_flight.push(handle(value, message)),
            Err(error) => {
                if park(js, stream, &message, &error.to_string()).await {
                    metrics.parked(stream);
                }
            }
        }
    };
    // Finish what was started: each handler acks or hands back its message.
    while in_flight.next().await.is_some() {}
    Ok(outcome)
}

/// A request id as a subject token (no dots, spaces or wildcards).
fn sanitize(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Refuses a rule whose actions need a capability the managers of a
/// targeted type lack (and types with no manager at all), as the hardware
/// contract declares them.
fn check_capabilities(
    rule: &RuleDefinition,
    components: &[ComponentTarget],
) -> Result<(), ApiError> {
    let targeted: BTreeSet<ComponentType> = components.iter().map(|c| c.component_type).collect();
    flow_hardware::catalog::check_rule(rule, &targeted).map_err(|problems| {
        ApiError::invalid("the rule needs capabilities the managers lack", problems)
    })
}
