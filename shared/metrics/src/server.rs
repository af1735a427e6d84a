//! The `GET /metrics` listener (axum), stopped by [`MetricsServer::stop`]
//! or when the process ends.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::prometheus_text;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::{MetricsError, MetricsListen, MetricsRegistry};

/// Starts the listener a service was configured with: `setting` when one
/// was given (flag or environment), else `default`. A listener asked for
/// explicitly must bind, or the service stops; the default address may be
/// taken (a second worker on the host, parallel tests): then a warning says
/// so and the service runs without a listener. Logs the bound address with
/// the field `metrics_addr`.
pub async fn start(
    setting: Option<MetricsListen>,
    default: SocketAddr,
    registry: MetricsRegistry,
) -> Result<Option<MetricsServer>, MetricsError> {
    let server = match setting {
        Some(MetricsListen::Off) => {
            tracing::info!("metrics listener off");
            return Ok(None);
        }
        Some(MetricsListen::On(addr)) => serve(addr, registry).await?,
        None => match serve(default, registry).await {
            Ok(server) => server,
            Err(error) => {
                tracing::warn!(
                    error = %flow_telemetry::ErrorChain(&error),
                    "default metrics address taken: no metrics listener (set --metrics-listen)"
                );
                return Ok(None);
            }
        },
    };
    tracing::info!(metrics_addr = %server.local_addr(), "serving metrics on /metrics");
    Ok(Some(server))
}

/// A running metrics listener.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl MetricsServer {
    /// The address it is bound to (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening; a scrape in progress finishes first.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Binds `addr` and serves `GET /metrics` with the registry's metrics until
/// stopped. The registry is read-only from here on: metrics are updated
/// through the handles registered in it.
pub async fn serve(
    addr: SocketAddr,
    registry: MetricsRegistry,
) -> Result<MetricsServer, MetricsError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| MetricsError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| MetricsError::Bind { addr, source })?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(Arc::new(registry));
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
            let _ = stopped.await;
        });
        if let Err(error) = serve.await {
            tracing::error!(error = %flow_telemetry::ErrorChain(&error), "metrics listener stopped");
        }
    });
    Ok(MetricsServer {
        addr: bound,
        stop,
        task,
    })
}

async fn metrics(State(registry): State<Arc<MetricsRegistry>>) -> impl IntoResponse {
    (
        [(CONTENT_TYPE, prometheus_text::CONTENT_TYPE)],
        registry.encode(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::gauge::Gauge;

    #[tokio::test]
    async fn answers_get_metrics_and_nothing_else() {
        let mut registry = MetricsRegistry::new();
        let gauge: Gauge = Gauge::default();
        registry
            .registry_mut()
            .register("widgets", "Widgets in stock", gauge.clone());
        let server = serve("127.0.0.1:0".parse().unwrap(), registry)
            .await
            .unwrap();
        let addr = server.local_addr();
        assert_ne!(addr.port(), 0);
        gauge.set(7);
        let client = reqwest::Client::new();
        let reply = client
            .get(format!("http://{addr}/metrics"))
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), 200);
        assert_eq!(
            reply.headers()[CONTENT_TYPE.as_str()],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        let text = reply.text().await.unwrap();
        assert!(text.contains("\nflow_widgets 7\n"), "{text}");
        let missing = client
            .get(format!("http://{addr}/other"))
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status(), 404);
        let taken = serve(addr, MetricsRegistry::new()).await.unwrap_err();
        assert!(
            taken
                .to_string()
                .starts_with("cannot listen for metrics on"),
            "{taken}"
        );
        server.stop().await;
        assert!(
            client
                .get(format!("http://{addr}/metrics"))
                .send()
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn only_a_taken_default_address_is_forgiven() {
        let first = serve("127.0.0.1:0".parse().unwrap(), MetricsRegistry::new())
            .await
            .unwrap();
        let taken = first.local_addr();
        let second = start(None, taken, MetricsRegistry::new()).await.unwrap();
        assert!(second.is_none(), "the default was taken: no listener");
        let explicit = start(
            Some(MetricsListen::On(taken)),
            taken,
            MetricsRegistry::new(),
        )
        .await;
        assert!(explicit.is_err(), "an explicit address must bind");
        let off = start(Some(MetricsListen::Off), taken, MetricsRegistry::new()).await;
        assert!(off.unwrap().is_none());
        first.stop().await;
    }
}
