-- Runs per day and status of job $3 for days in [$1, $2] ($4: LIKE patterns of the job types the
-- caller may see, NULL: all).
SELECT day, status, sum(runs)::bigint AS runs
FROM daily_report
WHERE day BETWEEN $1 AND $2 AND job_id = $3
  AND ($4::text[] IS NULL OR job_id IN (SELECT id FROM jobs WHERE job_type LIKE ANY($4)))
GROUP BY day, status
ORDER BY day, status
