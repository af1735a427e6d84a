//! `flow-telemetry`: what every Flow process does at its edges.
//!
//! * [`ErrorChain`] shows an error with every source below it
//!   (`a: b: c`): every error Flow logs goes through it
//!   (`error = %ErrorChain(&e)`), so the cause an operator needs is never
//!   cut off at the first layer ("database error").
//! * [`init`] installs the `tracing` subscriber (text or JSON, filtered).
//! * [`shutdown_signal`] listens for SIGINT and SIGTERM from start-up on.

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

/// Listens for SIGINT (Ctrl-C) and SIGTERM from this call on, and returns
/// a future that resolves on the first of them. Call it first thing in
/// `main` (inside the runtime): a signal that arrives during start-up is
/// then kept for the future instead of killing the process mid-way. A
/// signal that cannot be listened for is logged and waited for no more; the
/// other still works.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |kind: SignalKind, name: &'static str| {
            signal(kind)
                .inspect_err(|error| {
                    tracing::warn!(error = %ErrorChain(error), signal = name, "cannot listen for the signal");
                })
                .ok()
        };
        let interrupt = listen(SignalKind::interrupt(), "SIGINT");
        let terminate = listen(SignalKind::terminate(), "SIGTERM");
        async move {
            let wait = |signal: Option<tokio::signal::unix::Signal>| async move {
                match signal {
                    Some(mut signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = wait(interrupt) => {}
                () = wait(terminate) => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %ErrorChain(&error), "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
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

    #[cfg(unix)]
    #[tokio::test]
    async fn a_signal_before_the_first_poll_is_kept() {
        let shutdown = shutdown_signal();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
        // Still alive: the handler was installed by the call, not the poll.
        tokio::time::timeout(std::time::Duration::from_secs(10), shutdown)
            .await
            .expect("the SIGTERM sent before the first poll resolves the future");
    }
}
