-- Statuses are bound as parameters (their one mapping to text is the
-- enums' in flow-protocol), and a partial index whose predicate is a
-- literal cannot serve a query with a bound status under a generic plan:
-- index the status instead.
DROP INDEX IF EXISTS tasks_by_rack_active;
DROP INDEX IF EXISTS tasks_waiting_fifo;
DROP INDEX IF EXISTS task_steps_running_deadline;
CREATE INDEX tasks_by_rack_status ON tasks (rack_id, status, created_at);
CREATE INDEX tasks_by_status ON tasks (status);
CREATE INDEX task_steps_by_status_deadline ON task_steps (status, deadline);
