-- Runs that do not come from a schedule (manual and API triggers, child jobs, replays), one row
-- (`queued` for a job in a concurrency group or with an overlap policy, migration 0024)
-- per shard: $6 runs (shard 0..n-1 of n) for a `sharding_broadcast` job, which share a new
-- fire_group. The job's params unless $4 gives others. Each run is announced to its shard's
-- holder with NOTIFY; a child run that exists already (same parent, job and shard) is skipped.
-- The jobs are locked FOR KEY SHARE: a job being deleted waits, or is gone and gets no run
-- (migration 0021).
WITH r AS (
    SELECT *
    FROM UNNEST($1::bigint[], $2::text[], $3::timestamptz[], $4::text[], $5::text[], $6::int[],
                $7::bigint[])
         WITH ORDINALITY AS r (job_id, kind, fire_time, params, requested_worker, shard_total,
                               parent_id, n)
),
g AS (
    SELECT n, CASE WHEN shard_total > 1 THEN nextval('triggers_fire_group_seq') END AS fire_group
    FROM r
),
j AS (
    SELECT id, job_type, shard, params, block, timeout_ms, route, priority,
           cadenza_queue_key(id, concurrency_group, overlap) AS queue_key
    FROM jobs
    WHERE id IN (SELECT job_id FROM r)
    FOR KEY SHARE
),
t AS (
    INSERT INTO triggers (job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms,
                          route, requested_worker, shard_index, shard_total, parent_id, fire_group,
                          queue_key, priority)
    SELECT j.id, j.job_type, j.shard, r.kind, CASE WHEN j.queue_key IS NULL THEN 'scheduled' ELSE 'queued' END,
           COALESCE(r.fire_time, now()),
           COALESCE(r.params, j.params), j.block, j.timeout_ms, j.route, r.requested_worker, s.i,
           r.shard_total, r.parent_id, g.fire_group, j.queue_key, j.priority
    FROM r
    JOIN g USING (n)
    JOIN j ON j.id = r.job_id
    CROSS JOIN LATERAL generate_series(0, r.shard_total - 1) AS s (i)
    ORDER BY r.n, s.i
    ON CONFLICT DO NOTHING
    RETURNING id, job_id, shard
)
SELECT t.id, t.job_id, pg_notify('cadenza_trigger', t.shard || ':' || t.id) IS NOT NULL AS notified
FROM t
ORDER BY t.id
