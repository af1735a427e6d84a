//! Pulling from a durable consumer for as long as a service runs: decoded
//! messages go to a handler (several at once when asked), undecodable ones
//! are parked, and a consumer that cannot be found or whose message stream
//! ends (NATS restarting) is pulled again after a pause.

use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use flow_protocol::decode::DecodeError;
use flow_telemetry::ErrorChain;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::park;

/// Where [`consume`] pulls from and how many messages it handles at once.
#[derive(Debug, Clone, Copy)]
pub struct Source {
    /// The stream.
    pub stream: &'static str,
    /// The durable consumer on it.
    pub consumer: &'static str,
    /// Messages handled at once (each handler acks its own).
    pub concurrency: usize,
}

/// First pause before [`consume`] pulls again after its consumer failed
/// (doubling up to [`CONSUME_RETRY_MAX`]).
pub const CONSUME_RETRY_MIN: Duration = Duration::from_millis(250);
/// Longest pause between attempts to pull again.
pub const CONSUME_RETRY_MAX: Duration = Duration::from_secs(5);

/// Pulls messages of type `T` from `source` until `stop`, reading each with
/// `decode`; `handle` acknowledges. A message that does not decode (or
/// speaks another schema) is parked on FLOW_PARKED with the reason (and
/// `parked` is told its stream): never retried forever, never lost, never a
/// crash. A consumer that cannot be looked up, or whose message stream
/// ends, is looked up and pulled again after a pause: a scheduler whose
/// result consumer stopped would leave every running task stuck. On `stop`
/// it pulls no more and waits for the handlers it started.
pub async fn consume<T, D, F, Fut>(
    js: &jetstream::Context,
    source: Source,
    stop: CancellationToken,
    decode: D,
    parked: &(dyn Fn(&'static str) + Sync),
    mut handle: F,
) where
    D: Fn(&[u8]) -> Result<T, DecodeError>,
    F: FnMut(T, jetstream::Message) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut pause = CONSUME_RETRY_MIN;
    loop {
        match consume_once(js, source, &stop, &decode, parked, &mut handle).await {
            Ok(Pulled::Stopped) => return,
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
                error = %ErrorChain(&*error),
                "cannot pull; trying again"
            ),
        }
        tokio::select! {
            () = stop.cancelled() => return,
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
/// handled at once. Waits for the handlers it started.
async fn consume_once<T, D, F, Fut>(
    js: &jetstream::Context,
    source: Source,
    stop: &CancellationToken,
    decode: &D,
    parked: &(dyn Fn(&'static str) + Sync),
    handle: &mut F,
) -> Result<Pulled, async_nats::Error>
where
    D: Fn(&[u8]) -> Result<T, DecodeError>,
    F: FnMut(T, jetstream::Message) -> Fut,
    Fut: Future<Output = ()>,
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
            // Cancel-safe: the token only waits.
            () = stop.cancelled() => break Pulled::Stopped,
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
                tracing::warn!(stream, error = %ErrorChain(&error), "stream error");
                continue;
            }
        };
        handled = true;
        match decode(&message.payload) {
            Ok(value) => in_flight.push(handle(value, message)),
            Err(error) => {
                if park(js, stream, &message, &error.to_string()).await {
                    parked(stream);
                }
            }
        }
    };
    // Finish what was started: each handler acks or hands back its message.
    while in_flight.next().await.is_some() {}
    Ok(outcome)
}
