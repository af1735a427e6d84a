//! Row types and their conversion to domain types. Only this module sees raw
//! UUIDs and strings of the database.

use flow_protocol::api::{Association, ComponentRecord, RevisionRecord, RuleRecord, RuleSummary};
use flow_protocol::{ComponentId, RackId, RuleId};
use flow_rules::{ComponentType, OperationCode, RuleDefinition};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::StoreError;

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RuleRow {
    pub id: Uuid,
    pub name: String,
    pub description: String,
    pub operation_code: String,
    pub definition: Value,
    pub is_default: bool,
    pub revision: i32,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// The columns of `RuleRow`, for `SELECT`s (a macro so `concat!` can build
/// static SQL).
macro_rules! rule_columns {
    () => {
        "id, name, description, operation_code, definition, is_default, revision, created_at, \
         updated_at"
    };
}
pub(crate) use rule_columns;

pub(crate) fn operation(
    code: &str,
    what: impl Fn() -> String,
) -> Result<OperationCode, StoreError> {
    code.parse()
        .map_err(|e: flow_rules::InvalidOperation| StoreError::Corrupt {
            what: what(),
            reason: e.to_string(),
        })
}

impl RuleRow {
    pub(crate) fn operation(&self) -> Result<OperationCode, StoreError> {
        operation(&self.operation_code, || format!("rule {}", self.id))
    }

    /// The validated definition.
    pub(crate) fn definition(&self) -> Result<RuleDefinition, StoreError> {
        RuleDefinition::from_value(&self.definition).map_err(|e| StoreError::Corrupt {
            what: format!("definition of rule {}", self.id),
            reason: e.to_string(),
        })
    }

    pub(crate) fn into_record(
        self,
        associations: Vec<Association>,
    ) -> Result<RuleRecord, StoreError> {
        let operation = self.operation()?;
        Ok(RuleRecord {
            id: RuleId(self.id),
            name: self.name,
            description: self.description,
            operation_type: operation.operation_type(),
            operation,
            is_default: self.is_default,
            revision: revision(self.revision),
            definition: self.definition,
            associations,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }

    pub(crate) fn into_summary(self) -> Result<RuleSummary, StoreError> {
        let operation = self.operation()?;
        Ok(RuleSummary {
            id: RuleId(self.id),
            name: self.name,
            operation_type: operation.operation_type(),
            operation,
            is_default: self.is_default,
            revision: revision(self.revision),
            created_at: self.created_at,
        })
    }
}

pub(crate) fn revision(r: i32) -> u32 {
    u32::try_from(r).unwrap_or(0)
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RevisionRow {
    pub revision: i32,
    pub name: String,
    pub description: String,
    pub operation_code: String,
    pub definition: Value,
    pub created_at: OffsetDateTime,
}

impl RevisionRow {
    pub(crate) fn into_record(self) -> RevisionRecord {
        RevisionRecord {
            revision: revision(self.revision),
            name: self.name,
            description: self.description,
            definition: self.definition,
            created_at: self.created_at,
        }
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct AssociationRow {
    pub rack_id: Uuid,
    pub rack_name: String,
    pub operation_code: String,
    pub rule_id: Uuid,
}

impl AssociationRow {
    pub(crate) fn into_domain(self) -> Result<Association, StoreError> {
        Ok(Association {
            rack_id: RackId(self.rack_id),
            operation: operation(&self.operation_code, || {
                format!("association of rack {}", self.rack_id)
            })?,
            rack_name: self.rack_name,
            rule_id: RuleId(self.rule_id),
        })
    }
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RackRow {
    pub id: Uuid,
    pub name: String,
    pub manufacturer: String,
    pub model: String,
    pub serial: String,
    pub location: String,
    pub labels: sqlx::types::Json<flow_protocol::labels::Labels>,
    pub created_at: OffsetDateTime,
    pub power_domains: Vec<String>,
}

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ComponentRow {
    pub id: Uuid,
    pub component_type: String,
    pub name: String,
    pub slot: Option<i32>,
    pub manufacturer: String,
    pub model: String,
    pub serial: String,
    pub firmware_version: String,
    pub bmc_url: String,
    pub credential_ref: String,
    pub status: String,
}

impl ComponentRow {
    pub(crate) fn into_domain(self) -> Result<ComponentRecord, StoreError> {
        let component_type: ComponentType =
            self.component_type
                .parse()
                .map_err(|e: flow_rules::UnknownComponentType| StoreError::Corrupt {
                    what: format!("component {}", self.id),
                    reason: e.to_string(),
                })?;
        Ok(ComponentRecord {
            id: ComponentId(self.id),
            component_type,
            name: self.name,
            slot: self.slot.and_then(|s| u32::try_from(s).ok()),
            manufacturer: self.manufacturer,
            model: self.model,
            serial: self.serial,
            firmware_version: self.firmware_version,
            bmc_url: self.bmc_url,
            credential_ref: self.credential_ref,
            status: self.status.parse().map_err(
                |e: flow_protocol::readiness::UnknownComponentStatus| StoreError::Corrupt {
                    what: format!("component {}", self.id),
                    reason: e.to_string(),
                },
            )?,
        })
    }
}
