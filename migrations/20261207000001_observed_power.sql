-- Power as observed (docs/operating-safety.md, "What counts"): each
-- component's power as last read, when and by what, and its measured draw;
-- admission counts a component by what is known of it instead of at its
-- steady draw whatever it does.
CREATE TABLE component_power (
    rack        text NOT NULL,
    component   text NOT NULL,
    -- on, off, powering_on, powering_off, unknown (flow_protocol::state::PowerState)
    power       text NOT NULL,
    reachable   boolean NOT NULL,
    -- watcher, event, read, verify, command, telemetry (ObservationSource)
    source      text NOT NULL,
    observed_at timestamptz NOT NULL,
    measured_w  integer CHECK (measured_w >= 0),
    measured_at timestamptz,
    -- The last moment a power-on Flow granted for it may have been sent:
    -- the send reported, or the grant's start plus the send window. A read
    -- from before it says nothing of the power-on.
    commanded_until timestamptz,
    PRIMARY KEY (rack, component)
);

-- A grant reported sent: its inrush is counted from its start until the
-- send plus its settle time; one never reported expires at its start plus
-- the send window plus its settle time.
ALTER TABLE power_grants ADD COLUMN sent_at timestamptz;
ALTER TABLE power_grants ADD COLUMN settle_ms integer NOT NULL DEFAULT 0;
CREATE INDEX power_grants_by_component ON power_grants (rack, component, task_id);
