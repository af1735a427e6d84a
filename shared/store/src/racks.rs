//! Racks and their components.

use std::collections::BTreeMap;

use flow_protocol::api::{RackDeleteReply, RackListReply, RackRecord, RackSummary};
use flow_protocol::ids::RackRef;
use flow_protocol::rack::RackSpec;
use flow_protocol::{ComponentId, RackId};
use flow_rules::ComponentType;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::rows::{ComponentRow, RackRow};
use crate::{Store, StoreError};

/// Finds a rack by ID or name: `(id, name)`.
pub(crate) async fn find_rack(
    conn: &mut PgConnection,
    rack: &RackRef,
) -> Result<(RackId, String), StoreError> {
    let found: Option<(Uuid, String)> = match rack.as_id() {
        Some(id) => {
            sqlx::query_as("SELECT id, name FROM racks WHERE id = $1")
                .bind(id.as_uuid())
                .fetch_optional(&mut *conn)
                .await?
        }
        None => None,
    };
    let found = match found {
        Some(f) => Some(f),
        None => {
            sqlx::query_as("SELECT id, name FROM racks WHERE name = $1")
                .bind(&rack.0)
                .fetch_optional(&mut *conn)
                .await?
        }
    };
    found.map(|(id, name)| (RackId(id), name)).ok_or_else(|| {
        StoreError::NotFound(format!(
            "rack {rack:?} not found (by ID or name)",
            rack = rack.0
        ))
    })
}

impl Store {
    /// Creates a rack and its components in one transaction.
    pub async fn create_rack(&self, spec: &RackSpec) -> Result<RackRecord, StoreError> {
        let problems = spec.validate();
        if !problems.is_empty() {
            return Err(StoreError::Invalid {
                message: format!("the rack document has {} problem(s)", problems.len()),
                details: problems,
            });
        }
        let mut tx = self.pool().begin().await?;
        let id = RackId::new();
        let inserted = sqlx::query(
            "INSERT INTO racks (id, name, manufacturer, model, serial, location) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(id.as_uuid())
        .bind(&spec.name)
        .bind(&spec.manufacturer)
        .bind(&spec.model)
        .bind(&spec.serial)
        .bind(&spec.location)
        .execute(&mut *tx)
        .await;
        if let Err(e) = inserted {
            if StoreError::unique_violation(&e).is_some() {
                return Err(StoreError::Conflict(format!(
                    "a rack named {:?} already exists",
                    spec.name
                )));
            }
            return Err(e.into());
        }
        for c in &spec.components {
            let component_type = RackSpec::component_type(c)
                .map(ComponentType::as_str)
                .unwrap_or_default();
            sqlx::query(
                "INSERT INTO components (id, rack_id, component_type, name, slot, manufacturer, \
                 model, serial, firmware_version, bmc_url, credential_ref) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            )
            .bind(ComponentId::new().as_uuid())
            .bind(id.as_uuid())
            .bind(component_type)
            .bind(&c.name)
            .bind(c.slot.and_then(|s| i32::try_from(s).ok()))
            .bind(&c.manufacturer)
            .bind(&c.model)
            .bind(&c.serial)
            .bind(&c.firmware_version)
            .bind(&c.bmc_url)
            .bind(&c.credential_ref)
            .execute(&mut *tx)
            .await?;
        }
        let record = rack_record(&mut tx, id).await?;
        tx.commit().await?;
        Ok(record)
    }

    /// A rack with its components and rule bindings.
    pub async fn get_rack(&self, rack: &RackRef) -> Result<RackRecord, StoreError> {
        let mut conn = self.pool().acquire().await?;
        let (id, _) = find_rack(&mut conn, rack).await?;
        rack_record(&mut conn, id).await
    }

    /// Every rack, by name, with its component counts.
    pub async fn list_racks(&self) -> Result<RackListReply, StoreError> {
        let racks: Vec<RackRow> = sqlx::query_as(
            "SELECT id, name, manufacturer, model, serial, location, created_at FROM racks \
             ORDER BY name",
        )
        .fetch_all(self.pool())
        .await?;
        let counts: Vec<(Uuid, String, i64)> = sqlx::query_as(
            "SELECT rack_id, component_type, count(*) FROM components \
             GROUP BY rack_id, component_type",
        )
        .fetch_all(self.pool())
        .await?;
        let mut by_rack: BTreeMap<Uuid, Vec<(ComponentType, u32)>> = BTreeMap::new();
        for (rack, t, n) in counts {
            if let Ok(t) = t.parse() {
                by_rack
                    .entry(rack)
                    .or_default()
                    .push((t, u32::try_from(n).unwrap_or(u32::MAX)));
            }
        }
        Ok(RackListReply {
            racks: racks
                .into_iter()
                .map(|r| {
                    let mut components = by_rack.remove(&r.id).unwrap_or_default();
                    components.sort();
                    RackSummary {
                        id: RackId(r.id),
                        name: r.name,
                        model: r.model,
                        location: r.location,
                        components,
                        created_at: r.created_at,
                    }
                })
                .collect(),
        })
    }

    /// Deletes a rack, its components and its rule bindings. A missing rack
    /// is not an error.
    pub async fn delete_rack(&self, rack: &RackRef) -> Result<RackDeleteReply, StoreError> {
        let mut conn = self.pool().acquire().await?;
        let id = match find_rack(&mut conn, rack).await {
            Ok((id, _)) => id,
            Err(StoreError::NotFound(_)) => return Ok(RackDeleteReply { deleted: false }),
            Err(e) => return Err(e),
        };
        let n = sqlx::query("DELETE FROM racks WHERE id = $1")
            .bind(id.as_uuid())
            .execute(&mut *conn)
            .await?
            .rows_affected();
        Ok(RackDeleteReply { deleted: n > 0 })
    }
}

async fn rack_record(conn: &mut PgConnection, id: RackId) -> Result<RackRecord, StoreError> {
    let rack: RackRow = sqlx::query_as(
        "SELECT id, name, manufacturer, model, serial, location, created_at FROM racks \
         WHERE id = $1",
    )
    .bind(id.as_uuid())
    .fetch_one(&mut *conn)
    .await?;
    let rows: Vec<ComponentRow> = sqlx::query_as(
        "SELECT id, component_type, name, slot, manufacturer, model, serial, firmware_version, \
         bmc_url, credential_ref FROM components WHERE rack_id = $1 \
         ORDER BY component_type, slot NULLS LAST, name",
    )
    .bind(id.as_uuid())
    .fetch_all(&mut *conn)
    .await?;
    let associations = Store::rack_associations(conn, id).await?;
    Ok(RackRecord {
        id,
        name: rack.name,
        manufacturer: rack.manufacturer,
        model: rack.model,
        serial: rack.serial,
        location: rack.location,
        components: rows
            .into_iter()
            .map(ComponentRow::into_domain)
            .collect::<Result<_, _>>()?,
        associations,
        created_at: rack.created_at,
    })
}
