-- A task may name a window: it starts no earlier than not_before (waiting
-- without holding its components until then) and fails if it has not
-- started by not_after.
ALTER TABLE tasks ADD COLUMN not_before timestamptz;
ALTER TABLE tasks ADD COLUMN not_after timestamptz;
ALTER TABLE tasks ADD CONSTRAINT tasks_window_ordered CHECK (not_before < not_after);
