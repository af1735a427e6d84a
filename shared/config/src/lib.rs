//! `flow-config`: one typed [`Settings`] for every Flow binary and the CLI.
//! Layers, later wins: defaults → config file (YAML, `--config` or
//! `FLOW_CONFIG`) → `FLOW_*` environment → command-line flags; then
//! [`Settings::validate`] refuses inconsistent or missing pieces with a
//! message naming the setting. Secrets are held in [`Secret`], which never
//! prints.

mod secret;

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use secret::Secret;

/// Where NATS is and how to authenticate.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NatsSettings {
    /// Server URL(s), comma-separated: `nats://host:4222`, `tls://host:4222`
    /// (in the file also a list). With several, the client reconnects to
    /// whichever answers and learns the cluster's other nodes from them.
    #[serde(deserialize_with = "url_list")]
    pub url: String,
    /// Which of several URLs to try first: `random` (the default, spreads
    /// processes that share one list) or `listed` (in order: give each
    /// process its own first node).
    pub server_order: ServerOrder,
    /// User name (with `password`).
    pub user: Option<String>,
    /// Password (with `user`).
    pub password: Option<Secret>,
    /// Token.
    pub token: Option<Secret>,
    /// File holding an nkey seed (`SU…`).
    pub nkey_file: Option<PathBuf>,
    /// A `.creds` file (JWT and nkey).
    pub creds_file: Option<PathBuf>,
    /// CA certificate(s) to trust, PEM.
    pub tls_ca_file: Option<PathBuf>,
    /// Client certificate, PEM (with `tls_key_file`).
    pub tls_cert_file: Option<PathBuf>,
    /// Client key, PEM (with `tls_cert_file`).
    pub tls_key_file: Option<PathBuf>,
    /// Require TLS even for `nats://` URLs.
    pub tls_required: bool,
    /// Prefix of this connection's reply subjects (default `_INBOX`). A
    /// role of its own (`_INBOX_worker`) lets the server's permissions keep
    /// other users from subscribing to this process's replies.
    pub inbox_prefix: Option<String>,
}

impl Default for NatsSettings {
    fn default() -> Self {
        NatsSettings {
            url: DEFAULT_NATS_URL.to_owned(),
            server_order: ServerOrder::Random,
            user: None,
            password: None,
            token: None,
            nkey_file: None,
            creds_file: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_required: false,
            inbox_prefix: None,
        }
    }
}

/// The order in which a client tries several NATS URLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerOrder {
    /// Shuffled (each process picks its own first node).
    Random,
    /// As listed.
    Listed,
}

/// A URL string, or a list of them (joined with commas).
fn url_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => s,
        OneOrMany::Many(list) => list.join(","),
    })
}

/// How Flow's streams, consumers and bucket are replicated (the scheduler
/// creates them and checks existing ones at start-up).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JetStreamSettings {
    /// Replicas of every stream and bucket (1 on a single server, 3 in a
    /// cluster; JetStream allows at most 5).
    pub replicas: usize,
    /// Placement tags: the servers that hold them (`server_tags` in their
    /// configuration) must carry every one.
    pub placement_tags: Vec<String>,
}

impl Default for JetStreamSettings {
    fn default() -> Self {
        JetStreamSettings {
            replicas: 1,
            placement_tags: Vec::new(),
        }
    }
}

/// Most replicas JetStream allows.
pub const MAX_REPLICAS: usize = 5;

/// Where Postgres is.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseSettings {
    /// `postgres://user[:password]@host:port/database`.
    pub url: Secret,
    /// Connection pool size: by default one per `flow.api` request the
    /// scheduler answers at once (32) plus its background loops, so that an
    /// operator's request never waits for a connection behind the workers'
    /// power admissions, each of which holds one while it waits for its
    /// domains' row locks (`flow-bench power`, docs/benchmarks.md).
    pub max_connections: u32,
}

/// The pool size unless configured.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 40;

impl Default for DatabaseSettings {
    fn default() -> Self {
        DatabaseSettings {
            url: Secret::new(DEFAULT_DATABASE_URL),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Log output.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// A `tracing` filter, e.g. `info,flow_store=debug`.
    pub filter: String,
    /// `text` or `json`.
    pub format: LogFormat,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            filter: "info".to_owned(),
            format: LogFormat::Text,
        }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Every setting.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// NATS.
    pub nats: NatsSettings,
    /// JetStream replication (the scheduler).
    pub jetstream: JetStreamSettings,
    /// Postgres (the scheduler; the CLI and workers do not use it).
    pub database: DatabaseSettings,
    /// Logs.
    pub log: LogSettings,
}

/// The NATS URL when nothing says otherwise.
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";
/// The database URL when nothing says otherwise.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/flow";

/// A setting that is missing, malformed or inconsistent.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file cannot be read.
    #[error("cannot read config file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The config file is not valid.
    #[error("config file {path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// One setting is wrong.
    #[error("{setting}: {message}")]
    Invalid {
        /// The setting, as its environment variable.
        setting: &'static str,
        /// What is wrong and what is allowed.
        message: String,
    },
}

fn invalid(setting: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        setting,
        message: message.into(),
    }
}

impl Settings {
    /// Loads settings: defaults, then the file (`file`, or `FLOW_CONFIG`
    /// from `env`), then `FLOW_*` variables from `env`. Flags are applied by
    /// the caller afterwards; call [`Settings::validate`] last.
    pub fn load(
        file: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Settings, ConfigError> {
        let file = file
            .map(Path::to_path_buf)
            .or_else(|| env("FLOW_CONFIG").map(PathBuf::from));
        let mut s = match file {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                let options = serde_saphyr::options! { strict_booleans: true };
                serde_saphyr::from_str_with_options::<Settings>(&text, options).map_err(|e| {
                    ConfigError::File {
                        path,
                        message: e.to_string().lines().next().unwrap_or_default().to_owned(),
                    }
                })?
            }
            None => Settings::default(),
        };
        s.apply_env(env)?;
        Ok(s)
    }

    /// Loads from the process environment.
    pub fn from_env(file: Option<&Path>) -> Result<Settings, ConfigError> {
        Settings::load(file, &|k| std::env::var(k).ok())
    }

    fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        let path = |k: &str| env(k).map(PathBuf::from);
        if let Some(v) = env("FLOW_NATS_URL") {
            self.nats.url = v;
        }
        if let Some(v) = env("FLOW_NATS_SERVER_ORDER") {
            self.nats.server_order = match v.as_str() {
                "random" => ServerOrder::Random,
                "listed" => ServerOrder::Listed,
                _ => {
                    return Err(invalid(
                        "FLOW_NATS_SERVER_ORDER",
                        format!("must be random or listed, got {v:?}"),
                    ));
                }
            };
        }
        if let Some(v) = env("FLOW_JETSTREAM_REPLICAS") {
            self.jetstream.replicas = v.parse().map_err(|_| {
                invalid(
                    "FLOW_JETSTREAM_REPLICAS",
                    format!("must be a number from 1 to {MAX_REPLICAS}, got {v:?}"),
                )
            })?;
        }
        if let Some(v) = env("FLOW_JETSTREAM_PLACEMENT_TAGS") {
            self.jetstream.placement_tags = v
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect();
        }
        if let Some(v) = env("FLOW_NATS_USER") {
            self.nats.user = Some(v);
        }
        if let Some(v) = env("FLOW_NATS_PASSWORD") {
            self.nats.password = Some(Secret::new(v));
        }
        if let Some(v) = env("FLOW_NATS_TOKEN") {
            self.nats.token = Some(Secret::new(v));
        }
        self.nats.nkey_file = path("FLOW_NATS_NKEY_FILE").or(self.nats.nkey_file.take());
        self.nats.creds_file = path("FLOW_NATS_CREDS_FILE").or(self.nats.creds_file.take());
        self.nats.tls_ca_file = path("FLOW_NATS_TLS_CA_FILE").or(self.nats.tls_ca_file.take());
        self.nats.tls_cert_file =
            path("FLOW_NATS_TLS_CERT_FILE").or(self.nats.tls_cert_file.take());
        self.nats.tls_key_file = path("FLOW_NATS_TLS_KEY_FILE").or(self.nats.tls_key_file.take());
        if let Some(v) = env("FLOW_NATS_TLS_REQUIRED") {
            self.nats.tls_required = parse_bool("FLOW_NATS_TLS_REQUIRED", &v)?;
        }
        if let Some(v) = env("FLOW_NATS_INBOX_PREFIX") {
            self.nats.inbox_prefix = Some(v);
        }
        if let Some(v) = env("FLOW_DATABASE_URL") {
            self.database.url = Secret::new(v);
        }
        if let Some(v) = env("FLOW_DATABASE_MAX_CONNECTIONS") {
            self.database.max_connections = v.parse().map_err(|_| {
                invalid(
                    "FLOW_DATABASE_MAX_CONNECTIONS",
                    format!("must be a positive integer, got {v:?}"),
                )
            })?;
        }
        if let Some(v) = env("FLOW_LOG") {
            self.log.filter = v;
        }
        if let Some(v) = env("FLOW_LOG_FORMAT") {
            self.log.format = match v.as_str() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                _ => {
                    return Err(invalid(
                        "FLOW_LOG_FORMAT",
                        format!("must be text or json, got {v:?}"),
                    ));
                }
            };
        }
        Ok(())
    }

    /// Checks the NATS settings (every binary) for consistency.
    pub fn validate_nats(&self) -> Result<(), ConfigError> {
        let n = &self.nats;
        if n.url.trim().is_empty() {
            return Err(invalid("FLOW_NATS_URL", "must not be empty"));
        }
        for url in n.url.split(',') {
            let url = url.trim();
            let ok = ["nats://", "tls://", "ws://", "wss://"]
                .iter()
                .any(|p| url.strip_prefix(p).is_some_and(|rest| !rest.is_empty()));
            if !ok {
                return Err(invalid(
                    "FLOW_NATS_URL",
                    format!("{url:?} is not a NATS URL; use nats://host:4222 or tls://host:4222"),
                ));
            }
        }
        if n.user.is_some() != n.password.is_some() {
            return Err(invalid(
                "FLOW_NATS_USER",
                "user and password go together (FLOW_NATS_USER and FLOW_NATS_PASSWORD)",
            ));
        }
        let methods = [
            n.user.is_some(),
            n.token.is_some(),
            n.nkey_file.is_some(),
            n.creds_file.is_some(),
        ];
        if methods.iter().filter(|m| **m).count() > 1 {
            return Err(invalid(
                "FLOW_NATS_USER",
                "choose one authentication method: user/password, token, nkey file or creds file",
            ));
        }
        if n.tls_cert_file.is_some() != n.tls_key_file.is_some() {
            return Err(invalid(
                "FLOW_NATS_TLS_CERT_FILE",
                "a client certificate needs its key (FLOW_NATS_TLS_CERT_FILE and FLOW_NATS_TLS_KEY_FILE)",
            ));
        }
        if let Some(prefix) = &n.inbox_prefix {
            let tokens_ok = !prefix.is_empty()
                && prefix.split('.').all(|t| {
                    !t.is_empty()
                        && t.chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                });
            if !tokens_ok {
                return Err(invalid(
                    "FLOW_NATS_INBOX_PREFIX",
                    format!(
                        "{prefix:?} is not a subject prefix: use letters, digits, '_' and '-' \
                         in dot-separated tokens, e.g. _INBOX_worker"
                    ),
                ));
            }
        }
        let files = [
            ("FLOW_NATS_NKEY_FILE", &n.nkey_file),
            ("FLOW_NATS_CREDS_FILE", &n.creds_file),
            ("FLOW_NATS_TLS_CA_FILE", &n.tls_ca_file),
            ("FLOW_NATS_TLS_CERT_FILE", &n.tls_cert_file),
            ("FLOW_NATS_TLS_KEY_FILE", &n.tls_key_file),
        ];
        for (setting, file) in files {
            if let Some(path) = file
                && !path.is_file()
            {
                return Err(invalid(
                    setting,
                    format!("{} is not a readable file", path.display()),
                ));
            }
        }
        Ok(())
    }

    /// Checks the JetStream settings (the scheduler, which creates the
    /// streams).
    pub fn validate_jetstream(&self) -> Result<(), ConfigError> {
        let j = &self.jetstream;
        if !(1..=MAX_REPLICAS).contains(&j.replicas) {
            return Err(invalid(
                "FLOW_JETSTREAM_REPLICAS",
                format!(
                    "must be a number from 1 to {MAX_REPLICAS}, got {} (3 in a 3-node cluster)",
                    j.replicas
                ),
            ));
        }
        if let Some(tag) = j
            .placement_tags
            .iter()
            .find(|t| t.trim().is_empty() || t.contains(char::is_whitespace))
        {
            return Err(invalid(
                "FLOW_JETSTREAM_PLACEMENT_TAGS",
                format!("{tag:?} is not a tag: tags are comma-separated words"),
            ));
        }
        Ok(())
    }

    /// Checks the database settings (the scheduler).
    pub fn validate_database(&self) -> Result<(), ConfigError> {
        let url = self.database.url.expose();
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(invalid(
                "FLOW_DATABASE_URL",
                "must be a postgres:// URL, e.g. postgres://flow@127.0.0.1:5432/flow",
            ));
        }
        if self.database.max_connections == 0 {
            return Err(invalid(
                "FLOW_DATABASE_MAX_CONNECTIONS",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

fn parse_bool(setting: &'static str, v: &str) -> Result<bool, ConfigError> {
    match v {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(invalid(
            setting,
            format!("must be true or false, got {v:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn load(vars: &[(&str, &str)], file: Option<&Path>) -> Result<Settings, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::load(file, &|k| map.get(k).cloned())
    }

    #[test]
    fn environment_overrides_file_overrides_defaults() {
        let dir = std::env::temp_dir().join(format!("flow-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("flow.yaml");
        std::fs::write(
            &file,
            "nats:\n  url: nats://file:4222\ndatabase:\n  max_connections: 3\n",
        )
        .unwrap();
        let s = load(&[("FLOW_NATS_URL", "nats://env:4222")], Some(&file)).unwrap();
        assert_eq!(s.nats.url, "nats://env:4222");
        assert_eq!(s.database.max_connections, 3);
        assert_eq!(s.database.url.expose(), DEFAULT_DATABASE_URL);
        std::fs::write(&file, "nats:\n  ulr: x\n").unwrap();
        let e = load(&[], Some(&file)).unwrap_err().to_string();
        assert!(e.contains("unknown field `ulr`"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn validation_names_the_setting() {
        let e = load(&[("FLOW_NATS_URL", "http://x")], None)
            .unwrap()
            .validate_nats()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "FLOW_NATS_URL: \"http://x\" is not a NATS URL; use nats://host:4222 or tls://host:4222"
        );
        let e = load(&[("FLOW_NATS_USER", "u")], None)
            .unwrap()
            .validate_nats()
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("FLOW_NATS_USER: user and password go together")
        );
        let e = load(
            &[
                ("FLOW_NATS_USER", "u"),
                ("FLOW_NATS_PASSWORD", "p"),
                ("FLOW_NATS_TOKEN", "t"),
            ],
            None,
        )
        .unwrap()
        .validate_nats()
        .unwrap_err();
        assert!(e.to_string().contains("choose one authentication method"));
        let e = load(&[("FLOW_NATS_CREDS_FILE", "/nonexistent/x.creds")], None)
            .unwrap()
            .validate_nats()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "FLOW_NATS_CREDS_FILE: /nonexistent/x.creds is not a readable file"
        );
        let e = load(&[("FLOW_DATABASE_URL", "mysql://x")], None)
            .unwrap()
            .validate_database()
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("FLOW_DATABASE_URL: must be a postgres:// URL")
        );
        let e = load(&[("FLOW_NATS_INBOX_PREFIX", "_INBOX.>")], None)
            .unwrap()
            .validate_nats()
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("FLOW_NATS_INBOX_PREFIX: \"_INBOX.>\" is not a subject prefix"),
            "{e}"
        );
        let e = load(&[("FLOW_LOG_FORMAT", "xml")], None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "FLOW_LOG_FORMAT: must be text or json, got \"xml\""
        );
    }

    #[test]
    fn several_nats_urls_and_replicas() {
        let dir = std::env::temp_dir().join(format!("flow-config-list-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("flow.yaml");
        std::fs::write(
            &file,
            "nats:\n  url: [nats://a:4222, nats://b:4222]\n  server_order: listed\n\
             jetstream:\n  replicas: 3\n  placement_tags: [site-a]\n",
        )
        .unwrap();
        let s = load(&[], Some(&file)).unwrap();
        assert_eq!(s.nats.url, "nats://a:4222,nats://b:4222");
        assert_eq!(s.nats.server_order, ServerOrder::Listed);
        assert_eq!(s.jetstream.replicas, 3);
        assert_eq!(s.jetstream.placement_tags, ["site-a"]);
        s.validate_nats().unwrap();
        s.validate_jetstream().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();

        let s = load(
            &[
                ("FLOW_NATS_URL", "nats://a:1, nats://b:2,tls://c:3"),
                ("FLOW_JETSTREAM_REPLICAS", "3"),
                ("FLOW_JETSTREAM_PLACEMENT_TAGS", "rack-room-1, ssd"),
            ],
            None,
        )
        .unwrap();
        s.validate_nats().unwrap();
        assert_eq!(s.jetstream.placement_tags, ["rack-room-1", "ssd"]);
        assert_eq!(s.nats.server_order, ServerOrder::Random);

        let e = load(&[("FLOW_NATS_URL", "nats://a:1,,nats://b:2")], None)
            .unwrap()
            .validate_nats()
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("FLOW_NATS_URL: \"\" is not a NATS URL"),
            "{e}"
        );
        for bad in ["0", "6"] {
            let e = load(&[("FLOW_JETSTREAM_REPLICAS", bad)], None)
                .unwrap()
                .validate_jetstream()
                .unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "FLOW_JETSTREAM_REPLICAS: must be a number from 1 to 5, got {bad} (3 in a 3-node cluster)"
                )
            );
        }
        let e = load(&[("FLOW_JETSTREAM_REPLICAS", "three")], None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "FLOW_JETSTREAM_REPLICAS: must be a number from 1 to 5, got \"three\""
        );
        let e = load(&[("FLOW_NATS_SERVER_ORDER", "first")], None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "FLOW_NATS_SERVER_ORDER: must be random or listed, got \"first\""
        );
    }

    #[test]
    fn secrets_never_print() {
        let s = load(
            &[
                ("FLOW_NATS_USER", "u"),
                ("FLOW_NATS_PASSWORD", "hunter2"),
                ("FLOW_DATABASE_URL", "postgres://flow:pw-in-url@db/flow"),
            ],
            None,
        )
        .unwrap();
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("pw-in-url"),
            "{shown}"
        );
        assert!(s.validate_nats().is_ok());
    }
}

#[cfg(test)]
mod example_file {
    use super::*;

    #[test]
    fn the_shipped_example_file_loads_and_validates() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/flow.yaml");
        let s = Settings::load(Some(&path), &|_| None).expect("examples/flow.yaml loads");
        s.validate_nats().expect("valid nats settings");
        s.validate_database().expect("valid database settings");
        assert_eq!(s.database.max_connections, DEFAULT_MAX_CONNECTIONS);
    }
}
