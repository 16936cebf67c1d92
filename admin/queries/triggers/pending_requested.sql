-- Scheduled runs of the given shards that the scan did not write (API triggers, retries, child
-- runs, replays) and that are due within $2 ms: the sweep hands them to the timer in time even
-- when their NOTIFY went to an admin that no longer holds the shard.
SELECT id, job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms, attempt,
       shard_index, shard_total, route, requested_worker, workflow_run_id, workflow_node, upstream
FROM triggers
WHERE shard = ANY($1::int[]) AND status = 'scheduled'
  AND kind IN ('manual', 'api', 'retry', 'child', 'replay', 'workflow')
  AND fire_time <= now() + make_interval(secs => $2::float8 / 1000.0)
ORDER BY fire_time
