UPDATE jobs
SET name = $2, job_type = $3, schedule = $4, schedule_kind = $5, route = $6, block = $7, misfire = $8,
    misfire_threshold_ms = $9, params = $10, timeout_ms = $11, retries = $12, retry_backoff_ms = $13,
    children = $14, enabled = $15, next_fire_at = $16, retry_backoff = $17,
    retry_backoff_max_ms = $18, alarm_webhook = $19, alarm_emails = $20, concurrency_group = $21,
    priority = $22, overlap = $23, jitter_ms = $24, updated_at = now()
WHERE id = $1
RETURNING id, name, job_type, schedule, route, block, misfire, misfire_threshold_ms, params, timeout_ms,
          retries, retry_backoff_ms, retry_backoff, retry_backoff_max_ms, children, alarm_webhook,
          alarm_emails, enabled, shard, next_fire_at, created_at, updated_at, concurrency_group,
          priority, overlap, jitter_ms
