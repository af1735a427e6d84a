-- Who may (issue 41, docs/audit.md "Who may"): the policy Flow keeps.
-- A grant gives a verified user (`ACCOUNT/user`) or every user of an
-- account (`ACCOUNT/*`) a role over racks by name, by label, or all
-- (neither named). Enforced in verified identity mode.
CREATE TABLE access_grants (
    id          bigserial PRIMARY KEY,
    subject     text NOT NULL,
    role        text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    racks       text[] NOT NULL DEFAULT '{}',
    labels      jsonb NOT NULL DEFAULT '{}',
    granted_by  text NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (cardinality(racks) = 0 OR labels = '{}')
);
CREATE INDEX access_grants_by_subject ON access_grants (subject);

-- A schedule or run acts with its creator's scope, checked again each time
-- it submits (NULL: created in development mode or before, unchecked).
ALTER TABLE schedules ADD COLUMN created_by text;
ALTER TABLE runs ADD COLUMN created_by text;
