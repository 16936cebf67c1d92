-- Counts the runs $1, which just reached a terminal status in this transaction, in the daily
-- report: one upsert per day, job and status, in key order (no deadlock between batches).
INSERT INTO daily_report (day, job_id, status, runs)
SELECT (fire_time AT TIME ZONE 'UTC')::date, job_id, status, count(*)
FROM triggers
WHERE id = ANY($1::bigint[])
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
ON CONFLICT (day, job_id, status) DO UPDATE SET runs = daily_report.runs + EXCLUDED.runs
