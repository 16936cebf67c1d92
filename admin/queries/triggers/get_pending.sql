SELECT id, job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms, attempt,
       shard_index, shard_total, route, requested_worker, workflow_run_id, workflow_node, upstream,
       released_at
FROM triggers
WHERE id = $1 AND status = 'scheduled'
