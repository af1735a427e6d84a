-- Flow store, part 2: tasks, their steps, and the outbox of messages to
-- publish (written in the same transaction as the state that justifies them).

CREATE TABLE tasks (
    id              uuid PRIMARY KEY,
    request_id      text NOT NULL,
    rack_id         uuid NOT NULL REFERENCES racks (id) ON DELETE RESTRICT,
    rack_name       text NOT NULL,
    operation_type  varchar(32) NOT NULL,
    operation_code  varchar(32) NOT NULL,
    status          varchar(16) NOT NULL CHECK (status IN
                        ('waiting', 'pending', 'running', 'completed', 'failed', 'terminated')),
    rule_id         uuid REFERENCES operation_rules (id) ON DELETE SET NULL,
    rule_revision   integer,
    rule_source     varchar(32) NOT NULL,
    rule_name       text NOT NULL,
    rule_snapshot   jsonb NOT NULL,
    components      jsonb NOT NULL,
    firmware        jsonb NOT NULL DEFAULT '{}',
    current_stage   integer,
    message         text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (request_id, rack_id)
);
CREATE INDEX tasks_by_rack_active ON tasks (rack_id) WHERE status IN ('waiting', 'pending', 'running');
CREATE INDEX tasks_by_created ON tasks (created_at DESC);

CREATE TABLE task_steps (
    task_id         uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    step_index      integer NOT NULL,
    stage           integer NOT NULL,
    component_type  varchar(32) NOT NULL,
    status          varchar(16) NOT NULL CHECK (status IN
                        ('pending', 'running', 'completed', 'failed', 'skipped', 'cancelled')),
    generation      integer NOT NULL DEFAULT 0,
    components      integer NOT NULL,
    budget_ms       bigint NOT NULL,
    deadline        timestamptz,
    started_at      timestamptz,
    finished_at     timestamptz,
    error           text,
    results         jsonb NOT NULL DEFAULT '{}',
    calls           bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (task_id, step_index)
);
CREATE INDEX task_steps_running_deadline ON task_steps (deadline) WHERE status = 'running';

CREATE TABLE outbox (
    id           bigserial PRIMARY KEY,
    subject      text NOT NULL,
    msg_id       text NOT NULL,
    payload      jsonb NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz
);
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
