//! What a worker's steps read of components' power, passed on to the
//! schedulers (`flow.power.observed`, core NATS), who count each component
//! against its power domains by what is known of it
//! (`shared/store/src/observed.rs`). Reads are batched per round of the
//! step and published when the power differs from what this job last
//! published for the component, or that is older than [`REFRESH`]: a poll
//! that reads the same state every second costs nothing more. A lost
//! message leaves the component as last known — or not known once that is
//! stale — never counted lower.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use flow_executor::Observer;
use flow_hardware::{ComponentTarget, PowerStatus};
use flow_protocol::state::{ComponentState, OBSERVED_SUBJECT, ObservationSource, Observed};
use flow_telemetry::ErrorChain;

use crate::observe::power_of;

/// How long a component's unchanged power goes unpublished: well inside
/// the schedulers' known-for window (60 s by default).
pub(crate) const REFRESH: Duration = Duration::from_secs(15);

/// One job's reads, waiting to be published.
pub(crate) struct Published {
    nats: async_nats::Client,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    pending: Vec<ComponentState>,
    /// What was last published per component: (power, reachable, epoch ms).
    last: HashMap<(String, String), (Option<PowerStatus>, u64)>,
}

impl Published {
    pub(crate) fn new(nats: async_nats::Client) -> Self {
        Published {
            nats,
            state: Mutex::new(State::default()),
        }
    }

    /// Publishes what was read since the last flush (best effort).
    pub(crate) async fn flush(&self) {
        let states = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut state.pending)
        };
        if states.is_empty() {
            return;
        }
        let batch = Observed {
            schema: flow_protocol::api::SCHEMA,
            states,
        };
        let body = match serde_json::to_vec(&batch) {
            Ok(body) => body,
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "observations not encodable");
                return;
            }
        };
        if let Err(error) = self.nats.publish(OBSERVED_SUBJECT, body.into()).await {
            tracing::debug!(error = %ErrorChain(&error), "observations not published");
        }
    }
}

impl Observer for Published {
    fn observed(
        &self,
        target: &ComponentTarget,
        power: Option<PowerStatus>,
        at_ms: u64,
        source: ObservationSource,
    ) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let key = (target.rack.clone(), target.name.clone());
        let refresh = u64::try_from(REFRESH.as_millis()).unwrap_or(u64::MAX);
        if state
            .last
            .get(&key)
            .is_some_and(|(p, t)| *p == power && at_ms.saturating_sub(*t) < refresh)
        {
            return;
        }
        state.last.insert(key, (power, at_ms));
        state.pending.push(ComponentState {
            schema: flow_protocol::api::SCHEMA,
            rack: target.rack.clone(),
            component: target.name.clone(),
            power: power.map_or(flow_protocol::state::PowerState::Unknown, power_of),
            reachable: power.is_some(),
            error: String::new(),
            observed_at: flow_protocol::task::timestamp::from_ms(at_ms),
            source,
            measured_w: None,
        });
    }
}
