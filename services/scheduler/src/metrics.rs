//! The scheduler's Prometheus metrics (`flow_*`): tasks by status and the
//! queue depth (refreshed from the database every [`GAUGE_REFRESH`]), step
//! and stage durations measured when a result is applied, results applied
//! or ignored, the outbox, submissions by outcome, and deadline failures.
//! `docs/operating.md`, "Metrics and alerts", lists them with what to alert
//! on.

use std::time::Duration;

use flow_decisions::lifecycle::Applied;
use flow_metrics::{MetricsRegistry, duration_buckets};
use flow_protocol::TaskStatus;
use flow_store::Store;
use flow_store::stats::StepTiming;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Unit;
use tokio_util::sync::CancellationToken;

use crate::background::{Driver, Next, Period};

/// How often the gauges read from the database are refreshed: often
/// enough for a 15 s scrape interval, rare enough to cost nothing.
pub const GAUGE_REFRESH: Duration = Duration::from_secs(5);

/// A task, stage or step status.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    /// The status.
    pub status: String,
}

/// A step's component type and status.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    /// `Compute`, `NVSwitch`, `PowerShelf`, …
    pub component_type: String,
    /// `completed`, `failed` or `cancelled`.
    pub status: String,
}

/// What happened to a message.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// The outcome.
    pub outcome: &'static str,
}

/// A power domain.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DomainLabels {
    /// Its name (`row=B`).
    pub domain: String,
}

type KwGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// The stream a message came from.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamLabels {
    /// `FLOW_RESULTS` or `FLOW_TASKS`.
    pub stream: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(duration_buckets())
}

/// The scheduler's metrics. Cheap to clone: every handle shares its value.
#[derive(Debug, Clone)]
pub struct SchedulerMetrics {
    /// Tasks by status (database).
    pub tasks: Family<StatusLabels, Gauge>,
    /// Tasks waiting for a busy rack (database).
    pub queue_depth: Gauge,
    /// Tasks that reached a final status through a result, by status.
    pub tasks_finished: Family<StatusLabels, Counter>,
    /// Step durations, from the step's start to its result applied.
    pub step_duration: HistogramFamily<StepLabels>,
    /// Stage durations, from the first step start to the last step end.
    pub stage_duration: HistogramFamily<StatusLabels>,
    /// Results by outcome: `applied`, `ignored` (a repeat or a stale
    /// generation), `error` (not applied; redelivered).
    pub results: Family<OutcomeLabels, Counter>,
    /// Outbox messages published to JetStream.
    pub outbox_published: Counter,
    /// Outbox messages not yet published (database).
    pub outbox_pending: Gauge,
    /// Open tasks with no progress for 15 minutes, by status (*db*).
    pub tasks_stuck: Family<StatusLabels, Gauge>,
    /// Running tasks past their whole budget (*db*).
    pub tasks_over_budget: Gauge,
    /// Runs paused by a safety gate (*db*).
    pub runs_gate_paused: Gauge,
    /// Leak events whose first action did not start within 30 s (*db*).
    pub leaks_unacted: Gauge,
    /// Step results not yet applied (FLOW_RESULTS' messages).
    pub results_backlog: Gauge,
    /// Step jobs not yet finished (FLOW_JOBS' messages: queued, running
    /// and waiting durably).
    pub jobs_backlog: Gauge,
    /// Messages kept on FLOW_PARKED now (bounded, the oldest discarded
    /// first: `flow_protocol::jobs::PARKED_MAX_MESSAGES`).
    pub parked_messages: Gauge,
    /// Bytes kept on FLOW_PARKED now.
    pub parked_bytes: Gauge,
    /// Submissions per rack by outcome: `accepted`, `queued`, `duplicate`,
    /// `rejected`.
    pub submissions: Family<OutcomeLabels, Counter>,
    /// Messages refused and parked, by the stream they came from.
    pub messages_parked: Family<StreamLabels, Counter>,
    /// Running steps past their deadline (database).
    pub steps_overdue: Gauge,
    /// Steps failed by the deadline sweeper.
    pub deadline_failures: Counter,
    /// Hardware events stored, by event type (a repeat is not counted).
    pub hardware_events: Family<StatusLabels, Counter>,
    /// Attempts of event-rule actions, by outcome: `completed`, `retry`,
    /// `failed`.
    pub event_executions: Family<OutcomeLabels, Counter>,
    /// Alerts raised by event rules, by severity.
    pub event_alerts: Family<StatusLabels, Counter>,
    /// Each power domain's budget, kW (database; absent without one).
    pub power_budget: Family<DomainLabels, KwGauge>,
    /// Each power domain's draw counted against its budget, kW (database).
    pub power_in_use: Family<DomainLabels, KwGauge>,
    /// Power commands waiting for each domain (database).
    pub power_waiting: Family<DomainLabels, Gauge>,
    /// Power shelves Flow turned off, per domain (database).
    pub power_shelves_off: Family<DomainLabels, Gauge>,
}

impl SchedulerMetrics {
    /// Metrics that are counted but not registered (an embedded scheduler
    /// without a listener).
    pub fn unregistered() -> Self {
        SchedulerMetrics {
            tasks: Family::default(),
            queue_depth: Gauge::default(),
            tasks_finished: Family::default(),
            step_duration: Family::new_with_constructor(duration_histogram),
            stage_duration: Family::new_with_constructor(duration_histogram),
            results: Family::default(),
            outbox_published: Counter::default(),
            outbox_pending: Gauge::default(),
            tasks_stuck: Family::default(),
            tasks_over_budget: Gauge::default(),
            runs_gate_paused: Gauge::default(),
            leaks_unacted: Gauge::default(),
            results_backlog: Gauge::default(),
            jobs_backlog: Gauge::default(),
            parked_messages: Gauge::default(),
            parked_bytes: Gauge::default(),
            submissions: Family::default(),
            messages_parked: Family::default(),
            steps_overdue: Gauge::default(),
            deadline_failures: Counter::default(),
            hardware_events: Family::default(),
            event_executions: Family::default(),
            event_alerts: Family::default(),
            power_budget: Family::default(),
            power_in_use: Family::default(),
            power_waiting: Family::default(),
            power_shelves_off: Family::default(),
        }
    }

    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut MetricsRegistry) -> Self {
        let m = Self::unregistered();
        let r = registry.registry_mut();
        r.register(
            "tasks",
            "Tasks by status (refreshed from the database)",
            m.tasks.clone(),
        );
        r.register(
            "queue_depth",
            "Tasks waiting for a busy rack (refreshed from the database)",
            m.queue_depth.clone(),
        );
        r.register(
            "tasks_finished",
            "Tasks that reached a final status when a result was applied, by status",
            m.tasks_finished.clone(),
        );
        r.register_with_unit(
            "step_duration",
            "Step durations, from the step's start to its result applied, by component type and status",
            Unit::Seconds,
            m.step_duration.clone(),
        );
        r.register_with_unit(
            "stage_duration",
            "Stage durations, from the first step start to the last step end, by status",
            Unit::Seconds,
            m.stage_duration.clone(),
        );
        r.register(
            "results",
            "Step results by outcome (applied, ignored repeat or stale, error)",
            m.results.clone(),
        );
        r.register(
            "outbox_published",
            "Outbox messages published to JetStream",
            m.outbox_published.clone(),
        );
        r.register(
            "outbox_pending",
            "Outbox messages not yet published (refreshed from the database)",
            m.outbox_pending.clone(),
        );
        r.register(
            "tasks_stuck",
            "Open tasks with no progress for 15 minutes, by status (refreshed from the database)",
            m.tasks_stuck.clone(),
        );
        r.register(
            "tasks_over_budget",
            "Running tasks past their whole budget (refreshed from the database)",
            m.tasks_over_budget.clone(),
        );
        r.register(
            "runs_gate_paused",
            "Runs paused by a safety gate, waiting for an operator (refreshed from the database)",
            m.runs_gate_paused.clone(),
        );
        r.register(
            "leaks_unacted",
            "Leak events whose first action did not start within 30 s (refreshed from the database)",
            m.leaks_unacted.clone(),
        );
        r.register(
            "results_backlog",
            "Step results on FLOW_RESULTS not yet applied (refreshed from JetStream)",
            m.results_backlog.clone(),
        );
        r.register(
            "jobs_backlog",
            "Step jobs on FLOW_JOBS not yet finished: queued, running and waiting (refreshed from JetStream)",
            m.jobs_backlog.clone(),
        );
        r.register(
            "parked_messages",
            "Messages kept on FLOW_PARKED now (bounded; refreshed from JetStream)",
            m.parked_messages.clone(),
        );
        r.register(
            "parked_bytes",
            "Bytes kept on FLOW_PARKED now (bounded; refreshed from JetStream)",
            m.parked_bytes.clone(),
        );
        r.register(
            "submissions",
            "Task submissions per rack, by outcome",
            m.submissions.clone(),
        );
        r.register(
            "messages_parked",
            "Messages refused as malformed and parked, by stream",
            m.messages_parked.clone(),
        );
        r.register(
            "steps_overdue",
            "Running steps past their deadline (refreshed from the database)",
            m.steps_overdue.clone(),
        );
        r.register(
            "deadline_failures",
            "Steps failed by the deadline sweeper",
            m.deadline_failures.clone(),
        );
        r.register(
            "hardware_events",
            "Hardware events stored (each identity once), by event type (label status)",
            m.hardware_events.clone(),
        );
        r.register(
            "event_executions",
            "Attempts of event-rule actions, by outcome (completed, retry, failed)",
            m.event_executions.clone(),
        );
        r.register(
            "event_alerts",
            "Alerts raised by event rules, by severity (label status)",
            m.event_alerts.clone(),
        );
        r.register(
            "power_budget_kw",
            "Each power domain's budget in kW, by domain (refreshed from the database)",
            m.power_budget.clone(),
        );
        r.register(
            "power_in_use_kw",
            "Each power domain's draw counted against its budget in kW: steady draw of its racks plus unsettled inrush (refreshed from the database)",
            m.power_in_use.clone(),
        );
        r.register(
            "power_waiting",
            "Power commands held by each domain's limits (refreshed from the database)",
            m.power_waiting.clone(),
        );
        r.register(
            "power_shelves_off",
            "Power shelves Flow turned off, by domain (refreshed from the database)",
            m.power_shelves_off.clone(),
        );
        // Known label values start at zero, so that rate() sees the first
        // increment.
        for outcome in ["completed", "retry", "failed"] {
            let _ = m.event_executions.get_or_create(&OutcomeLabels { outcome });
        }
        for outcome in ["accepted", "queued", "duplicate", "rejected"] {
            let _ = m.submissions.get_or_create(&OutcomeLabels { outcome });
        }
        for outcome in ["applied", "ignored", "error"] {
            let _ = m.results.get_or_create(&OutcomeLabels { outcome });
        }
        for status in TaskStatus::ALL.iter().filter(|s| s.is_final()) {
            let _ = m.tasks_finished.get_or_create(&StatusLabels {
                status: status.as_str().to_owned(),
            });
        }
        m
    }

    /// Counts one outcome of a submission.
    pub fn submission(&self, outcome: &'static str) {
        self.submissions
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Counts a parked message.
    pub fn parked(&self, stream: &str) {
        self.messages_parked
            .get_or_create(&StreamLabels {
                stream: stream.to_owned(),
            })
            .inc();
    }

    /// Counts a result that could not be applied.
    pub fn result_error(&self) {
        self.results
            .get_or_create(&OutcomeLabels { outcome: "error" })
            .inc();
    }

    /// Counts an applied or ignored result and, when it was applied, the
    /// step's duration, its stage's when the result closed it, and the
    /// task's end.
    pub fn result(&self, applied: Applied, timing: Option<&StepTiming>) {
        let outcome = match applied {
            Applied::Ignored => "ignored",
            Applied::Recorded | Applied::Finished(_) => "applied",
        };
        self.results.get_or_create(&OutcomeLabels { outcome }).inc();
        if let Applied::Finished(status) = applied {
            self.tasks_finished
                .get_or_create(&StatusLabels {
                    status: status.as_str().to_owned(),
                })
                .inc();
        }
        let (Some(timing), false) = (timing, matches!(applied, Applied::Ignored)) else {
            return;
        };
        if let Some(seconds) = timing.seconds {
            self.step_duration
                .get_or_create(&StepLabels {
                    component_type: timing.component_type.as_str().to_owned(),
                    status: timing.status.as_str().to_owned(),
                })
                .observe(seconds);
        }
        if let Some((status, seconds)) = &timing.stage_finished {
            self.stage_duration
                .get_or_create(&StatusLabels {
                    status: status.as_str().to_owned(),
                })
                .observe(*seconds);
        }
    }

    /// Reads the gauges from the database once.
    pub async fn refresh(&self, store: &Store) -> Result<(), flow_store::StoreError> {
        let gauges = store.gauges().await?;
        // Every status is exported, zero when no task has it, so that a
        // status that empties drops to 0.
        for status in TaskStatus::ALL {
            let n = gauges.tasks.get(status).copied().unwrap_or(0);
            self.tasks
                .get_or_create(&StatusLabels {
                    status: status.as_str().to_owned(),
                })
                .set(n);
        }
        self.queue_depth
            .set(gauges.tasks.get(&TaskStatus::Waiting).copied().unwrap_or(0));
        for status in [
            TaskStatus::Pending,
            TaskStatus::Waiting,
            TaskStatus::Running,
        ] {
            self.tasks_stuck
                .get_or_create(&StatusLabels {
                    status: status.as_str().to_owned(),
                })
                .set(gauges.stuck.get(&status).copied().unwrap_or(0));
        }
        self.tasks_over_budget.set(gauges.over_budget);
        self.runs_gate_paused.set(gauges.runs_gate_paused);
        self.leaks_unacted.set(gauges.leaks_unacted);
        self.outbox_pending.set(gauges.outbox_pending);
        self.steps_overdue.set(gauges.steps_overdue);
        // Domains deleted since the last refresh disappear.
        self.power_budget.clear();
        self.power_in_use.clear();
        self.power_waiting.clear();
        self.power_shelves_off.clear();
        for d in store.list_power_domains().await?.domains {
            let labels = DomainLabels {
                domain: d.name.to_string(),
            };
            if let Some(budget) = d.budget_kw {
                self.power_budget.get_or_create(&labels).set(budget);
            }
            self.power_in_use.get_or_create(&labels).set(d.in_use_kw());
            self.power_waiting
                .get_or_create(&labels)
                .set(i64::from(d.waiting));
            self.power_shelves_off
                .get_or_create(&labels)
                .set(i64::from(d.shelves_off));
        }
        Ok(())
    }

    /// Reads FLOW_PARKED's size and the job and result backlogs once.
    pub async fn refresh_parked(
        &self,
        js: &async_nats::jetstream::Context,
    ) -> Result<(), async_nats::Error> {
        let mut parked = js.get_stream(flow_protocol::jobs::STREAM_PARKED).await?;
        let state = parked.info().await?.state.clone();
        self.parked_messages
            .set(i64::try_from(state.messages).unwrap_or(i64::MAX));
        self.parked_bytes
            .set(i64::try_from(state.bytes).unwrap_or(i64::MAX));
        for (stream, gauge) in [
            (flow_protocol::jobs::STREAM_RESULTS, &self.results_backlog),
            (flow_protocol::jobs::STREAM_JOBS, &self.jobs_backlog),
        ] {
            let messages = js.get_stream(stream).await?.info().await?.state.messages;
            gauge.set(i64::try_from(messages).unwrap_or(i64::MAX));
        }
        Ok(())
    }

    /// Refreshes the gauges every [`GAUGE_REFRESH`] until `stop`.
    pub async fn run_refresh(
        self,
        store: Store,
        js: async_nats::jetstream::Context,
        stop: CancellationToken,
    ) {
        let driver = Driver {
            name: "metrics",
            period: Period::Rest(GAUGE_REFRESH),
            poke: None,
        };
        driver
            .drive(&stop, |_| async {
                let refreshed = self.refresh(&store).await;
                if let Err(error) = self.refresh_parked(&js).await {
                    tracing::warn!(error = %error, "JetStream stream sizes not read");
                }
                refreshed.map(|()| Next::Wait)
            })
            .await;
    }
}
