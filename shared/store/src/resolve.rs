//! Rule resolution: which rule a task for (rack, operation) runs, and why.
//! Order: explicit rule ID (missing → error, no fallback) → the rack's
//! binding → the operation's default → the built-in rule. A database error
//! or an unreadable stored rule is an error, never a silent fall-through to
//! the built-in rule (`docs/rule-format.md`, "Resolution and default
//! rules").

use flow_protocol::RuleId;
use flow_protocol::api::{ResolveReply, RuleSource};
use flow_protocol::ids::RackRef;
use flow_rules::{OperationCode, RuleDefinition, builtin_rule};

use crate::rows::{RuleRow, rule_columns};
use crate::{Store, StoreError};

/// A resolved rule: the reply the API shows, and the validated definition a
/// task snapshots.
#[derive(Debug, Clone)]
pub struct Resolution {
    /// Source, reason, ID, revision, name and canonical definition.
    pub reply: ResolveReply,
    /// The definition, validated.
    pub definition: RuleDefinition,
}

fn from_row(row: RuleRow, source: RuleSource, reason: String) -> Result<Resolution, StoreError> {
    let definition = row.definition()?;
    let operation = row.operation()?;
    Ok(Resolution {
        reply: ResolveReply {
            source,
            reason,
            rule_id: Some(RuleId(row.id)),
            revision: Some(crate::rows::revision(row.revision)),
            name: row.name,
            operation,
            definition: definition.to_json_value(),
        },
        definition,
    })
}

impl Store {
    /// Resolves the rule for `operation` on `rack`.
    pub async fn resolve(
        &self,
        rack: &RackRef,
        operation: OperationCode,
        explicit: Option<RuleId>,
    ) -> Result<Resolution, StoreError> {
        let mut conn = self.pool().acquire().await?;
        let (rack_id, rack_name) = crate::racks::find_rack(&mut conn, rack).await?;
        if let Some(id) = explicit {
            let row = match Store::fetch_rule_row(&mut conn, id).await {
                Err(StoreError::NotFound(_)) => {
                    return Err(StoreError::NotFound(format!(
                        "rule {id} not found; it was named explicitly, so Flow does not fall \
                         back to another rule"
                    )));
                }
                other => other?,
            };
            let rule_op = row.operation()?;
            if rule_op != operation {
                return Err(StoreError::Invalid {
                    message: format!(
                        "rule {id} is a {}/{rule_op} rule and cannot run {}/{operation}",
                        rule_op.operation_type(),
                        operation.operation_type()
                    ),
                    details: Vec::new(),
                });
            }
            return from_row(
                row,
                RuleSource::Explicit,
                format!("rule {id} was named explicitly"),
            );
        }
        let bound: Option<RuleRow> = sqlx::query_as(concat!(
            "SELECT ",
            rule_columns!(),
            " FROM operation_rules WHERE id = (SELECT rule_id FROM rack_rule_associations \
             WHERE rack_id = $1 AND operation_type = $2 AND operation_code = $3)"
        ))
        .bind(rack_id.as_uuid())
        .bind(operation.operation_type().as_str())
        .bind(operation.as_str())
        .fetch_optional(&mut *conn)
        .await?;
        if let Some(row) = bound {
            let reason = format!(
                "rack {rack_name} is bound to rule {} for {operation}",
                row.id
            );
            return from_row(row, RuleSource::RackAssociation, reason);
        }
        let default: Option<RuleRow> = sqlx::query_as(concat!(
            "SELECT ",
            rule_columns!(),
            " FROM operation_rules WHERE operation_type = $1 AND operation_code = $2 AND is_default"
        ))
        .bind(operation.operation_type().as_str())
        .bind(operation.as_str())
        .fetch_optional(&mut *conn)
        .await?;
        if let Some(row) = default {
            let reason = format!(
                "rack {rack_name} has no rule bound for {operation}; rule {} is the default",
                row.id
            );
            return from_row(row, RuleSource::Default, reason);
        }
        let builtin = builtin_rule(operation);
        Ok(Resolution {
            reply: ResolveReply {
                source: RuleSource::Builtin,
                reason: format!(
                    "rack {rack_name} has no rule bound for {operation} and there is no default; \
                     the built-in rule applies"
                ),
                rule_id: None,
                revision: None,
                name: builtin.name.clone(),
                operation,
                definition: builtin.definition.to_json_value(),
            },
            definition: builtin.definition.clone(),
        })
    }
}
