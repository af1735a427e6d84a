//! `flow-console`: the web console of Flow — racks and their trays, tasks
//! live, rollouts and schedules — served as HTML with a little JavaScript.
//!
//! It holds no state and no database of its own: every page is read from
//! `flow.api` when asked ([`app`]), and the browser is told when to read
//! again by a server-sent event stream fed from NATS ([`live`]); each
//! component's power and reachability come from the watchers' `FLOW_STATE`
//! stream ([`states`]). Every
//! request needs credentials, and actions the operator role, a confirmation
//! and a CSRF token ([`access`]). Rendering is pure ([`pages`]).

pub mod access;
pub mod actions;
pub mod app;
pub mod live;
pub mod pages;
pub mod states;

use std::net::SocketAddr;
use std::sync::Arc;

pub use access::{Access, AccessError, Role, User};
pub use app::AppState;

/// Serves the console on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = app::router(state);
    axum::serve(listener, router.into_make_service())
        .with_graceful_shutdown(shutdown)
        .await
}

/// The state of a console on this NATS connection; starts following the
/// component states (a task that lives as long as the process).
pub fn state(nats: async_nats::Client, url: &str, access: Access) -> AppState {
    let states = Arc::new(states::States::default());
    tokio::spawn({
        let states = Arc::clone(&states);
        let nats = nats.clone();
        async move { states.follow(nats).await }
    });
    AppState {
        client: Arc::new(flow_client::Client::new(nats.clone(), url)),
        nats,
        access: Arc::new(access),
        states,
    }
}

/// The address the console prints for operators (`http://127.0.0.1:8480/`).
pub fn url_of(addr: SocketAddr) -> String {
    format!("http://{addr}/")
}
