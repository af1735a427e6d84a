//! What becomes of a delivered job, and the one mapping from that to a
//! JetStream acknowledgement.

use std::time::Duration;

use async_nats::jetstream::{AckKind, Message};

use crate::metrics::WorkerMetrics;

/// How long a job waits before it comes back when something could not be
/// read or written now (its checkpoint, its result).
pub const RETRY_DELAY: Duration = Duration::from_secs(1);

/// How long a job that arrived without a free slot waits before it comes
/// back: straight back, the fetch it came on would take it again.
pub const NO_SLOT_DELAY: Duration = Duration::from_millis(250);

/// What becomes of a delivered job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Its result is published: done with it.
    Finished,
    /// A durable wait (a Sleep, a poll interval, a backoff): its checkpoint
    /// is saved; any worker takes it up again after this delay.
    WaitFor(Duration),
    /// This worker stops: another worker, at once.
    HandBack,
    /// It arrived when every slot was taken: again after
    /// [`NO_SLOT_DELAY`].
    NoSlot,
    /// Its checkpoint could not be read, or its result not published while
    /// its checkpoint is saved: again after [`RETRY_DELAY`].
    Retry,
    /// Still being worked on here (a call, or an unsaved checkpoint kept
    /// in-process): keep it from being redelivered.
    StillWorking,
}

/// The acknowledgement for a disposition.
pub fn ack_for(disposition: Disposition) -> AckKind {
    match disposition {
        Disposition::Finished => AckKind::Ack,
        Disposition::WaitFor(delay) => AckKind::Nak(Some(delay)),
        Disposition::HandBack => AckKind::Nak(None),
        Disposition::NoSlot => AckKind::Nak(Some(NO_SLOT_DELAY)),
        Disposition::Retry => AckKind::Nak(Some(RETRY_DELAY)),
        Disposition::StillWorking => AckKind::Progress,
    }
}

/// The `reason` label of a disposition that hands the job back.
fn nak_reason(disposition: Disposition) -> Option<&'static str> {
    match disposition {
        Disposition::WaitFor(_) => Some("wait"),
        Disposition::HandBack | Disposition::NoSlot => Some("handback"),
        Disposition::Retry => Some("retry"),
        Disposition::Finished | Disposition::StillWorking => None,
    }
}

/// Acknowledges `message` as `disposition` says, counting the naks. A lost
/// acknowledgement is harmless: the job comes back after the ack wait and
/// resumes from its checkpoint.
pub async fn dispose(message: &Message, disposition: Disposition, metrics: &WorkerMetrics) {
    if let Some(reason) = nak_reason(disposition) {
        metrics.nak(reason);
    }
    let _ = message.ack_with(ack_for(disposition)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_disposition_maps_to_its_ack() {
        let d = Duration::from_secs(3);
        assert!(matches!(ack_for(Disposition::Finished), AckKind::Ack));
        assert!(matches!(ack_for(Disposition::WaitFor(d)), AckKind::Nak(Some(x)) if x == d));
        assert!(matches!(ack_for(Disposition::HandBack), AckKind::Nak(None)));
        assert!(
            matches!(ack_for(Disposition::NoSlot), AckKind::Nak(Some(x)) if x == NO_SLOT_DELAY)
        );
        assert_eq!(nak_reason(Disposition::NoSlot), Some("handback"));
        assert!(matches!(ack_for(Disposition::Retry), AckKind::Nak(Some(x)) if x == RETRY_DELAY));
        assert!(matches!(
            ack_for(Disposition::StillWorking),
            AckKind::Progress
        ));
        assert_eq!(nak_reason(Disposition::Finished), None);
        assert_eq!(nak_reason(Disposition::WaitFor(d)), Some("wait"));
    }
}
