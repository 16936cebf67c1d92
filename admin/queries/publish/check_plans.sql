-- The plan generation and misfire rule of the jobs of runs taken for sending (runs the scan wrote
-- already claimed, and `scheduled` runs of a schedule), and the database's clock. Locks the jobs FOR KEY SHARE until the
-- transaction ends: a job change (which locks its job FOR UPDATE) waits for it, so it never drops
-- a run taken here, and one committed before is seen here. The scan (FOR NO KEY UPDATE) is not
-- held up.
SELECT id, plan_gen, misfire, misfire_threshold_ms, now() AS db_now
FROM jobs WHERE id = ANY($1::bigint[]) ORDER BY id FOR KEY SHARE
