-- Event rules: what to do when the hardware reports an event. `spec` is
-- the rule's content (event type, actions) as `event_rule.create` takes
-- it; rules are created disabled unless asked; `revision` changes with
-- every update (a stale update is refused).
CREATE TABLE event_rules (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    event_type  text NOT NULL CHECK (event_type IN ('hardware.leak.detected',
                'hardware.temperature.critical')),
    enabled     boolean NOT NULL DEFAULT false,
    spec        jsonb NOT NULL,
    revision    bigint NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- One rule per (event type, scope): `rack_id` NULL is the site binding.
-- A rule's event type is the binding's (checked by the scheduler; an
-- update that changes a bound rule's event type is refused).
CREATE TABLE event_rule_bindings (
    event_type  text NOT NULL,
    rack_id     uuid REFERENCES racks (id) ON DELETE CASCADE,
    rule_id     uuid NOT NULL REFERENCES event_rules (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX event_rule_bindings_slot
    ON event_rule_bindings (event_type, coalesce(rack_id, '00000000-0000-0000-0000-000000000000'));

-- Hardware events, one row per identity (source, key): a repeated
-- observation finds the row and changes nothing. The rule chosen is
-- snapshotted with the event (`rule_name`; empty when none applied), and
-- its executions are inserted in the same transaction.
CREATE TABLE hardware_events (
    id          uuid PRIMARY KEY,
    source      text NOT NULL,
    key         text NOT NULL,
    event_type  text NOT NULL,
    severity    text NOT NULL,
    rack_name   text NOT NULL,
    component   text NOT NULL,
    message     text NOT NULL DEFAULT '',
    origin      text NOT NULL DEFAULT '',
    observed_at timestamptz NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    rule_name   text NOT NULL DEFAULT '',
    UNIQUE (source, key)
);
CREATE INDEX hardware_events_received ON hardware_events (received_at DESC);

-- One row per action of the chosen rule. A scheduler claims a due one
-- (`FOR UPDATE SKIP LOCKED`, `claimed_until` a lease: a scheduler that dies
-- mid-attempt leaves it to another when the lease ends), runs it, and
-- records the outcome; a failed attempt is due again after a back-off.
CREATE TABLE event_executions (
    id              uuid PRIMARY KEY,
    event_id        uuid NOT NULL REFERENCES hardware_events (id) ON DELETE CASCADE,
    position        integer NOT NULL,
    action          text NOT NULL,
    spec            jsonb NOT NULL,
    status          text NOT NULL CHECK (status IN ('pending', 'running', 'completed',
                    'failed', 'skipped')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    claimed_until   timestamptz,
    last_error      text NOT NULL DEFAULT '',
    targets         jsonb NOT NULL DEFAULT '[]',
    tasks           uuid[] NOT NULL DEFAULT '{}',
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id, position)
);
CREATE INDEX event_executions_due ON event_executions (next_attempt_at)
    WHERE status IN ('pending', 'running');
ALTER TABLE event_executions ADD COLUMN claim uuid;

-- The event whose rule submitted a task (kept when the event is deleted:
-- the task runs on, unlinked).
ALTER TABLE tasks ADD COLUMN event_id uuid REFERENCES hardware_events (id) ON DELETE SET NULL;
