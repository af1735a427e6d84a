-- Who, verified (issue 41, docs/audit.md "Who"): the actor is now the
-- identity the NATS server stamped (`<account>/<user>`, source 'verified'),
-- one of Flow's own processes inside its account ('service'), or the one
-- development user ('development'); the request's `Flow-Actor` header is
-- kept beside it as a claim. Older records keep 'header' and 'default'.
ALTER TABLE audit_log ADD COLUMN claimed_actor text;
ALTER TABLE audit_log DROP CONSTRAINT audit_log_actor_source_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_actor_source_check
    CHECK (actor_source IN ('verified', 'service', 'development', 'unverified',
                            'header', 'default'));
CREATE INDEX audit_log_claimed_actor ON audit_log (claimed_actor, at DESC)
    WHERE claimed_actor IS NOT NULL;
