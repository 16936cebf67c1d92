-- The runs $1 (announced with NOTIFY) that are still scheduled, for the timer.
SELECT id, job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms, attempt,
       shard_index, shard_total, route, requested_worker, workflow_run_id, workflow_node, upstream,
       released_at
FROM triggers
WHERE id = ANY($1::bigint[]) AND status = 'scheduled'
