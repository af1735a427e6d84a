//! Connecting to NATS with the configured authentication and TLS.

use async_nats::ServerAddr;
use flow_config::{NatsSettings, ServerOrder};

/// How a process treats a NATS server that is not up yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialConnect {
    /// Keep trying in the background (services: NATS may start later).
    Retry,
    /// Fail at once (the CLI: tell the operator now).
    FailFast,
}

/// How often the client pings its server. Two unanswered pings end the
/// connection, so a server that stops answering with its sockets open (a
/// partition, a paused process) is left for another node within about
/// three intervals instead of the client's default of minutes.
pub const PING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Connects to NATS. `name` identifies the connection on the server
/// (`nats server report connections`).
pub async fn connect_nats(
    settings: &NatsSettings,
    name: &str,
    initial: InitialConnect,
) -> Result<async_nats::Client, async_nats::ConnectError> {
    let servers = server_addrs(&settings.url)?;
    let mut options = async_nats::ConnectOptions::new()
        .name(name)
        .connection_timeout(std::time::Duration::from_secs(5))
        .ping_interval(PING_INTERVAL);
    if settings.server_order == ServerOrder::Listed {
        options = options.retain_servers_order();
    }
    if initial == InitialConnect::Retry {
        options = options.retry_on_initial_connect();
    }
    if let (Some(user), Some(password)) = (&settings.user, &settings.password) {
        options = options.user_and_password(user.clone(), password.expose().to_owned());
    }
    if let Some(token) = &settings.token {
        options = options.token(token.expose().to_owned());
    }
    if let Some(file) = &settings.nkey_file {
        let seed = std::fs::read_to_string(file).map_err(|e| {
            async_nats::ConnectError::with_source(async_nats::ConnectErrorKind::Io, e)
        })?;
        options = options.nkey(seed.trim().to_owned());
    }
    if let Some(file) = &settings.creds_file {
        options = options.credentials_file(file).await.map_err(|e| {
            async_nats::ConnectError::with_source(async_nats::ConnectErrorKind::Io, e)
        })?;
    }
    if let Some(ca) = &settings.tls_ca_file {
        options = options.add_root_certificates(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&settings.tls_cert_file, &settings.tls_key_file) {
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    if settings.tls_required {
        options = options.require_tls(true);
    }
    if let Some(prefix) = &settings.inbox_prefix {
        options = options.custom_inbox_prefix(prefix);
    }
    let connection = name.to_owned();
    options = options.event_callback(move |event| log_event(connection.clone(), event));
    options.connect(servers.as_slice()).await
}

/// The comma-separated URLs of `url`, each a server the client may connect
/// (and reconnect) to.
pub fn server_addrs(url: &str) -> Result<Vec<ServerAddr>, async_nats::ConnectError> {
    url.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| {
            u.parse::<ServerAddr>().map_err(|e| {
                async_nats::ConnectError::with_source(async_nats::ConnectErrorKind::ServerParse, e)
            })
        })
        .collect()
}

/// Logs what the connection reports on its own: above all the server's
/// errors, such as a permissions violation, which otherwise only show up as
/// requests that time out.
async fn log_event(connection: String, event: async_nats::Event) {
    use async_nats::Event;
    match event {
        Event::ServerError(error) => {
            tracing::warn!(connection, error = %flow_telemetry::ErrorChain(&error), "NATS server reported an error");
        }
        Event::ClientError(error) => {
            tracing::warn!(connection, error = %error, "NATS client error");
        }
        Event::SlowConsumer(sid) => {
            tracing::warn!(
                connection,
                subscription = sid,
                "NATS slow consumer: messages dropped"
            );
        }
        Event::Disconnected => tracing::warn!(connection, "disconnected from NATS; reconnecting"),
        Event::Connected => tracing::info!(connection, "connected to NATS"),
        Event::LameDuckMode => tracing::warn!(connection, "NATS server entering lame duck mode"),
        Event::Draining | Event::Closed => {
            tracing::debug!(connection, event = %event, "NATS connection")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_url_of_a_list_is_a_server() {
        let servers = server_addrs("nats://127.0.0.1:4222, nats://127.0.0.1:4223,tls://h:4224")
            .expect("three servers");
        let ports: Vec<u16> = servers.iter().map(ServerAddr::port).collect();
        assert_eq!(ports, [4222, 4223, 4224]);
        assert!(servers[2].tls_required());
        assert!(server_addrs("nats://a:1,nats://[::1:2").is_err());
    }
}
