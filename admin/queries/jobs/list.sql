-- Jobs by id, filtered; $5: the LIKE patterns of the job types the caller may see (NULL: all);
-- $6: a part of the name (any case); $7: a concurrency group.
SELECT id, name, job_type, schedule, route, block, misfire, misfire_threshold_ms, params, timeout_ms,
       retries, retry_backoff_ms, retry_backoff, retry_backoff_max_ms, children, alarm_webhook,
       alarm_emails, enabled, shard, next_fire_at, created_at, updated_at, concurrency_group,
          priority, overlap, jitter_ms
FROM jobs
WHERE ($1::text IS NULL OR job_type = $1)
  AND ($2::bool IS NULL OR enabled = $2)
  AND id > $3
  AND ($5::text[] IS NULL OR job_type LIKE ANY($5))
  AND ($6::text IS NULL OR strpos(lower(name), lower($6)) > 0)
  AND ($7::text IS NULL OR concurrency_group = $7)
ORDER BY id
LIMIT $4
