-- One row per planned fire time (per broadcast shard: $5 index of $6), copying what the run
-- needs from the job.
-- A (job, fire time, shard) that already exists is skipped (unique index triggers_job_fire_time).
INSERT INTO triggers (job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms,
                      route, shard_index, shard_total, message, finished_at)
SELECT j.id, j.job_type, j.shard, p.kind, p.status, p.fire_time, j.params, j.block, j.timeout_ms,
       j.route, p.shard_index, p.shard_total,
       CASE WHEN p.status = 'misfired'
            THEN 'missed its fire time by more than the misfire threshold (' || j.misfire_threshold_ms || ' ms); misfire strategy ' || j.misfire
       END,
       CASE WHEN p.status = 'misfired' THEN now() END
FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::timestamptz[], $5::int[], $6::int[])
     AS p (job_id, kind, status, fire_time, shard_index, shard_total)
JOIN jobs j ON j.id = p.job_id
ON CONFLICT DO NOTHING
RETURNING id, job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms, attempt,
          shard_index, shard_total, route, requested_worker
