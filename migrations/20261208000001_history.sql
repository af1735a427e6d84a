-- Bounded history (issue 43; docs/operating.md "History and the archive").
-- Expand only: columns and tables added, the audit log's guard widened to
-- let go of records once archived; every query of the previous release
-- still runs.

-- A finished task whose detail (its steps and their component results)
-- went to the archive: `{"at", "segment", "summary": {...}}`. The task row
-- stays for good as its summary; its steps are removed.
ALTER TABLE tasks ADD COLUMN archived jsonb;
CREATE INDEX tasks_to_archive ON tasks (finished_at)
    WHERE archived IS NULL AND finished_at IS NOT NULL;

-- The audit log's hash chain: one seal per record, in the order sealed
-- (`seq`); each seal's hash covers the record and the seal before it
-- (flow_archive::chain). Appended by the scheduler's history pass, never
-- changed.
CREATE TABLE audit_seals (
    seq        bigserial PRIMARY KEY,
    record_id  bigint NOT NULL UNIQUE,
    version    integer NOT NULL,
    prev_hash  text NOT NULL,
    hash       text NOT NULL,
    sealed_at  timestamptz NOT NULL DEFAULT now()
);

-- Each export of sealed records to the archive: what the chain covered.
-- Records (and their seals) up to `last_seq` may then be removed; nothing
-- else may.
CREATE TABLE audit_exports (
    segment     text PRIMARY KEY,
    first_seq   bigint NOT NULL,
    last_seq    bigint NOT NULL,
    prev_hash   text NOT NULL,
    last_hash   text NOT NULL,
    records     bigint NOT NULL,
    exported_at timestamptz NOT NULL DEFAULT now()
);

-- The guard of migrations/20261205200001_audit_log.sql, widened: a DELETE
-- of a record an export covers is let through; every other UPDATE, DELETE
-- and TRUNCATE is refused as before.
CREATE OR REPLACE FUNCTION audit_log_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND EXISTS (
        SELECT 1 FROM audit_seals s
        WHERE s.record_id = OLD.id
          AND s.seq <= (SELECT max(last_seq) FROM audit_exports)
    ) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'audit records cannot be changed or deleted (docs/audit.md)';
END;
$$;

CREATE FUNCTION audit_seals_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE'
       AND OLD.seq <= (SELECT max(last_seq) FROM audit_exports) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'the audit chain cannot be changed (docs/audit.md)';
END;
$$;

CREATE TRIGGER audit_seals_no_update BEFORE UPDATE ON audit_seals
    FOR EACH ROW EXECUTE FUNCTION audit_seals_refuse_change();
CREATE TRIGGER audit_seals_no_delete BEFORE DELETE ON audit_seals
    FOR EACH ROW EXECUTE FUNCTION audit_seals_refuse_change();
CREATE TRIGGER audit_seals_no_truncate BEFORE TRUNCATE ON audit_seals
    FOR EACH STATEMENT EXECUTE FUNCTION audit_seals_refuse_change();

CREATE FUNCTION audit_exports_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_exports is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER audit_exports_no_update BEFORE UPDATE OR DELETE ON audit_exports
    FOR EACH ROW EXECUTE FUNCTION audit_exports_refuse_change();
CREATE TRIGGER audit_exports_no_truncate BEFORE TRUNCATE ON audit_exports
    FOR EACH STATEMENT EXECUTE FUNCTION audit_exports_refuse_change();

-- What the other expiries look up.
CREATE INDEX schedule_firings_done ON schedule_firings (done_at) WHERE done_at IS NOT NULL;
CREATE INDEX outbox_published ON outbox (published_at) WHERE published_at IS NOT NULL;

-- Who submitted a task, found when its detail is archived: the first
-- change record naming it.
CREATE INDEX audit_log_task_ids ON audit_log USING gin (task_ids);
