-- Closed spans of skipped fire times, newest first: filters as misfires/open, ids below $4
-- (NULL: from the newest), at most $5.
SELECT id, job_id, job_type, first_fire, last_fire, count, strategy, threshold_ms, closed_at
FROM misfires
WHERE ($1::bigint IS NULL OR job_id = $1)
  AND ($2::text IS NULL OR job_type = $2)
  AND ($3::text[] IS NULL OR job_type LIKE ANY($3))
  AND ($4::bigint IS NULL OR id < $4)
ORDER BY id DESC
LIMIT $5
