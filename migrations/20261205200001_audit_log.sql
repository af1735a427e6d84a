-- The audit log: one row per state-changing `flow.api` request, written in
-- the same transaction as the change (or alone, for a request refused
-- before any change). Append-only: the triggers below refuse UPDATE,
-- DELETE and TRUNCATE, whoever asks (docs/audit.md). No foreign keys: a
-- record outlives the rack, rule or task it names.
CREATE TABLE audit_log (
    id            bigserial PRIMARY KEY,
    at            timestamptz NOT NULL DEFAULT now(),
    -- Who, as claimed by the request's `Flow-Actor` header (`unknown`
    -- without one); `actor_source` says where the name came from.
    actor         text NOT NULL,
    actor_source  text NOT NULL CHECK (actor_source IN ('header', 'default')),
    -- The endpoint (`task.submit`) and its kind (`change`).
    endpoint      text NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('change', 'internal')),
    -- What it was about: rack names, task IDs, and any other target (a
    -- rule, schedule, run or event rule reference).
    racks         text[] NOT NULL DEFAULT '{}',
    task_ids      uuid[] NOT NULL DEFAULT '{}',
    target        text,
    -- The request as received (JSON; a body that was not JSON is kept as
    -- a JSON string).
    request       jsonb NOT NULL,
    outcome       text NOT NULL CHECK (outcome IN ('ok', 'refused', 'error')),
    message       text NOT NULL DEFAULT '',
    -- The operator's reason, when the request gave one (required for
    -- readiness overrides and version-change allowances).
    reason        text
);

CREATE INDEX audit_log_at ON audit_log (at DESC, id DESC);
CREATE INDEX audit_log_actor ON audit_log (actor, at DESC);
CREATE INDEX audit_log_endpoint ON audit_log (endpoint, at DESC);
CREATE INDEX audit_log_racks ON audit_log USING gin (racks);

CREATE FUNCTION audit_log_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'audit records cannot be changed or deleted (docs/audit.md)';
END;
$$;

CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_refuse_change();
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_refuse_change();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_refuse_change();
