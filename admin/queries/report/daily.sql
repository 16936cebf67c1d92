-- Runs per day, job and status from the daily report, for days in [$1, $2] (of job $3 if given).
SELECT day, job_id, status, runs
FROM daily_report
WHERE day BETWEEN $1 AND $2 AND ($3::bigint IS NULL OR job_id = $3)
ORDER BY day, job_id, status
