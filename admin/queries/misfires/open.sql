-- Open spans of skipped fire times, the most recent first: of job $1, of job type $2 (either
-- NULL: all), of job types matching $3 (LIKE patterns the caller may see; NULL: all), at most $4.
SELECT NULL::bigint AS id, id AS job_id, job_type, misfire_first AS first_fire,
       misfire_last AS last_fire, misfire_count AS count, misfire AS strategy,
       misfire_threshold_ms AS threshold_ms, NULL::timestamptz AS closed_at
FROM jobs
WHERE misfire_count > 0
  AND ($1::bigint IS NULL OR id = $1)
  AND ($2::text IS NULL OR job_type = $2)
  AND ($3::text[] IS NULL OR job_type LIKE ANY($3))
ORDER BY misfire_last DESC, id
LIMIT $4
