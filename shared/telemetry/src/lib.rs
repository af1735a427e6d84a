//! `flow-telemetry`: what every Flow process does at its edges.
//!
//! * [`ErrorChain`] shows an error with every source below it
//!   (`a: b: c`): every error Flow logs goes through it
//!   (`error = %ErrorChain(&e)`), so the cause an operator needs is never
//!   cut off at the first layer ("database error").
//! * [`init`] installs the `tracing` subscriber (text or JSON, filtered).
//! * [`shutdown_signal`] waits for SIGINT or SIGTERM.

use std::error::Error;
use std::fmt;

use flow_config::{LogFormat, LogSettings};
use tracing_subscriber::EnvFilter;

/// An error and its sources on one line, `outer: inner: root`. A source
/// whose text its parent already ends with (a wrapper that prints its
/// source) is not repeated.
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'a));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.0.to_string();
        f.write_str(&shown)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            let text = s.to_string();
            if !shown.ends_with(&text) {
                write!(f, ": {text}")?;
            }
            shown = text;
            source = s.source();
        }
        Ok(())
    }
}

impl fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The chain as a `String` (for messages that carry it, e.g. an API error).
pub fn chain(error: &dyn Error) -> String {
    ErrorChain(error).to_string()
}

/// Installs the global subscriber: logs to stderr as text or JSON, filtered
/// by the settings' filter (an unreadable filter falls back to `info`).
/// Later calls are ignored.
pub fn init(settings: &LogSettings) {
    let filter = EnvFilter::try_new(&settings.filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match settings.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM. A signal that cannot be
/// listened for is logged and waited for no more; the other still works.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %ErrorChain(&error), "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);

    impl fmt::Display for E {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for E {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|e| e as &(dyn Error + 'static))
        }
    }

    #[test]
    fn every_source_is_shown_once() {
        let root = E("connection refused", None);
        let mid = E("error communicating with database", Some(Box::new(root)));
        let top = E("database error", Some(Box::new(mid)));
        assert_eq!(
            chain(&top),
            "database error: error communicating with database: connection refused"
        );
        // A wrapper that already prints its source does not repeat it.
        let inner = E("timed out", None);
        let wrapper = E("request failed: timed out", Some(Box::new(inner)));
        assert_eq!(chain(&wrapper), "request failed: timed out");
    }
}
