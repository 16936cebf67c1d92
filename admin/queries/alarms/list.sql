SELECT id, trigger_id, job_id, channel, target, status, attempts, next_attempt_at, last_error,
       created_at, sent_at
FROM alarms
WHERE ($1::bigint IS NULL OR job_id = $1)
  AND ($2::bigint IS NULL OR trigger_id = $2)
  AND ($3::text IS NULL OR status = $3)
  AND id < $4
  AND ($6::text[] IS NULL OR job_id IN (SELECT id FROM jobs WHERE job_type LIKE ANY($6)))
ORDER BY id DESC
LIMIT $5
