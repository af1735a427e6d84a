//! Operation rules: create (single and batch), read, list, update, delete,
//! defaults, revisions and rack associations.

use flow_protocol::api::{
    Association, BatchCreateReply, BatchItem, DisassociateReply, HistoryReply, RuleDeleteReply,
    RuleList, RuleListReply, RuleRecord,
};
use flow_protocol::ids::RackRef;
use flow_protocol::{RackId, RuleId};
use flow_rules::{OperationCode, RuleBatch, RuleSpec};
use serde_json::Value;
use sqlx::{PgConnection, Postgres, Transaction};
use uuid::Uuid;

use crate::rows::{AssociationRow, RevisionRow, RuleRow, operation, rule_columns};
use crate::{Store, StoreError};

/// Most rules one list call returns.
pub const MAX_LIST_LIMIT: u32 = 1000;
/// Rules per page when the caller says nothing (as the reference system's
/// API pages them).
pub const DEFAULT_LIST_LIMIT: u32 = 100;

fn type_str(op: OperationCode) -> &'static str {
    op.operation_type().as_str()
}

/// Serialises concurrent writers of one operation's rules (batch checks and
/// default moves) for the rest of the transaction.
async fn lock_operation(tx: &mut PgConnection, op: OperationCode) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('flow.rules/' || $1))")
        .bind(op.as_str())
        .execute(tx)
        .await?;
    Ok(())
}

async fn insert_revision(tx: &mut PgConnection, row: &RuleRow) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO rule_revisions (rule_id, revision, name, description, operation_type, \
         operation_code, definition, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(row.id)
    .bind(row.revision)
    .bind(&row.name)
    .bind(&row.description)
    .bind(type_str(row.operation()?))
    .bind(&row.operation_code)
    .bind(&row.definition)
    .bind(row.updated_at)
    .execute(tx)
    .await?;
    Ok(())
}

async fn current_default(
    tx: &mut PgConnection,
    op: OperationCode,
) -> Result<Option<Uuid>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT id FROM operation_rules WHERE operation_type = $1 AND operation_code = $2 \
         AND is_default",
    )
    .bind(type_str(op))
    .bind(op.as_str())
    .fetch_optional(tx)
    .await?)
}

async fn insert_rule(
    tx: &mut PgConnection,
    spec: &RuleSpec,
    is_default: bool,
) -> Result<RuleRow, StoreError> {
    let row: RuleRow = sqlx::query_as(concat!(
        "INSERT INTO operation_rules (id, name, description, operation_type, operation_code, \
         definition, is_default) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING ",
        rule_columns!()
    ))
    .bind(RuleId::new().as_uuid())
    .bind(&spec.name)
    .bind(&spec.description)
    .bind(type_str(spec.operation))
    .bind(spec.operation.as_str())
    .bind(spec.definition.to_json_value())
    .bind(is_default)
    .fetch_one(&mut *tx)
    .await?;
    insert_revision(tx, &row).await?;
    Ok(row)
}

async fn fetch_rule(tx: &mut PgConnection, id: RuleId, lock: bool) -> Result<RuleRow, StoreError> {
    let query = if lock {
        concat!(
            "SELECT ",
            rule_columns!(),
            " FROM operation_rules WHERE id = $1 FOR UPDATE"
        )
    } else {
        concat!(
            "SELECT ",
            rule_columns!(),
            " FROM operation_rules WHERE id = $1"
        )
    };
    sqlx::query_as(query)
        .bind(id.as_uuid())
        .fetch_optional(tx)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("rule {id} not found")))
}

async fn rule_associations(
    tx: &mut PgConnection,
    id: RuleId,
) -> Result<Vec<Association>, StoreError> {
    let rows: Vec<AssociationRow> = sqlx::query_as(
        "SELECT a.rack_id, r.name AS rack_name, a.operation_code, a.rule_id \
         FROM rack_rule_associations a JOIN racks r ON r.id = a.rack_id \
         WHERE a.rule_id = $1 ORDER BY r.name",
    )
    .bind(id.as_uuid())
    .fetch_all(tx)
    .await?;
    rows.into_iter().map(AssociationRow::into_domain).collect()
}

async fn record(tx: &mut PgConnection, row: RuleRow) -> Result<RuleRecord, StoreError> {
    let associations = rule_associations(tx, RuleId(row.id)).await?;
    row.into_record(associations)
}

fn default_conflict(op: OperationCode, existing: Option<Uuid>) -> StoreError {
    let which = existing
        .map(|id| format!(" (rule {id})"))
        .unwrap_or_default();
    StoreError::Conflict(format!(
        "a default rule already exists for {}/{op}{which}; create the rule without \
         is_default and move the default with set-default",
        op.operation_type()
    ))
}

impl Store {
    async fn begin(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        Ok(self.pool().begin().await?)
    }

    /// Creates a validated rule. With `is_default`, fails if the operation
    /// already has a default; `set_default` moves it (`docs/rule-format.md`,
    /// "Resolution and default rules").
    pub async fn create_rule(
        &self,
        spec: &RuleSpec,
        is_default: bool,
    ) -> Result<RuleRecord, StoreError> {
        let mut tx = self.begin().await?;
        lock_operation(&mut tx, spec.operation).await?;
        if is_default && let Some(existing) = current_default(&mut tx, spec.operation).await? {
            return Err(default_conflict(spec.operation, Some(existing)));
        }
        let row = match insert_rule(&mut tx, spec, is_default).await {
            Err(StoreError::Database(e)) if StoreError::unique_violation(&e).is_some() => {
                return Err(default_conflict(spec.operation, None));
            }
            other => other?,
        };
        let record = row.into_record(Vec::new())?;
        self.commit(tx).await?;
        Ok(record)
    }

    /// Creates a validated batch in one transaction: an operation that
    /// already has a rule is skipped, or with `overwrite` that rule gets a new
    /// revision (keeping its rack associations). Every batch rule ends up the
    /// default for its operation. All or nothing.
    pub async fn batch_create(
        &self,
        batch: &RuleBatch,
        overwrite: bool,
    ) -> Result<BatchCreateReply, StoreError> {
        let mut tx = self.begin().await?;
        let mut reply = BatchCreateReply::default();
        for spec in &batch.rules {
            let op = spec.operation;
            lock_operation(&mut tx, op).await?;
            // The rule to replace: the default if there is one, else the newest.
            let existing: Option<RuleRow> = sqlx::query_as(concat!(
                "SELECT ",
                rule_columns!(),
                " FROM operation_rules WHERE operation_type = $1 AND operation_code = $2 \
                 ORDER BY is_default DESC, created_at DESC LIMIT 1 FOR UPDATE"
            ))
            .bind(type_str(op))
            .bind(op.as_str())
            .fetch_optional(&mut *tx)
            .await?;
            match existing {
                Some(row) if !overwrite => reply.skipped.push(BatchItem {
                    id: RuleId(row.id),
                    name: row.name,
                    operation: op,
                }),
                Some(row) => {
                    let id = RuleId(row.id);
                    sqlx::query(
                        "UPDATE operation_rules SET is_default = false, updated_at = now() \
                         WHERE operation_type = $1 AND operation_code = $2 AND is_default \
                         AND id <> $3",
                    )
                    .bind(type_str(op))
                    .bind(op.as_str())
                    .bind(id.as_uuid())
                    .execute(&mut *tx)
                    .await?;
                    let updated: RuleRow = sqlx::query_as(concat!(
                        "UPDATE operation_rules SET name = $2, description = $3, definition = $4, \
                         is_default = true, revision = revision + 1, updated_at = now() \
                         WHERE id = $1 RETURNING ",
                        rule_columns!()
                    ))
                    .bind(id.as_uuid())
                    .bind(&spec.name)
                    .bind(&spec.description)
                    .bind(spec.definition.to_json_value())
                    .fetch_one(&mut *tx)
                    .await?;
                    insert_revision(&mut tx, &updated).await?;
                    reply.overwritten.push(BatchItem {
                        id,
                        name: spec.name.clone(),
                        operation: op,
                    });
                }
                None => {
                    let row = insert_rule(&mut tx, spec, true).await?;
                    reply.created.push(BatchItem {
                        id: RuleId(row.id),
                        name: row.name,
                        operation: op,
                    });
                }
            }
        }
        self.commit(tx).await?;
        Ok(reply)
    }

    /// One rule with the racks bound to it.
    pub async fn get_rule(&self, id: RuleId) -> Result<RuleRecord, StoreError> {
        let mut conn = self.pool().acquire().await?;
        let row = fetch_rule(&mut conn, id, false).await?;
        record(&mut conn, row).await
    }

    /// Rules, newest first, filtered and paged.
    pub async fn list_rules(&self, q: &RuleList) -> Result<RuleListReply, StoreError> {
        let limit = q.limit.unwrap_or(DEFAULT_LIST_LIMIT).min(MAX_LIST_LIMIT);
        let operation_type = q.operation_type.map(|t| t.as_str());
        let operation = q.operation.map(|c| c.as_str());
        let rows: Vec<RuleRow> = sqlx::query_as(concat!(
            "SELECT ",
            rule_columns!(),
            " FROM operation_rules WHERE ($1::text IS NULL OR operation_type = $1) \
             AND ($2::text IS NULL OR operation_code = $2) AND (NOT $3 OR is_default) \
             ORDER BY created_at DESC, id LIMIT $4 OFFSET $5"
        ))
        .bind(operation_type)
        .bind(operation)
        .bind(q.default_only)
        .bind(i64::from(limit))
        .bind(i64::from(q.offset))
        .fetch_all(self.pool())
        .await?;
        let total: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM operation_rules WHERE ($1::text IS NULL OR operation_type = $1) \
             AND ($2::text IS NULL OR operation_code = $2) AND (NOT $3 OR is_default)",
        )
        .bind(operation_type)
        .bind(operation)
        .bind(q.default_only)
        .fetch_one(self.pool())
        .await?;
        Ok(RuleListReply {
            rules: rows
                .into_iter()
                .map(RuleRow::into_summary)
                .collect::<Result<_, _>>()?,
            total: u64::try_from(total).unwrap_or(0),
        })
    }

    /// Changes name, description and/or definition. A new definition is
    /// validated against the rule's operation and saved as a new revision.
    pub async fn update_rule(
        &self,
        id: RuleId,
        name: Option<&str>,
        description: Option<&str>,
        definition: Option<&Value>,
    ) -> Result<RuleRecord, StoreError> {
        let mut tx = self.begin().await?;
        let row = fetch_rule(&mut tx, id, true).await?;
        let op = row.operation()?;
        let new_definition = definition.unwrap_or(&row.definition);
        let spec = flow_rules::spec_from_parts(
            name.unwrap_or(&row.name),
            description.unwrap_or(&row.description),
            type_str(op),
            op.as_str(),
            new_definition,
        )
        .map_err(|e| StoreError::invalid(&e))?;
        let canonical = spec.definition.to_json_value();
        let changed_definition = canonical != row.definition;
        let updated: RuleRow = sqlx::query_as(concat!(
            "UPDATE operation_rules SET name = $2, description = $3, definition = $4, \
             revision = revision + $5, updated_at = now() WHERE id = $1 RETURNING ",
            rule_columns!()
        ))
        .bind(id.as_uuid())
        .bind(&spec.name)
        .bind(&spec.description)
        .bind(&canonical)
        .bind(i32::from(changed_definition))
        .fetch_one(&mut *tx)
        .await?;
        if changed_definition {
            insert_revision(&mut tx, &updated).await?;
        }
        let record = record(&mut tx, updated).await?;
        self.commit(tx).await?;
        Ok(record)
    }

    /// Deletes a rule. A rule bound to racks is kept unless `force`, which
    /// removes the bindings with it. Deleting a missing rule is not an error.
    pub async fn delete_rule(
        &self,
        id: RuleId,
        force: bool,
    ) -> Result<RuleDeleteReply, StoreError> {
        let mut tx = self.begin().await?;
        let bound = rule_associations(&mut tx, id).await?;
        if !bound.is_empty() && !force {
            let racks: Vec<_> = bound
                .iter()
                .map(|a| format!("{} ({})", a.rack_name, a.operation))
                .collect();
            return Err(StoreError::Conflict(format!(
                "rule {id} is bound to {} rack(s): {}; disassociate them first or delete with force",
                bound.len(),
                racks.join(", ")
            )));
        }
        let deleted = sqlx::query("DELETE FROM operation_rules WHERE id = $1")
            .bind(id.as_uuid())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        self.commit(tx).await?;
        Ok(RuleDeleteReply {
            deleted: deleted > 0,
            associations_removed: bound.len() as u64,
        })
    }

    /// Makes a rule the default for its operation, atomically taking the
    /// flag from the previous default. Idempotent.
    pub async fn set_default(&self, id: RuleId) -> Result<RuleRecord, StoreError> {
        let mut tx = self.begin().await?;
        let row = fetch_rule(&mut tx, id, true).await?;
        let op = row.operation()?;
        lock_operation(&mut tx, op).await?;
        sqlx::query(
            "UPDATE operation_rules SET is_default = false, updated_at = now() \
             WHERE operation_type = $1 AND operation_code = $2 AND is_default AND id <> $3",
        )
        .bind(type_str(op))
        .bind(op.as_str())
        .bind(id.as_uuid())
        .execute(&mut *tx)
        .await?;
        let row: RuleRow = sqlx::query_as(concat!(
            "UPDATE operation_rules SET is_default = true, updated_at = now() WHERE id = $1 \
             RETURNING ",
            rule_columns!()
        ))
        .bind(id.as_uuid())
        .fetch_one(&mut *tx)
        .await?;
        let record = record(&mut tx, row).await?;
        self.commit(tx).await?;
        Ok(record)
    }

    /// Every saved definition of a rule, oldest first (also for a deleted
    /// rule).
    pub async fn rule_history(&self, id: RuleId) -> Result<HistoryReply, StoreError> {
        let rows: Vec<RevisionRow> = sqlx::query_as(
            "SELECT revision, name, description, operation_code, definition, created_at \
             FROM rule_revisions WHERE rule_id = $1 ORDER BY revision",
        )
        .bind(id.as_uuid())
        .fetch_all(self.pool())
        .await?;
        let Some(first) = rows.first() else {
            return Err(StoreError::NotFound(format!(
                "rule {id} has no history: no such rule"
            )));
        };
        let op = operation(&first.operation_code, || format!("history of rule {id}"))?;
        Ok(HistoryReply {
            rule_id: id,
            operation: op,
            revisions: rows.into_iter().map(RevisionRow::into_record).collect(),
        })
    }

    /// Binds a rule to a rack for the rule's operation, replacing any rule
    /// bound for that operation.
    pub async fn associate(&self, rack: &RackRef, rule: RuleId) -> Result<Association, StoreError> {
        let mut tx = self.begin().await?;
        let (rack_id, rack_name) = crate::racks::find_rack(&mut tx, rack).await?;
        let row = fetch_rule(&mut tx, rule, false).await?;
        let op = row.operation()?;
        sqlx::query(
            "INSERT INTO rack_rule_associations (rack_id, operation_type, operation_code, rule_id) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (rack_id, operation_type, operation_code) \
             DO UPDATE SET rule_id = EXCLUDED.rule_id, updated_at = now()",
        )
        .bind(rack_id.as_uuid())
        .bind(type_str(op))
        .bind(op.as_str())
        .bind(rule.as_uuid())
        .execute(&mut *tx)
        .await?;
        self.commit(tx).await?;
        Ok(Association {
            rack_id,
            rack_name,
            operation: op,
            rule_id: rule,
        })
    }

    /// Removes a rack's binding for an operation (nothing bound is not an
    /// error).
    pub async fn disassociate(
        &self,
        rack: &RackRef,
        op: OperationCode,
    ) -> Result<DisassociateReply, StoreError> {
        let mut tx = self.begin().await?;
        let (rack_id, _) = crate::racks::find_rack(&mut tx, rack).await?;
        let removed = sqlx::query(
            "DELETE FROM rack_rule_associations WHERE rack_id = $1 AND operation_type = $2 \
             AND operation_code = $3",
        )
        .bind(rack_id.as_uuid())
        .bind(type_str(op))
        .bind(op.as_str())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        self.commit(tx).await?;
        Ok(DisassociateReply {
            removed: removed > 0,
        })
    }

    pub(crate) async fn rack_associations(
        conn: &mut PgConnection,
        rack: RackId,
    ) -> Result<Vec<Association>, StoreError> {
        let rows: Vec<AssociationRow> = sqlx::query_as(
            "SELECT a.rack_id, r.name AS rack_name, a.operation_code, a.rule_id \
             FROM rack_rule_associations a JOIN racks r ON r.id = a.rack_id \
             WHERE a.rack_id = $1 ORDER BY a.operation_type, a.operation_code",
        )
        .bind(rack.as_uuid())
        .fetch_all(conn)
        .await?;
        rows.into_iter().map(AssociationRow::into_domain).collect()
    }

    pub(crate) async fn fetch_rule_row(
        conn: &mut PgConnection,
        id: RuleId,
    ) -> Result<RuleRow, StoreError> {
        fetch_rule(conn, id, false).await
    }
}
