-- Runs per day and status for days in [$1, $2], from the report by job type ($3: LIKE patterns
-- of the job types the caller may see, NULL: all), with the fire times of open spans of skipped
-- ones (see report/daily). Its rows grow with the job types, not the jobs.
SELECT day, status, sum(runs)::bigint AS runs
FROM (
    SELECT day, job_type, status, runs
    FROM daily_type_report
    UNION ALL
    SELECT (misfire_first AT TIME ZONE 'UTC')::date, job_type, 'misfired', misfire_count
    FROM jobs
    WHERE misfire_count > 0
) r
WHERE day BETWEEN $1 AND $2 AND ($3::text[] IS NULL OR job_type LIKE ANY($3))
GROUP BY day, status
ORDER BY day, status
