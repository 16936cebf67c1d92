-- Scheduled runs of shards this admin just acquired (or that it may have missed), for the timer.
SELECT id, job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms, attempt,
       shard_index, shard_total, route, requested_worker, workflow_run_id, workflow_node, upstream
FROM triggers
WHERE shard = ANY($1::int[]) AND status = 'scheduled' AND fire_time <= now() + make_interval(secs => $2::float8 / 1000.0)
ORDER BY fire_time
