//! `text/event-stream` framing (the Redfish EventService's SSE stream):
//! chunks in, the `data` of each complete frame out; comment lines (a
//! keep-alive) and frames without data are skipped; and where a service
//! root's EventService says the stream is.

use serde_json::Value;

/// The EventService a service root links, if any.
pub fn event_service_of(root: &Value) -> Option<&str> {
    root.pointer("/EventService/@odata.id")
        .and_then(Value::as_str)
}

/// An EventService's SSE URI, `None` without one or when the service is
/// disabled (`ServiceEnabled` false; absent counts as enabled).
pub fn stream_uri_of(service: &Value) -> Option<String> {
    let enabled = service
        .get("ServiceEnabled")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    service
        .get("ServerSentEventUri")
        .and_then(Value::as_str)
        .filter(|_| enabled)
        .map(str::to_owned)
}

/// Splits a `text/event-stream` into the `data` of each frame.
#[derive(Debug, Default)]
pub struct SseFrames {
    buffer: String,
}

impl SseFrames {
    /// Takes the next chunk; the data of every frame it completed, the
    /// lines of a multi-line `data` joined by `\n`.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        self.buffer
            .push_str(&String::from_utf8_lossy(chunk).replace("\r\n", "\n"));
        let mut out = Vec::new();
        while let Some(end) = self.buffer.find("\n\n") {
            let frame: String = self.buffer.drain(..end + 2).collect();
            let data: Vec<&str> = frame
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if !data.is_empty() {
                out.push(data.join("\n"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disabled_or_absent_stream_is_none() {
        let service = serde_json::json!({"ServerSentEventUri": "/sse"});
        assert_eq!(stream_uri_of(&service).as_deref(), Some("/sse"));
        let off = serde_json::json!({"ServerSentEventUri": "/sse", "ServiceEnabled": false});
        assert_eq!(stream_uri_of(&off), None);
        assert_eq!(stream_uri_of(&serde_json::json!({})), None);
    }

    #[test]
    fn frames_split_across_chunks_and_comments_are_skipped() {
        let mut frames = SseFrames::default();
        assert!(
            frames
                .push(b": keep-alive\n\nid: 1\ndata: {\"a\":")
                .is_empty()
        );
        assert_eq!(
            frames.push(b"1}\n\nid: 2\r\ndata: x\r\ndata: y\r\n\r\n"),
            ["{\"a\":1}", "x\ny"]
        );
    }
}
