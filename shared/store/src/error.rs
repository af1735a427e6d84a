//! The store's errors.

/// What went wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The named object does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The change conflicts with what is stored.
    #[error("{0}")]
    Conflict(String),
    /// The content is invalid; `details` lists every problem.
    #[error("{message}")]
    Invalid {
        /// Summary.
        message: String,
        /// Each problem.
        details: Vec<String>,
    },
    /// A stored value that no longer reads back (e.g. a definition that
    /// fails validation): reported, never silently replaced.
    #[error("stored {what} is unreadable: {reason}")]
    Corrupt {
        /// Which object.
        what: String,
        /// Why.
        reason: String,
    },
    /// The database failed.
    #[error("database error")]
    Database(#[from] sqlx::Error),
    /// The batch of power admissions this one was decided in failed (the
    /// error is shared by every ask of the batch).
    #[error("power admission batch failed")]
    Batch(#[source] std::sync::Arc<StoreError>),
    /// A migration failed.
    #[error("migration failed")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl StoreError {
    /// True when Postgres refused a value of the statement itself: SQLSTATE
    /// class 22 (data exception: a NUL byte in text, a string too long, a
    /// number out of range) or 54 (a program limit, e.g. an index row too
    /// large). The same input fails the same way again, so it is the
    /// caller's to refuse, not a reason to retry.
    pub fn is_refused_value(&self) -> bool {
        match self {
            StoreError::Database(sqlx::Error::Database(db)) => db
                .code()
                .is_some_and(|code| code.starts_with("22") || code.starts_with("54")),
            _ => false,
        }
    }

    /// The Postgres constraint a failed statement violated, if any.
    pub(crate) fn unique_violation(e: &sqlx::Error) -> Option<String> {
        match e {
            sqlx::Error::Database(db) if db.code().as_deref() == Some("23505") => {
                Some(db.constraint().unwrap_or_default().to_owned())
            }
            _ => None,
        }
    }

    pub(crate) fn invalid(errors: &flow_rules::ValidationErrors) -> StoreError {
        StoreError::Invalid {
            message: format!(
                "the rule is invalid ({} {})",
                errors.len(),
                if errors.len() == 1 { "error" } else { "errors" }
            ),
            details: errors.iter().map(|e| e.to_string()).collect(),
        }
    }
}
