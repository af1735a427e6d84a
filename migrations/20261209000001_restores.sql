-- Database restores (issue 43; docs/operating.md "Backup and restore").
-- Expand only: one table added; every query of the previous release still
-- runs.

-- Each time this database was restored from a backup and a scheduler
-- started on it with --restored: the epoch it began (seconds since the
-- Unix epoch at the restore, so an epoch is never reused even when the
-- same backup is restored twice), and what it sent again. The scheduler
-- publishes in the newest epoch (shared/protocol/src/restore.rs).
CREATE TABLE restores (
    epoch       bigint PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    tasks       integer NOT NULL DEFAULT 0,
    steps       integer NOT NULL DEFAULT 0,
    finished_at timestamptz
);
