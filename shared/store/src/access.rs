//! The access policy as kept (`migrations/20261207200001_access_policy.sql`):
//! grants added, revoked and read; the admins a scheduler is started with
//! (`flow-scheduler --admin`) made sure of. What a grant lets is decided by
//! `flow_decisions::access`.

use std::collections::BTreeMap;

use flow_protocol::access::{AccessGrant, AccessGrantRecord, Role};
use sqlx::types::Json;
use time::OffsetDateTime;

use crate::{Store, StoreError};

/// Who the admins a scheduler was started with are recorded as granted by.
pub const STARTUP_GRANTOR: &str = "flow-scheduler --admin";

type GrantRow = (
    i64,
    String,
    String,
    Vec<String>,
    Json<BTreeMap<String, String>>,
    String,
    OffsetDateTime,
);

/// A grant's columns, in [`GrantRow`]'s order.
macro_rules! columns {
    () => {
        "id, subject, role, racks, labels, granted_by, granted_at"
    };
}

fn record(row: GrantRow) -> Result<AccessGrantRecord, StoreError> {
    let (id, subject, role, racks, labels, granted_by, granted_at) = row;
    let role: Role = role.parse().map_err(|reason: String| StoreError::Corrupt {
        what: format!("access grant {id}"),
        reason,
    })?;
    Ok(AccessGrantRecord {
        id,
        subject,
        role,
        racks,
        labels: labels.0,
        granted_by,
        granted_at,
    })
}

impl Store {
    /// Adds a grant, recorded as granted by the request's actor.
    pub async fn grant_access(&self, grant: &AccessGrant) -> Result<AccessGrantRecord, StoreError> {
        let by = self
            .audit_scope()
            .map(|s| s.actor().name)
            .unwrap_or_else(|| "flow".to_owned());
        let mut tx = self.pool().begin().await?;
        let row: GrantRow = sqlx::query_as(concat!(
            "INSERT INTO access_grants (subject, role, racks, labels, granted_by) \
             VALUES ($1, $2, $3, $4, $5) RETURNING ",
            columns!()
        ))
        .bind(&grant.subject)
        .bind(grant.role.as_str())
        .bind(&grant.racks)
        .bind(Json(&grant.labels))
        .bind(&by)
        .fetch_one(&mut *tx)
        .await?;
        self.commit(tx).await?;
        record(row)
    }

    /// Removes grant `id`, returning what it was.
    pub async fn revoke_access(&self, id: i64) -> Result<AccessGrantRecord, StoreError> {
        let mut tx = self.pool().begin().await?;
        let row: Option<GrantRow> = sqlx::query_as(concat!(
            "DELETE FROM access_grants WHERE id = $1 RETURNING ",
            columns!()
        ))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Err(StoreError::NotFound(format!("access grant {id} not found")));
        };
        self.commit(tx).await?;
        record(row)
    }

    /// The grants, oldest first: all, or those that apply to `user`
    /// (`ACCOUNT/user`: its own and its account's `ACCOUNT/*`).
    pub async fn access_grants(
        &self,
        user: Option<&str>,
    ) -> Result<Vec<AccessGrantRecord>, StoreError> {
        let account = user
            .and_then(|u| u.split_once('/'))
            .map(|(acc, _)| format!("{acc}/*"));
        let rows: Vec<GrantRow> = sqlx::query_as(concat!(
            "SELECT ",
            columns!(),
            " FROM access_grants \
             WHERE $1::text IS NULL OR subject = $1 OR subject = $2 ORDER BY id"
        ))
        .bind(user)
        .bind(account)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(record).collect()
    }

    /// Makes sure each of `admins` holds an admin grant over every rack
    /// (the ones a scheduler is started with); adds what is missing.
    pub async fn ensure_admins(&self, admins: &[String]) -> Result<(), StoreError> {
        for admin in admins {
            sqlx::query(
                "INSERT INTO access_grants (subject, role, granted_by) \
                 SELECT $1, 'admin', $2 WHERE NOT EXISTS ( \
                   SELECT 1 FROM access_grants WHERE subject = $1 AND role = 'admin' \
                     AND cardinality(racks) = 0 AND labels = '{}')",
            )
            .bind(admin)
            .bind(STARTUP_GRANTOR)
            .execute(self.pool())
            .await?;
        }
        Ok(())
    }

    /// The verified user of the request this store answers (its audit
    /// scope's actor), if verified: the creator a schedule or run records,
    /// whose scope it acts with.
    pub fn verified_actor(&self) -> Option<String> {
        self.audit_scope()
            .map(|s| s.actor())
            .filter(|a| a.source == flow_protocol::audit::ActorSource::Verified)
            .map(|a| a.name)
    }

    /// The rack (by name) of task `id`, if it exists.
    pub async fn task_rack(&self, id: flow_protocol::TaskId) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT rack_name FROM tasks WHERE id = $1")
                .bind(id.as_uuid())
                .fetch_optional(self.pool())
                .await?,
        )
    }

    /// Who created schedule `id`, when verified.
    pub async fn schedule_creator(
        &self,
        id: flow_protocol::ScheduleId,
    ) -> Result<Option<String>, StoreError> {
        let row: Option<Option<String>> =
            sqlx::query_scalar("SELECT created_by FROM schedules WHERE id = $1")
                .bind(id.as_uuid())
                .fetch_optional(self.pool())
                .await?;
        Ok(row.flatten())
    }

    /// Who created run `id`, when verified.
    pub async fn run_creator(
        &self,
        id: flow_protocol::RunId,
    ) -> Result<Option<String>, StoreError> {
        let row: Option<Option<String>> =
            sqlx::query_scalar("SELECT created_by FROM runs WHERE id = $1")
                .bind(id.as_uuid())
                .fetch_optional(self.pool())
                .await?;
        Ok(row.flatten())
    }

    /// Each named rack's name and labels (racks by name or ID; one not
    /// found is absent).
    pub async fn rack_facts(
        &self,
        racks: &[String],
    ) -> Result<Vec<(String, BTreeMap<String, String>)>, StoreError> {
        if racks.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(String, Json<BTreeMap<String, String>>)> = sqlx::query_as(
            "SELECT name, labels FROM racks WHERE name = ANY($1) OR id::text = ANY($1) ORDER BY name",
        )
        .bind(racks)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(|(n, l)| (n, l.0)).collect())
    }
}
