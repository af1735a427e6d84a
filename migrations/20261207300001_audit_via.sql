-- Through the console (issue 41, docs/audit.md "Through the console"): a
-- trusted intermediary whose own identity the NATS server stamped may name
-- the end user it authenticated (`Flow-On-Behalf-Of`); the record's actor
-- is that user of the intermediary's account (source 'intermediary') and
-- `via` keeps the intermediary. Added, nullable: older records and readers
-- are untouched.
ALTER TABLE audit_log ADD COLUMN via text;
ALTER TABLE audit_log DROP CONSTRAINT audit_log_actor_source_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_actor_source_check
    CHECK (actor_source IN ('verified', 'service', 'development', 'unverified',
                            'header', 'default', 'intermediary'));
