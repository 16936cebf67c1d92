-- Runs per day and status of job $3 for days in [$1, $2] ($4: LIKE patterns of the job types the
-- caller may see, NULL: all), with the fire times of its open span of skipped ones (see
-- report/daily).
SELECT day, status, sum(runs)::bigint AS runs
FROM (
    SELECT day, job_id, status, runs
    FROM daily_report
    WHERE job_id = $3
    UNION ALL
    SELECT (misfire_first AT TIME ZONE 'UTC')::date, id, 'misfired', misfire_count
    FROM jobs
    WHERE id = $3 AND misfire_count > 0
) r
WHERE day BETWEEN $1 AND $2
  AND ($4::text[] IS NULL OR job_id IN (SELECT id FROM jobs WHERE job_type LIKE ANY($4)))
GROUP BY day, status
ORDER BY day, status
