-- Records a replay request ($1 job type, $2 request, $3 number of runs) and inserts its runs:
-- one run of kind `replay` per trigger read back, linked to the original ($4) and the request,
-- with the original's params, block strategy, timeout and broadcast shard; due now. Triggers of
-- jobs deleted since are skipped (the jobs are locked FOR KEY SHARE: a job
-- being deleted waits, migration 0021). Each run is announced to its shard's holder with NOTIFY.
WITH rp AS (
    INSERT INTO replays (job_type, request, runs) VALUES ($1, $2, $3) RETURNING id
),
r AS (
    SELECT *
    FROM UNNEST($4::bigint[], $5::bigint[], $6::text[], $7::text[], $8::bigint[], $9::int[], $10::int[])
         WITH ORDINALITY AS r (parent_id, job_id, params, block, timeout_ms, shard_index, shard_total, n)
),
j AS (
    SELECT id, job_type, shard, route, priority,
           cadenza_queue_key(id, concurrency_group, overlap) AS queue_key
    FROM jobs
    WHERE id IN (SELECT job_id FROM r)
    FOR KEY SHARE
),
t AS (
    INSERT INTO triggers (job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms,
                          route, shard_index, shard_total, parent_id, replay_id, queue_key, priority)
    SELECT j.id, j.job_type, j.shard, 'replay', CASE WHEN j.queue_key IS NULL THEN 'scheduled' ELSE 'queued' END, now(), r.params, r.block,
           r.timeout_ms, j.route, r.shard_index, r.shard_total, r.parent_id, rp.id, j.queue_key,
           j.priority
    FROM r
    JOIN j ON j.id = r.job_id
    CROSS JOIN rp
    ORDER BY r.n
    RETURNING id, parent_id, shard
)
SELECT (SELECT id FROM rp) AS replay_id, t.parent_id, t.id,
       pg_notify('cadenza_trigger', t.shard || ':' || t.id) IS NOT NULL AS notified
FROM t
ORDER BY t.id
