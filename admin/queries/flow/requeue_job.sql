-- After a job's group, priority or overlap policy changed: its queued runs move to its new
-- queue key ($2) with its new priority ($3), or, when it has none, are released at once.
WITH moved AS (
    UPDATE triggers
    SET queue_key = $2, priority = $3, updated_at = now()
    WHERE job_id = $1 AND status = 'queued' AND $2::text IS NOT NULL
    RETURNING id
),
released AS (
    UPDATE triggers
    SET status = 'scheduled', queue_key = NULL, released_at = now(), updated_at = now()
    WHERE job_id = $1 AND status = 'queued' AND $2::text IS NULL
    RETURNING id, shard
)
SELECT id, pg_notify('cadenza_trigger', shard || ':' || id) IS NOT NULL AS notified FROM released
