-- Runs per day, job and status from the daily report, for days in [$1, $2] (of job $3 if given;
-- $4: LIKE patterns of the job types the caller may see, NULL: all), after the row ($5, $6, $7)
-- when given, at most $8 rows. The fire times skipped in a job's open span (not in the report
-- until the span closes) count as `misfired` on the day of the span's first.
SELECT day, job_id, status, sum(runs)::bigint AS runs
FROM (
    SELECT day, job_id, status, runs
    FROM daily_report
    UNION ALL
    SELECT (misfire_first AT TIME ZONE 'UTC')::date, id, 'misfired', misfire_count
    FROM jobs
    WHERE misfire_count > 0
) r
WHERE day BETWEEN $1 AND $2 AND ($3::bigint IS NULL OR job_id = $3)
  AND ($4::text[] IS NULL OR job_id IN (SELECT id FROM jobs WHERE job_type LIKE ANY($4)))
  AND ($5::date IS NULL OR (day, job_id, status) > ($5::date, $6::bigint, $7::text))
GROUP BY day, job_id, status
ORDER BY day, job_id, status
LIMIT $8
