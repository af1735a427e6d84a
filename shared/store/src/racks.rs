//! Racks and their components.

use std::collections::BTreeMap;

use flow_protocol::api::{
    ComponentStatusEntry, ComponentStatusReply, RackDeleteReply, RackLabel, RackListReply,
    RackRecord, RackSummary,
};
use flow_protocol::ids::RackRef;
use flow_protocol::labels::{self, Labels};
use flow_protocol::power::DomainName;
use flow_protocol::rack::RackSpec;
use flow_protocol::readiness::ComponentStatus;
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
            "INSERT INTO racks (id, name, manufacturer, model, serial, location, labels, \
             power_domains) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(id.as_uuid())
        .bind(&spec.name)
        .bind(&spec.manufacturer)
        .bind(&spec.model)
        .bind(&spec.serial)
        .bind(&spec.location)
        .bind(sqlx::types::Json(&spec.labels))
        .bind(
            spec.power_domains
                .iter()
                .map(DomainName::as_str)
                .collect::<Vec<_>>(),
        )
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
        self.commit(tx).await?;
        Ok(record)
    }

    /// A rack with its components and rule bindings.
    pub async fn get_rack(&self, rack: &RackRef) -> Result<RackRecord, StoreError> {
        let mut conn = self.pool().acquire().await?;
        let (id, _) = find_rack(&mut conn, rack).await?;
        rack_record(&mut conn, id).await
    }

    /// Every rack carrying all of `labels` (every rack when empty), by
    /// name, with its component counts.
    pub async fn list_racks(&self, labels: &Labels) -> Result<RackListReply, StoreError> {
        let racks: Vec<RackRow> = sqlx::query_as(
            "SELECT id, name, manufacturer, model, serial, location, labels, created_at, \
             power_domains FROM racks WHERE labels @> $1 ORDER BY name",
        )
        .bind(sqlx::types::Json(labels))
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
                        labels: r.labels.0,
                        components,
                        created_at: r.created_at,
                    }
                })
                .collect(),
        })
    }

    /// Sets and removes labels of a rack (one statement: concurrent
    /// changes of other keys are kept).
    pub async fn label_rack(&self, request: &RackLabel) -> Result<RackRecord, StoreError> {
        let mut problems = labels::problems("set", &request.set);
        problems.extend(
            request
                .remove
                .iter()
                .filter_map(|k| labels::key_problem(k))
                .map(|p| format!("remove: {p}")),
        );
        if let Some(k) = request.remove.iter().find(|k| request.set.contains_key(*k)) {
            problems.push(format!("remove: {k:?} is also in set"));
        }
        if !problems.is_empty() {
            return Err(StoreError::Invalid {
                message: "the labels are invalid".to_owned(),
                details: problems,
            });
        }
        let mut tx = self.pool().begin().await?;
        let (id, _) = find_rack(&mut tx, &request.rack).await?;
        let count: i32 = sqlx::query_scalar(
            "UPDATE racks SET labels = (labels - $2::text[]) || $3, updated_at = now() \
             WHERE id = $1 RETURNING (SELECT count(*)::int FROM jsonb_object_keys(labels))",
        )
        .bind(id.as_uuid())
        .bind(&request.remove)
        .bind(sqlx::types::Json(&request.set))
        .fetch_one(&mut *tx)
        .await?;
        if usize::try_from(count).unwrap_or(usize::MAX) > labels::MAX_LABELS {
            return Err(StoreError::Invalid {
                message: "too many labels".to_owned(),
                details: vec![format!(
                    "set: the rack would carry {count} labels, at most {}",
                    labels::MAX_LABELS
                )],
            });
        }
        let record = rack_record(&mut tx, id).await?;
        self.commit(tx).await?;
        Ok(record)
    }

    /// Finds the components `refs` name — each an ID, `<rack>/<name>`, or a
    /// name only one rack has — as (rack name, component name), in the
    /// order given; every reference that finds none or several is named in
    /// the error.
    pub async fn find_components(
        &self,
        refs: &[String],
    ) -> Result<Vec<(String, String)>, StoreError> {
        let mut conn = self.pool().acquire().await?;
        let mut found = Vec::with_capacity(refs.len());
        let mut problems = Vec::new();
        for (i, reference) in refs.iter().enumerate() {
            let matches: Vec<(String, String)> = if let Ok(id) = reference.parse::<Uuid>() {
                sqlx::query_as(
                    "SELECT r.name, c.name FROM components c JOIN racks r ON r.id = c.rack_id \
                     WHERE c.id = $1",
                )
                .bind(id)
                .fetch_all(&mut *conn)
                .await?
            } else if let Some((rack, name)) = reference.split_once('/') {
                sqlx::query_as(
                    "SELECT r.name, c.name FROM components c JOIN racks r ON r.id = c.rack_id \
                     WHERE (r.name = $1 OR r.id::text = $1) AND c.name = $2",
                )
                .bind(rack)
                .bind(name)
                .fetch_all(&mut *conn)
                .await?
            } else {
                sqlx::query_as(
                    "SELECT r.name, c.name FROM components c JOIN racks r ON r.id = c.rack_id \
                     WHERE c.name = $1 ORDER BY r.name LIMIT 6",
                )
                .bind(reference)
                .fetch_all(&mut *conn)
                .await?
            };
            match matches.len() {
                0 => problems.push(format!("components[{i}]: no component {reference:?} (by ID, <rack>/<name> or name)")),
                1 => found.extend(matches),
                _ => problems.push(format!(
                    "components[{i}]: {reference:?} is in several racks ({}); name it as <rack>/{reference} or by ID",
                    matches.iter().map(|(r, _)| r.as_str()).take(5).collect::<Vec<_>>().join(", ")
                )),
            }
        }
        if problems.is_empty() {
            Ok(found)
        } else {
            Err(StoreError::Invalid {
                message: format!(
                    "{} component reference(s) found no single component",
                    problems.len()
                ),
                details: problems,
            })
        }
    }

    /// Sets the status of the components `refs` name (as
    /// [`Store::find_components`] finds them), all or none.
    pub async fn set_component_status(
        &self,
        refs: &[String],
        status: ComponentStatus,
    ) -> Result<ComponentStatusReply, StoreError> {
        let found = self.find_components(refs).await?;
        let mut tx = self.pool().begin().await?;
        let mut components = Vec::with_capacity(found.len());
        for (rack, component) in found {
            sqlx::query(
                "UPDATE components SET status = $3, updated_at = now() \
                 WHERE name = $2 AND rack_id = (SELECT id FROM racks WHERE name = $1)",
            )
            .bind(&rack)
            .bind(&component)
            .bind(status.as_str())
            .execute(&mut *tx)
            .await?;
            components.push(ComponentStatusEntry {
                rack,
                component,
                status,
            });
        }
        self.commit(tx).await?;
        Ok(ComponentStatusReply { components })
    }

    /// Deletes a rack, its components and its rule bindings. A missing rack
    /// is not an error.
    pub async fn delete_rack(&self, rack: &RackRef) -> Result<RackDeleteReply, StoreError> {
        let mut tx = self.pool().begin().await?;
        let id = match find_rack(&mut tx, rack).await {
            Ok((id, _)) => id,
            Err(StoreError::NotFound(_)) => return Ok(RackDeleteReply { deleted: false }),
            Err(e) => return Err(e),
        };
        let n = sqlx::query("DELETE FROM racks WHERE id = $1")
            .bind(id.as_uuid())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        self.commit(tx).await?;
        Ok(RackDeleteReply { deleted: n > 0 })
    }
}

pub(crate) async fn rack_record(
    conn: &mut PgConnection,
    id: RackId,
) -> Result<RackRecord, StoreError> {
    let rack: RackRow = sqlx::query_as(
        "SELECT id, name, manufacturer, model, serial, location, labels, created_at, \
         power_domains FROM racks WHERE id = $1",
    )
    .bind(id.as_uuid())
    .fetch_one(&mut *conn)
    .await?;
    let rows: Vec<ComponentRow> = sqlx::query_as(
        "SELECT id, component_type, name, slot, manufacturer, model, serial, firmware_version, \
         bmc_url, credential_ref, status FROM components WHERE rack_id = $1 \
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
        labels: rack.labels.0,
        power_domains: rack
            .power_domains
            .into_iter()
            .filter_map(|d| DomainName::try_from(d).ok())
            .collect(),
        components: rows
            .into_iter()
            .map(ComponentRow::into_domain)
            .collect::<Result<_, _>>()?,
        associations,
        created_at: rack.created_at,
    })
}
