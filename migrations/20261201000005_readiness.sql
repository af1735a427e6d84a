-- The readiness gate: components carry an operator-set status; a power or
-- firmware task waits (at most readiness_wait_ms) until every component it
-- targets is ready, and while it waits readiness_until says until when.
ALTER TABLE components ADD COLUMN status varchar(16) NOT NULL DEFAULT 'ready'
    CHECK (status IN ('ready', 'in_use', 'maintenance'));
ALTER TABLE tasks ADD COLUMN readiness_wait_ms bigint CHECK (readiness_wait_ms > 0);
ALTER TABLE tasks ADD COLUMN readiness_until timestamptz;
CREATE INDEX tasks_held_by_readiness ON tasks (readiness_until) WHERE readiness_until IS NOT NULL;
