-- A run requested through the API, due now; announced to the shard's holder with NOTIFY.
WITH t AS (
    INSERT INTO triggers (job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms,
                          route, requested_worker)
    SELECT j.id, j.job_type, j.shard, $2, 'scheduled', now(), COALESCE($3, j.params), j.block,
           j.timeout_ms, j.route, $4
    FROM jobs j WHERE j.id = $1
    RETURNING id, shard
)
SELECT t.id, pg_notify('cadenza_trigger', t.shard || ':' || t.id) IS NOT NULL AS notified FROM t
