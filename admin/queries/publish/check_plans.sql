-- The plan generation of the jobs of runs the scan wrote already claimed, as they are taken for
-- sending. Locks the jobs FOR KEY SHARE until the transaction ends: a job change (which locks its
-- job FOR UPDATE) waits for it, so it never drops a run taken here, and one committed before is
-- seen here. The scan (FOR NO KEY UPDATE) is not held up.
SELECT id, plan_gen FROM jobs WHERE id = ANY($1::bigint[]) ORDER BY id FOR KEY SHARE
