-- Power domains, draw models and admission (docs/operating-safety.md).

-- The domains a rack belongs to (`site`, `row=B`, a PDU, a busway).
ALTER TABLE racks ADD COLUMN power_domains text[] NOT NULL DEFAULT '{}';
CREATE INDEX racks_by_power_domain ON racks USING gin (power_domains);

-- A task reads its rack's domains when it is submitted, as it reads its rule.
ALTER TABLE tasks ADD COLUMN power_domains text[] NOT NULL DEFAULT '{}';

-- A domain's limits, set by an operator; each NULL means no such limit.
-- `last_on_at` is when the last power-on in it was admitted (spacing).
CREATE TABLE power_domains (
    name            text PRIMARY KEY,
    budget_w        bigint CHECK (budget_w > 0),
    max_shelves_off integer CHECK (max_shelves_off >= 0),
    min_spacing_ms  bigint CHECK (min_spacing_ms >= 0),
    last_on_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Draw per component type, for a rack model ('' = every model without its
-- own). Defaults: docs/operating-safety.md, "Draw models".
CREATE TABLE power_models (
    component_type varchar(32) NOT NULL,
    rack_model     text NOT NULL DEFAULT '',
    inrush_w       integer NOT NULL CHECK (inrush_w >= 0),
    steady_w       integer NOT NULL CHECK (steady_w >= 0 AND steady_w <= inrush_w),
    settle_ms      integer NOT NULL CHECK (settle_ms >= 0),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (component_type, rack_model)
);
INSERT INTO power_models (component_type, inrush_w, steady_w, settle_ms) VALUES
    ('Compute', 9000, 5400, 2000),
    ('NVSwitch', 1500, 900, 2000),
    ('PowerShelf', 400, 200, 1000);

-- Inrush granted in a domain: counted against its budget until it expires
-- (the settle time plus the window the command is sent in). Nothing needs
-- releasing: a worker killed after its grant leaks nothing past expiry.
CREATE TABLE power_grants (
    id         bigserial PRIMARY KEY,
    domain     text NOT NULL REFERENCES power_domains (name) ON DELETE CASCADE,
    rack       text NOT NULL,
    component  text NOT NULL,
    task_id    uuid NOT NULL,
    excess_w   bigint NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX power_grants_live ON power_grants (domain, expires_at);

-- Power shelves Flow turned off (the shelves-off cap), until Flow turns
-- them on again.
CREATE TABLE power_shelves_off (
    domain    text NOT NULL REFERENCES power_domains (name) ON DELETE CASCADE,
    rack      text NOT NULL,
    component text NOT NULL,
    task_id   uuid NOT NULL,
    since     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (domain, rack, component)
);

-- Commands waiting for a domain now: why, for `task show` and metrics.
-- Removed when the command is admitted or its task ends.
CREATE TABLE power_waits (
    task_id   uuid NOT NULL,
    rack      text NOT NULL,
    component text NOT NULL,
    domain    text NOT NULL,
    reason    text NOT NULL,
    since     timestamptz NOT NULL DEFAULT now(),
    seen_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, rack, component)
);
