-- Queued tasks: a task submitted with the queue strategy waits (status
-- 'waiting') until the rack is free, or fails when this time passes.
ALTER TABLE tasks ADD COLUMN queue_expires_at timestamptz;
CREATE INDEX tasks_waiting_fifo ON tasks (rack_id, created_at) WHERE status = 'waiting';
