-- The first $2 queued runs of key $1 that are due, in release order: highest priority first,
-- then oldest fire time, with their job's overlap policy.
SELECT t.id, t.job_id, j.overlap
FROM triggers t
JOIN jobs j ON j.id = t.job_id
WHERE t.queue_key = $1 AND t.status = 'queued' AND t.fire_time <= now()
ORDER BY t.priority DESC, t.fire_time, t.id
LIMIT $2
