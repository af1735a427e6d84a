-- A step job the results transaction commits is published at once by the
-- scheduler that committed it; until `claimed_until` the outbox publisher
-- leaves it alone (it would publish it a second time), after it — the
-- scheduler died or could not publish — the publisher sends it.
ALTER TABLE outbox ADD COLUMN claimed_until timestamptz;
