//! The worker's power gate: before a power-on, a reset or a power shelf's
//! power-off of a rack in a power domain, the executor asks `power.admit`
//! on `flow.api` (answered by any scheduler from Postgres,
//! `shared/store/src/power.rs`), with what it read of the component just
//! before; once the device accepted admitted commands it tells `power.sent`,
//! so their inrush is counted for its settle time from then rather than
//! for the whole send window. A wait becomes the component's next time in
//! the checkpoint — a durable wait like any other — and its reason travels
//! with the step's progress.

use std::time::Duration;

use flow_executor::StepJob;
use flow_executor::gate::{GateRequest, PowerGate};
use flow_protocol::TaskId;
use flow_protocol::api::{Endpoint, decode_reply, endpoint};
use flow_protocol::power::{
    Admission, PowerAdmit, PowerSent, PowerSentReply, SeenPower, SentCommand,
};
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
                observed: request.observed.map(|(power, at_ms)| SeenPower {
                    power: crate::observe::power_of(power),
                    at_ms,
                }),
                replaces_ms: request.replaces_ms,
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

    fn sent<'a>(
        &'a self,
        _job: &'a StepJob,
        rack: &'a str,
        sent: Vec<SentCommand>,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let body = PowerSent {
                task: self.task,
                rack: rack.to_owned(),
                sent,
            };
            let payload = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
            let subject = api_subject(endpoint::PowerSent::NAME);
            let reply =
                tokio::time::timeout(ADMIT_TIMEOUT, self.nats.request(subject, payload.into()))
                    .await
                    .map_err(|_| format!("no answer within {} s", ADMIT_TIMEOUT.as_secs()))?
                    .map_err(|e| e.to_string())?;
            decode_reply::<PowerSentReply>(&reply.payload)
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    }
}
