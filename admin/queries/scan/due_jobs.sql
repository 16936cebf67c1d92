-- Enabled jobs of the given shards due before now + lookahead ($2 ms), earliest first, at most
-- $3 of them: a plain ordered scan of the partial index jobs_due_at (see its migration) that
-- stops after the batch; the caller turns bitmap scans off around it, since a bitmap scan would
-- read every dead entry left by earlier advances. Jobs that are not due are never read. Due jobs
-- of shards this admin does not hold are read and passed over (PostgreSQL checks the shard on
-- the row): in a cluster those are the few that other admins have not claimed yet, and, until a
-- dead admin's shards are taken over (the lease TTL), its due jobs.
SELECT id, schedule, misfire, misfire_threshold_ms, next_fire_at, now() AS db_now, job_type, route,
       shard, plan_gen, misfire_first, misfire_last, misfire_count,
       concurrency_group IS NOT NULL OR overlap <> 'allow' AS queued, jitter_ms
FROM jobs
WHERE enabled
  AND next_fire_at IS NOT NULL
  AND next_fire_at <= now() + make_interval(secs => $2::float8 / 1000.0)
  AND shard = ANY($1::int[])
ORDER BY next_fire_at
LIMIT $3
FOR NO KEY UPDATE SKIP LOCKED
