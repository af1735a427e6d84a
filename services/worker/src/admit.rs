//! The worker's power gate: before a power-on, a reset or a power shelf's
//! power-off of a rack in a power domain, the executor asks `power.admit`
//! on `flow.api` (answered by any scheduler from Postgres,
//! `shared/store/src/power.rs`). A wait becomes the component's next
//! time in the checkpoint — a durable wait like any other — and its reason
//! travels with the step's progress.

use std::time::Duration;

use flow_executor::StepJob;
use flow_executor::gate::{GateRequest, PowerGate};
use flow_protocol::TaskId;
use flow_protocol::api::{Endpoint, decode_reply, endpoint};
use flow_protocol::power::{Admission, PowerAdmit};
use flow_protocol::subjects::api_subject;
use futures::future::BoxFuture;

/// How long one admission request may take.
const ADMIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks `power.admit` for one task's commands.
pub(crate) struct NatsGate {
    pub nats: async_nats::Client,
    pub task: TaskId,
}

impl PowerGate for NatsGate {
    fn admit<'a>(
        &'a self,
        job: &'a StepJob,
        request: GateRequest<'a>,
    ) -> BoxFuture<'a, Result<Admission, String>> {
        Box::pin(async move {
            let body = PowerAdmit {
                task: self.task,
                rack: request.rack.to_owned(),
                component: request.component.to_owned(),
                component_type: request.component_type,
                operation: request.operation,
                domains: job.power_domains.clone(),
                emergency: job.emergency,
            };
            let payload = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
            let subject = api_subject(endpoint::PowerAdmit::NAME);
            let reply =
                tokio::time::timeout(ADMIT_TIMEOUT, self.nats.request(subject, payload.into()))
                    .await
                    .map_err(|_| format!("no answer within {} s", ADMIT_TIMEOUT.as_secs()))?
                    .map_err(|e| e.to_string())?;
            decode_reply::<Admission>(&reply.payload).map_err(|e| e.to_string())
        })
    }
}
