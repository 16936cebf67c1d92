-- A run requested through the API, due now; announced to the shard's holder with NOTIFY.
-- $5 runs (shard 0..$5-1 of $5): more than one for a `sharding_broadcast` job.
WITH t AS (
    INSERT INTO triggers (job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms,
                          route, requested_worker, shard_index, shard_total)
    SELECT j.id, j.job_type, j.shard, $2, 'scheduled', now(), COALESCE($3, j.params), j.block,
           j.timeout_ms, j.route, $4, s.i, $5::int
    FROM jobs j CROSS JOIN generate_series(0, $5::int - 1) AS s (i)
    WHERE j.id = $1
    RETURNING id, shard
)
SELECT t.id, pg_notify('cadenza_trigger', t.shard || ':' || t.id) IS NOT NULL AS notified FROM t
ORDER BY t.id
