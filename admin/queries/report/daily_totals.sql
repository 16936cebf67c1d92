-- Runs per day and status for days in [$1, $2], from the report by job type ($3: LIKE patterns
-- of the job types the caller may see, NULL: all). Its rows grow with the job types, not the jobs.
SELECT day, status, sum(runs)::bigint AS runs
FROM daily_type_report
WHERE day BETWEEN $1 AND $2 AND ($3::text[] IS NULL OR job_type LIKE ANY($3))
GROUP BY day, status
ORDER BY day, status
