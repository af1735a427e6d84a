//! `flow-store`: Flow's Postgres store — operation rules and every revision
//! of them, racks and their components, rack-rule associations, and rule
//! resolution. Migrations live in the top-level `migrations/` folder and are
//! embedded here. Row types stay in this crate; callers see the protocol's
//! domain types with typed IDs.

pub mod access;
mod admission;
pub mod audit;
mod error;
pub mod events;
pub mod firmware;
pub mod history;
pub mod hosts;
pub mod observed;
pub mod power;
mod racks;
mod resolve;
pub mod restore;
mod rows;
mod rules;
pub mod runs;
pub mod schedules;
pub mod stats;
pub mod tasks;

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

pub use error::StoreError;
use hosts::{HostList, TargetSession};
pub use resolve::Resolution;

/// The migrations, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// A handle on the database. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    pool: PgPool,
    /// The request whose audit record the next committed change carries
    /// ([`Store::with_audit`]); none outside a request.
    audit: Option<std::sync::Arc<audit::AuditScope>>,
    /// How long an observation of a component's power is known
    /// ([`observed::DEFAULT_KNOWN_FOR`] unless set).
    power_known_for: Duration,
    /// Each power domain's counted draw as last read, shared by the
    /// admissions of this store's clones for
    /// [`observed::DRAW_SNAPSHOT_FOR`].
    draws: observed::Draws,
    /// The power-on asks waiting for their batch, by domains, shared by
    /// this store's clones (`crate::admission`).
    batches: admission::Batches,
}

/// How often a store on several hosts checks its current one.
pub const HOST_WATCH: Duration = Duration::from_secs(1);
/// The longest a connection lives when the URL names several hosts, so
/// that after a switch none stays on the old host for long.
pub const HOST_SWITCH_LIFETIME: Duration = Duration::from_secs(60);

/// While the pool is open: every [`HOST_WATCH`], a connection from the pool
/// must answer and suit the target; when none does, the hosts are tried in
/// order and new connections go to the first suitable one.
async fn watch_hosts(pool: PgPool, list: HostList, mut current: String) {
    let mut tick = tokio::time::interval(HOST_WATCH);
    loop {
        tick.tick().await;
        if pool.is_closed() {
            return;
        }
        let healthy = match tokio::time::timeout(hosts::PROBE_TIMEOUT, pool.acquire()).await {
            Ok(Ok(mut conn)) => hosts::suits(&mut conn, list.target).await.is_ok(),
            _ => false,
        };
        if healthy {
            continue;
        }
        match list.first_suitable().await {
            Ok(host) if host.addr != current => {
                tracing::warn!(from = %current, to = %host.addr, "database host changed: new connections go to it");
                pool.set_connect_options(host.options.clone());
                current = host.addr.clone();
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "no database host suits now; trying again"),
        }
    }
}

impl Store {
    /// Connects with at most `max_connections` connections. `url` may
    /// name several hosts and `target_session_attrs=read-write`
    /// ([`hosts`]): the pool then connects to the first suitable host, and
    /// a watch moves it to another when that one fails or turns read-only.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Store, StoreError> {
        let list = HostList::parse(url)?;
        let target = list.target;
        let several = list.hosts.len() > 1;
        let host = if several || target == TargetSession::ReadWrite {
            list.first_suitable().await?.clone()
        } else {
            list.hosts[0].clone()
        };
        let mut options = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10));
        if target == TargetSession::ReadWrite {
            // A host that became a standby gets no new connection.
            options = options.after_connect(move |conn, _| {
                Box::pin(async move {
                    hosts::suits(conn, target)
                        .await
                        .map_err(|why| sqlx::Error::Configuration(why.into()))
                })
            });
        }
        if several {
            // After a switch, connections to the old host end within this.
            options = options.max_lifetime(HOST_SWITCH_LIFETIME);
        }
        let pool = options.connect_with(host.options.clone()).await?;
        tracing::info!(host = %host.addr, hosts = list.hosts.len(), "connected to the database");
        if several {
            tokio::spawn(watch_hosts(pool.clone(), list, host.addr));
        }
        Ok(Store::from_pool(pool))
    }

    /// Wraps an existing pool.
    pub fn from_pool(pool: PgPool) -> Store {
        Store {
            pool,
            audit: None,
            power_known_for: observed::DEFAULT_KNOWN_FOR,
            draws: observed::Draws::default(),
            batches: admission::Batches::default(),
        }
    }

    /// How long an observation of a component's power is known
    /// (`docs/operating-safety.md`, "What counts").
    pub fn with_power_known_for(mut self, known_for: Duration) -> Store {
        self.power_known_for = known_for;
        self
    }

    /// How long an observation of a component's power is known.
    pub fn power_known_for(&self) -> Duration {
        self.power_known_for
    }

    /// Applies every migration not yet applied (safe to run from several
    /// processes at once: sqlx takes an advisory lock).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}
