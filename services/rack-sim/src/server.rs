//! Listeners: one TCP listener per BMC plus the admin listener, each with
//! its own accept loop so that a BMC can go away for real.
//!
//! A BMC's listener follows its reachability switch: when the switch turns
//! off the listening socket is closed and every open connection is dropped
//! (clients see "connection refused" and reset connections); when it turns
//! on the same address is bound again, so the BMC's URL never changes.
//! HTTPS uses rustls with the ring provider only.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::Request;
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

use crate::config::TlsPem;

/// Pending connections the kernel queues per listener.
const BACKLOG: u32 = 1024;
/// Pause after a failed accept (e.g. out of file descriptors), so the loop
/// does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);
/// Pause between attempts to bind a BMC's port again after it came back.
const REBIND_RETRY: Duration = Duration::from_millis(20);
/// A client has this long to finish the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The certificate or key cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate PEM does not parse.
    #[error("cannot read the TLS certificate PEM")]
    Certificate(#[source] rustls_pki_types::pem::Error),
    /// The certificate PEM holds no certificate.
    #[error("the TLS certificate PEM holds no certificate")]
    NoCertificate,
    /// The key PEM does not parse.
    #[error("cannot read the TLS private key PEM")]
    Key(#[source] rustls_pki_types::pem::Error),
    /// rustls refuses the pair.
    #[error("rustls refuses the certificate and key")]
    Rustls(#[source] rustls::Error),
}

/// A TLS acceptor for `pem`, built on the ring provider.
pub(crate) fn tls_acceptor(pem: &TlsPem) -> Result<TlsAcceptor, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(TlsError::Certificate)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(pem.key_pem.as_bytes()).map_err(TlsError::Key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(TlsError::Rustls)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Binds a listening socket with `SO_REUSEADDR`, so a BMC can bind its port
/// again while old connections linger in TIME_WAIT.
pub(crate) fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    reserve(addr)?.listen(BACKLOG)
}

/// Holds `addr` while a BMC is down: a socket bound (with `SO_REUSEADDR`)
/// but not listening, so a connection is refused as by a closed port, and
/// no other process is handed the port meanwhile (a port the OS chose,
/// released while the BMC is down, was seen taken by another test's
/// server, which then answered the BMC's requests with its own `404`; the
/// OS never picks a bound port for a bind to port 0). [`bind`] takes the
/// port back while it is held: Linux lets a listener bind beside a
/// reuse-address socket that does not listen.
fn reserve(addr: SocketAddr) -> io::Result<TcpSocket> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    Ok(socket)
}

/// One listener's accept loop.
pub(crate) struct Listener {
    /// Who it serves, for logs (`admin` or `rack-01/compute-01`).
    pub(crate) label: String,
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    /// What it serves.
    pub(crate) router: Router,
    /// HTTPS, if configured.
    pub(crate) tls: Option<TlsAcceptor>,
    /// Whether it should be open (always `true` for the admin listener).
    pub(crate) open: watch::Receiver<bool>,
    /// Whether it is open, for whoever waits for the switch to take effect.
    pub(crate) listening: watch::Sender<bool>,
    /// Turns `true` (or is dropped) when the simulator stops.
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Called each time the listener closes because its switch turned off
    /// (a BMC going down forgets its sessions).
    pub(crate) on_close: Option<Box<dyn Fn() + Send + Sync>>,
}

impl Listener {
    /// Serves until shutdown; `initial` is the socket bound at start (or
    /// `None` if the BMC starts down).
    pub(crate) async fn run(mut self, mut initial: Option<TcpListener>) {
        loop {
            // Wait for the switch to be on, holding the port. Cancel-safe:
            // both arms only observe watch channels.
            let mut held = None;
            while !*self.open.borrow_and_update() {
                initial = None;
                if held.is_none() {
                    held = reserve(self.addr).ok();
                }
                tokio::select! {
                    biased;
                    _ = self.shutdown.changed() => return,
                    changed = self.open.changed() => if changed.is_err() { return },
                }
            }
            let listener = match initial.take() {
                Some(listener) => listener,
                None => match self.rebind().await {
                    Some(listener) => listener,
                    None => return,
                },
            };
            drop(held);
            tracing::debug!(bmc = %self.label, addr = %self.addr, "listening");
            self.listening.send_replace(true);
            let keep_running = self.serve(listener).await;
            self.listening.send_replace(false);
            if !keep_running {
                return;
            }
            if let Some(on_close) = &self.on_close {
                on_close();
            }
            tracing::debug!(bmc = %self.label, addr = %self.addr, "listener closed");
        }
    }

    /// Binds the address again, retrying while the port is busy; `None` on
    /// shutdown.
    async fn rebind(&mut self) -> Option<TcpListener> {
        let mut attempts: u32 = 0;
        loop {
            match bind(self.addr) {
                Ok(listener) => return Some(listener),
                Err(error) => {
                    attempts += 1;
                    if attempts == 1 || attempts.is_multiple_of(250) {
                        tracing::warn!(bmc = %self.label, addr = %self.addr, attempts, error = %flow_telemetry::ErrorChain(&error), "cannot bind the BMC's port again; retrying");
                    }
                }
            }
            tokio::select! {
                biased;
                _ = self.shutdown.changed() => return None,
                () = tokio::time::sleep(REBIND_RETRY) => {}
            }
        }
    }

    /// Accepts until the switch turns off (returns `true`) or shutdown
    /// (returns `false`); then closes the socket and every connection.
    async fn serve(&mut self, listener: TcpListener) -> bool {
        let mut connections = JoinSet::new();
        let keep_running = loop {
            // Cancel-safe: accept and join_next lose nothing when another
            // arm wins; the watch arms only observe.
            tokio::select! {
                biased;
                _ = self.shutdown.changed() => break false,
                changed = self.open.changed() => {
                    if changed.is_err() {
                        break false;
                    }
                    if !*self.open.borrow_and_update() {
                        break true;
                    }
                }
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        connections.spawn(serve_connection(stream, Peer(peer), self.tls.clone(), self.router.clone()));
                    }
                    Err(error) => {
                        tracing::warn!(bmc = %self.label, error = %flow_telemetry::ErrorChain(&error), "accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        };
        drop(listener);
        connections.shutdown().await;
        keep_running
    }
}

/// The client's address, in every request's extensions (an SSE stream's
/// EventDestination names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Peer(pub(crate) SocketAddr);

/// Serves HTTP/1.1 (or h2c) on one connection, over TLS if configured.
async fn serve_connection(stream: TcpStream, peer: Peer, tls: Option<TlsAcceptor>, router: Router) {
    // Best effort: Nagle only delays small replies.
    let _ = stream.set_nodelay(true);
    let router = TowerToHyperService::new(router);
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(peer);
        router.call(request)
    });
    let builder = auto::Builder::new(TokioExecutor::new());
    let result = match tls {
        None => {
            builder
                .serve_connection(TokioIo::new(stream), service)
                .await
        }
        Some(acceptor) => {
            match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls_stream)) => {
                    builder
                        .serve_connection(TokioIo::new(tls_stream), service)
                        .await
                }
                Ok(Err(error)) => {
                    tracing::debug!(error = %flow_telemetry::ErrorChain(&error), "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!("TLS handshake timed out");
                    return;
                }
            }
        }
    };
    if let Err(error) = result {
        tracing::debug!(error = %flow_telemetry::ErrorChain(&*error), "connection ended with an error");
    }
}
