//! Every component's last seen state (power, reachability), followed from
//! `FLOW_STATE` — the stream keeps the last state of each component, so an
//! ordered consumer delivering the last message per subject gives all of
//! them, then each change as it is published. The site page reads this
//! map; live streams of site pages are told when it changed.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use flow_protocol::state::{COMPONENT_STATES, ComponentState, STREAM_STATE};
use futures::StreamExt;
use tokio::sync::broadcast;

/// The longest pause before the stream is followed again after a failure.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Component states by (rack, component) name.
#[derive(Debug)]
pub struct States {
    map: RwLock<HashMap<(String, String), ComponentState>>,
    changed: broadcast::Sender<()>,
}

impl Default for States {
    fn default() -> Self {
        States {
            map: RwLock::new(HashMap::new()),
            changed: broadcast::channel(16).0,
        }
    }
}

impl States {
    /// The state of a component, if a watcher has seen it.
    pub fn get(&self, rack: &str, component: &str) -> Option<ComponentState> {
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(rack.to_owned(), component.to_owned()))
            .cloned()
    }

    /// Told after every applied change.
    pub fn subscribe(&self) -> broadcast::Receiver<()> {
        self.changed.subscribe()
    }

    /// Applies one state (an older one than held is ignored).
    pub fn apply(&self, state: ComponentState) {
        let key = (state.rack.clone(), state.component.clone());
        let mut map = self
            .map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map
            .get(&key)
            .is_some_and(|held| held.observed_at > state.observed_at)
        {
            return;
        }
        map.insert(key, state);
        drop(map);
        let _ = self.changed.send(());
    }

    /// Follows the stream for good: when it is missing (no scheduler has
    /// created it yet) or the connection fails, tries again with backoff.
    pub async fn follow(&self, nats: async_nats::Client) {
        let js = jetstream::new(nats);
        let mut pause = Duration::from_millis(500);
        loop {
            match self.follow_once(&js).await {
                Ok(()) => pause = Duration::from_millis(500),
                Err(e) => {
                    tracing::warn!(error = %e, stream = STREAM_STATE, "cannot follow component states; trying again");
                    pause = (pause * 2).min(RETRY_MAX);
                }
            }
            tokio::time::sleep(pause).await;
        }
    }

    async fn follow_once(&self, js: &jetstream::Context) -> Result<(), async_nats::Error> {
        let stream = js.get_stream(STREAM_STATE).await?;
        let consumer = stream
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: COMPONENT_STATES.to_owned(),
                deliver_policy: consumer::DeliverPolicy::LastPerSubject,
                ..Default::default()
            })
            .await?;
        let mut messages = consumer.messages().await?;
        while let Some(message) = messages.next().await {
            let message = message?;
            match serde_json::from_slice::<ComponentState>(&message.payload) {
                Ok(state) => self.apply(state),
                // The stream is written by watchers of this version; a body
                // it cannot read is skipped (and kept there for whoever can).
                Err(e) => {
                    tracing::warn!(subject = %message.subject, error = %e, "a component state this console cannot read; skipped")
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flow_protocol::state::PowerState;
    use time::OffsetDateTime;

    fn state(power: PowerState, at: i64) -> ComponentState {
        ComponentState {
            schema: 1,
            rack: "r".into(),
            component: "c".into(),
            power,
            reachable: true,
            error: String::new(),
            observed_at: OffsetDateTime::from_unix_timestamp(at).unwrap(),
            source: flow_protocol::state::ObservationSource::Watcher,
            measured_w: None,
        }
    }

    #[test]
    fn the_newest_state_wins_and_changes_are_told() {
        let s = States::default();
        let mut told = s.subscribe();
        s.apply(state(PowerState::Off, 10));
        s.apply(state(PowerState::On, 20));
        s.apply(state(PowerState::Off, 15));
        assert_eq!(s.get("r", "c").unwrap().power, PowerState::On);
        assert!(told.try_recv().is_ok());
        assert!(s.get("r", "x").is_none());
    }
}
