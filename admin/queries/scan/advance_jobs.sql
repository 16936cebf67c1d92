-- Move each claimed job's next_fire_at past what was just written; `once` jobs disable themselves.
UPDATE jobs
SET next_fire_at = u.next_fire_at, enabled = u.enabled, updated_at = now()
FROM UNNEST($1::bigint[], $2::timestamptz[], $3::bool[]) AS u (id, next_fire_at, enabled)
WHERE jobs.id = u.id
