//! Test support for flow's integration tests.
//!
//! Tests talk to real services, never mocks:
//!
//! * [`NatsServer`] spawns a private `nats-server` (JetStream on, its own free
//!   ports and store directory) from the binary named by the
//!   [`NATS_SERVER_ENV`] environment variable, and stops it on drop, so tests
//!   running in parallel never share a server.
//! * [`NatsCluster`] joins three of them by routes into one JetStream
//!   cluster (own store per node), so a test can kill, restart or pause
//!   (SIGSTOP, a partition) one node at a time.
//! * [`database_url`] returns the PostgreSQL URL named by [`DATABASE_URL_ENV`].
//! * [`wait_until`] (and its async form [`eventually`]) is the one way to
//!   wait for something: bounded, polling, never a bare sleep in a test.
//!
//! The whole stack (scheduler, workers, simulator on top of these) is
//! `flow-testenv` (`tests/stack`).
//!
//! `scripts/test` provisions both services and exports both variables; run
//! the tests through it, or export the variables it prints.

mod cluster;

pub use cluster::{CLUSTER_START_TIMEOUT, NatsCluster};

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Environment variable holding the absolute path of a `nats-server` (>= 2.10) binary.
pub const NATS_SERVER_ENV: &str = "FLOW_NATS_SERVER";

/// Environment variable holding the URL of the PostgreSQL server tests may use.
pub const DATABASE_URL_ENV: &str = "FLOW_TEST_DATABASE_URL";

/// How long [`NatsServer::start`] waits for a server to report healthy.
pub const NATS_START_TIMEOUT: Duration = Duration::from_secs(10);

/// How many times [`NatsServer::start`] retries with fresh ports when a
/// server exits at startup (another process took a port in the meantime).
const NATS_START_ATTEMPTS: u32 = 3;

/// Timeout for one HTTP request to a monitoring endpoint.
const HTTP_TIMEOUT: Duration = Duration::from_secs(2);

/// Returned by [`wait_until`] when the condition did not hold in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitTimedOut {
    /// How long [`wait_until`] waited before giving up.
    pub waited: Duration,
}

impl fmt::Display for WaitTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "condition still false after {:?}", self.waited)
    }
}

impl std::error::Error for WaitTimedOut {}

/// Calls `condition` every `poll` until it returns `true` or `timeout` has
/// passed, and returns how long that took.
///
/// The condition is always evaluated at least once, and once more at the
/// deadline, so a zero `timeout` means "check exactly once".
///
/// # Errors
///
/// [`WaitTimedOut`] if the condition never returned `true` in time.
pub fn wait_until(
    timeout: Duration,
    poll: Duration,
    mut condition: impl FnMut() -> bool,
) -> Result<Duration, WaitTimedOut> {
    let start = Instant::now();
    let deadline = start + timeout;
    loop {
        if condition() {
            return Ok(start.elapsed());
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(WaitTimedOut {
                waited: start.elapsed(),
            });
        }
        thread::sleep(poll.min(deadline - now));
    }
}

/// Awaits `probe` every `poll` until it yields `Some`, or `timeout` has
/// passed: the async form of [`wait_until`], for conditions that need a
/// request to read (a task's status, a stream's depth). The probe runs at
/// least once, and once more at the deadline.
///
/// # Errors
///
/// [`WaitTimedOut`] if the probe never yielded a value in time.
pub async fn eventually<T, F, Fut>(
    timeout: Duration,
    poll: Duration,
    mut probe: F,
) -> Result<T, WaitTimedOut>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    let deadline = start + timeout;
    loop {
        if let Some(v) = probe().await {
            return Ok(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(WaitTimedOut {
                waited: start.elapsed(),
            });
        }
        tokio::time::sleep(poll.min(deadline - now)).await;
    }
}

/// Returns the path in [`NATS_SERVER_ENV`].
///
/// # Panics
///
/// If the variable is unset or empty, with a message saying how to set it.
#[must_use]
pub fn nats_server_binary() -> PathBuf {
    match std::env::var_os(NATS_SERVER_ENV) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => panic!(
            "{NATS_SERVER_ENV} is not set: it must name a nats-server >= 2.10 binary. \
             Run the tests through scripts/test, which installs one and exports \
             {NATS_SERVER_ENV}, or export it yourself."
        ),
    }
}

/// Returns the PostgreSQL URL in [`DATABASE_URL_ENV`].
///
/// # Panics
///
/// If the variable is unset or empty, with a message saying how to set it.
#[must_use]
pub fn database_url() -> String {
    match std::env::var(DATABASE_URL_ENV) {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "{DATABASE_URL_ENV} is not set: it must be a postgres:// URL. \
             Run the tests through scripts/test, which starts PostgreSQL and exports \
             {DATABASE_URL_ENV}, or export it yourself \
             (e.g. postgres://postgres@127.0.0.1:5432/postgres)."
        ),
    }
}

/// Extracts the host and port from a URL such as
/// `postgres://user:password@host:5432/db` or `nats://[::1]:4222`.
///
/// `default_port` is used when the URL names none. IPv6 hosts are returned
/// without their brackets.
///
/// # Errors
///
/// A message naming the URL when it has no `scheme://`, no host, or a port
/// that is not a number in 1..=65535.
pub fn url_host_port(url: &str, default_port: u16) -> Result<(String, u16), String> {
    let (_, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("not a URL (no scheme://): {url:?}"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host_port)| host_port);
    let (host, port) = if let Some(bracketed) = host_port.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or_else(|| format!("unclosed '[' in the host of {url:?}"))?;
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return Err(format!("unexpected {after:?} after the host of {url:?}")),
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return Err(format!("no host in {url:?}"));
    }
    let port = match port {
        None | Some("") => default_port,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port != 0 => port,
            _ => return Err(format!("bad port {port:?} in {url:?}")),
        },
    };
    Ok((host.to_owned(), port))
}

/// Sends `GET path` over HTTP/1.0 to `127.0.0.1:port` and returns the status
/// code and the body.
///
/// # Errors
///
/// Connection or I/O failures (each step times out after two seconds), or a
/// reply that is not HTTP.
pub fn http_get(port: u16, path: &str) -> io::Result<(u16, String)> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, HTTP_TIMEOUT)?;
    stream.set_read_timeout(Some(HTTP_TIMEOUT))?;
    stream.set_write_timeout(Some(HTTP_TIMEOUT))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAccept: */*\r\n\r\n"
    )?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply)?;
    let reply = String::from_utf8_lossy(&reply);
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not an HTTP reply: {reply:?}"),
        )
    };
    let (head, body) = reply.split_once("\r\n\r\n").ok_or_else(bad)?;
    let status = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(bad)?;
    Ok((status, body.to_owned()))
}

/// Returns a name no other call, in this or any other process, returns:
/// `<prefix>-<pid>-<counter>-<nanoseconds since the epoch>`.
fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}-{}-{n}-{nanos}", std::process::id())
}

/// Asks the OS for `count` distinct free TCP ports on 127.0.0.1.
///
/// All listeners are held until every port is chosen, so the ports differ
/// from each other; another process may still take one before it is used,
/// which [`NatsServer::start`] handles by retrying.
fn free_ports(count: usize) -> io::Result<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

/// Why one attempt of [`NatsServer::start`] failed, and whether another may succeed.
#[derive(Debug)]
struct StartError {
    message: String,
    retry: bool,
}

impl StartError {
    fn fatal(message: String) -> Self {
        Self {
            message,
            retry: false,
        }
    }
}

/// Where a [`NatsServer`]'s config file comes from.
enum ServerConfig<'a> {
    /// `jetstream { sync_interval: always }` and this text; `-js -sd <store>`.
    Extra(&'a str),
    /// The whole file, made from the store directory; extra environment.
    File {
        config: &'a dyn Fn(&Path) -> String,
        env: &'a [(&'a str, &'a str)],
    },
}

/// A private `nats-server` child process with JetStream enabled, listening
/// on 127.0.0.1 on ports of its own, with its own store directory.
///
/// Dropping it kills the process and deletes its directory (store, config
/// and log).
#[derive(Debug)]
pub struct NatsServer {
    child: Child,
    name: String,
    port: u16,
    monitor_port: u16,
    dir: PathBuf,
    /// `-js -sd <store>` (a config of [`ServerConfig::Extra`]).
    js_args: bool,
    /// Extra environment of the process.
    env: Vec<(String, String)>,
}

impl NatsServer {
    /// Starts a server from the binary in [`NATS_SERVER_ENV`] and waits (at
    /// most [`NATS_START_TIMEOUT`]) until its `/healthz` answers 200.
    ///
    /// The server runs with `-js`, a store directory of its own (`-sd`), a
    /// monitoring port (`-m`), and a config file with
    /// `jetstream { sync_interval: always }`, so acknowledged JetStream
    /// writes are on disk.
    ///
    /// # Panics
    ///
    /// If [`NATS_SERVER_ENV`] is unset, or the server does not become healthy;
    /// the message includes the server's log.
    #[must_use]
    pub fn start() -> Self {
        Self::start_with_config("")
    }

    /// Like [`NatsServer::start`], with `extra` appended to the server's
    /// config file (e.g. an `authorization { … }` block).
    #[must_use]
    pub fn start_with_config(extra: &str) -> Self {
        Self::start_from(&ServerConfig::Extra(extra))
    }

    /// Starts a server from a complete config file: `config` is given this
    /// server's store directory (for the file's `jetstream { store_dir }`) and
    /// returns the file's text, which is used as is (no `-js`, no `-sd`).
    /// `env` is added to the server's environment, for `$VARIABLE`
    /// references in the file. The address and ports are still this
    /// server's own (`-a 127.0.0.1 -p … -m …`, which override `listen`,
    /// `port` and `http` in the file).
    ///
    /// # Panics
    ///
    /// As [`NatsServer::start`].
    #[must_use]
    pub fn start_with_config_file(config: &dyn Fn(&Path) -> String, env: &[(&str, &str)]) -> Self {
        Self::start_from(&ServerConfig::File { config, env })
    }

    fn start_from(config: &ServerConfig<'_>) -> Self {
        let binary = nats_server_binary();
        let mut errors = Vec::new();
        for attempt in 1..=NATS_START_ATTEMPTS {
            match Self::try_start(&binary, config) {
                Ok(server) => return server,
                Err(StartError { message, retry }) => {
                    errors.push(format!("attempt {attempt}: {message}"));
                    if !retry {
                        break;
                    }
                }
            }
        }
        panic!(
            "could not start nats-server {} ({NATS_SERVER_ENV}):\n{}",
            binary.display(),
            errors.join("\n")
        );
    }

    fn try_start(binary: &Path, config: &ServerConfig<'_>) -> Result<Self, StartError> {
        let name = unique_name("flow-nats");
        let dir = std::env::temp_dir().join(&name);
        fs::create_dir(&dir)
            .map_err(|e| StartError::fatal(format!("creating {}: {e}", dir.display())))?;
        match Self::spawn_in(binary, name, &dir, config) {
            Ok(server) => Ok(server),
            Err(err) => {
                let _ = fs::remove_dir_all(&dir);
                Err(err)
            }
        }
    }

    fn spawn_in(
        binary: &Path,
        name: String,
        dir: &Path,
        source: &ServerConfig<'_>,
    ) -> Result<Self, StartError> {
        let config = dir.join("nats.conf");
        let store = dir.join("store");
        let (text, env) = match source {
            ServerConfig::Extra(extra) => (
                format!("jetstream {{\n  sync_interval: always\n}}\n{extra}\n"),
                &[][..],
            ),
            ServerConfig::File { config, env } => (config(&store), *env),
        };
        fs::write(&config, text)
            .map_err(|e| StartError::fatal(format!("writing {}: {e}", config.display())))?;
        let ports =
            free_ports(2).map_err(|e| StartError::fatal(format!("finding free ports: {e}")))?;
        let (port, monitor_port) = (ports[0], ports[1]);
        // From here on, Drop kills the child and removes the directory.
        let mut server = Self {
            child: Self::spawn(
                binary,
                &name,
                dir,
                port,
                monitor_port,
                matches!(source, ServerConfig::Extra(_)),
                env.iter().copied(),
            )?,
            name,
            port,
            monitor_port,
            dir: dir.to_path_buf(),
            js_args: matches!(source, ServerConfig::Extra(_)),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        let mut exited = None;
        let healthy = wait_until(NATS_START_TIMEOUT, Duration::from_millis(25), || {
            if let Ok(Some(status)) = server.child.try_wait() {
                exited = Some(status);
                return true;
            }
            matches!(http_get(monitor_port, "/healthz"), Ok((200, _)))
        });
        // An early exit or a foreign server on our monitoring port is most
        // likely a port taken by another process since we chose it: retry
        // with new ports. A timeout is not retried (it would only triple it).
        let (reason, retry) = match (exited, healthy) {
            (Some(status), _) => (format!("nats-server exited at startup ({status})"), true),
            (None, Err(timed_out)) => (format!("/healthz never answered 200: {timed_out}"), false),
            (None, Ok(_)) => match server.check_identity() {
                Ok(()) => return Ok(server),
                Err(reason) => (reason, true),
            },
        };
        let log = server.log();
        // Drop kills the child and removes the directory.
        drop(server);
        Err(StartError {
            message: format!("{reason}; server log:\n{log}"),
            retry,
        })
    }

    /// Starts the process for a server whose directory holds `nats.conf`;
    /// its output goes to `nats.log` (appended, so a restart keeps the log).
    fn spawn<K: AsRef<std::ffi::OsStr>, V: AsRef<std::ffi::OsStr>>(
        binary: &Path,
        name: &str,
        dir: &Path,
        port: u16,
        monitor_port: u16,
        js_args: bool,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Child, StartError> {
        let log = dir.join("nats.log");
        let log_file = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| StartError::fatal(format!("opening {}: {e}", log.display())))?;
        let log_file_err = log_file
            .try_clone()
            .map_err(|e| StartError::fatal(format!("cloning log handle: {e}")))?;
        let mut command = Command::new(binary);
        command
            .arg("-c")
            .arg(dir.join("nats.conf"))
            .args(["-n", name, "-a", "127.0.0.1"])
            .args(["-p", &port.to_string(), "-m", &monitor_port.to_string()])
            .envs(env);
        if js_args {
            command.arg("-js").arg("-sd").arg(dir.join("store"));
        }
        command
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_file_err)
            .spawn()
            .map_err(|e| StartError::fatal(format!("spawning {}: {e}", binary.display())))
    }

    /// Kills the server as a crash would (SIGKILL) and starts it again on
    /// the same ports, config and store ([`NatsServer::kill`], then
    /// [`NatsServer::start_again`]).
    ///
    /// # Panics
    ///
    /// As [`NatsServer::start_again`].
    pub fn restart(&mut self) {
        self.kill();
        self.start_again();
    }

    /// Kills the server as a crash would (SIGKILL) and waits for it to exit;
    /// its store stays. Clients see the connection drop and try to
    /// reconnect.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again (after [`NatsServer::kill`]) on the same
    /// ports, config and store, so clients reconnect to the same URL and find
    /// what JetStream had written to disk. Returns once it answers
    /// `/healthz` (at most [`NATS_START_TIMEOUT`]).
    ///
    /// # Panics
    ///
    /// If the server cannot be started again or does not become healthy; the
    /// message includes the server's log.
    pub fn start_again(&mut self) {
        let binary = nats_server_binary();
        // The ports were ours a moment ago; another process taking one in
        // between is unlikely, and a failure says so with the log.
        let deadline = Instant::now() + NATS_START_TIMEOUT;
        loop {
            let child = Self::spawn(
                &binary,
                &self.name,
                &self.dir,
                self.port,
                self.monitor_port,
                self.js_args,
                self.env.iter().map(|(k, v)| (k, v)),
            )
            .unwrap_or_else(|e| panic!("restarting nats-server: {}", e.message));
            self.child = child;
            let port = self.monitor_port;
            let mut exited = false;
            let healthy = wait_until(NATS_START_TIMEOUT, Duration::from_millis(25), || {
                if let Ok(Some(_)) = self.child.try_wait() {
                    exited = true;
                    return true;
                }
                matches!(http_get(port, "/healthz"), Ok((200, _)))
            });
            match (exited, healthy) {
                (false, Ok(_)) => return,
                // Exited at once: most likely its port is not released yet.
                (true, _) if Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(100));
                }
                _ => panic!(
                    "nats-server did not come back after a restart; log:\n{}",
                    self.log()
                ),
            }
        }
    }

    /// Makes sure the monitoring port answering is this server's (not another
    /// process that grabbed the port first).
    fn check_identity(&self) -> Result<(), String> {
        let body = match http_get(self.monitor_port, "/varz") {
            Ok((200, body)) => body,
            Ok((status, body)) => return Err(format!("/varz answered {status}: {body}")),
            Err(err) => return Err(format!("/varz failed: {err}")),
        };
        let varz: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("/varz is not JSON: {e}: {body}"))?;
        let reported = varz.get("server_name").and_then(serde_json::Value::as_str);
        if reported == Some(self.name.as_str()) {
            Ok(())
        } else {
            Err(format!(
                "monitoring port {} belongs to server {reported:?}, not {:?}",
                self.monitor_port, self.name
            ))
        }
    }

    /// Client URL, `nats://127.0.0.1:<port>`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Client port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Monitoring base URL, `http://127.0.0.1:<monitor port>`.
    #[must_use]
    pub fn monitor_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.monitor_port)
    }

    /// Monitoring port.
    #[must_use]
    pub fn monitor_port(&self) -> u16 {
        self.monitor_port
    }

    /// The server's name (`-n`), unique to this server.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// JetStream store directory (`-sd`) of this server.
    #[must_use]
    pub fn store_dir(&self) -> PathBuf {
        self.dir.join("store")
    }

    /// Raw JSON body of the monitoring endpoint `/varz`.
    ///
    /// # Panics
    ///
    /// If the request fails or does not answer 200.
    #[must_use]
    pub fn varz(&self) -> String {
        self.monitor_get("/varz")
    }

    /// Raw body of a monitoring endpoint such as `/jsz` or `/connz`.
    ///
    /// # Panics
    ///
    /// If the request fails or does not answer 200.
    #[must_use]
    pub fn monitor_get(&self, path: &str) -> String {
        match http_get(self.monitor_port, path) {
            Ok((200, body)) => body,
            Ok((status, body)) => {
                panic!("GET {}{path} answered {status}: {body}", self.monitor_url())
            }
            Err(err) => panic!("GET {}{path} failed: {err}", self.monitor_url()),
        }
    }

    /// What the server has logged so far (stdout and stderr), for failure messages.
    #[must_use]
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("nats.log"))
            .unwrap_or_else(|e| format!("<could not read the server log: {e}>"))
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The path of one of this workspace's binaries (`flow-scheduler`,
/// `flow-worker`, `flow`, `flow-rack-sim`), built from the package at
/// `package` (relative to the workspace root, e.g. `services/worker`), in
/// the running test's own target directory.
///
/// Cargo hands a test only its own package's binaries
/// (`CARGO_BIN_EXE_<name>`); a test that runs several Flow processes finds
/// the others here. `cargo nextest run --workspace` and `cargo test
/// --workspace` (so `scripts/test`) build every binary before any test runs.
///
/// # Panics
///
/// If the binary is missing, or older than a source file it is built from
/// (the package's `src`, the `src` of every `shared/*` crate it depends on,
/// directly or not, `shared/rules/builtin` with `flow-rules`, `migrations`
/// with `flow-store`): a stale binary would test old code.
#[must_use]
pub fn workspace_binary(name: &str, package: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    // <target>/<profile>/deps/<test>-<hash>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from <target>/<profile>/deps");
    let binary = profile_dir.join(name);
    let rebuild = format!(
        "build it first: cargo build --workspace --bins{} (cargo nextest run --workspace does)",
        if profile_dir.ends_with("release") {
            " --release"
        } else {
            ""
        }
    );
    let built = fs::metadata(&binary)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{} is not there ({e}): {rebuild}", binary.display()));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut sources = vec![root.join(package).join("src")];
    for crate_dir in shared_dependencies(&root, package) {
        sources.push(root.join(&crate_dir).join("src"));
        match crate_dir.as_str() {
            "shared/rules" => sources.push(root.join("shared/rules/builtin")),
            "shared/store" => sources.push(root.join("migrations")),
            _ => {}
        }
    }
    for dir in sources {
        if let Some((newest, path)) = newest_file(&dir)
            && newest > built
        {
            panic!(
                "{} is older than {}: {rebuild}",
                binary.display(),
                path.display()
            );
        }
    }
    binary
}

/// The `shared/*` crates `package` is built from: its `[dependencies]` on
/// `flow-<name>` where `shared/<name>` exists, and theirs, transitively.
fn shared_dependencies(root: &Path, package: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut todo = vec![package.to_owned()];
    while let Some(dir) = todo.pop() {
        let manifest = fs::read_to_string(root.join(&dir).join("Cargo.toml")).unwrap_or_default();
        let deps = manifest
            .split("\n[")
            .find(|section| section.starts_with("dependencies]"))
            .unwrap_or_default();
        for line in deps.lines().skip(1) {
            let Some(name) = line.trim().strip_prefix("flow-") else {
                continue;
            };
            let name: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            let shared = format!("shared/{name}");
            if root.join(&shared).is_dir() && !found.contains(&shared) {
                found.push(shared.clone());
                todo.push(shared);
            }
        }
    }
    found
}

/// The most recently modified file under `dir` (recursively), if any.
fn newest_file(dir: &Path) -> Option<(SystemTime, PathBuf)> {
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    for entry in fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let found = if path.is_dir() {
            newest_file(&path)
        } else {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .map(|t| (t, path))
        };
        if let Some((time, path)) = found
            && newest.as_ref().is_none_or(|(n, _)| time > *n)
        {
            newest = Some((time, path));
        }
    }
    newest
}

/// A fresh PostgreSQL database for one test, on the server named by
/// [`DATABASE_URL_ENV`], dropped (with any open connections) when the value
/// is dropped.
pub struct TestDb {
    name: String,
    url: String,
    admin_url: String,
}

static DB_COUNTER: AtomicU64 = AtomicU64::new(0);

impl TestDb {
    /// Creates an empty database named `flow_test_<pid>_<n>_<nanos>`.
    pub async fn create() -> TestDb {
        let admin_url = database_url();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            "flow_test_{}_{}_{nanos}",
            std::process::id(),
            DB_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let mut admin = connect_admin(&admin_url).await;
        sqlx::Executor::execute(
            &mut admin,
            sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));
        let url = with_database(&admin_url, &name);
        TestDb {
            name,
            url,
            admin_url,
        }
    }

    /// The URL of the test database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// An outage of this database alone: new connections are refused and
    /// open ones are ended, until [`TestDb::allow_connections`].
    pub async fn refuse_connections(&self) {
        self.admin(&format!(
            "ALTER DATABASE \"{}\" ALLOW_CONNECTIONS false",
            self.name
        ))
        .await;
        self.admin(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = '{}' AND pid <> pg_backend_pid()",
            self.name
        ))
        .await;
    }

    /// Ends [`TestDb::refuse_connections`].
    pub async fn allow_connections(&self) {
        self.admin(&format!(
            "ALTER DATABASE \"{}\" ALLOW_CONNECTIONS true",
            self.name
        ))
        .await;
    }

    /// A backup of the database as an operator takes one: `pg_dump
    /// --format=custom` into `to` (docs/operating.md, "Backup and
    /// restore").
    pub async fn backup(&self, to: &std::path::Path) {
        let out = tokio::process::Command::new(pg_tool("pg_dump"))
            .arg("--format=custom")
            .arg("--file")
            .arg(to)
            .arg("--dbname")
            .arg(&self.url)
            .output()
            .await
            .expect("pg_dump runs");
        assert!(
            out.status.success(),
            "pg_dump: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The database lost and restored from `backup`: dropped (its
    /// connections ended), created again under the same name and filled
    /// with `pg_restore`.
    pub async fn destroy_and_restore(&self, backup: &std::path::Path) {
        self.admin(&format!(
            "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
            self.name
        ))
        .await;
        self.admin(&format!("CREATE DATABASE \"{}\"", self.name))
            .await;
        let out = tokio::process::Command::new(pg_tool("pg_restore"))
            .arg("--exit-on-error")
            .arg("--dbname")
            .arg(&self.url)
            .arg(backup)
            .output()
            .await
            .expect("pg_restore runs");
        assert!(
            out.status.success(),
            "pg_restore: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    async fn admin(&self, sql: &str) {
        let mut admin = connect_admin(&self.admin_url).await;
        sqlx::Executor::execute(&mut admin, sqlx::AssertSqlSafe(sql.to_owned()))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// A Postgres client program: from `FLOW_PG_BINDIR` when set, else the
/// one on `PATH` (Debian's wrapper picks the installed version).
fn pg_tool(name: &str) -> std::path::PathBuf {
    match std::env::var_os("FLOW_PG_BINDIR") {
        Some(dir) => std::path::Path::new(&dir).join(name),
        None => std::path::PathBuf::from(name),
    }
}

async fn connect_admin(url: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    sqlx::PgConnection::connect(url).await.unwrap_or_else(|e| {
        panic!(
            "cannot connect to {DATABASE_URL_ENV}={url}: {e} (run the tests through scripts/test)"
        )
    })
}

/// `url` with its database path replaced by `name`.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    format!("{base}/{name}{query}")
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        // Drop runs inside the test's runtime; use a thread with its own.
        let dropped = thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime for dropping the test database");
            runtime.block_on(async {
                let mut admin = connect_admin(&admin_url).await;
                sqlx::Executor::execute(
                    &mut admin,
                    sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")),
                )
                .await
            })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("warning: could not drop test database {}: {e}", self.name);
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn url_host_port_handles_the_usual_shapes() {
        let cases = [
            (
                "postgres://postgres@127.0.0.1:5432/postgres",
                ("127.0.0.1", 5432),
            ),
            (
                "postgres://u:p%40ss@db.example:6543/x?sslmode=disable",
                ("db.example", 6543),
            ),
            ("postgres://localhost/db", ("localhost", 5432)),
            ("postgresql://localhost:/db", ("localhost", 5432)),
            ("nats://[::1]:4222", ("::1", 4222)),
            ("postgres://user@[::1]/db", ("::1", 5432)),
            ("postgres://host:7000", ("host", 7000)),
        ];
        for (url, (host, port)) in cases {
            assert_eq!(
                url_host_port(url, 5432),
                Ok((host.to_owned(), port)),
                "parsing {url}"
            );
        }
    }

    #[test]
    fn url_host_port_rejects_garbage() {
        for url in [
            "127.0.0.1:5432",
            "postgres:///db",
            "postgres://host:notaport/db",
            "postgres://host:0/db",
            "postgres://host:70000/db",
            "postgres://[::1/db",
            "postgres://[::1]x/db",
        ] {
            assert!(
                url_host_port(url, 5432).is_err(),
                "{url} should be rejected"
            );
        }
    }

    #[test]
    fn wait_until_returns_once_the_condition_holds() {
        let mut calls = 0;
        let waited = wait_until(Duration::from_secs(5), Duration::from_millis(1), || {
            calls += 1;
            calls == 3
        });
        assert!(waited.is_ok(), "{waited:?}");
        assert_eq!(calls, 3);
    }

    #[test]
    fn wait_until_gives_up_after_the_timeout() {
        let mut calls = 0;
        let result = wait_until(Duration::from_millis(50), Duration::from_millis(10), || {
            calls += 1;
            false
        });
        let err = result.expect_err("the condition never holds");
        assert!(err.waited >= Duration::from_millis(50), "{err}");
        assert!(calls >= 2, "checked {calls} times");
    }

    #[test]
    fn wait_until_with_zero_timeout_checks_once() {
        let mut calls = 0;
        let result = wait_until(Duration::ZERO, Duration::from_millis(10), || {
            calls += 1;
            false
        });
        assert!(result.is_err());
        assert_eq!(calls, 1);
    }

    #[test]
    fn unique_names_differ() {
        assert_ne!(unique_name("x"), unique_name("x"));
    }

    #[test]
    fn a_binary_is_checked_against_the_shared_crates_it_is_built_from() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let sim = shared_dependencies(&root, "services/rack-sim");
        assert!(sim.contains(&"shared/rules".to_owned()), "{sim:?}");
        assert!(!sim.contains(&"shared/store".to_owned()), "{sim:?}");
        let scheduler = shared_dependencies(&root, "services/scheduler");
        for crate_dir in [
            "shared/store",
            "shared/decisions",
            "shared/jetstream",
            "shared/config",
        ] {
            assert!(
                scheduler.contains(&crate_dir.to_owned()),
                "{crate_dir}: {scheduler:?}"
            );
        }
        // The scheduler decides; only the worker executes steps.
        assert!(
            !scheduler.contains(&"shared/executor".to_owned()),
            "{scheduler:?}"
        );
        let worker = shared_dependencies(&root, "services/worker");
        assert!(worker.contains(&"shared/executor".to_owned()), "{worker:?}");
    }

    #[test]
    fn free_ports_are_distinct() {
        let ports = free_ports(3).expect("ports");
        assert_eq!(ports.len(), 3);
        assert!(ports[0] != ports[1] && ports[1] != ports[2] && ports[0] != ports[2]);
    }
}
