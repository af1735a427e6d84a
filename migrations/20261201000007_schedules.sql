-- Schedules: a task request fired at an interval, at cron times in a time
-- zone, or once. `request` is the task.submit body each firing submits;
-- `next_run_at` is NULL while paused and after a one-time schedule fired.
-- `revision` changes with every update, pause and resume (a stale update
-- is refused).
CREATE TABLE schedules (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    kind        text NOT NULL CHECK (kind IN ('interval', 'cron', 'once')),
    spec        jsonb NOT NULL,
    timezone    text NOT NULL,
    overlap     text NOT NULL CHECK (overlap IN ('skip', 'queue')),
    windows     jsonb NOT NULL DEFAULT '[]',
    request     jsonb NOT NULL,
    enabled     boolean NOT NULL DEFAULT true,
    next_run_at timestamptz,
    last_fired_at timestamptz,
    revision    bigint NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE enabled;

-- One row per firing, keyed by the time it was due: a firing is made once
-- however many schedulers look. `done_at` is NULL until its submissions
-- are recorded; a firing claimed longer ago than the claim lease and not
-- done is finished by another scheduler (its tasks' request IDs make the
-- resubmission create nothing twice).
CREATE TABLE schedule_firings (
    schedule_id uuid NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    due_at      timestamptz NOT NULL,
    fired_at    timestamptz NOT NULL DEFAULT now(),
    trigger     text NOT NULL CHECK (trigger IN ('scheduled', 'manual')),
    claimed_at  timestamptz NOT NULL DEFAULT now(),
    done_at     timestamptz,
    window_start timestamptz,
    window_end  timestamptz,
    outcome     jsonb,
    PRIMARY KEY (schedule_id, due_at)
);
CREATE INDEX schedule_firings_unfinished ON schedule_firings (claimed_at) WHERE done_at IS NULL;

-- The schedule a task came from (kept when the schedule is deleted: the
-- task runs on, unlinked).
ALTER TABLE tasks ADD COLUMN schedule_id uuid REFERENCES schedules (id) ON DELETE SET NULL;
CREATE INDEX tasks_schedule ON tasks (schedule_id) WHERE schedule_id IS NOT NULL;
