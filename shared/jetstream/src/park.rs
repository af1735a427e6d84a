//! Keeping a message a consumer refuses (malformed, another schema) on
//! `FLOW_PARKED` with the reason, so that it is never retried forever, never
//! lost and never a crash.

use std::time::Duration;

use async_nats::jetstream;
use flow_protocol::jobs::ParkOrigin;

/// How long a refused message waits before another try when FLOW_PARKED
/// did not acknowledge its copy (a stream leader election, a full disk):
/// long enough not to spin, short enough to drain soon after.
pub const PARK_RETRY_DELAY: Duration = Duration::from_secs(5);

/// Keeps a refused message: republishes its payload (cut to fit
/// `max_payload` only if the headers leave no room) on
/// `flow.parked.<stream>` with headers naming its origin, the reason and the
/// time, and terminates the original only once FLOW_PARKED acknowledged the
/// copy (true); otherwise hands it back after [`PARK_RETRY_DELAY`] (false).
/// A redelivered message parked before is dropped by the copy's
/// `Nats-Msg-Id`.
pub async fn park(
    js: &jetstream::Context,
    stream: &str,
    message: &jetstream::Message,
    reason: &str,
) -> bool {
    let sequence = message.info().map(|i| i.stream_sequence).unwrap_or(0);
    let msg_id = message
        .headers
        .as_ref()
        .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
        .map(|v| v.as_str());
    let origin = ParkOrigin {
        stream,
        subject: message.subject.as_str(),
        sequence,
        msg_id,
    };
    let parked = flow_protocol::jobs::park(
        &origin,
        reason,
        std::time::SystemTime::now(),
        message.payload.len(),
        js.client().max_payload(),
    );
    let mut headers = async_nats::HeaderMap::new();
    for (name, value) in &parked.headers {
        headers.insert(*name, value.as_str());
    }
    let mut copy = jetstream::message::PublishMessage::build()
        .payload(message.payload.slice(..parked.keep))
        .headers(headers);
    if let Some(id) = &parked.msg_id {
        copy = copy.message_id(id.as_str());
    }
    let acked = match js.send_publish(parked.subject.clone(), copy).await {
        Ok(ack) => ack.await.map(drop).map_err(async_nats::Error::from),
        Err(error) => Err(error.into()),
    };
    match acked {
        Ok(()) => {
            tracing::error!(
                stream,
                subject = %message.subject,
                sequence,
                reason,
                parked_on = %parked.subject,
                "refused message parked"
            );
            let _ = message.ack_with(jetstream::AckKind::Term).await;
            true
        }
        Err(error) => {
            tracing::warn!(
                stream,
                subject = %message.subject,
                sequence,
                reason,
                error = %flow_telemetry::ErrorChain(&*error),
                "refused message not parked yet; handed back"
            );
            let _ = message
                .ack_with(jetstream::AckKind::Nak(Some(PARK_RETRY_DELAY)))
                .await;
            false
        }
    }
}
