-- Flow store, part 1: operation rules with their revisions, racks and their
-- components, and rack-rule associations. Tasks come with the execution issue.

CREATE TABLE operation_rules (
    id             uuid PRIMARY KEY,
    name           varchar(128) NOT NULL CHECK (btrim(name) <> ''),
    description    text NOT NULL DEFAULT '',
    operation_type varchar(32) NOT NULL,
    operation_code varchar(32) NOT NULL,
    definition     jsonb NOT NULL,
    is_default     boolean NOT NULL DEFAULT false,
    revision       integer NOT NULL DEFAULT 1 CHECK (revision >= 1),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- At most one default per operation.
CREATE UNIQUE INDEX operation_rules_one_default
    ON operation_rules (operation_type, operation_code) WHERE is_default;
CREATE INDEX operation_rules_by_operation ON operation_rules (operation_type, operation_code);
CREATE INDEX operation_rules_by_created ON operation_rules (created_at DESC, id);

-- Every definition a rule has had. No foreign key: the history outlives a
-- deleted rule, so a task can always show the exact rule it ran.
CREATE TABLE rule_revisions (
    rule_id        uuid NOT NULL,
    revision       integer NOT NULL,
    name           varchar(128) NOT NULL,
    description    text NOT NULL,
    operation_type varchar(32) NOT NULL,
    operation_code varchar(32) NOT NULL,
    definition     jsonb NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rule_id, revision)
);

CREATE TABLE racks (
    id           uuid PRIMARY KEY,
    name         varchar(128) NOT NULL UNIQUE CHECK (btrim(name) <> ''),
    manufacturer text NOT NULL DEFAULT '',
    model        text NOT NULL DEFAULT '',
    serial       text NOT NULL DEFAULT '',
    location     text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- A component names a credential reference, never a password.
CREATE TABLE components (
    id               uuid PRIMARY KEY,
    rack_id          uuid NOT NULL REFERENCES racks (id) ON DELETE CASCADE,
    component_type   varchar(32) NOT NULL,
    name             varchar(128) NOT NULL,
    slot             integer CHECK (slot >= 0),
    manufacturer     text NOT NULL DEFAULT '',
    model            text NOT NULL DEFAULT '',
    serial           text NOT NULL DEFAULT '',
    firmware_version text NOT NULL DEFAULT '',
    bmc_url          text NOT NULL,
    credential_ref   text NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (rack_id, name)
);
CREATE INDEX components_by_rack_type ON components (rack_id, component_type);

-- One rule per rack per operation.
CREATE TABLE rack_rule_associations (
    rack_id        uuid NOT NULL REFERENCES racks (id) ON DELETE CASCADE,
    operation_type varchar(32) NOT NULL,
    operation_code varchar(32) NOT NULL,
    rule_id        uuid NOT NULL REFERENCES operation_rules (id) ON DELETE CASCADE,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rack_id, operation_type, operation_code)
);
CREATE INDEX rack_rule_associations_by_rule ON rack_rule_associations (rule_id);
