-- A firmware task's snapshot (issue 42, docs/firmware.md "Snapshot and
-- restore"): the version the inventory recorded on each component it was
-- to flash, taken at submission, before anything changed. Added with a
-- default, so the previous release's inserts (which do not name it) still
-- work.
ALTER TABLE tasks ADD COLUMN firmware_snapshot jsonb NOT NULL DEFAULT '[]'::jsonb;
