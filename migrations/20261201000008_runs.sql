-- Phased rollouts ("runs"): an operation rolled over a fixed list of racks
-- in phases. `request` is the task.submit body each target's task is made
-- from; `phase` is the current phase (0-based); `accepted_*` are failures
-- an operator accepted by resuming after a gate tripped.
CREATE TABLE runs (
    id             uuid PRIMARY KEY,
    name           text NOT NULL UNIQUE,
    description    text NOT NULL DEFAULT '',
    request        jsonb NOT NULL,
    status         text NOT NULL CHECK (status IN ('pending', 'running', 'paused', 'completed',
                   'cancelled', 'failed', 'completed_with_failures')),
    reason         text NOT NULL CHECK (reason IN ('none', 'operator_paused', 'phase_gate',
                   'safety_gate', 'conflict_retry_timeout', 'outside_window')),
    phase          integer NOT NULL DEFAULT 0,
    phase_count    integer NOT NULL CHECK (phase_count > 0),
    phase_policy   jsonb NOT NULL,
    max_concurrent integer NOT NULL CHECK (max_concurrent > 0),
    gates          jsonb NOT NULL,
    auto_advance   boolean NOT NULL,
    ordering       jsonb NOT NULL,
    windows        jsonb NOT NULL DEFAULT '[]',
    timezone       text NOT NULL,
    retry          jsonb NOT NULL,
    gate_state     jsonb,
    accepted_phase integer NOT NULL DEFAULT 0,
    accepted_run   integer NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz
);
CREATE INDEX runs_open ON runs (created_at) WHERE status IN ('pending', 'running', 'paused');

-- One row per rack of a run, in the run's order.
CREATE TABLE run_targets (
    run_id           uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    rack_id          uuid NOT NULL,
    rack_name        text NOT NULL,
    phase            integer NOT NULL,
    seq              integer NOT NULL,
    status           text NOT NULL CHECK (status IN ('pending', 'blocked', 'submitted',
                     'completed', 'failed', 'terminated', 'skipped')),
    task_id          uuid,
    attempts         integer NOT NULL DEFAULT 0,
    message          text NOT NULL DEFAULT '',
    first_blocked_at timestamptz,
    next_attempt_at  timestamptz,
    PRIMARY KEY (run_id, rack_id)
);
CREATE INDEX run_targets_order ON run_targets (run_id, phase, seq);

-- The run a task was submitted for.
ALTER TABLE tasks ADD COLUMN run_id uuid REFERENCES runs (id) ON DELETE SET NULL;
