-- Failed runs among $1 (failed, timed_out, lost) of jobs with retries left get their next try:
-- a new run of kind `retry` linked to the failed one (parent_id), for the same broadcast shard,
-- due after the job's backoff (database clock). Announced to the shard's holder with NOTIFY.
-- A failed run is retried once (unique index triggers_one_retry). A retry of a workflow node's run
-- belongs to the same workflow run and node, with the same upstream. The jobs are locked FOR KEY
-- SHARE: a job being deleted waits, or is gone and its runs get no retry (migration 0021).
WITH f AS (
    SELECT t.id, t.job_id, t.job_type, t.shard, t.params, t.block, t.timeout_ms, t.route,
           t.shard_index, t.shard_total, t.fire_group, t.retry_no, t.workflow_run_id,
           t.workflow_node, t.upstream,
           cadenza_queue_key(j.id, j.concurrency_group, j.overlap) AS queue_key, j.priority,
           CASE WHEN j.retry_backoff = 'exponential'
                THEN LEAST(j.retry_backoff_ms * power(2::float8, t.retry_no), j.retry_backoff_max_ms::float8)
                ELSE j.retry_backoff_ms::float8
           END AS delay_ms
    FROM triggers t
    JOIN jobs j ON j.id = t.job_id
    WHERE t.id = ANY($1::bigint[])
      AND t.status IN ('failed', 'timed_out', 'lost')
      AND t.retry_no < j.retries
    FOR KEY SHARE OF j
),
ins AS (
    INSERT INTO triggers (job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms,
                          route, shard_index, shard_total, parent_id, fire_group, retry_no,
                          workflow_run_id, workflow_node, upstream, queue_key, priority)
    SELECT f.job_id, f.job_type, f.shard, 'retry',
           CASE WHEN f.queue_key IS NULL THEN 'scheduled' ELSE 'queued' END,
           now() + make_interval(secs => f.delay_ms / 1000.0), f.params, f.block, f.timeout_ms,
           f.route, f.shard_index, f.shard_total, f.id, f.fire_group, f.retry_no + 1,
           f.workflow_run_id, f.workflow_node, f.upstream, f.queue_key, f.priority
    FROM f
    ORDER BY f.id
    ON CONFLICT DO NOTHING
    RETURNING id, parent_id, shard
)
SELECT ins.parent_id, ins.id, pg_notify('cadenza_trigger', ins.shard || ':' || ins.id) IS NOT NULL AS notified
FROM ins
