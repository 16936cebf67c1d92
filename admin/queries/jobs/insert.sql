-- The job $25 (an id taken with jobs/next_id); its shard is fixed from it: shard = id %
-- shard_count ($1).
WITH new_id AS (SELECT $25::bigint AS id)
INSERT INTO jobs (id, shard, name, job_type, schedule, schedule_kind, route, block, misfire,
                  misfire_threshold_ms, params, timeout_ms, retries, retry_backoff_ms, children,
                  enabled, next_fire_at, retry_backoff, retry_backoff_max_ms, alarm_webhook,
                  alarm_emails, concurrency_group, priority, overlap, jitter_ms)
SELECT new_id.id, (new_id.id % $1)::int, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
       $15, $16, $17, $18, $19, $20, $21, $22, $23, $24
FROM new_id
RETURNING id, name, job_type, schedule, route, block, misfire, misfire_threshold_ms, params, timeout_ms,
          retries, retry_backoff_ms, retry_backoff, retry_backoff_max_ms, children, alarm_webhook,
          alarm_emails, enabled, shard, next_fire_at, created_at, updated_at, concurrency_group,
          priority, overlap, jitter_ms
