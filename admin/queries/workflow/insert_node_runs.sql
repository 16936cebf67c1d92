-- Runs of the nodes of workflow run $1 that start now: one per node, of kind `workflow`, with the
-- node's params ($3) or else its job's, and the outputs of its parents ($5, JSON text). Due at
-- $6 (the workflow's fire time for its first nodes) or now. Each run is announced to its shard's
-- holder with NOTIFY. A node whose job no longer exists gets no run (it is missing from the
-- result); the jobs are locked FOR KEY SHARE, so a job being deleted waits (migration 0021).
WITH r AS (
    SELECT *
    FROM UNNEST($2::bigint[], $3::text[], $4::text[], $5::text[])
         WITH ORDINALITY AS r (job_id, params, node, upstream, n)
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
                          route, workflow_run_id, workflow_node, upstream, queue_key, priority)
    SELECT j.id, j.job_type, j.shard, 'workflow', CASE WHEN j.queue_key IS NULL THEN 'scheduled' ELSE 'queued' END,
           COALESCE($6::timestamptz, now()),
           COALESCE(r.params, j.params), j.block, j.timeout_ms, j.route, $1, r.node,
           r.upstream::jsonb, j.queue_key, j.priority
    FROM r
    JOIN j ON j.id = r.job_id
    ORDER BY r.n
    RETURNING id, workflow_node, shard
)
SELECT t.id, t.workflow_node, pg_notify('cadenza_trigger', t.shard || ':' || t.id) IS NOT NULL AS notified
FROM t
ORDER BY t.id
