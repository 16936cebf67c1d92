-- Deletes concurrency group $1 (no job belongs to it); its runs still queued (of jobs that left
-- it while their runs waited) are released at once.
WITH released AS (
    UPDATE triggers
    SET status = 'scheduled', queue_key = NULL, released_at = now(), updated_at = now()
    WHERE queue_key = 'g:' || $1 AND status = 'queued'
    RETURNING id, shard
),
notified AS (
    SELECT pg_notify('cadenza_trigger', shard || ':' || id) FROM released
)
DELETE FROM concurrency_groups WHERE name = $1 AND (SELECT count(*) FROM notified) >= 0
