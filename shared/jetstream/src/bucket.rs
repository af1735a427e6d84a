//! Opening a KV bucket at a service's start-up without dying of a NATS
//! restart or a leader election that happens at the same moment.

use std::time::Duration;

use async_nats::jetstream::{self, context::KeyValueError, kv};
use flow_telemetry::ErrorChain;
use tokio_util::sync::CancellationToken;

use crate::topology::timed_out;

/// Opens the bucket `name`, asking again every `retry` while JetStream does
/// not answer in time; a refusal (no such bucket, no permission) is an
/// error at once. `None` when `stop` came first.
///
/// # Errors
///
/// JetStream's answer when it refused.
pub async fn open_bucket(
    js: &jetstream::Context,
    name: &str,
    retry: Duration,
    stop: &CancellationToken,
) -> Result<Option<kv::Store>, KeyValueError> {
    loop {
        match js.get_key_value(name).await {
            Ok(bucket) => return Ok(Some(bucket)),
            Err(error) if timed_out(&error) => {
                tracing::warn!(
                    bucket = name,
                    error = %ErrorChain(&error),
                    "the bucket did not answer in time; asking again"
                );
            }
            Err(error) => return Err(error),
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(None),
            () = tokio::time::sleep(retry) => {}
        }
    }
}
