SELECT id, name, job_type, schedule, route, block, misfire, misfire_threshold_ms, params, timeout_ms,
       retries, retry_backoff_ms, retry_backoff, retry_backoff_max_ms, children, alarm_webhook,
       alarm_emails, enabled, shard, next_fire_at, created_at, updated_at, concurrency_group,
          priority, overlap, jitter_ms
FROM jobs
WHERE id = $1
