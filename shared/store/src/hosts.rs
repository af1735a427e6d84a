//! A database URL that names several hosts, as libpq reads one:
//! `postgres://flow@db-1:5432,db-2:5432/flow?target_session_attrs=read-write`.
//! The store connects to the first host that answers and, with
//! `read-write`, is not a standby (`SHOW transaction_read_only` is `off`);
//! while it runs, a watch finds another such host when the current one
//! stops answering or turns read-only (a failover by Patroni or the like),
//! and new connections go there. sqlx itself takes one host per URL.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};

use crate::StoreError;

/// Which server a session may use (`target_session_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetSession {
    /// Any that answers (libpq's default).
    Any,
    /// Only one that accepts writes: a primary.
    ReadWrite,
}

/// One host of the list, with the URL's other settings.
#[derive(Debug, Clone)]
pub struct Host {
    /// `host:port`, for logs and errors.
    pub addr: String,
    /// How to connect to it.
    pub options: PgConnectOptions,
}

/// The hosts of a URL, in order, and what a session must be.
#[derive(Debug, Clone)]
pub struct HostList {
    /// In the URL's order: tried first to last.
    pub hosts: Vec<Host>,
    /// `target_session_attrs`.
    pub target: TargetSession,
}

/// How long one host may take to accept a connection and answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

fn bad(message: String) -> StoreError {
    StoreError::Invalid {
        message: format!("FLOW_DATABASE_URL: {message}"),
        details: Vec::new(),
    }
}

impl HostList {
    /// Reads a `postgres://` URL with one host or several
    /// (`host1:port1,host2:port2`), and `target_session_attrs` (`any` or
    /// `read-write`; others are refused) among its parameters.
    pub fn parse(url: &str) -> Result<HostList, StoreError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("not a postgres:// URL".to_owned()))?;
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (userinfo, hostlist) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (path, query) = match tail.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (tail, None),
        };
        let mut target = TargetSession::Any;
        let mut params = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some(("target_session_attrs", value)) => {
                    target = match value {
                        "any" => TargetSession::Any,
                        "read-write" => TargetSession::ReadWrite,
                        other => {
                            return Err(bad(format!(
                                "target_session_attrs={other} is not supported; use any or read-write"
                            )));
                        }
                    };
                }
                _ if pair.is_empty() => {}
                _ => params.push(pair),
            }
        }
        let mut hosts = Vec::new();
        for addr in hostlist.split(',') {
            if addr.is_empty() {
                return Err(bad(format!(
                    "an empty host in {hostlist:?}: list hosts as host1:port1,host2:port2"
                )));
            }
            let one = format!(
                "{scheme}://{}{addr}{path}{}{}",
                userinfo.map(|u| format!("{u}@")).unwrap_or_default(),
                if params.is_empty() { "" } else { "?" },
                params.join("&")
            );
            let options =
                PgConnectOptions::from_str(&one).map_err(|e| bad(format!("host {addr:?}: {e}")))?;
            let addr = format!("{}:{}", options.get_host(), options.get_port());
            hosts.push(Host { addr, options });
        }
        Ok(HostList { hosts, target })
    }

    /// The first host that answers and suits the target, in order; the
    /// error names every host and why it was passed over.
    pub async fn first_suitable(&self) -> Result<&Host, StoreError> {
        let mut passed = Vec::new();
        for host in &self.hosts {
            match probe(host, self.target).await {
                Ok(()) => return Ok(host),
                Err(why) => passed.push(format!("{}: {why}", host.addr)),
            }
        }
        Err(StoreError::Invalid {
            message: format!(
                "no database host {}: {}",
                match self.target {
                    TargetSession::Any => "answers",
                    TargetSession::ReadWrite => "answers and accepts writes",
                },
                passed.join("; ")
            ),
            details: passed,
        })
    }
}

/// Whether a session on `conn` suits `target` (a standby does not suit
/// read-write).
pub async fn suits(conn: &mut PgConnection, target: TargetSession) -> Result<(), String> {
    if target == TargetSession::Any {
        return Ok(());
    }
    let read_only: String = sqlx::query_scalar("SHOW transaction_read_only")
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| format!("cannot read transaction_read_only: {e}"))?;
    if read_only == "off" {
        Ok(())
    } else {
        Err("read-only (a standby, or default_transaction_read_only is on)".to_owned())
    }
}

/// Connects to `host` once (bounded by [`PROBE_TIMEOUT`]) and checks it
/// suits `target`.
async fn probe(host: &Host, target: TargetSession) -> Result<(), String> {
    let check = async {
        let mut conn = host
            .options
            .connect()
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let suits = suits(&mut conn, target).await;
        let _ = conn.close().await;
        suits
    };
    match tokio::time::timeout(PROBE_TIMEOUT, check).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_hosts_keep_the_rest_of_the_url() {
        let list = HostList::parse(
            "postgres://flow:pw@db-1:5433,db-2,10.0.0.3:6000/flow?sslmode=disable&target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(list.target, TargetSession::ReadWrite);
        let addrs: Vec<&str> = list.hosts.iter().map(|h| h.addr.as_str()).collect();
        assert_eq!(addrs, ["db-1:5433", "db-2:5432", "10.0.0.3:6000"]);
        for h in &list.hosts {
            assert_eq!(h.options.get_database(), Some("flow"));
            assert_eq!(h.options.get_username(), "flow");
        }
        let one = HostList::parse("postgres://postgres@127.0.0.1:5432/x").unwrap();
        assert_eq!(one.target, TargetSession::Any);
        assert_eq!(one.hosts.len(), 1);
    }

    #[test]
    fn bad_lists_are_refused_naming_what() {
        let e = HostList::parse("postgres://u@a,,b/db")
            .unwrap_err()
            .to_string();
        assert!(e.contains("an empty host"), "{e}");
        let e = HostList::parse("postgres://u@a/db?target_session_attrs=standby")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "FLOW_DATABASE_URL: target_session_attrs=standby is not supported; use any or read-write"
        );
        let e = HostList::parse("postgres://u@a:notaport/db")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("FLOW_DATABASE_URL: host \"a:notaport\""),
            "{e}"
        );
    }
}
