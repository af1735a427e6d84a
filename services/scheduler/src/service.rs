//! The scheduler's task side: one [`TaskService`] shared by the API, the
//! consumers and the sweeps of a scheduler process. Its operations are in
//! the modules beside this one: [`crate::submit`] (submissions),
//! [`crate::transition`] (the lifecycle's transactions), [`crate::results`]
//! (step results), [`crate::outbox`] (the publisher and the sweeps),
//! [`crate::schedules`] (schedules and their dispatcher), [`crate::runs`]
//! (phased rollouts and theirs).

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use flow_store::Store;
use tokio::sync::Notify;

use crate::metrics::SchedulerMetrics;

/// How long a worker may hold a job without a progress ack before
/// JetStream redelivers it (workers send progress while working).
pub const JOB_ACK_WAIT: Duration = Duration::from_secs(30);

/// The scheduler's task side. Cheap to clone.
#[derive(Clone)]
pub struct TaskService {
    pub(crate) store: Store,
    pub(crate) js: jetstream::Context,
    /// Wakes the outbox publisher: new rows were committed.
    pub(crate) poke: Arc<Notify>,
    /// Wakes the schedule dispatcher: a schedule was created, resumed or
    /// changed.
    pub(crate) schedule_poke: Arc<Notify>,
    /// Wakes the run dispatcher: a run was created or changed.
    pub(crate) run_poke: Arc<Notify>,
    /// Wakes the event-action dispatcher: an event arrived.
    pub(crate) event_poke: Arc<Notify>,
    pub(crate) metrics: SchedulerMetrics,
    /// How callers are known: in verified mode the access policy holds
    /// (`crate::access`).
    pub(crate) identity: crate::identity::IdentityMode,
    /// The verified user of the API request this service answers, whose
    /// scope its submissions are checked against.
    pub(crate) caller: Option<String>,
    /// The history policy and its archive, when history is bounded.
    pub(crate) history: Option<Arc<crate::history::History>>,
    /// The restore epoch messages are published in
    /// (`shared/protocol/src/restore.rs`; 0: never restored).
    pub(crate) epoch: Arc<std::sync::atomic::AtomicU32>,
}

impl TaskService {
    /// A service over `store` and `js`.
    pub fn new(store: Store, js: jetstream::Context) -> Self {
        Self::with_metrics(store, js, SchedulerMetrics::unregistered())
    }

    /// A service that counts in `metrics`.
    pub fn with_metrics(store: Store, js: jetstream::Context, metrics: SchedulerMetrics) -> Self {
        TaskService {
            store,
            js,
            poke: Arc::new(Notify::new()),
            schedule_poke: Arc::new(Notify::new()),
            run_poke: Arc::new(Notify::new()),
            event_poke: Arc::new(Notify::new()),
            metrics,
            identity: crate::identity::IdentityMode::Development,
            caller: None,
            history: None,
            epoch: Arc::new(std::sync::atomic::AtomicU32::new(0)),
        }
    }

    /// This service answering `archive.*` from `history`'s archive.
    pub fn with_history(mut self, history: Option<Arc<crate::history::History>>) -> Self {
        self.history = history;
        self
    }

    /// This service knowing callers as `identity` says.
    pub fn with_identity(mut self, identity: crate::identity::IdentityMode) -> Self {
        self.identity = identity;
        self
    }

    /// This service answering a request of `caller` (a verified user).
    pub fn with_caller(&self, caller: Option<String>) -> Self {
        TaskService {
            caller,
            ..self.clone()
        }
    }

    /// This service over `store` (a store carrying a request's audit scope,
    /// see [`crate::audit`]); everything else is shared.
    pub fn with_store(&self, store: Store) -> Self {
        TaskService {
            store,
            ..self.clone()
        }
    }

    /// Wakes the outbox publisher (new rows were committed, e.g. a cancel
    /// mark).
    pub fn poke(&self) {
        self.poke.notify_one();
    }
}
