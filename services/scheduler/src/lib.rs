//! `flow-scheduler`: owns tasks. It serves the `flow.api` request/reply
//! service (a NATS micro service named `flow`), creates tasks, publishes
//! their step jobs through an outbox, applies step results and enforces step
//! deadlines. All state is in Postgres, so any number of schedulers can run
//! at once. Its Prometheus metrics are in [`metrics`].

pub mod api;
pub mod exec;
pub mod metrics;
pub mod telemetry;

use std::sync::Arc;

use flow_store::Store;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// A running scheduler: the API service and the execution loops.
pub struct Scheduler {
    api: api::ApiService,
    stop: Arc<Notify>,
    loops: Vec<JoinHandle<()>>,
}

impl Scheduler {
    /// Creates the JetStream streams, consumers and bucket, then starts the
    /// outbox publisher, the deadline sweeper, the result and submission
    /// consumers and the API.
    pub async fn start(
        client: async_nats::Client,
        store: Store,
    ) -> Result<Scheduler, async_nats::Error> {
        Self::start_with(client, store, exec::JOB_ACK_WAIT).await
    }

    /// [`Scheduler::start`] with a job ack wait of choice (fault drills use a
    /// short one so that a killed worker's job comes back quickly).
    pub async fn start_with(
        client: async_nats::Client,
        store: Store,
        job_ack_wait: std::time::Duration,
    ) -> Result<Scheduler, async_nats::Error> {
        Self::start_inner(client, store, job_ack_wait, None).await
    }

    /// [`Scheduler::start_with`], counting in `metrics` (registered by the
    /// caller, who serves them) and refreshing their database gauges every
    /// [`metrics::GAUGE_REFRESH`].
    pub async fn start_with_metrics(
        client: async_nats::Client,
        store: Store,
        job_ack_wait: std::time::Duration,
        metrics: metrics::SchedulerMetrics,
    ) -> Result<Scheduler, async_nats::Error> {
        Self::start_inner(client, store, job_ack_wait, Some(metrics)).await
    }

    async fn start_inner(
        client: async_nats::Client,
        store: Store,
        job_ack_wait: std::time::Duration,
        metrics: Option<metrics::SchedulerMetrics>,
    ) -> Result<Scheduler, async_nats::Error> {
        let js = async_nats::jetstream::new(client.clone());
        exec::ensure_jetstream(&js, job_ack_wait).await?;
        let stop = Arc::new(Notify::new());
        let mut loops = Vec::new();
        let executor = match metrics {
            Some(metrics) => {
                loops.push(tokio::spawn(
                    metrics
                        .clone()
                        .run_refresh(store.clone(), Arc::clone(&stop)),
                ));
                exec::Executor::with_metrics(store.clone(), js, metrics)
            }
            None => exec::Executor::new(store.clone(), js),
        };
        let sweeps = tokio::spawn(executor.clone().run_sweeps(Arc::clone(&stop)));
        let results = {
            let (executor, stop) = (executor.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                if let Err(error) = executor.run_results(stop).await {
                    tracing::error!(error = %error, "result consumer stopped");
                }
            })
        };
        let submissions = {
            let (executor, stop) = (executor.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                if let Err(error) = executor.run_submissions(stop).await {
                    tracing::error!(error = %error, "submission consumer stopped");
                }
            })
        };
        let api = api::ApiService::start(client, store, executor).await?;
        loops.extend([sweeps, results, submissions]);
        Ok(Scheduler { api, stop, loops })
    }

    /// Stops the API and the loops.
    pub async fn stop(self) -> Result<(), async_nats::Error> {
        self.api.stop().await?;
        self.stop.notify_waiters();
        for l in self.loops {
            l.abort();
            let _ = l.await;
        }
        Ok(())
    }
}
