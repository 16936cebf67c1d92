-- Claims up to $1 due alarms for $2 ms (if this admin dies meanwhile, another takes them over
-- then), counting the attempt, with what the message says about the run and its job.
WITH c AS (
    SELECT id FROM alarms
    WHERE status = 'pending' AND next_attempt_at <= now()
    ORDER BY next_attempt_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE alarms a
SET attempts = a.attempts + 1, next_attempt_at = now() + make_interval(secs => $2::float8 / 1000.0)
FROM c, triggers t, jobs j
WHERE a.id = c.id AND t.id = a.trigger_id AND j.id = a.job_id
RETURNING a.id, a.channel, a.target, a.attempts, t.id AS trigger_id, t.job_id, j.name AS job_name,
          t.job_type, t.kind, t.status, t.attempt, t.retry_no, t.fire_time, t.started_at,
          t.finished_at, t.worker_id, t.message
