-- A cancel request is part of a task's state (the lifecycle sends its
-- cancel mark once, and starts no further stage once it is set).
ALTER TABLE tasks ADD COLUMN cancel_requested_at timestamptz;
