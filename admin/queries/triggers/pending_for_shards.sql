-- Scheduled runs of shards this admin just acquired (or that it may have missed), for the timer.
-- In two parts, each the predicate of a partial index of `scheduled` runs by (shard, fire_time):
-- runs of a schedule (triggers_scheduled, migration 0017) and the others (triggers_requested,
-- migration 0014); between them every kind. triggers_pending also holds the runs delivered and
-- not yet started, which a worker group that is down can leave by the million.
SELECT * FROM (
    SELECT id, job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms,
           attempt, shard_index, shard_total, route, requested_worker, workflow_run_id,
           workflow_node, upstream
    FROM triggers
    WHERE shard = ANY($1::int[]) AND status = 'scheduled'
      AND kind IN ('cron', 'fix_rate', 'fix_delay', 'once', 'misfire')
      AND fire_time <= now() + make_interval(secs => $2::float8 / 1000.0)
    UNION ALL
    SELECT id, job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms,
           attempt, shard_index, shard_total, route, requested_worker, workflow_run_id,
           workflow_node, upstream
    FROM triggers
    WHERE shard = ANY($1::int[]) AND status = 'scheduled'
      AND kind IN ('manual', 'api', 'retry', 'child', 'replay', 'workflow')
      AND fire_time <= now() + make_interval(secs => $2::float8 / 1000.0)
) AS pending
ORDER BY fire_time
