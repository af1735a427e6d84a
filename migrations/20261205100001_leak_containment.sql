-- Leak containment (docs/leak-containment.md).
--
-- A leaking component is locked until an operator clears its event with a
-- reason: `task.submit` refuses power-on, reset and firmware tasks on a
-- locked component. One row per (rack, component, event): a component
-- two events locked stays locked until both are cleared. Inserted with the
-- event, in the same transaction; deleted by `event.clear`.
CREATE TABLE component_locks (
    rack_name   text NOT NULL,
    component   text NOT NULL,
    event_id    uuid NOT NULL REFERENCES hardware_events (id) ON DELETE CASCADE,
    since       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rack_name, component, event_id)
);
CREATE INDEX component_locks_event ON component_locks (event_id);

-- Who cleared an event's locks, when and why (`event.clear`; the reason is
-- required).
ALTER TABLE hardware_events ADD COLUMN cleared_at timestamptz;
ALTER TABLE hardware_events ADD COLUMN cleared_reason text NOT NULL DEFAULT '';
ALTER TABLE hardware_events ADD COLUMN cleared_by text NOT NULL DEFAULT '';

-- The event whose action preempted (cancelled) this task so that its own
-- task could start at once.
ALTER TABLE tasks ADD COLUMN preempted_by uuid REFERENCES hardware_events (id) ON DELETE SET NULL;
