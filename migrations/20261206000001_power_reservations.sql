-- Power admission reserves a start instead of answering "ask again"
-- (shared/engine/src/admission.rs): a grant may start in the future, and
-- a wait records until when it holds. Spacing is judged from the grants'
-- starts, so a domain no longer keeps its last power-on time.
ALTER TABLE power_grants ADD COLUMN starts_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX power_grants_starts ON power_grants (domain, starts_at);
ALTER TABLE power_waits ADD COLUMN until_at timestamptz;
ALTER TABLE power_domains DROP COLUMN last_on_at;
