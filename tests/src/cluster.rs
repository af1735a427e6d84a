//! [`NatsCluster`]: three (or more) private `nats-server`s joined by routes
//! into one JetStream cluster on loopback ports, each with its own store
//! (`sync_interval: always`), so a test can kill, restart, pause and resume
//! single nodes. Routes ping every 2 s and give a peer up after 3 unanswered
//! pings, so a paused node's interest is dropped within ~8 s, not after the
//! server's default of minutes.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::{
    NATS_SERVER_ENV, NatsServer, StartError, free_ports, http_get, nats_server_binary, unique_name,
    wait_until,
};

/// How long [`NatsCluster::start`] waits for every node to report healthy
/// (a fresh cluster elects its meta leader first).
pub const CLUSTER_START_TIMEOUT: Duration = Duration::from_secs(30);

/// A JetStream cluster of private servers. Dropping it stops every node and
/// deletes their directories.
#[derive(Debug)]
pub struct NatsCluster {
    nodes: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts `size` nodes (3 for R3) and waits until each answers
    /// `/healthz` (JetStream current with the cluster).
    ///
    /// # Panics
    ///
    /// If [`NATS_SERVER_ENV`] is unset or the cluster does not form; the
    /// message includes every node's log.
    #[must_use]
    pub fn start(size: usize) -> NatsCluster {
        let binary = nats_server_binary();
        let mut errors = Vec::new();
        for attempt in 1..=3 {
            match Self::try_start(&binary, size) {
                Ok(cluster) => return cluster,
                Err(StartError { message, retry }) => {
                    errors.push(format!("attempt {attempt}: {message}"));
                    if !retry {
                        break;
                    }
                }
            }
        }
        panic!(
            "could not start a {size}-node NATS cluster from {} ({NATS_SERVER_ENV}):\n{}",
            binary.display(),
            errors.join("\n")
        );
    }

    fn try_start(binary: &Path, size: usize) -> Result<NatsCluster, StartError> {
        let ports = free_ports(3 * size)
            .map_err(|e| StartError::fatal(format!("finding free ports: {e}")))?;
        let cluster_name = unique_name("flow-cluster");
        let routes: Vec<String> = (0..size)
            .map(|i| format!("nats-route://127.0.0.1:{}", ports[3 * i + 2]))
            .collect();
        let mut nodes = Vec::new();
        for i in 0..size {
            let name = format!("{cluster_name}-n{}", i + 1);
            let dir = std::env::temp_dir().join(&name);
            fs::create_dir(&dir)
                .map_err(|e| StartError::fatal(format!("creating {}: {e}", dir.display())))?;
            let config = format!(
                "jetstream {{\n  store_dir: \"{store}\"\n  sync_interval: always\n}}\n\
                 cluster {{\n  name: \"{cluster_name}\"\n  listen: 127.0.0.1:{route}\n  \
                 ping_interval: \"2s\"\n  ping_max: 3\n  \
                 routes: [\n    {routes}\n  ]\n}}\n",
                store = dir.join("store").display(),
                route = ports[3 * i + 2],
                routes = routes.join("\n    "),
            );
            fs::write(dir.join("nats.conf"), config)
                .map_err(|e| StartError::fatal(format!("writing the config: {e}")))?;
            let (port, monitor_port) = (ports[3 * i], ports[3 * i + 1]);
            let child = match NatsServer::spawn(
                binary,
                &name,
                &dir,
                port,
                monitor_port,
                false,
                std::iter::empty::<(&str, &str)>(),
            ) {
                Ok(child) => child,
                Err(e) => {
                    let _ = fs::remove_dir_all(&dir);
                    return Err(e);
                }
            };
            nodes.push(NatsServer {
                child,
                name,
                port,
                monitor_port,
                dir,
                js_args: false,
                env: Vec::new(),
            });
        }
        let mut cluster = NatsCluster { nodes };
        let mut exited = None;
        let healthy = wait_until(CLUSTER_START_TIMEOUT, Duration::from_millis(50), || {
            for node in &mut cluster.nodes {
                if let Ok(Some(status)) = node.child.try_wait() {
                    exited = Some(format!("{} exited at startup ({status})", node.name));
                    return true;
                }
            }
            cluster.nodes.iter().all(NatsServer::healthy)
        });
        let (reason, retry) = match (exited, healthy) {
            (Some(reason), _) => (reason, true),
            (None, Err(timed_out)) => {
                (format!("not every node became healthy: {timed_out}"), false)
            }
            (None, Ok(_)) => match cluster
                .nodes
                .iter()
                .try_for_each(NatsServer::check_identity)
            {
                Ok(()) => return Ok(cluster),
                Err(reason) => (reason, true),
            },
        };
        Err(StartError {
            message: format!("{reason}; logs:\n{}", cluster.logs()),
            retry,
        })
    }

    /// The client URLs of every node, comma-separated, starting at node
    /// `first` (give each process another first node).
    #[must_use]
    pub fn urls_from(&self, first: usize) -> String {
        let n = self.nodes.len();
        (0..n)
            .map(|i| self.nodes[(first + i) % n].url())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The client URLs of every node, comma-separated.
    #[must_use]
    pub fn urls(&self) -> String {
        self.urls_from(0)
    }

    /// The nodes, each a server of its own (dropping one stops it).
    #[must_use]
    pub fn into_nodes(self) -> Vec<NatsServer> {
        self.nodes
    }

    /// The nodes.
    #[must_use]
    pub fn nodes(&self) -> &[NatsServer] {
        &self.nodes
    }

    /// One node, to kill, restart, pause or resume.
    ///
    /// # Panics
    ///
    /// If there is no node `i`.
    pub fn node(&mut self, i: usize) -> &mut NatsServer {
        &mut self.nodes[i]
    }

    /// The node whose server name is `name` (a stream's leader, say).
    #[must_use]
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Every node's log, for failure messages.
    #[must_use]
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("--- {}:\n{}", n.name, n.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl NatsServer {
    /// Whether `/healthz` answers 200 now.
    #[must_use]
    pub fn healthy(&self) -> bool {
        matches!(http_get(self.monitor_port, "/healthz"), Ok((200, _)))
    }

    /// Stops the process with SIGSTOP: it holds its sockets but answers
    /// nothing, as a node cut off by a network partition.
    ///
    /// # Panics
    ///
    /// If the signal cannot be sent.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a paused process go on (SIGCONT).
    ///
    /// # Panics
    ///
    /// If the signal cannot be sent.
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap_or_else(|e| panic!("kill -{signal}: {e}"));
        assert!(
            status.success(),
            "kill -{signal} {} failed",
            self.child.id()
        );
    }
}
