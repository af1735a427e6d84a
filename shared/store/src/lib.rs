//! `flow-store`: Flow's Postgres store — operation rules and every revision
//! of them, racks and their components, rack-rule associations, and rule
//! resolution. Migrations live in the top-level `migrations/` folder and are
//! embedded here. Row types stay in this crate; callers see the protocol's
//! domain types with typed IDs.

mod error;
pub mod events;
mod racks;
mod resolve;
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
pub use resolve::Resolution;

/// The migrations, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// A handle on the database. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    pool: PgPool,
}

impl Store {
    /// Connects with at most `max_connections` connections.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Store, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await?;
        Ok(Store { pool })
    }

    /// Wraps an existing pool.
    pub fn from_pool(pool: PgPool) -> Store {
        Store { pool }
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
