//! Log set-up: `tracing` to stderr, as text or JSON.

use flow_config::{LogFormat, LogSettings};
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber (once; later calls are ignored).
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
